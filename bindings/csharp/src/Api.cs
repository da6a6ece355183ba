// The public C# API: Context, Model, Dataset, Trainer (IDisposable, each owning a SafeHandle).
// Library failures throw MptException (status + message); null arguments ArgumentNullException; use
// after Dispose ObjectDisposedException. Calls on objects of one Context are serialised by a lock,
// so they may be shared between threads; different contexts run in parallel. Finalizers never wait
// for that lock: what they release is destroyed by its holder as it lets go (Handles.cs).
using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Text;

namespace Mptrain
{
    public static class Library
    {
        /// <summary>Version of the loaded libmptrain, e.g. "0.1.0".</summary>
        public static string Version { get { return Utf8.FromNative(Native.mpt_version()); } }

        public static int CudaDeviceCount { get { return Native.mpt_cuda_device_count(); } }
    }

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

        public Backend Backend
        {
            get
            {
                using (Family.Enter())
                {
                    Backend backend;
                    MptException.Check(Native.mpt_context_get_backend(Live, out backend));
                    return backend;
                }
            }
        }

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
    }

    public sealed class Model : NativeObject<ModelHandle>
    {
        private readonly long inputFeatures;

        public Model(Context context, long inputFeatures) : base(Create(context, inputFeatures))
        {
            this.inputFeatures = inputFeatures;
        }

        private Model(ModelHandle handle) : base(handle)
        {
            inputFeatures = InputFeatures;
        }

        private static ModelHandle Create(Context context, long inputFeatures)
        {
            NotNull(context, "context");
            using (context.Family.Enter())
            {
                ModelHandle model;
                MptException.Check(Native.mpt_model_create(context.Live, inputFeatures, out model));
                model.Attach(context.Family);
                return model;
            }
        }

        /// <summary>Appends a Dense layer; returns this model, so calls chain.</summary>
        public Model AddDense(long units, Activation activation)
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_add_dense(Live, units, activation));
            return this;
        }

        public void SetLayerDType(int layer, DType dtype)
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_set_layer_dtype(Live, layer, dtype));
        }

        /// <summary>Layer <paramref name="layer"/>'s dtype override (DType.Default: the policy's).</summary>
        public DType GetLayerDType(int layer)
        {
            return QueryLayer<DType>(Native.mpt_model_get_layer_dtype, layer);
        }

        /// <summary>Dropout after hidden layer <paramref name="layer"/>, as a Keras Dropout(rate) layer after
        /// it: while a trainer trains (Fit, Step), each of its outputs is dropped with probability
        /// <paramref name="rate"/> in [0, 1) and the kept ones are scaled by 1 / (1 - rate); Evaluate and
        /// Predict use every output. 0 (the default) means none. Before the model is built; another rate or
        /// layer throws MptException (Status.InvalidArgument). Building a model whose last layer has dropout
        /// (a Trainer, Predict, GetWeights) throws Status.InvalidState. Saved with the model.</summary>
        public void SetLayerDropout(int layer, float rate)
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_set_layer_dropout(Live, layer, rate));
        }

        /// <summary>Dropout on the inputs, as a Keras Dropout(rate) before the first Dense layer: while a trainer
        /// trains, each input value is dropped with probability <paramref name="rate"/> in [0, 1) and the kept
        /// ones are scaled by 1 / (1 - rate); Evaluate and Predict use every input. Before the model is built;
        /// saved with the model.</summary>
        public void SetInputDropout(float rate)
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_set_input_dropout(Live, rate));
        }

        /// <summary>The inputs' dropout rate (0: none).</summary>
        public float GetInputDropout()
        {
            using (Family.Enter())
            {
                float rate;
                MptException.Check(Native.mpt_model_get_input_dropout(Live, out rate));
                return rate;
            }
        }

        /// <summary>Standardizes the inputs inside the model, as a Keras Normalization layer before the first
        /// Dense layer: input feature f becomes (x - mean[f]) / max(stddev[f], 1e-7), each operation rounded in
        /// float32, in Fit, Step, Evaluate and PredictDataset and in Predict alike. Saved with the model, so a
        /// loaded model predicts from raw inputs as the trained one did. A training set's
        /// Dataset.FeatureStatistics() are the values to give (Keras's adapt):
        /// <code>
        /// var (mean, stddev) = training.FeatureStatistics();
        /// model.SetInputStandardization(mean, stddev); // then Fit on the raw training set
        /// </code>
        /// `mean` and `stddev` hold one value per input feature: another count (or counts that differ) throws
        /// MptException with Status.ShapeMismatch, a non-finite mean or a negative or non-finite standard
        /// deviation with Status.InvalidArgument naming the first such; a null array ArgumentNullException.
        /// They are copied and replace any the model had. A trainer refuses a Standardized data set for such
        /// a model (Status.InvalidArgument: that would standardize twice). At any time but while a trainer
        /// fits the model (Status.InvalidState).</summary>
        public void SetInputStandardization(float[] mean, float[] stddev)
        {
            RequireStandardization(mean, stddev);
            using (Family.Enter())
                MptException.Check(Native.mpt_model_set_input_standardization(Live, mean, stddev, mean.LongLength));
        }

        /// <summary>Removes the model's input standardization, if any: it takes its inputs as given again.</summary>
        public void ClearInputStandardization()
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_set_input_standardization(Live, null, null, 0));
        }

        /// <summary>The means and standard deviations the model standardizes its inputs by, as set (not
        /// floored), as Dataset.FeatureStatistics() gives them; null when it takes its inputs as given.
        /// Deconstruct the value (<c>var (mean, stddev) = s.Value;</c>): Mono's mcs 6.8 loses the element
        /// name Stddev of a nullable tuple from another assembly.</summary>
        public (float[] Mean, float[] Stddev)? GetInputStandardization()
        {
            using (Family.Enter())
            {
                float[] mean = Shape.ZeroedFloats(inputFeatures);
                float[] stddev = Shape.ZeroedFloats(inputFeatures);
                int standardizes;
                MptException.Check(Native.mpt_model_get_input_standardization(Live, mean, stddev, inputFeatures, out standardizes));
                if (standardizes == 0) return null;
                return (mean, stddev);
            }
        }

        /// <summary>How layer <paramref name="layer"/>'s weights are drawn when the model is built (default
        /// Initializer.GlorotUniform), from the context's seed. Before the model is built (else
        /// Status.InvalidState); not saved with the model, whose file holds the weights.</summary>
        public void SetLayerInitializer(int layer, Initializer initializer)
        {
            using (Family.Enter()) MptException.Check(Native.mpt_model_set_layer_initializer(Live, layer, initializer));
        }

        /// <summary>Layer <paramref name="layer"/>'s initializer (a loaded model's are the default).</summary>
        public Initializer GetLayerInitializer(int layer)
        {
            return QueryLayer<Initializer>(Native.mpt_model_get_layer_initializer, layer);
        }

        /// <summary>Layer <paramref name="layer"/>'s dropout rate (0: none).</summary>
        public float GetLayerDropout(int layer)
        {
            return QueryLayer<float>(Native.mpt_model_get_layer_dropout, layer);
        }

        /// <summary>Freezes layer <paramref name="layer"/> (false) or lets it train (true, the default), as
        /// Keras's layer.trainable: trainers' steps leave a frozen layer's weights, bias and optimizer state
        /// exactly as they are (no gradient, no weight decay, no share of the clipped norm, no averaging:
        /// swapped in, the averages leave it as it is), while gradients still flow through it to the layers
        /// below. At any time: every trainer's next step reads it. Training with every layer frozen throws
        /// MptException (Status.InvalidState). Saved with the model.</summary>
        public void SetLayerTrainable(int layer, bool trainable)
        {
            using (Family.Enter())
                MptException.Check(Native.mpt_model_set_layer_trainable(Live, layer, trainable ? 1 : 0));
        }

        /// <summary>Whether layer <paramref name="layer"/> trains (false: frozen).</summary>
        public bool GetLayerTrainable(int layer)
        {
            return QueryLayer<int>(Native.mpt_model_get_layer_trainable, layer) != 0;
        }

        private delegate Status Getter(ModelHandle model, out long value);
        private delegate Status LayerGetter<T>(ModelHandle model, long layer, out T value);

        /// <summary>What the per-layer getter writes for <paramref name="layer"/>.</summary>
        private T QueryLayer<T>(LayerGetter<T> getter, int layer)
        {
            using (Family.Enter())
            {
                T value;
                MptException.Check(getter(Live, layer, out value));
                return value;
            }
        }

        private long Query(Getter getter)
        {
            using (Family.Enter())
            {
                long value;
                MptException.Check(getter(Live, out value));
                return value;
            }
        }

        public long LayerCount { get { return Query(Native.mpt_model_get_layer_count); } }
        public long InputFeatures { get { return Query(Native.mpt_model_get_input_features); } }
        public long OutputFeatures { get { return Query(Native.mpt_model_get_output_features); } }
        public long ParameterCount { get { return Query(Native.mpt_model_get_parameter_count); } }

        /// <summary>Layer <paramref name="layer"/>'s width, as added or as a loaded file holds it.</summary>
        public long GetLayerUnits(int layer)
        {
            return QueryLayer<long>(Native.mpt_model_get_layer_units, layer);
        }

        /// <summary>Layer <paramref name="layer"/>'s activation, as added or as a loaded file holds it.</summary>
        public Activation GetLayerActivation(int layer)
        {
            return QueryLayer<Activation>(Native.mpt_model_get_layer_activation, layer);
        }

        /// <summary>A layer's fp32 master weights (row-major [units, inputs]) and bias ([units]).</summary>
        public void GetWeights(int layer, out float[] weights, out float[] bias)
        {
            long units = GetLayerUnits(layer); // throws for a layer out of range
            long inputs = layer == 0 ? inputFeatures : GetLayerUnits(layer - 1);
            // The library caps both at 2^24, so no overflow, but 2^48 floats fit no memory (nor an array).
            weights = Shape.ZeroedFloats(inputs > long.MaxValue / units ? long.MaxValue : units * inputs);
            bias = Shape.ZeroedFloats(units);
            using (Family.Enter())
                MptException.Check(Native.mpt_model_get_weights(Live, layer, weights, weights.LongLength, bias, bias.LongLength));
        }

        /// <summary>Sets a layer's weights and bias; either may be null to keep it.</summary>
        public void SetWeights(int layer, float[] weights, float[] bias)
        {
            using (Family.Enter())
                MptException.Check(Native.mpt_model_set_weights(Live, layer, weights, weights == null ? 0 : weights.LongLength,
                                                                bias, bias == null ? 0 : bias.LongLength));
        }

        /// <summary>fp32 forward pass for whole rows of InputFeatures floats; returns rows * OutputFeatures.</summary>
        public float[] Predict(float[] inputs)
        {
            long rows = Shape.Of(NotNull(inputs, "inputs").LongLength, inputFeatures, "inputs");
            using (Family.Enter())
            {
                float[] output = Shape.PredictionOutput(rows, inputFeatures, OutputFeatures);
                MptException.Check(Native.mpt_model_predict(Live, inputs, rows, output, output.LongLength));
                return output;
            }
        }

        /// <summary>Saves the architecture and fp32 weights as a .safetensors file, atomically (a crash
        /// leaves the old file or the new one). Builds the model.</summary>
        public void Save(string path)
        {
            NotNull(path, "path");
            using (Family.Enter())
            {
                ModelHandle live = Live;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_model_save(live, native)));
            }
        }

        /// <summary>Loads a model written by Save (or the model inside a training checkpoint). A missing
        /// file throws MptException with Status.IoError, a truncated or damaged one Status.CorruptData,
        /// one from another major version Status.Unsupported.</summary>
        public static Model Load(Context context, string path)
        {
            NotNull(context, "context");
            NotNull(path, "path");
            using (context.Family.Enter())
            {
                ContextHandle live = context.Live;
                ModelHandle handle = null;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_model_load(live, native, out handle)));
                handle.Attach(context.Family);
                return new Model(handle);
            }
        }
    }

    internal static class Shape
    {
        internal static long Of(long values, long width, string what)
        {
            if (width <= 0 || values == 0 || values % width != 0)
                throw new MptException(Status.ShapeMismatch, what + " holds " + values + " values, not whole rows of " + width);
            return values / width;
        }

        /// <summary>The most elements the library accepts in one caller's array (a data set's samples, a
        /// prediction's inputs or outputs): MPT_MAX_HOST_ELEMENTS in mptrain.h. Checked here too, so
        /// that what the library would refuse is refused before these bindings allocate for it.</summary>
        internal const long MaxHostElements = 1L << 40;

        /// <summary>rows * width (both positive) as an element count, refused as the library refuses it:
        /// the same status and message.</summary>
        internal static long Elements(long rows, long width, string what)
        {
            if (width > MaxHostElements / rows)
                throw new MptException(Status.InvalidArgument, what + " would hold more than 2^40 elements");
            return rows * width;
        }

        /// <summary>`count` zeroed floats for C to fill. An array the runtime cannot allocate (too long for
        /// an array, or for memory) is an MptException with OutOfMemory, as it is in C.</summary>
        internal static float[] ZeroedFloats(long count)
        {
            try
            {
                return new float[count];
            }
            catch (OverflowException)
            {
                throw new MptException(Status.OutOfMemory, "out of host memory");
            }
            catch (OutOfMemoryException)
            {
                throw new MptException(Status.OutOfMemory, "out of host memory");
            }
        }

        /// <summary>The output array of a prediction on `rows` rows, after the library's checks of them
        /// (the inputs, then the outputs, within MaxHostElements).</summary>
        internal static float[] PredictionOutput(long rows, long inputFeatures, long outputFeatures)
        {
            Elements(rows, inputFeatures, "the inputs (rows * input features)");
            return ZeroedFloats(Elements(rows, Math.Max(outputFeatures, 1), "the outputs (rows * output features)"));
        }
    }

    public sealed class Dataset : NativeObject<DatasetHandle>
    {
        private Dataset(DatasetHandle handle) : base(handle) { }

        private delegate Status Creator(ContextHandle context, out DatasetHandle dataset);

        private static Dataset Create(Context context, Creator create)
        {
            NotNull(context, "context");
            using (context.Family.Enter())
            {
                DatasetHandle dataset;
                MptException.Check(create(context.Live, out dataset));
                dataset.Attach(context.Family);
                return new Dataset(dataset);
            }
        }

        private static void CheckSamples(long values, long features, long rows)
        {
            // Beyond the library's limit (long overflow included) no array can be right: that is the
            // library's refusal, with its status and message.
            if (features > 0 && rows > 0) Shape.Elements(rows, features, "the dataset (rows * features)");
            if (features <= 0 || rows == 0 || values != rows * features)
                throw new MptException(Status.ShapeMismatch,
                    values + " sample values do not make " + rows + " rows of " + features + " features");
        }

        /// <summary>float32 samples (labels.Length rows of features) with labels in [0, numClasses).</summary>
        public static Dataset FromF32(Context context, float[] samples, long features, int[] labels, int numClasses,
                                      bool checkFinite = true)
        {
            NotNull(samples, "samples");
            NotNull(labels, "labels");
            CheckSamples(samples.LongLength, features, labels.LongLength);
            return Create(context, (ContextHandle c, out DatasetHandle d) =>
                Native.mpt_dataset_create_f32(c, samples, labels.LongLength, features, labels, numClasses, checkFinite ? 1 : 0, out d));
        }

        /// <summary>uint8 samples, normalised as x * scale + offset when batched.</summary>
        public static Dataset FromU8(Context context, byte[] samples, long features, int[] labels, int numClasses,
                                     float scale = 1.0f / 255.0f, float offset = 0.0f)
        {
            NotNull(samples, "samples");
            NotNull(labels, "labels");
            CheckSamples(samples.LongLength, features, labels.LongLength);
            return Create(context, (ContextHandle c, out DatasetHandle d) =>
                Native.mpt_dataset_create_u8(c, samples, labels.LongLength, features, labels, numClasses, scale, offset, out d));
        }

        /// <summary>float32 samples with float32 targets ([rows, targetWidth]).</summary>
        public static Dataset FromTargets(Context context, float[] samples, long features, float[] targets, long targetWidth,
                                          bool checkFinite = true)
        {
            NotNull(samples, "samples");
            NotNull(targets, "targets");
            long rows = Shape.Of(targets.LongLength, targetWidth, "targets");
            CheckSamples(samples.LongLength, features, rows);
            return Create(context, (ContextHandle c, out DatasetHandle d) =>
                Native.mpt_dataset_create_f32_targets(c, samples, rows, features, targets, targetWidth, checkFinite ? 1 : 0, out d));
        }

        /// <summary>CIFAR-10 from the binary release's directory.</summary>
        public static Dataset LoadCifar10(Context context, string directory, bool train, long limit = 0)
        {
            NotNull(directory, "directory");
            return Utf8.WithPath(directory, path => Create(context, (ContextHandle c, out DatasetHandle d) =>
                Native.mpt_dataset_load_cifar10(c, path, train ? 1 : 0, limit, out d)));
        }

        public long Rows
        {
            get
            {
                using (Family.Enter())
                {
                    long value;
                    MptException.Check(Native.mpt_dataset_get_rows(Live, out value));
                    return value;
                }
            }
        }

        public long Features
        {
            get
            {
                using (Family.Enter())
                {
                    long value;
                    MptException.Check(Native.mpt_dataset_get_features(Live, out value));
                    return value;
                }
            }
        }

        /// <summary>A copy of the integer labels, one per row (a slice's own rows', from its first). With
        /// Trainer.PredictDataset, a confusion matrix or the per-class accuracy of a loaded data set (the
        /// CIFAR-10 test set, a validation slice):
        /// <code>
        /// float[] probabilities = trainer.PredictDataset(test); // Rows * 10
        /// int[] labels = test.GetLabels();
        /// var confusion = new long[10, 10]; // [label, predicted class]
        /// for (int row = 0; row &lt; labels.Length; row++)
        /// {
        ///     int predicted = 0;
        ///     for (int c = 1; c &lt; 10; c++)
        ///         if (probabilities[row * 10 + c] &gt; probabilities[row * 10 + predicted]) predicted = c;
        ///     confusion[labels[row], predicted]++;
        /// }
        /// </code>
        /// A data set of float targets (FromTargets) has no labels: MptException with
        /// Status.InvalidArgument.</summary>
        public int[] GetLabels()
        {
            using (Family.Enter())
            {
                DatasetHandle live = Live;
                long rows;
                MptException.Check(Native.mpt_dataset_get_rows(live, out rows));
                int[] labels;
                try
                {
                    labels = new int[rows];
                }
                catch (OutOfMemoryException)
                {
                    throw new MptException(Status.OutOfMemory, "out of host memory");
                }
                catch (OverflowException)
                {
                    throw new MptException(Status.OutOfMemory, "out of host memory");
                }
                MptException.Check(Native.mpt_dataset_get_labels(live, labels, labels.LongLength));
                return labels;
            }
        }

        /// <summary>A data set of rows [first, first + rows) of this one that shares its storage: nothing
        /// is copied, and on a GPU one device copy serves this data set and all its slices (placed when any
        /// of them is first used, within the context's DatasetDeviceBudget as a whole). Labels or targets,
        /// classes and normalisation are this data set's. For a held-out validation set or a first or
        /// last fold: Keras's validation_split holds out the last rows, before any shuffling, so a split of
        /// `held` rows is <c>Slice(0, Rows - held)</c> for training and <c>Slice(Rows - held, held)</c>
        /// for validation. The slice is a Dataset of its own, disposed separately: it keeps the storage
        /// alive after this one is disposed (and the context after its Context is); a slice of a slice
        /// counts from that slice's first row. `first` outside [0, Rows) or `rows` outside
        /// [1, Rows - first] throws MptException with Status.InvalidArgument.</summary>
        public Dataset Slice(long first, long rows)
        {
            using (Family.Enter())
            {
                DatasetHandle slice;
                MptException.Check(Native.mpt_dataset_create_slice(Live, first, rows, out slice));
                slice.Attach(Family);
                return new Dataset(slice);
            }
        }

        /// <summary>A data set of copies of this one's rows rows[0], rows[1], ... in that order: any rows,
        /// where a slice is one range. For k-fold cross-validation (a fold's training rows are all the
        /// others), a stratified or shuffled split, or a bootstrap sample (a row may be listed more than
        /// once). Each row brings its label or targets and its weight (of a Weighted data set); classes
        /// and normalisation are this data set's. Unlike a slice the rows are copied, into a storage of
        /// the subset's own (on a GPU placed on the device apart from this data set's when first used).
        /// The subset is a Dataset of its own, disposed separately: it keeps the context alive after its
        /// Context is disposed. Indices count from this data set's first row (a slice's own); no rows,
        /// or an index outside [0, Rows), throws MptException with Status.InvalidArgument naming the
        /// first such; a null array ArgumentNullException.</summary>
        public Dataset Subset(long[] rows)
        {
            NotNull(rows, "rows");
            using (Family.Enter())
            {
                DatasetHandle subset;
                MptException.Check(Native.mpt_dataset_create_subset(Live, rows, rows.LongLength, out subset));
                subset.Attach(Family);
                return new Dataset(subset);
            }
        }

        /// <summary>A data set of this one's rows with a weight per row: Keras's sample_weight, for Fit and
        /// Evaluate alike. In Fit, Step and Evaluate each row's loss (and in training its gradient) is
        /// multiplied by its weight, and in training by its class weight too where the trainer has
        /// TrainerOptions.ClassWeights (Evaluate leaves those out, as without row weights), then averaged
        /// over the rows as before: the weights are not normalised (Keras's sum_over_batch_size), so the
        /// losses reported, Evaluate's included, are the weighted ones. Accuracy counts every row once.
        /// Every loss takes row weights. The rows are shared, not copied, as by Slice; the weights are
        /// copied (on a GPU placed beside the rows, 4 bytes a row) and replace any weights this data set
        /// had; a slice of a weighted data set keeps its rows' weights. The result is a Dataset of its
        /// own, disposed separately: it keeps the storage alive after this one is disposed (and the
        /// context after its Context is). `weights` holds one weight per row: another count throws
        /// MptException with Status.ShapeMismatch, a negative, NaN or infinite weight with
        /// Status.InvalidArgument.</summary>
        public Dataset Weighted(float[] weights)
        {
            NotNull(weights, "weights");
            using (Family.Enter())
            {
                DatasetHandle weighted;
                MptException.Check(Native.mpt_dataset_create_weighted(Live, weights, weights.LongLength, out weighted));
                weighted.Attach(Family);
                return new Dataset(weighted);
            }
        }

        /// <summary>A data set of this one's rows standardized feature by feature, as Keras's Normalization
        /// layer does: feature f of every batch holds (x - mean[f]) / max(stddev[f], 1e-7), where x is
        /// what this data set gives (a uint8 sample after its scale and offset), each operation rounded
        /// in float32. For Fit, Step, Evaluate and PredictDataset alike; Predict takes its inputs as
        /// given, so standardize those yourself, or have the model standardize them
        /// (Model.SetInputStandardization, saved with it) instead. The rows are shared, not copied, as by Slice (a uint8
        /// data set stays 1 byte a value); the statistics are copied and replace any standardization this
        /// data set had, and slices, weighted data sets and subsets of the result keep them. Use the
        /// training set's FeatureStatistics() for the validation and test sets too:
        /// <code>
        /// var (mean, stddev) = training.FeatureStatistics();
        /// using (Dataset scaled = training.Standardized(mean, stddev))
        ///     trainer.Fit(scaled, epochs, batchSize);
        /// </code>
        /// The result is a Dataset of its own, disposed separately: it keeps the storage alive after this
        /// one is disposed (and the context after its Context is). `mean` and `stddev` hold one value per
        /// feature: another count (or counts that differ) throws MptException with
        /// Status.ShapeMismatch, a non-finite mean or a negative or non-finite standard deviation with
        /// Status.InvalidArgument naming the first such; a null array ArgumentNullException.</summary>
        public Dataset Standardized(float[] mean, float[] stddev)
        {
            RequireStandardization(mean, stddev);
            using (Family.Enter())
            {
                DatasetHandle standardized;
                MptException.Check(Native.mpt_dataset_create_standardized(Live, mean, stddev, mean.LongLength, out standardized));
                standardized.Attach(Family);
                return new Dataset(standardized);
            }
        }

        /// <summary>Each feature's mean and standard deviation over this data set's rows (a slice's own),
        /// of the values its batches hold (standardized ones, for a Standardized data set): the
        /// population's, divided by the rows, as Keras's Normalization.adapt, summed in double.
        /// Standardized(Mean, Stddev) with them gives features of mean 0 and standard deviation 1.</summary>
        public (float[] Mean, float[] Stddev) FeatureStatistics()
        {
            using (Family.Enter())
            {
                DatasetHandle live = Live;
                long features;
                MptException.Check(Native.mpt_dataset_get_features(live, out features));
                float[] mean = Shape.ZeroedFloats(features);
                float[] stddev = Shape.ZeroedFloats(features);
                MptException.Check(Native.mpt_dataset_get_feature_statistics(live, mean, stddev, features));
                return (mean, stddev);
            }
        }
    }

    public struct LossScalerDynamics
    {
        public float GrowthFactor;
        public float BackoffFactor;
        public long GrowthInterval;
        public float MinScale;
        public float MaxScale;
    }

    /// <summary>Options of a Trainer; null values keep the library's defaults. Trainer.GetOptions reads
    /// a trainer's back, every one filled in; FromCheckpoint those of the trainer that wrote a checkpoint.</summary>
    public sealed class TrainerOptions
    {
        /// <summary>The options of the trainer that wrote the training checkpoint at <paramref name="path"/>
        /// (Trainer.SaveCheckpoint), every one filled in as Trainer.GetOptions fills them, so that a run
        /// resumes from the file alone, as Keras's load_model restores the optimizer. The checkpoint holds
        /// the model too:
        /// <code>
        /// Model model = Model.Load(context, path);
        /// var trainer = new Trainer(model, TrainerOptions.FromCheckpoint(path));
        /// trainer.LoadCheckpoint(path);
        /// trainer.Fit(dataset, epochs, batchSize);
        /// </code>
        /// continues the run (bit for bit on the CPU backend, whatever the context's seed). Precision and
        /// LossScaling are the ones the trainer ran, Auto and Default resolved (e.g. Precision.MixedBf16
        /// and LossScaling.Off); LearningRate is the base rate of its next step (the rate set last, not
        /// the one it was created with); every other option is its own value. A checkpoint records no
        /// MicroBatchSize: it reads 0 (set it again for a run that used one). Options that the trainer's
        /// loss or optimizer does not read (HuberDelta without Loss.Huber, Rho without RMSprop) are not
        /// recorded and read as their defaults. MptException statuses: a model file (not a checkpoint)
        /// InvalidArgument, a missing file IoError, a truncated or damaged one CorruptData, one from
        /// another major version Unsupported; a null path throws ArgumentNullException.</summary>
        public static TrainerOptions FromCheckpoint(string path)
        {
            if (path == null) throw new ArgumentNullException("path");
            // The library reads the file alone, thread-safely: no context, so no family to enter.
            TrainerOptionsHandle raw = null;
            MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_options_create_from_checkpoint(native, out raw)));
            using (raw) return Trainer.ReadOptions(raw);
        }

        public Precision? Precision { get; set; }
        public Loss? Loss { get; set; }
        /// <summary>Huber's delta for Loss.Huber (null: the library's 1, Keras's): the loss is (y - t)^2 / 2
        /// where |y - t| &lt;= delta, else delta (|y - t| - delta / 2), so outlying targets pull no harder
        /// than delta. 0, a negative, NaN or infinite delta throws MptException (InvalidArgument) from the
        /// Trainer constructor. Only Huber reads it; checkpoints of a Huber trainer must match it.</summary>
        public float? HuberDelta { get; set; }
        /// <summary>Label smoothing s in [0, 1) for the cross-entropy losses (null or 0: none): training
        /// aims at t (1 - s) + s / n instead of each target t, n the model's outputs (2 for binary
        /// cross-entropy), as Keras's label_smoothing and PyTorch's CrossEntropyLoss(label_smoothing=).
        /// Fit, Step and Evaluate report the smoothed loss; accuracy compares with the given labels.
        /// Another value, or a non-zero one with a regression loss, throws MptException (InvalidArgument)
        /// from the Trainer constructor. Checkpoints must match it.</summary>
        public float? LabelSmoothing { get; set; }
        /// <summary>Class weights for the categorical cross-entropy losses (null or empty: none), one per
        /// model output, as Keras's fit(class_weight=): in training (Fit, Step) each row's loss and
        /// gradient are multiplied by the weight of its class (its label, or for float targets the first
        /// largest target), still averaged over the batch's rows, so Fit's and Step's losses are the
        /// weighted ones; Evaluate reports the unweighted loss. The Trainer constructor throws
        /// MptException: InvalidArgument for a negative, NaN or infinite weight, all weights 0, or class
        /// weights with BinaryCrossentropy or a regression loss; ShapeMismatch for a count other than the
        /// model's outputs. The array is read when a Trainer is constructed. Checkpoints must match them.</summary>
        public float[] ClassWeights { get; set; }
        public Optimizer? Optimizer { get; set; }
        public float? LearningRate { get; set; }
        /// <summary>SGD momentum in [0, 1), Nesterov's when Nesterov is true. Optimizer.RmsProp takes the
        /// momentum too, not Nesterov's (the Trainer constructor then throws MptException with
        /// InvalidArgument); Adam and Optimizer.Lion ignore it.</summary>
        public float? Momentum { get; set; }
        public bool Nesterov { get; set; }
        /// <summary>Adam's beta1, beta2 and epsilon, set together when Beta1 has a value. The library keeps
        /// one pair of betas for Adam and Lion: with LionBeta1 or LionBeta2 set too, Beta1 and Beta2 must
        /// equal Lion's (as GetOptions fills them), else the Trainer constructor throws MptException
        /// (InvalidArgument).</summary>
        public float? Beta1 { get; set; }
        public float Beta2 { get; set; } = 0.999f;
        /// <summary>Adam's and RMSprop's epsilon (one value, as the library keeps one), passed on when Beta1 or
        /// Rho has a value.</summary>
        public float Epsilon { get; set; } = 1e-7f;
        /// <summary>RMSprop's rho and epsilon (Epsilon), set together when Rho has a value, for
        /// Optimizer.RmsProp, as Keras computes it: v = rho v + (1 - rho) g^2,
        /// w -= lr g / sqrt(v + epsilon). Rho in [0, 1), Epsilon finite and &gt; 0 (library defaults 0.9
        /// and 1e-7); other values throw MptException (InvalidArgument) from the Trainer constructor.
        /// Checkpoints of an RMSprop trainer must match its rho.</summary>
        public float? Rho { get; set; }
        /// <summary>Centered RMSprop (Keras's centered=True, default false): the gradients' average a is
        /// kept too and v - a^2 (held at &gt;= 0) replaces v under the root. Read by Optimizer.RmsProp
        /// only; checkpoints of an RMSprop trainer must match it.</summary>
        public bool RmsPropCentered { get; set; }
        /// <summary>Lion's beta1 and beta2 for Optimizer.Lion, as Keras computes it:
        /// w -= lr sign(beta1 m + (1 - beta1) g), then m = beta2 m + (1 - beta2) g. Set together when
        /// either has a value, the other then Keras's default (0.9 for LionBeta1, 0.99 for LionBeta2,
        /// the library's defaults when neither is set). Each in [0, 1); other values throw MptException
        /// (InvalidArgument) from the Trainer constructor. Every weight moves by the rate or not at all,
        /// so Lion wants a rate 3-10 times smaller than AdamW's. Adam and Lion share the betas: with
        /// Beta1 set too, Beta1 and Beta2 must equal Lion's (an unset one counting as its default), else
        /// the Trainer constructor throws MptException (InvalidArgument). Checkpoints of a Lion trainer
        /// must match its betas.</summary>
        public float? LionBeta1 { get; set; }
        /// <summary>Lion's beta2: see LionBeta1.</summary>
        public float? LionBeta2 { get; set; }
        /// <summary>Decoupled weight decay, Keras's for every optimizer (AdamW's default 0.004, the others' 0).</summary>
        public float? WeightDecay { get; set; }
        /// <summary>Gradient clipping by global norm (null or 0: none), as Keras's global_clipnorm and
        /// PyTorch's clip_grad_norm_(max_norm): every step, the gradients of all weights and biases
        /// together are scaled by clipnorm / max(norm, clipnorm), norm their L2 norm (with loss scaling,
        /// that of the unscaled gradients), so a step keeps its direction and its length is bounded;
        /// weight decay is not clipped. A negative, NaN or infinite bound throws MptException
        /// (InvalidArgument) from the Trainer constructor. Checkpoints must match it.</summary>
        public float? GlobalClipnorm { get; set; }
        /// <summary>An exponential moving average of the weights (null or 0: none), as Keras's use_ema
        /// with ema_momentum (PyTorch's AveragedModel with get_ema_multi_avg_fn): after every applied step
        /// each weight's and bias's average becomes momentum * average + (1 - momentum) * weight, the first
        /// applied step copying the weights and a skipped step leaving them. Trainer.SwapEmaWeights puts
        /// them in the model. A momentum outside (0, 1) other than 0 throws MptException
        /// (InvalidArgument) from the Trainer constructor. Checkpoints must match it (and then hold the
        /// averages).</summary>
        public float? EmaMomentum { get; set; }
        /// <summary>Gradient accumulation (0: none): a step over a batch of more rows runs forward and
        /// backward on micro-batches of this many rows (the last may have fewer), adds up their gradients
        /// and makes the whole batch's one update, the same step as in one pass but for rounding (its
        /// loss, clipping, loss-scale skip, schedule step and dropout masks are the whole batch's), with
        /// the step memory of a micro-batch plus the sums, 4 bytes a parameter (Trainer.Memory). After
        /// such a step it is Evaluate's and PredictDataset's default batch size. A negative size throws
        /// MptException (InvalidArgument) from the Trainer constructor. Not recorded in checkpoints.</summary>
        public long MicroBatchSize { get; set; }
        /// <summary>A learning-rate schedule the library evaluates at every step, with WarmupSteps,
        /// DecaySteps and DecayFactor (all four set together when LrSchedule or DecayFactor has a value
        /// or WarmupSteps or DecaySteps is not 0; WarmupSteps alone: Constant with a warm-up). Step s,
        /// counted from 0 over the trainer's life (Trainer.Progress.Steps), trains with the base rate times
        /// (s + 1) / WarmupSteps during the warm-up (WarmupSteps &gt;= 0; 0: none), then, d steps after
        /// it: Constant 1 (DecaySteps 0, DecayFactor 1); Linear and Cosine from 1 down to DecayFactor (in
        /// [0, 1]) over DecaySteps (&gt;= 1) in a straight line or along half a cosine period, and
        /// DecayFactor after; Step DecayFactor (in (0, 1]) to the power floor(d / DecaySteps). A null
        /// DecayFactor (the default) is 1 for Constant, 0 for Linear and Cosine (a decay to rate 0) and
        /// 0.1 for Step; a value set is passed on as it is. Other values throw MptException
        /// (InvalidArgument) from the Trainer constructor. The next step's rate is
        /// Trainer.ScheduledLearningRate.</summary>
        public LrSchedule? LrSchedule { get; set; }
        public long WarmupSteps { get; set; }
        public long DecaySteps { get; set; }
        public float? DecayFactor { get; set; }
        public LossScaling? LossScaling { get; set; }
        public float InitialScale { get; set; } = 32768.0f;
        public LossScalerDynamics? LossScalerDynamics { get; set; }
    }

    public struct Evaluation
    {
        public float Loss;
        public float Accuracy;
    }

    public struct LossScaleState
    {
        public float Scale;
        public long GrowthTracker;
        public long SkippedSteps;
    }

    public struct TrainingProgress
    {
        public long Steps;
        public long Epochs;
    }

    /// <summary>The epoch Fit left unfinished (Trainer.UnfinishedEpoch); all 0 when there is none.</summary>
    public struct UnfinishedEpoch
    {
        /// <summary>Its steps that ran.</summary>
        public long Steps;
        /// <summary>The rows of the data set it trains on.</summary>
        public long Rows;
        /// <summary>Its batch size.</summary>
        public long BatchSize;
    }

    public struct TrainerMemory
    {
        public ulong Planned;
        public ulong Allocated;
    }

    /// <summary>The last epoch Fit completed: device time on a GPU (CUDA events), host time on the CPU.</summary>
    public struct EpochTime
    {
        public double Seconds;
        public long Steps;
    }

    /// <summary>Passed to the progress callback after each step of Fit; set Stop to end training.</summary>
    public sealed class StepProgress
    {
        public long Epoch { get; internal set; }
        public long Step { get; internal set; }
        public long StepsPerEpoch { get; internal set; }
        public float Loss { get; internal set; }
        public float Accuracy { get; internal set; }
        /// <summary>Set to true to stop Fit (it then throws MptException with Status.Cancelled).</summary>
        public bool Stop { get; set; }
    }

    /// <summary>Passed to the epoch-end callback; set Stop to end training.</summary>
    public sealed class EpochProgress
    {
        public long Epoch { get; internal set; }
        public float Loss { get; internal set; }
        public float Accuracy { get; internal set; }
        public bool Stop { get; set; }
    }

    public sealed class Trainer : NativeObject<TrainerHandle>
    {
        // What C calls back into: reached through a GCHandle (the user data) that the TrainerHandle
        // frees after mpt_trainer_destroy, so it lives exactly as long as C may call it.
        private sealed class Callbacks
        {
            internal Action<StepProgress> Progress;
            internal Action<EpochProgress> EpochEnd;
            internal Exception Error;
        }

        private static readonly ProgressFn ProgressThunk = OnProgress;
        private static readonly EpochEndFn EpochEndThunk = OnEpochEnd;

        private readonly Callbacks callbacks;
        private readonly long inputFeatures;
        private readonly long outputFeatures;
        // ManagedThreadId of the thread inside mpt_trainer_fit (0: none), the only thread that runs this
        // trainer's callbacks. Written by that thread alone, so only it can read its own id here.
        private int fittingThread;

        public Trainer(Model model) : this(model, null) { }

        public Trainer(Model model, TrainerOptions options) : base(Create(model, options))
        {
            callbacks = new Callbacks();
            handle.CallbacksHandle = GCHandle.ToIntPtr(GCHandle.Alloc(callbacks));
            inputFeatures = model.InputFeatures;
            outputFeatures = model.OutputFeatures;
        }

        // From the trainer's own callback, the C destroy is what stops the fit (it then returns
        // MPT_STATUS_CANCELLED, and the library frees the trainer as it returns).
        internal override void Close()
        {
            if (InOwnCallback) handle.DestroyInCallback();
            handle.Dispose();
        }

        // DecayFactor when none is set: a decay to rate 0 for Linear and Cosine (Keras's CosineDecay
        // alpha, PyTorch's CosineAnnealingLR eta_min, Hugging Face's linear schedule), PyTorch
        // StepLR's gamma for Step. An unknown schedule gets 1 and the library refuses it.
        private static float DefaultDecayFactor(LrSchedule schedule)
        {
            switch (schedule)
            {
                case Mptrain.LrSchedule.Linear:
                case Mptrain.LrSchedule.Cosine: return 0.0f;
                case Mptrain.LrSchedule.Step: return 0.1f;
                default: return 1.0f;
            }
        }

        // Refuses two inputs that the library keeps as one value (Adam's and Lion's betas) when they differ:
        // the one set last would silently win. Equal ones (as GetOptions fills them) are taken.
        private static void OneValue(string name, float value, string otherName, float otherValue)
        {
            if (value != otherValue)
                throw new MptException(Status.InvalidArgument, string.Format(CultureInfo.InvariantCulture,
                    "{0} {1} and {2} {3} are one value in the library: set them once, or equal",
                    name, value.ToString("R", CultureInfo.InvariantCulture), otherName,
                    otherValue.ToString("R", CultureInfo.InvariantCulture)));
        }

        // A Lion beta's name for OneValue, saying when it is unset (Lion's default, the other one being set).
        private static string LionName(string name, float? value)
        {
            return value.HasValue ? name : name + " (unset: Lion's default)";
        }

        private static TrainerHandle Create(Model model, TrainerOptions options)
        {
            NotNull(model, "model");
            TrainerOptionsHandle raw;
            MptException.Check(Native.mpt_trainer_options_create(out raw));
            using (raw)
            {
                if (options != null)
                {
                    if (options.Precision.HasValue) MptException.Check(Native.mpt_trainer_options_set_precision(raw, options.Precision.Value));
                    if (options.Loss.HasValue) MptException.Check(Native.mpt_trainer_options_set_loss(raw, options.Loss.Value));
                    if (options.HuberDelta.HasValue) MptException.Check(Native.mpt_trainer_options_set_huber_delta(raw, options.HuberDelta.Value));
                    if (options.LabelSmoothing.HasValue) MptException.Check(Native.mpt_trainer_options_set_label_smoothing(raw, options.LabelSmoothing.Value));
                    if (options.ClassWeights != null) MptException.Check(Native.mpt_trainer_options_set_class_weights(raw, options.ClassWeights, options.ClassWeights.Length));
                    if (options.Optimizer.HasValue) MptException.Check(Native.mpt_trainer_options_set_optimizer(raw, options.Optimizer.Value));
                    if (options.LearningRate.HasValue) MptException.Check(Native.mpt_trainer_options_set_learning_rate(raw, options.LearningRate.Value));
                    if (options.Momentum.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_momentum(raw, options.Momentum.Value, options.Nesterov ? 1 : 0));
                    if (options.Beta1.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_adam(raw, options.Beta1.Value, options.Beta2, options.Epsilon));
                    if (options.Rho.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_rmsprop(raw, options.Rho.Value, options.Epsilon));
                    MptException.Check(Native.mpt_trainer_options_set_rmsprop_centered(raw, options.RmsPropCentered ? 1 : 0));
                    if (options.LionBeta1.HasValue || options.LionBeta2.HasValue)
                    {
                        float lionBeta1 = options.LionBeta1 ?? 0.9f, lionBeta2 = options.LionBeta2 ?? 0.99f;
                        MptException.Check(Native.mpt_trainer_options_set_lion(raw, lionBeta1, lionBeta2));
                        // After both setters, which refuse values out of range (NaN among them) with their own message.
                        if (options.Beta1.HasValue)
                        {
                            OneValue("Beta1", options.Beta1.Value, LionName("LionBeta1", options.LionBeta1), lionBeta1);
                            OneValue("Beta2", options.Beta2, LionName("LionBeta2", options.LionBeta2), lionBeta2);
                        }
                    }
                    if (options.WeightDecay.HasValue) MptException.Check(Native.mpt_trainer_options_set_weight_decay(raw, options.WeightDecay.Value));
                    if (options.GlobalClipnorm.HasValue) MptException.Check(Native.mpt_trainer_options_set_global_clipnorm(raw, options.GlobalClipnorm.Value));
                    if (options.EmaMomentum.HasValue) MptException.Check(Native.mpt_trainer_options_set_ema(raw, options.EmaMomentum.Value));
                    MptException.Check(Native.mpt_trainer_options_set_micro_batch_size(raw, options.MicroBatchSize));
                    if (options.LrSchedule.HasValue || options.WarmupSteps != 0 || options.DecaySteps != 0 || options.DecayFactor.HasValue)
                    {
                        LrSchedule schedule = options.LrSchedule ?? Mptrain.LrSchedule.Constant;
                        MptException.Check(Native.mpt_trainer_options_set_lr_schedule(
                            raw, schedule, options.WarmupSteps, options.DecaySteps, options.DecayFactor ?? DefaultDecayFactor(schedule)));
                    }
                    if (options.LossScaling.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_loss_scaling(raw, options.LossScaling.Value, options.InitialScale));
                    if (options.LossScalerDynamics.HasValue)
                    {
                        LossScalerDynamics d = options.LossScalerDynamics.Value;
                        MptException.Check(Native.mpt_trainer_options_set_loss_scaler_dynamics(
                            raw, d.GrowthFactor, d.BackoffFactor, d.GrowthInterval, d.MinScale, d.MaxScale));
                    }
                }
                using (model.Family.Enter())
                {
                    TrainerHandle trainer;
                    MptException.Check(Native.mpt_trainer_create(model.Live, raw, out trainer));
                    trainer.Attach(model.Family);
                    return trainer;
                }
            }
        }

        // The inverse of Create's conversion: every option filled, so that Create sets each to the value
        // held. Beta1 and Rho make it set the betas and the epsilon, LionBeta1 the betas again (the same
        // pair), LrSchedule the schedule with its DecayFactor as held. For GetOptions and
        // TrainerOptions.FromCheckpoint, which dispose of `raw`.
        internal static TrainerOptions ReadOptions(TrainerOptionsHandle raw)
        {
            MptException.Check(Native.mpt_trainer_options_get_precision(raw, out Precision precision));
            MptException.Check(Native.mpt_trainer_options_get_loss(raw, out Loss loss));
            MptException.Check(Native.mpt_trainer_options_get_huber_delta(raw, out float huberDelta));
            MptException.Check(Native.mpt_trainer_options_get_label_smoothing(raw, out float labelSmoothing));
            MptException.Check(Native.mpt_trainer_options_get_optimizer(raw, out Optimizer optimizer));
            MptException.Check(Native.mpt_trainer_options_get_learning_rate(raw, out float learningRate));
            MptException.Check(Native.mpt_trainer_options_get_momentum(raw, out float momentum, out int nesterov));
            MptException.Check(Native.mpt_trainer_options_get_adam(raw, out float beta1, out float beta2, out float epsilon));
            MptException.Check(Native.mpt_trainer_options_get_rmsprop(raw, out float rho, out float _)); // its epsilon is Adam's
            MptException.Check(Native.mpt_trainer_options_get_rmsprop_centered(raw, out int centered));
            MptException.Check(Native.mpt_trainer_options_get_lion(raw, out float lionBeta1, out float lionBeta2));
            MptException.Check(Native.mpt_trainer_options_get_weight_decay(raw, out float weightDecay));
            MptException.Check(Native.mpt_trainer_options_get_global_clipnorm(raw, out float clipnorm));
            MptException.Check(Native.mpt_trainer_options_get_ema(raw, out float emaMomentum));
            MptException.Check(Native.mpt_trainer_options_get_micro_batch_size(raw, out long microBatchSize));
            MptException.Check(Native.mpt_trainer_options_get_lr_schedule(raw, out LrSchedule schedule, out long warmupSteps,
                                                                          out long decaySteps, out float decayFactor));
            MptException.Check(Native.mpt_trainer_options_get_loss_scaling(raw, out LossScaling scaling, out float initialScale));
            var dynamics = new LossScalerDynamics();
            MptException.Check(Native.mpt_trainer_options_get_loss_scaler_dynamics(
                raw, out dynamics.GrowthFactor, out dynamics.BackoffFactor, out dynamics.GrowthInterval, out dynamics.MinScale, out dynamics.MaxScale));
            return new TrainerOptions
            {
                Precision = precision, Loss = loss, HuberDelta = huberDelta, LabelSmoothing = labelSmoothing,
                ClassWeights = ReadClassWeights(raw), Optimizer = optimizer, LearningRate = learningRate,
                Momentum = momentum, Nesterov = nesterov != 0, Beta1 = beta1, Beta2 = beta2, Epsilon = epsilon,
                Rho = rho, RmsPropCentered = centered != 0, LionBeta1 = lionBeta1, LionBeta2 = lionBeta2,
                WeightDecay = weightDecay, GlobalClipnorm = clipnorm, EmaMomentum = emaMomentum,
                MicroBatchSize = microBatchSize, LrSchedule = schedule, WarmupSteps = warmupSteps,
                DecaySteps = decaySteps, DecayFactor = decayFactor, LossScaling = scaling,
                InitialScale = initialScale, LossScalerDynamics = dynamics,
            };
        }

        // The class weights held (their count first), null when there are none, as Create takes them.
        private static float[] ReadClassWeights(TrainerOptionsHandle raw)
        {
            MptException.Check(Native.mpt_trainer_options_get_class_weights(raw, null, 0, out long count));
            if (count == 0) return null;
            float[] weights = Shape.ZeroedFloats(count);
            MptException.Check(Native.mpt_trainer_options_get_class_weights(raw, weights, count, out count));
            return weights;
        }

        private static Callbacks From(IntPtr userData)
        {
            return (Callbacks)GCHandle.FromIntPtr(userData).Target;
        }

        private static int OnProgress(long epoch, long step, long steps, float loss, float accuracy, IntPtr userData)
        {
            Callbacks self = null;
            try
            {
                self = From(userData);
                if (self.Error != null || self.Progress == null) return self.Error != null ? 1 : 0;
                var info = new StepProgress { Epoch = epoch, Step = step, StepsPerEpoch = steps, Loss = loss, Accuracy = accuracy };
                self.Progress(info);
                return info.Stop ? 1 : 0;
            }
            catch (Exception error)
            {
                if (self != null) self.Error = error; // rethrown by Fit; never unwinds into C
                return 1;
            }
        }

        private static int OnEpochEnd(long epoch, float loss, float accuracy, IntPtr userData)
        {
            Callbacks self = null;
            try
            {
                self = From(userData);
                if (self.Error != null || self.EpochEnd == null) return self.Error != null ? 1 : 0;
                var info = new EpochProgress { Epoch = epoch, Loss = loss, Accuracy = accuracy };
                self.EpochEnd(info);
                return info.Stop ? 1 : 0;
            }
            catch (Exception error)
            {
                if (self != null) self.Error = error;
                return 1;
            }
        }

        /// <summary>Callbacks of Fit (either may be null). An exception thrown by one stops training
        /// and is rethrown by Fit. They run on Fit's thread, which may call back into this trainer:
        /// Evaluate and PredictDataset run from the epoch-end callback (validation each epoch: the
        /// numbers and outputs of an Evaluate or a PredictDataset between one-epoch fits, and Fit's run
        /// goes on unchanged), on a data set of this trainer's context (one of another throws
        /// InvalidArgument); the library refuses them from the progress callback, and Fit, Step and
        /// Predict from either, with Status.InvalidState. LearningRate may be read and set from both,
        /// and SaveCheckpoint called; GradientNorm read from the progress callback is the reported
        /// step's.</summary>
        public void SetCallbacks(Action<StepProgress> progress, Action<EpochProgress> epochEnd = null)
        {
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                callbacks.Progress = progress;
                callbacks.EpochEnd = epochEnd;
                MptException.Check(Native.mpt_trainer_set_callbacks(live, progress != null ? ProgressThunk : null,
                                                                     epochEnd != null ? EpochEndThunk : null,
                                                                     live.CallbacksHandle));
            }
        }

        private bool InOwnCallback { get { return fittingThread == Environment.CurrentManagedThreadId; } }

        // The C library refuses Fit and Step from the trainer's own callbacks too, but the refusal must
        // come before LockBoth: the fit holds its families' locks, and taking another family's lock
        // from the callback could break the Id order. Evaluate and PredictDataset are the library's to
        // allow (from the epoch-end callback) or refuse, on a data set of the fit's own family, whose
        // (re-entrant) lock this thread holds; one of another family is refused here, as the library
        // would refuse it.
        // Other threads just wait for the lock.
        private DatasetHandle Use(Dataset dataset, string call, bool libraryDecides = false)
        {
            NotNull(dataset, "dataset");
            if (InOwnCallback)
            {
                if (!libraryDecides)
                    throw new MptException(Status.InvalidState, call + " cannot be called from this trainer's callbacks");
                if (!ReferenceEquals(dataset.Family, Family))
                    throw new MptException(Status.InvalidArgument, "the dataset was created on another context than the trainer");
            }
            return dataset.Live;
        }

        // Locks the trainer's and the dataset's families in Id order, so two threads cannot deadlock.
        private Family LockBoth(Dataset dataset, out Family second)
        {
            Family a = Family, b = dataset.Family;
            if (ReferenceEquals(a, b)) { second = null; return a; }
            if (a.Id < b.Id) { second = b; return a; }
            second = a;
            return b;
        }

        private T WithDataset<T>(Dataset dataset, string name, Func<DatasetHandle, T> call, bool libraryDecides = false)
        {
            DatasetHandle data = Use(dataset, name, libraryDecides);
            Family second;
            Family first = LockBoth(dataset, out second);
            using (first.Enter())
            {
                if (second == null) return call(data);
                using (second.Enter()) return call(data);
            }
        }

        /// <summary>Trains for `epochs` epochs in batches of `batchSize`.</summary>
        public void Fit(Dataset dataset, long epochs, long batchSize, bool shuffle = true)
        {
            TrainerHandle live = Live;
            Status status = WithDataset(dataset, "Fit", data =>
            {
                callbacks.Error = null;
                fittingThread = Environment.CurrentManagedThreadId;
                try
                {
                    return Native.mpt_trainer_fit(live, data, epochs, batchSize, shuffle ? 1 : 0);
                }
                finally
                {
                    fittingThread = 0;
                }
            });
            Exception error = callbacks.Error;
            callbacks.Error = null;
            if (error != null) ExceptionDispatchInfo.Capture(error).Throw();
            MptException.Check(status);
            GC.KeepAlive(this);
        }

        /// <summary>One step on rows [first, first + batchSize); returns the batch's mean loss.</summary>
        public float Step(Dataset dataset, long first, long batchSize)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "Step", data =>
            {
                float loss;
                MptException.Check(Native.mpt_trainer_step(live, data, first, batchSize, out loss));
                return loss;
            });
        }

        /// <summary>Mean loss and accuracy over the data set, in the trainer's precision (batchSize 0: the
        /// last training batch size, or 256). Also from Fit's epoch-end callback (see SetCallbacks).</summary>
        public Evaluation Evaluate(Dataset dataset, long batchSize = 0)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "Evaluate", data =>
            {
                float loss, accuracy;
                MptException.Check(Native.mpt_trainer_evaluate(live, data, batchSize, out loss, out accuracy));
                return new Evaluation { Loss = loss, Accuracy = accuracy };
            }, libraryDecides: true);
        }

        /// <summary>Outputs of the last layer for whole rows of inputs, in the trainer's precision
        /// (PredictDataset predicts the rows of a Dataset).</summary>
        public float[] Predict(float[] inputs)
        {
            long rows = Shape.Of(NotNull(inputs, "inputs").LongLength, inputFeatures, "inputs");
            float[] output = Shape.PredictionOutput(rows, inputFeatures, outputFeatures);
            using (Family.Enter()) MptException.Check(Native.mpt_trainer_predict(Live, inputs, rows, output, output.LongLength));
            return output;
        }

        /// <summary>The outputs Predict gives, for every row of the data set in order (Keras's
        /// model.predict on a data set: the CIFAR-10 test set, a slice): Rows * OutputFeatures values,
        /// row-major, in the trainer's precision, computed in batches of `batchSize` (0: the last training
        /// batch size, or 256). Only the samples are read (uint8 ones normalised as when batched): the
        /// labels, targets and row weights play no part. With Dataset.GetLabels, a confusion matrix. The
        /// batch size can change the last bits: the CPU's GEMMs block a batch by its rows, so batches of
        /// other sizes than Predict's may round sums differently (some 1e-7 of a probability in fp32).
        /// Like Evaluate it runs from Fit's epoch-end callback (the outputs of a PredictDataset between
        /// one-epoch fits; see SetCallbacks). A data set of another context throws MptException with
        /// Status.InvalidArgument (so does a negative `batchSize`), one of another feature count than
        /// the model's inputs with Status.ShapeMismatch.</summary>
        public float[] PredictDataset(Dataset dataset, long batchSize = 0)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "PredictDataset", data =>
            {
                long rows;
                MptException.Check(Native.mpt_dataset_get_rows(data, out rows));
                // rows <= 2^40: only an absurd width overflows, which no array could hold anyway.
                if (outputFeatures > 0 && rows > long.MaxValue / outputFeatures)
                    throw new MptException(Status.OutOfMemory, "out of host memory");
                // The count the library expects: its refusals (another context, another feature count,
                // a negative batch) are then its own.
                float[] output = Shape.ZeroedFloats(rows * outputFeatures);
                MptException.Check(Native.mpt_trainer_predict_dataset(live, data, batchSize, output, output.LongLength));
                return output;
            }, libraryDecides: true);
        }

        public Precision Precision
        {
            get
            {
                using (Family.Enter())
                {
                    Precision precision;
                    MptException.Check(Native.mpt_trainer_get_precision(Live, out precision));
                    return precision;
                }
            }
        }

        /// <summary>The base learning rate: the options' until set, or restored by LoadCheckpoint; without
        /// an LrSchedule, the rate of the next step. Setting it (finite, &gt; 0) applies from the next step
        /// on, also from Fit's callbacks: a schedule of one's own (an LrSchedule multiplies it).
        /// Checkpoints save and restore it; an automatic one at an epoch's end is written after that
        /// epoch's epoch-end callback, so it holds the rate set there.</summary>
        public float LearningRate
        {
            get
            {
                using (Family.Enter())
                {
                    float rate;
                    MptException.Check(Native.mpt_trainer_get_learning_rate(Live, out rate));
                    return rate;
                }
            }
            set
            {
                using (Family.Enter()) MptException.Check(Native.mpt_trainer_set_learning_rate(Live, value));
            }
        }

        /// <summary>The options this trainer was created with, every one filled in:
        /// <c>new Trainer(model, trainer.GetOptions())</c> creates a trainer that trains as this one would
        /// (Keras's get_config), given the same model weights and context seed. A new object each call;
        /// changing it changes nothing here. The values are those the library holds: floats as kept in
        /// float32, options not set as the defaults the trainer uses (the optimizer's own: AdamW's
        /// WeightDecay 0.004, Lion's betas 0.9 and 0.99; the DecayFactor the schedule took), Precision
        /// Auto as Auto (Precision is the one it runs in), ClassWeights null when there are none.
        /// LearningRate is the base rate now: setting LearningRate or LoadCheckpoint changes it. Beta1 and
        /// Beta2 equal LionBeta1 and LionBeta2, and Epsilon is RMSprop's too: the library keeps one pair
        /// of betas and one epsilon. An edit of the betas changes both pairs: the Trainer constructor
        /// refuses differing ones (MptException, InvalidArgument). Also from Fit's callbacks.</summary>
        public TrainerOptions GetOptions()
        {
            TrainerOptionsHandle copy;
            using (Family.Enter()) MptException.Check(Native.mpt_trainer_get_options(Live, out copy));
            using (copy) return ReadOptions(copy);
        }

        /// <summary>The rate the next step trains with: LearningRate times the LrSchedule's factor at the
        /// step count (Progress.Steps; on a GPU, reading it waits for the steps issued).</summary>
        public float ScheduledLearningRate
        {
            get
            {
                using (Family.Enter())
                {
                    float rate;
                    MptException.Check(Native.mpt_trainer_get_scheduled_learning_rate(Live, out rate));
                    return rate;
                }
            }
        }

        public LossScaleState LossScale
        {
            get
            {
                using (Family.Enter())
                {
                    var state = new LossScaleState();
                    MptException.Check(Native.mpt_trainer_get_loss_scale(Live, out state.Scale, out state.GrowthTracker, out state.SkippedSteps));
                    return state;
                }
            }
        }

        /// <summary>The global L2 norm of the last step's gradients (all weights and biases, the loss scale
        /// divided out) before clipping: what TrainerOptions.GlobalClipnorm compared with its bound
        /// (PyTorch's clip_grad_norm_ returns the same number). From a progress callback, the reported
        /// step's. Only a clipping trainer computes it: NaN (not an exception) without clipping, before
        /// the first step, after LoadCheckpoint, and for a skipped step (its gradients not finite).</summary>
        public float GradientNorm
        {
            get
            {
                using (Family.Enter())
                {
                    float norm;
                    MptException.Check(Native.mpt_trainer_get_gradient_norm(Live, out norm));
                    return norm;
                }
            }
        }

        /// <summary>Exchanges the model's weights with this trainer's moving averages
        /// (TrainerOptions.EmaMomentum; a trainer without them throws MptException with
        /// Status.InvalidState) and returns true when the model now holds the averages, false when its own
        /// weights are back (bit for bit). Meanwhile Evaluate, Predict, PredictDataset and the Model's
        /// calls (GetWeights, Predict, Save) see the averages, and Fit and Step (of any trainer of the
        /// model), SaveCheckpoint and LoadCheckpoint throw MptException with Status.InvalidState. Before
        /// the first applied step the averages are the weights. Allowed from Fit's epoch-end callback
        /// (exchange them back before it returns, or Fit's next epoch is refused), not from its progress
        /// callback. A trainer disposed while the model holds its averages leaves them there (Keras's way
        /// of finishing).</summary>
        public bool SwapEmaWeights()
        {
            using (Family.Enter())
            {
                int holdsAverages;
                MptException.Check(Native.mpt_trainer_swap_ema_weights(Live, out holdsAverages));
                return holdsAverages != 0;
            }
        }

        public TrainingProgress Progress
        {
            get
            {
                using (Family.Enter())
                {
                    var progress = new TrainingProgress();
                    MptException.Check(Native.mpt_trainer_get_progress(Live, out progress.Steps, out progress.Epochs));
                    return progress;
                }
            }
        }

        /// <summary>The rows of the last training step (Fit's batch size, or the data set's rows when fewer;
        /// Step's rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can fit on
        /// in the saved run's batches (mpt_trainer_get_batch_size: the exception of an unfinished epoch).</summary>
        public long BatchSize
        {
            get
            {
                using (Family.Enter())
                {
                    long rows;
                    MptException.Check(Native.mpt_trainer_get_batch_size(Live, out rows));
                    return rows;
                }
            }
        }

        /// <summary>The epoch Fit left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint
        /// that LoadCheckpoint restored), which the next Fit finishes on the same data in that batch size and
        /// abandons otherwise; all 0 when there is none (mpt_trainer_get_unfinished_epoch).</summary>
        public UnfinishedEpoch UnfinishedEpoch
        {
            get
            {
                using (Family.Enter())
                {
                    var epoch = new UnfinishedEpoch();
                    MptException.Check(Native.mpt_trainer_get_unfinished_epoch(Live, out epoch.Steps, out epoch.Rows, out epoch.BatchSize));
                    return epoch;
                }
            }
        }

        /// <summary>Writes a training checkpoint, atomically: fp32 master weights, optimizer and loss-scaler
        /// state, the learning rate, step and epoch counters, the position inside the epoch and the shuffle state. Loading it
        /// into a trainer of the same architecture and options and calling Fit continues the run
        /// bit-exactly on the CPU backend.</summary>
        public void SaveCheckpoint(string path)
        {
            NotNull(path, "path");
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_save_checkpoint(live, native)));
            }
        }

        /// <summary>Restores a checkpoint, its learning rate included; the whole file is validated first,
        /// so a failure changes nothing. MptException statuses: another architecture ShapeMismatch, other
        /// trainer options (all but the learning rate) InvalidArgument, a missing file IoError, a damaged one CorruptData, another major version
        /// Unsupported.</summary>
        public void LoadCheckpoint(string path)
        {
            NotNull(path, "path");
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_load_checkpoint(live, native)));
            }
        }

        /// <summary>Checkpoints automatically during Fit into `directory` (which must exist) as
        /// checkpoint-&lt;step&gt;.safetensors, every `everySteps` optimizer steps and/or every
        /// `everyEpochs`-th epoch (0 = not on that trigger; null: every epoch unless `everySteps` is
        /// given), keeping the newest `keepLast` (&gt;= 1). A null directory turns checkpointing off. A
        /// failed write stops Fit with Status.IoError.</summary>
        public void SetCheckpointing(string directory, long everySteps = 0, long? everyEpochs = null, long keepLast = 1)
        {
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                long epochs = everyEpochs ?? (everySteps == 0 ? 1 : 0);
                MptException.Check(Utf8.WithPath(directory, native =>
                    Native.mpt_trainer_set_checkpointing(live, native, everySteps, epochs, keepLast)));
            }
        }

        public TrainerMemory Memory
        {
            get
            {
                using (Family.Enter())
                {
                    UIntPtr planned, allocated;
                    MptException.Check(Native.mpt_trainer_get_memory(Live, out planned, out allocated));
                    return new TrainerMemory { Planned = planned.ToUInt64(), Allocated = allocated.ToUInt64() };
                }
            }
        }

        public EpochTime LastEpochTime
        {
            get
            {
                using (Family.Enter())
                {
                    double seconds;
                    long steps;
                    MptException.Check(Native.mpt_trainer_get_last_epoch_time(Live, out seconds, out steps));
                    return new EpochTime { Seconds = seconds, Steps = steps };
                }
            }
        }
    }
}
