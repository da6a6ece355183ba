// The exception every failed library call becomes: the C status and the mpt_last_error() message.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Mptrain
{
    public class MptException : Exception
    {
        /// <summary>The C status of the failure.</summary>
        public Status Status { get; private set; }

        /// <summary>The library's message (Message also names the status).</summary>
        public string NativeMessage { get; private set; }

        public MptException(Status status, string message)
            : base(StatusName(status) + ": " + message)
        {
            Status = status;
            NativeMessage = message;
        }

        /// <summary>"MPT_STATUS_..." as the library names it.</summary>
        public static string StatusName(Status status)
        {
            return Utf8.FromNative(Native.mpt_status_string(status));
        }

        // Reads the thread-local message right after the failed call, on the same thread.
        internal static void Check(Status status)
        {
            if (status != Status.Ok)
                throw new MptException(status, Utf8.FromNative(Native.mpt_last_error()));
        }
    }

    internal static class Utf8
    {
        internal static string FromNative(IntPtr text)
        {
            if (text == IntPtr.Zero) return "";
            int length = 0;
            while (Marshal.ReadByte(text, length) != 0) length++;
            var bytes = new byte[length];
            Marshal.Copy(text, bytes, 0, length);
            return Encoding.UTF8.GetString(bytes);
        }

        /// <summary>A NUL-terminated UTF-8 copy in unmanaged memory; free with Marshal.FreeHGlobal.</summary>
        internal static IntPtr ToNative(string text)
        {
            byte[] bytes = Encoding.UTF8.GetBytes(text);
            IntPtr memory = Marshal.AllocHGlobal(bytes.Length + 1);
            Marshal.Copy(bytes, 0, memory, bytes.Length);
            Marshal.WriteByte(memory, bytes.Length, 0);
            return memory;
        }

        /// <summary>Calls `call` with a NUL-terminated UTF-8 copy of a path (IntPtr.Zero for null), freed
        /// afterwards. A path containing NUL is refused: C would stop reading there.</summary>
        internal static T WithPath<T>(string path, Func<IntPtr, T> call)
        {
            if (path == null) return call(IntPtr.Zero);
            if (path.IndexOf('\0') >= 0) throw new MptException(Status.InvalidArgument, "path contains NUL");
            IntPtr native = ToNative(path);
            try
            {
                return call(native);
            }
            finally
            {
                Marshal.FreeHGlobal(native);
            }
        }
    }
}
