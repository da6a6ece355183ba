// The base of the public API's owning wrappers, Context, Model, Dataset and Trainer (IDisposable, each
// owning a SafeHandle), and the rules they share. Library failures throw MptException (status +
// message); null arguments ArgumentNullException; use after Dispose ObjectDisposedException. Calls on
// objects of one Context are serialised by a lock, so they may be shared between threads; different
// contexts run in parallel. Finalizers never wait for that lock: what they release is destroyed by its
// holder as it lets go (Handles.cs).
using System;

namespace Mptrain
{
    /// <summary>Base of the owning wrappers: the handle, its context family, Dispose.</summary>
    public abstract class NativeObject<THandle> : IDisposable where THandle : MptHandle
    {
        internal THandle handle;

        internal NativeObject(THandle handle) { this.handle = handle; }

        internal Family Family { get { return handle.Family; } }

        /// <summary>The live handle, or ObjectDisposedException.</summary>
        internal THandle Live
        {
            get
            {
                if (handle.IsClosed || handle.IsInvalid) throw new ObjectDisposedException(GetType().Name);
                return handle;
            }
        }

        public bool IsDisposed { get { return handle.IsClosed; } }

        /// <summary>Destroys the object now, waiting for a call on its context in another thread (the
        /// finalizer instead leaves the destroy to that call).</summary>
        public void Dispose()
        {
            Family family = handle.Family;
            if (family == null) handle.Dispose();
            else using (family.Enter()) Close();
            GC.SuppressFinalize(this);
        }

        /// <summary>Disposes the handle, holding the family's lock.</summary>
        internal virtual void Close() { handle.Dispose(); }

        internal delegate Status Getter<T>(THandle handle, out T value);

        /// <summary>The value a one-value C getter writes, read holding the family's lock.</summary>
        internal T Query<T>(Getter<T> getter)
        {
            using (Family.Enter())
            {
                T value;
                MptException.Check(getter(Live, out value));
                return value;
            }
        }

        internal static T NotNull<T>(T value, string name) where T : class
        {
            if (value == null) throw new ArgumentNullException(name);
            return value;
        }

        /// <summary>A standardization's arrays (Dataset.Standardized, Model.SetInputStandardization):
        /// not null, and one count to reach C. Arrays of different lengths, or empty ones (which the
        /// marshaller may pass as NULL: for a model, removing its standardization), are the shape
        /// mismatch C reports for a count other than the features.</summary>
        internal static void RequireStandardization(float[] mean, float[] stddev)
        {
            NotNull(mean, "mean");
            NotNull(stddev, "stddev");
            if (mean.LongLength != stddev.LongLength || mean.LongLength == 0)
                throw new MptException(Status.ShapeMismatch, "standardization takes one mean and one stddev per feature ("
                    + mean.LongLength + " means and " + stddev.LongLength + " stddevs given)");
        }
    }
}
