// Dataset: samples with labels or targets held by the library, created from arrays or CIFAR-10 files,
// and the data sets derived from one (slices, subsets, weighted and standardized ones).
using System;

namespace Mptrain
{
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

        public long Rows { get { return Query<long>(Native.mpt_dataset_get_rows); } }

        public long Features { get { return Query<long>(Native.mpt_dataset_get_features); } }

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
}
