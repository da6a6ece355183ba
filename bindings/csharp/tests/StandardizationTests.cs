// Dataset.Standardized and Dataset.FeatureStatistics (Keras's Normalization layer, for the data): the
// statistics against a double reference; a data set standardized by its own statistics has features
// of mean 0 and standard deviation 1 and trains; a mean or stddev of another count throws
// MptException with Status.ShapeMismatch, a negative stddev Status.InvalidArgument.
using System;
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
    }
}
