// Model: a stack of Dense layers (dropout, initializers, trainable flags, input standardization,
// weights), its fp32 prediction, and saving it to and loading it from a .safetensors file.
namespace Mptrain
{
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
            return Query<float>(Native.mpt_model_get_input_dropout);
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

        public long LayerCount { get { return Query<long>(Native.mpt_model_get_layer_count); } }
        public long InputFeatures { get { return Query<long>(Native.mpt_model_get_input_features); } }
        public long OutputFeatures { get { return Query<long>(Native.mpt_model_get_output_features); } }
        public long ParameterCount { get { return Query<long>(Native.mpt_model_get_parameter_count); } }

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
}
