// One SafeHandle subclass per C handle; ReleaseHandle calls the matching _destroy. The C library
// reference-counts parents, so the finalizer may release handles in any order.
using System;
using System.Collections.Concurrent;
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
        internal readonly object Sync = new object(); // taken through Enter, which drains `pending`
        internal Action<LogLevel, string> Log;
        internal IntPtr LogHandle; // GCHandle of this object while C may call the log callback
        private int handles;
        private int depth; // how deeply the owner of Sync holds it; changed only by that owner

        // Destroys left by finalizers that found Sync taken. A finalizer never waits for Sync: Fit holds
        // it throughout, and a callback that waits for pending finalizers would then deadlock.
        private readonly ConcurrentQueue<Action> pending = new ConcurrentQueue<Action>();

        internal struct Held : IDisposable
        {
            private readonly Family family;
            internal Held(Family family) { this.family = family; }
            public void Dispose() { family.Exit(); }
        }

        /// <summary>Takes the lock until the result is disposed (`using (family.Enter())`); the
        /// outermost exit runs the destroys that finalizers queued meanwhile.</summary>
        internal Held Enter()
        {
            Monitor.Enter(Sync);
            depth++;
            return new Held(this);
        }

        private void Exit()
        {
            // A nested exit is still inside a C call (a callback of fit, or a log callback, which must
            // not call into its context), so queued destroys wait for the outermost one.
            bool outermost = --depth == 0;
            Monitor.Exit(Sync);
            if (outermost) Drain();
        }

        /// <summary>Runs `destroy` now when this thread holds the lock (Dispose takes it), else queues it
        /// for the lock's holder, or runs it here if the lock is free. Never blocks.</summary>
        internal void Release(Action destroy)
        {
            if (Monitor.IsEntered(Sync))
            {
                destroy();
                return;
            }
            pending.Enqueue(destroy);
            Drain();
        }

        // Called after queueing and after every outermost release of the lock. A finalizer queues, then
        // tries the lock; a holder releases it, then looks at the queue. The fence keeps each look after
        // the write before it, so at least one of the two sees the other and runs the destroy.
        private void Drain()
        {
            while (true)
            {
                Interlocked.MemoryBarrier();
                if (pending.IsEmpty || !Monitor.TryEnter(Sync)) return;
                depth++;
                try
                {
                    Action destroy;
                    while (pending.TryDequeue(out destroy)) destroy();
                }
                finally
                {
                    depth--;
                    Monitor.Exit(Sync);
                }
            }
        }

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

        // Runs from Dispose (which holds the family's lock), or from the finalizer, which must not wait
        // for the lock (see Family.Release).
        protected override bool ReleaseHandle()
        {
            Family family = Family;
            IntPtr raw = handle;
            if (family == null)
            {
                Destroy(raw);
                return true;
            }
            family.Release(() =>
            {
                Destroy(raw);
                family.ReleaseHandle();
            });
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

        // Set when Dispose ran in one of the trainer's own callbacks: mpt_trainer_destroy was called
        // then, and the library frees the trainer as fit returns, so it must not be destroyed again.
        internal bool DestroyedInCallback;

        /// <summary>Calls mpt_trainer_destroy from the trainer's own callback. The call to
        /// mpt_trainer_fit holds a reference to this handle, so ReleaseHandle runs only once fit has
        /// returned, and then frees just the callbacks' GCHandle.</summary>
        internal void DestroyInCallback()
        {
            if (DestroyedInCallback || IsClosed) return;
            DestroyedInCallback = true;
            Native.mpt_trainer_destroy(handle);
        }

        protected override void Destroy(IntPtr raw)
        {
            if (!DestroyedInCallback) Native.mpt_trainer_destroy(raw);
            if (CallbacksHandle != IntPtr.Zero)
            {
                GCHandle.FromIntPtr(CallbacksHandle).Free();
                CallbacksHandle = IntPtr.Zero;
            }
        }
    }
}
