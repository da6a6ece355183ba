// One SafeHandle subclass per C handle; ReleaseHandle calls the matching _destroy. The C library
// reference-counts parents, so the finalizer may release handles in any order.
using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace Mptrain
{
    /// <summary>What all objects created from one context share: the lock serialising their calls
    /// (the C API allows one thread at a time per context) and the log callback, kept alive (through a
    /// GCHandle given to C) until the last handle of the context is released.</summary>
    internal sealed class Family
    {
        private static long lastId;
        internal readonly long Id = Interlocked.Increment(ref lastId);
        internal readonly object Sync = new object();
        internal Action<LogLevel, string> Log;
        internal IntPtr LogHandle; // GCHandle of this object while C may call the log callback
        private int handles;

        internal void AddHandle() { Interlocked.Increment(ref handles); }

        internal void ReleaseHandle()
        {
            if (Interlocked.Decrement(ref handles) == 0 && LogHandle != IntPtr.Zero)
            {
                GCHandle.FromIntPtr(LogHandle).Free();
                LogHandle = IntPtr.Zero;
            }
        }

        // Static, so the thunk given to C is never collected; user data routes to the family.
        internal static readonly LogFn LogThunk = OnLog;

        private static void OnLog(int level, IntPtr message, IntPtr userData)
        {
            try
            {
                var family = (Family)GCHandle.FromIntPtr(userData).Target;
                Action<LogLevel, string> log = family.Log;
                if (log != null) log((LogLevel)level, Utf8.FromNative(message));
            }
            catch
            {
                // A log message cannot fail a call, and no exception may unwind into C.
            }
        }
    }

    public abstract class MptHandle : SafeHandle
    {
        internal Family Family;

        protected MptHandle() : base(IntPtr.Zero, true) { }

        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }

        internal void Attach(Family family)
        {
            Family = family;
            family.AddHandle();
        }

        protected abstract void Destroy(IntPtr raw);

        protected override bool ReleaseHandle()
        {
            Family family = Family;
            if (family == null)
            {
                Destroy(handle);
                return true;
            }
            lock (family.Sync) Destroy(handle);
            family.ReleaseHandle();
            return true;
        }
    }

    public sealed class ContextOptionsHandle : MptHandle
    {
        protected override void Destroy(IntPtr raw) { Native.mpt_context_options_destroy(raw); }
    }

    public sealed class ContextHandle : MptHandle
    {
        protected override void Destroy(IntPtr raw) { Native.mpt_context_destroy(raw); }
    }

    public sealed class ModelHandle : MptHandle
    {
        protected override void Destroy(IntPtr raw) { Native.mpt_model_destroy(raw); }
    }

    public sealed class DatasetHandle : MptHandle
    {
        protected override void Destroy(IntPtr raw) { Native.mpt_dataset_destroy(raw); }
    }

    public sealed class TrainerOptionsHandle : MptHandle
    {
        protected override void Destroy(IntPtr raw) { Native.mpt_trainer_options_destroy(raw); }
    }

    public sealed class TrainerHandle : MptHandle
    {
        internal IntPtr CallbacksHandle; // GCHandle of the trainer's callbacks, freed after destroy

        protected override void Destroy(IntPtr raw)
        {
            Native.mpt_trainer_destroy(raw);
            if (CallbacksHandle != IntPtr.Zero)
            {
                GCHandle.FromIntPtr(CallbacksHandle).Free();
                CallbacksHandle = IntPtr.Zero;
            }
        }
    }
}
