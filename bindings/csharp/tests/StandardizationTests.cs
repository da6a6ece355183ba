// Dataset.Standardized and Dataset.FeatureStatistics (Keras's Normalization layer, for the data): the
// statistics against a double reference; a data set standardized by its own statistics has features
// of mean 0 and standard deviation 1 and trains; a mean or stddev of another count throws
// MptException with Status.ShapeMismatch, a negative stddev Status.InvalidArgument.
// Model.SetInputStandardization, ClearInputStandardization and GetInputStandardization (the same layer
// inside the model): trained on the raw rows, the model predicts from raw inputs bit for bit as a plain
// copy of it does from inputs standardized here in float32; saved and loaded it keeps the statistics,
// cleared it has none; the refusals, a standardized data set in Fit among them.
using System;
using System.IO;
using System.Linq;

namespace Mptrain.Tests
{
    public static class StandardizationTests
    {
        const int Rows = 90;

        // Blobs with feature f scaled by 3 (f + 1) and moved by 5 f - 4: far from mean 0, stddev 1.
        static void ScaledBlobs(int seed, out float[] samples, out int[] labels)
        {
            Data.Blobs(Rows, seed, out samples, out labels);
            for (int i = 0; i < samples.Length; i++)
            {
                int f = i % Data.Features;
                samples[i] = samples[i] * 3.0f * (f + 1) + 5.0f * f - 4.0f;
            }
        }

        [Test]
        public static void ADatasetStandardizedByItsOwnStatisticsHasMeanZeroAndStddevOneAndTrains()
        {
            float[] x; int[] y;
            ScaledBlobs(31, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                var (mean, stddev) = data.FeatureStatistics();
                Assert.Equal(Data.Features, mean.Length, "one mean per feature");
                Assert.Equal(Data.Features, stddev.Length, "one stddev per feature");
                for (int f = 0; f < Data.Features; f++)
                {
                    // The population's, in double.
                    double sum = 0, squares = 0;
                    for (int r = 0; r < Rows; r++) sum += x[r * Data.Features + f];
                    double expectedMean = sum / Rows;
                    for (int r = 0; r < Rows; r++) squares += Math.Pow(x[r * Data.Features + f] - expectedMean, 2);
                    Assert.Close(expectedMean, mean[f], "mean of feature " + f, 1e-6);
                    Assert.Close(Math.Sqrt(squares / Rows), stddev[f], "stddev of feature " + f, 1e-6);
                    Assert.True(Math.Abs(stddev[f] - 1.0f) > 0.5f, "feature " + f + " is not standardized to begin with");
                }
                using (Dataset standardized = data.Standardized(mean, stddev))
                {
                    Assert.Equal((long)Rows, standardized.Rows, "the same rows");
                    Assert.SequenceEqual(y, standardized.GetLabels(), "the same labels");
                    var after = standardized.FeatureStatistics();
                    for (int f = 0; f < Data.Features; f++)
                    {
                        Assert.True(Math.Abs(after.Mean[f]) < 1e-5f, "standardized mean of feature " + f + ": " + after.Mean[f]);
                        Assert.True(Math.Abs(after.Stddev[f] - 1.0f) < 1e-5f, "standardized stddev of feature " + f + ": " + after.Stddev[f]);
                    }
                    using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
                    {
                        trainer.Fit(standardized, 3, 16);
                        Assert.Equal(3L, trainer.Progress.Epochs, "three epochs");
                        Assert.True(!float.IsNaN(trainer.Evaluate(standardized).Loss), "a finite loss");
                    }
                }
            }
        }

        [Test]
        public static void AMeanOrStddevOfTheWrongCountThrowsShapeMismatch()
        {
            float[] x; int[] y;
            Data.Blobs(30, 32, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                float[] zeros = new float[Data.Features], ones = Enumerable.Repeat(1.0f, Data.Features).ToArray();
                Func<int, float, float[]> values = (count, value) => Enumerable.Repeat(value, count).ToArray();
                Assert.Fails(Status.ShapeMismatch, () => data.Standardized(values(Data.Features - 1, 0), values(Data.Features - 1, 1)));
                Assert.Fails(Status.ShapeMismatch, () => data.Standardized(values(Data.Features + 1, 0), ones));
                Assert.Fails(Status.ShapeMismatch, () => data.Standardized(zeros, values(Data.Features - 1, 1)));
                Assert.Fails(Status.ShapeMismatch, () => data.Standardized(new float[0], new float[0]));
                float[] negative = (float[])ones.Clone();
                negative[2] = -1.0f;
                Assert.Fails(Status.InvalidArgument, () => data.Standardized(zeros, negative));
                Assert.Throws<ArgumentNullException>(() => data.Standardized(null, ones));
                using (Dataset standardized = data.Standardized(zeros, ones))
                using (Dataset slice = standardized.Slice(10, 5))
                    Assert.Equal(5L, slice.Rows, "a slice of a standardized data set");
            }
        }

