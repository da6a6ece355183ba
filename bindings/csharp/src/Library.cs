// Facts about the loaded libmptrain itself: its version and the CUDA devices it sees.
namespace Mptrain
{
    public static class Library
    {
        /// <summary>Version of the loaded libmptrain, e.g. "0.1.0".</summary>
        public static string Version { get { return Utf8.FromNative(Native.mpt_version()); } }

        public static int CudaDeviceCount { get { return Native.mpt_cuda_device_count(); } }
    }
}
