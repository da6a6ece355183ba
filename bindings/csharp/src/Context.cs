// Context: the root object every other one is created from (backend, threads, seed, memory budget,
// log callback), with the options it is created from, its memory reading and its description.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Mptrain
{
    /// <summary>Options of a Context; null values keep the library's defaults.</summary>
    public sealed class ContextOptions
    {
        public Backend? Backend { get; set; }
        /// <summary>CPU compute threads; 0 = number of cores.</summary>
        public int? Threads { get; set; }
        public ulong? Seed { get; set; }
        public int? Device { get; set; }
        public LogLevel? LogLevel { get; set; }
        /// <summary>Upper bound on the context's arena bytes; 0 = unlimited.</summary>
        public ulong? MemoryBudget { get; set; }
        /// <summary>Device bytes one data set may occupy on a GPU; larger ones are streamed from host memory.</summary>
        public ulong? DatasetDeviceBudget { get; set; }
        /// <summary>Receives log messages on the calling thread; its exceptions are swallowed.</summary>
        public Action<LogLevel, string> Log { get; set; }
    }

    public struct MemoryUsage
    {
        public ulong Used;
        public ulong Peak;
    }

    public sealed class Context : NativeObject<ContextHandle>
    {
        public Context() : this(null) { }

        public Context(ContextOptions options) : base(Create(options)) { }

        private static ContextHandle Create(ContextOptions options)
        {
            var family = new Family();
            ContextOptionsHandle raw;
            MptException.Check(Native.mpt_context_options_create(out raw));
            using (raw)
            {
                if (options != null)
                {
                    if (options.Backend.HasValue) MptException.Check(Native.mpt_context_options_set_backend(raw, options.Backend.Value));
                    if (options.Threads.HasValue) MptException.Check(Native.mpt_context_options_set_threads(raw, options.Threads.Value));
                    if (options.Seed.HasValue) MptException.Check(Native.mpt_context_options_set_seed(raw, options.Seed.Value));
                    if (options.Device.HasValue) MptException.Check(Native.mpt_context_options_set_device(raw, options.Device.Value));
                    if (options.LogLevel.HasValue) MptException.Check(Native.mpt_context_options_set_log_level(raw, options.LogLevel.Value));
                    if (options.MemoryBudget.HasValue)
                        MptException.Check(Native.mpt_context_options_set_memory_budget(raw, new UIntPtr(options.MemoryBudget.Value)));
                    if (options.DatasetDeviceBudget.HasValue)
                        MptException.Check(Native.mpt_context_options_set_dataset_device_budget(raw, new UIntPtr(options.DatasetDeviceBudget.Value)));
                    if (options.Log != null)
                    {
                        family.Log = options.Log;
                        family.LogHandle = GCHandle.ToIntPtr(GCHandle.Alloc(family));
                        MptException.Check(Native.mpt_context_options_set_log_callback(raw, Family.LogThunk, family.LogHandle));
                    }
                }
                ContextHandle context;
                Status status = Native.mpt_context_create(raw, out context);
                if (status != Status.Ok && family.LogHandle != IntPtr.Zero)
                {
                    GCHandle.FromIntPtr(family.LogHandle).Free();
                    family.LogHandle = IntPtr.Zero;
                }
                MptException.Check(status);
                context.Attach(family);
                return context;
            }
        }

        public Backend Backend { get { return Query<Backend>(Native.mpt_context_get_backend); } }

        public Precision ResolvePrecision(Precision requested)
        {
            using (Family.Enter())
            {
                Precision precision;
                MptException.Check(Native.mpt_context_resolve_precision(Live, requested, out precision));
                return precision;
            }
        }

        public MemoryUsage Memory
        {
            get
            {
                using (Family.Enter())
                {
                    UIntPtr used, peak;
                    MptException.Check(Native.mpt_context_get_memory(Live, out used, out peak));
                    return new MemoryUsage { Used = used.ToUInt64(), Peak = peak.ToUInt64() };
                }
            }
        }

        /// <summary>What this context runs on and how, as one JSON object (mpt_context_describe): "version",
        /// "backend" ("cpu" or "cuda"), "device", "auto_fallback", the memory counters, then the backend's own
        /// members ("threads", ... on the CPU; "device_index", "switches", ... on CUDA).</summary>
        public string Describe()
        {
            // One lock around both calls: no call on this context's objects can change the text between them.
            using (Family.Enter())
            {
                UIntPtr length;
                MptException.Check(Native.mpt_context_describe(Live, null, UIntPtr.Zero, out length));
                var text = new byte[length.ToUInt64() + 1];  // and C's NUL
                MptException.Check(Native.mpt_context_describe(Live, text, new UIntPtr((ulong)text.Length), out length));
                return Encoding.UTF8.GetString(text, 0, (int)length.ToUInt64());
            }
        }
    }
}