        [Test]
        public static void AModelStandardizingByADatasetsStatisticsTrainsOnRawRowsAndPredictsAsAPlainCopy()
        {
            float[] x; int[] y;
            ScaledBlobs(33, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Model plain = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                var (mean, stddev) = data.FeatureStatistics();
                Assert.True(model.GetInputStandardization() == null, "a new model takes its inputs as given");
                model.SetInputStandardization(mean, stddev);
                var read = model.GetInputStandardization();
                Assert.True(read.HasValue, "the model standardizes");
                var (readMean, readStddev) = read.Value;
                Assert.SequenceEqual(Data.Bits(mean), Data.Bits(readMean), "the means as set");
                Assert.SequenceEqual(Data.Bits(stddev), Data.Bits(readStddev), "the stddevs as set");
                using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
                {
                    trainer.Fit(data, 5, 16);
                    Assert.True(trainer.Evaluate(data).Accuracy > 0.9f, "it learns the raw rows");
                }
                // The header's (x - mean) / stddev, each operation in float32.
                float[] standardized = new float[x.Length];
                for (int i = 0; i < x.Length; i++)
                {
                    int f = i % Data.Features;
                    float centred = x[i] - mean[f];
                    standardized[i] = centred / stddev[f];
                }
                for (int layer = 0; layer < model.LayerCount; layer++)
                {
                    float[] w, b;
                    model.GetWeights(layer, out w, out b);
                    plain.SetWeights(layer, w, b);
                }
                float[] predicted = model.Predict(x);
                Assert.SequenceEqual(Data.Bits(plain.Predict(standardized)), Data.Bits(predicted), "a plain copy's predictions of the standardized inputs");
                Assert.True(!Data.Bits(plain.Predict(x)).SequenceEqual(Data.Bits(predicted)), "unlike a plain copy's of the raw inputs");
            }
        }

        [Test]
        public static void AModelsInputStandardizationIsSavedWithItAndClearedIsNone()
        {
            float[] inputs; int[] labels;
            Data.Blobs(12, 34, out inputs, out labels);
            float[] mean = { 0.5f, -1.25f, 3.0f, 0.0f }, stddev = { 2.0f, 0.75f, 1.5f, 0.0f };
            string directory = Path.Combine(Path.GetTempPath(), "mptrain-cs-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(directory);
            try
            {
                string file = Path.Combine(directory, "standardizing.safetensors");
                using (Context ctx = Data.CpuContext())
                using (Model model = Data.Mlp(ctx))
                {
                    model.SetInputStandardization(mean, stddev);
                    float[] predicted = model.Predict(inputs);
                    model.Save(file);
                    using (Model loaded = Model.Load(ctx, file))
                    {
                        var kept = loaded.GetInputStandardization();
                        Assert.True(kept.HasValue, "the loaded model standardizes");
                        var (keptMean, keptStddev) = kept.Value;
                        Assert.SequenceEqual(Data.Bits(mean), Data.Bits(keptMean), "the means loaded");
                        Assert.SequenceEqual(Data.Bits(stddev), Data.Bits(keptStddev), "the stddevs loaded, the 0 not floored");
                        Assert.SequenceEqual(Data.Bits(predicted), Data.Bits(loaded.Predict(inputs)), "the loaded model's predictions");
                    }
                    model.ClearInputStandardization();
                    Assert.True(model.GetInputStandardization() == null, "cleared");
                    Assert.True(!Data.Bits(model.Predict(inputs)).SequenceEqual(Data.Bits(predicted)), "cleared, it predicts otherwise");
                    model.ClearInputStandardization(); // none to remove: still none
                    Assert.True(model.GetInputStandardization() == null, "cleared twice");
                    model.Save(file);
                    using (Model loaded = Model.Load(ctx, file))
                        Assert.True(loaded.GetInputStandardization() == null, "a plain model's file loads as plain");
                }
            }
            finally
            {
                Directory.Delete(directory, true);
            }
        }

        [Test]
        public static void AModelsInputStandardizationOfTheWrongCountOrValueThrowsAndLeavesIt()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                float[] zeros = new float[Data.Features], ones = Enumerable.Repeat(1.0f, Data.Features).ToArray();
                Func<int, float, float[]> values = (count, value) => Enumerable.Repeat(value, count).ToArray();
                model.SetInputStandardization(zeros, ones);
                Assert.Fails(Status.ShapeMismatch, () => model.SetInputStandardization(values(Data.Features - 1, 0), values(Data.Features - 1, 1)));
                Assert.Fails(Status.ShapeMismatch, () => model.SetInputStandardization(values(Data.Features + 1, 0), ones));
                Assert.Fails(Status.ShapeMismatch, () => model.SetInputStandardization(zeros, values(Data.Features - 1, 1)));
                Assert.Fails(Status.ShapeMismatch, () => model.SetInputStandardization(new float[0], new float[0])); // not a clear
                float[] nanMean = (float[])zeros.Clone(), negative = (float[])ones.Clone();
                nanMean[1] = float.NaN;
                negative[2] = -1.0f;
                Assert.Fails(Status.InvalidArgument, () => model.SetInputStandardization(nanMean, ones));
                Assert.Fails(Status.InvalidArgument, () => model.SetInputStandardization(zeros, negative));
                Assert.Throws<ArgumentNullException>(() => model.SetInputStandardization(null, ones));
                var kept = model.GetInputStandardization();
                Assert.True(kept.HasValue, "still standardizes");
                var (keptMean, keptStddev) = kept.Value;
                Assert.SequenceEqual(zeros, keptMean, "the means unchanged");
                Assert.SequenceEqual(ones, keptStddev, "the stddevs unchanged");
            }
        }

        [Test]
        public static void FittingAModelThatStandardizesOnAStandardizedDatasetThrowsInvalidArgument()
        {
            float[] x; int[] y;
            Data.Blobs(30, 35, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                var (mean, stddev) = data.FeatureStatistics();
                model.SetInputStandardization(mean, stddev);
                using (Dataset standardized = data.Standardized(mean, stddev))
                using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
                {
                    Assert.Fails(Status.InvalidArgument, () => trainer.Fit(standardized, 1, 16));
                    Assert.Equal(0L, trainer.Progress.Epochs, "no epoch");
                    trainer.Fit(data, 1, 16); // the raw rows train
                    Assert.Equal(1L, trainer.Progress.Epochs, "one epoch");
                }
            }
        }
    }
}
