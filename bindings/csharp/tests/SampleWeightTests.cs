// Dataset.Weighted (Keras's sample_weight): weights 2 train as twice the learning rate bit for bit;
// weighted steps and evaluations report the mean of each row's loss times its weight, recomputed from
// the trainer's predictions, with accuracy unweighted; slices keep their rows' weights and weighting
// again replaces them; bad counts and values throw MptException; a weighted data set keeps working
// after its source (and its Context) are disposed.
using System;
using System.Linq;

namespace Mptrain.Tests
{
    public static class SampleWeightTests
    {
        const int Rows = 48;

        static TrainerOptions Adam(float[] classWeights = null)
        {
            return new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f, ClassWeights = classWeights };
        }

        // Weights that differ from row to row with no period (a slice sees other weights than its
        // source's first rows): 0.2 + 0.05 r, one row in seven 0.
        static float[] VariedWeights(int rows)
        {
            return Enumerable.Range(0, rows).Select(r => r % 7 == 3 ? 0.0f : 0.2f + 0.05f * r).ToArray();
        }

        // The mean over rows of -log p(label) times the row's weight (and its class's weight, with
        // classWeights), in double from the predicted probabilities.
        static double WeightedCrossEntropy(float[] probabilities, int[] labels, float[] weights, float[] classWeights = null)
        {
            Assert.Equal(labels.Length, weights.Length, "one weight per row");
            double total = 0;
            for (int row = 0; row < labels.Length; row++)
            {
                double p = probabilities[row * Data.Classes + labels[row]];
                double classWeight = classWeights == null ? 1.0 : classWeights[labels[row]];
                total += -Math.Log(p) * classWeight * weights[row];
            }
            return total / labels.Length;
        }

        static float[] Range(float[] values, int first, int count) { return values.Skip(first).Take(count).ToArray(); }

        static int[] Range(int[] values, int first, int count) { return values.Skip(first).Take(count).ToArray(); }

        [Test]
        public static void WeightsOfTwoTrainOneSgdStepAsTwiceTheLearningRateBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 21, out x, out y);
            // Every row weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling
            // the rate.
            Func<float, float[], Tuple<float, int[]>> oneStep = (learningRate, rowWeights) =>
            {
                using (Context ctx = Data.CpuContext(5))
                using (Model model = Data.Mlp(ctx))
                using (Dataset plain = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (Dataset rowWeighted = rowWeights == null ? null : plain.Weighted(rowWeights))
                using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                             LearningRate = learningRate, Momentum = 0.0f }))
                {
                    int[] start = Data.WeightBits(model);
                    float loss = trainer.Step(rowWeighted ?? plain, 0, Rows);
                    int[] weights = Data.WeightBits(model);
                    Assert.True(!weights.SequenceEqual(start), "the step moves the weights");
                    return Tuple.Create(loss, weights);
                }
            };
            Tuple<float, int[]> unweighted = oneStep(0.05f, null), doubledRate = oneStep(2 * 0.05f, null);
            Tuple<float, int[]> weighted = oneStep(0.05f, Enumerable.Repeat(2.0f, Rows).ToArray());
            Assert.SequenceEqual(doubledRate.Item2, weighted.Item2, "weights 2 step as twice the rate, bit for bit");
            Assert.True(!weighted.Item2.SequenceEqual(unweighted.Item2), "weights 2 step elsewhere than the rate alone");
            Assert.Equal(unweighted.Item1, doubledRate.Item1, "the loss is that of the weights before the step");
            Assert.Equal(2 * unweighted.Item1, weighted.Item1, "the weighted loss is twice the unweighted one");
        }

        [Test]
        public static void AWeightedStepAndEvaluateReportTheMeanOfEachRowsLossTimesItsWeight()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 22, out x, out y);
            float[] weights = VariedWeights(Rows);
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset plain = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset data = plain.Weighted(weights))
            using (var trainer = new Trainer(model, Adam()))
            {
                trainer.Fit(data, 2, 16);
                float[] probabilities = trainer.Predict(x);
                double unweightedLoss = WeightedCrossEntropy(probabilities, y, Enumerable.Repeat(1.0f, Rows).ToArray());
                double expected = WeightedCrossEntropy(probabilities, y, weights);
                Assert.True(Math.Abs(expected - unweightedLoss) > 1e-2 * unweightedLoss, "the two can be told apart");
                foreach (long batchSize in new long[] { 0, 16, 5 })
                {
                    Evaluation weighted = trainer.Evaluate(data, batchSize), unweighted = trainer.Evaluate(plain, batchSize);
                    Assert.Close(expected, weighted.Loss, "evaluate's loss (weighted), batches of " + batchSize);
                    Assert.Close(unweightedLoss, unweighted.Loss, "evaluate's loss without weights, batches of " + batchSize);
                    Assert.Equal(unweighted.Accuracy, weighted.Accuracy, "accuracy counts every row once, batches of " + batchSize);
                }
                Assert.Close(expected, trainer.Step(data, 0, Rows), "step's loss (weighted)");
                // A step on some rows averages their weighted losses over those rows.
                const int first = 10, rows = 20;
                float[] batch = trainer.Predict(Range(x, first * Data.Features, rows * Data.Features));
                Assert.Close(WeightedCrossEntropy(batch, Range(y, first, rows), Range(weights, first, rows)), trainer.Step(data, first, rows),
                      "the loss of a step on rows 10..30");
            }
        }

        [Test]
        public static void RowWeightsMultiplyClassWeightsInTrainingAndEvaluateKeepsOnlyTheRowWeights()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 24, out x, out y);
            float[] weights = VariedWeights(Rows), classWeights = { 0.5f, 3.0f, 1.0f };
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset plain = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset data = plain.Weighted(weights))
            using (var trainer = new Trainer(model, Adam(classWeights)))
            {
                float[] probabilities = trainer.Predict(x);
                double rowsOnly = WeightedCrossEntropy(probabilities, y, weights), both = WeightedCrossEntropy(probabilities, y, weights, classWeights);
                Assert.True(Math.Abs(both - rowsOnly) > 1e-2 * rowsOnly, "the two can be told apart");
                Assert.Close(rowsOnly, trainer.Evaluate(data).Loss, "evaluate's loss (row weights only)");
                Assert.Close(both, trainer.Step(data, 0, Rows), "step's loss (row and class weights)");
            }
        }

        [Test]
        public static void ASliceOfAWeightedDatasetEqualsWeightingThatSliceAndWeightingAgainReplaces()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 26, out x, out y);
            float[] weights = VariedWeights(Rows);
            const int first = 10, rows = 30;
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Adam()))
            using (Dataset whole = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset plainSlice = whole.Slice(first, rows))
            using (Dataset weightedSlice = plainSlice.Weighted(Range(weights, first, rows))) // sliced, then weighted
            using (Dataset misaligned = plainSlice.Weighted(Range(weights, 0, rows))) // the source's first rows' weights
            {
                // Weighted, then sliced (the weighted data set disposed: the slice keeps the weights).
                Dataset sliceOfWeighted;
                using (Dataset weighted = whole.Weighted(weights)) sliceOfWeighted = weighted.Slice(first, rows);
                using (sliceOfWeighted)
                {
                    trainer.Fit(whole, 1, 16);
                    foreach (long batchSize in new long[] { 0, 8 })
                    {
                        string what = "batches of " + batchSize + ": ";
                        Evaluation sliced = trainer.Evaluate(sliceOfWeighted, batchSize), unweighted = trainer.Evaluate(plainSlice, batchSize);
                        Assert.SequenceEqual(Data.Bits(trainer.Evaluate(weightedSlice, batchSize)), Data.Bits(sliced), what + "the same loss and accuracy, bit for bit");
                        Assert.True(sliced.Loss != unweighted.Loss, what + "the slice is weighted");
                        Assert.Equal(unweighted.Accuracy, sliced.Accuracy, what + "accuracy");
                        Assert.True(sliced.Loss != trainer.Evaluate(misaligned, batchSize).Loss, what + "the slice keeps its own rows' weights");
                    }
                    // A step on it trains from the loss of its own rows and weights.
                    float[] probabilities = trainer.Predict(Range(x, first * Data.Features, rows * Data.Features));
                    Assert.Close(WeightedCrossEntropy(probabilities, Range(y, first, rows), Range(weights, first, rows)),
                          trainer.Step(sliceOfWeighted, 0, rows), "a step on the slice of the weighted data set");

                    // Weighting again replaces the weights: ones give the plain slice's numbers.
                    using (Dataset reweighted = sliceOfWeighted.Weighted(Enumerable.Repeat(1.0f, rows).ToArray()))
                    {
                        Evaluation evaluation = trainer.Evaluate(reweighted);
                        Assert.SequenceEqual(Data.Bits(trainer.Evaluate(plainSlice)), Data.Bits(evaluation), "weights 1 again: the plain slice's bits");
                        Assert.True(evaluation.Loss != trainer.Evaluate(sliceOfWeighted).Loss, "the old weights are gone");
                        Assert.Equal((long)rows, reweighted.Rows, "rows");
                    }
                }
            }
        }

        [Test]
        public static void AWrongCountOrANegativeNanOrInfiniteWeightIsRefused()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 27, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (int count in new[] { 0, 1, Rows - 1, Rows + 1, 2 * Rows })
                {
                    MptException error = Assert.Fails(Status.ShapeMismatch, () => data.Weighted(Enumerable.Repeat(1.0f, count).ToArray()).Dispose());
                    Assert.True(error.Message.StartsWith("MPT_STATUS_SHAPE_MISMATCH: "), count + ": " + error.Message);
                }
                foreach (float bad in new[] { -1.0f, -0.5f, -float.Epsilon, float.NaN, float.PositiveInfinity, float.NegativeInfinity })
                {
                    foreach (int row in new[] { 0, 7, Rows - 1 })
                    {
                        float[] weights = Enumerable.Repeat(1.0f, Rows).ToArray();
                        weights[row] = bad;
                        MptException error = Assert.Fails(Status.InvalidArgument, () => data.Weighted(weights).Dispose());
                        Assert.True(error.NativeMessage.Contains("row " + row), bad + " at row " + row + ": the library's message names the row: " + error.NativeMessage);
                    }
                }
                Assert.Throws<ArgumentNullException>(() => data.Weighted(null));
                // A slice's weights are one per row of the slice.
                using (Dataset slice = data.Slice(5, 10))
                {
                    foreach (int count in new[] { Rows, 9, 11 })
                        Assert.Fails(Status.ShapeMismatch, () => slice.Weighted(Enumerable.Repeat(1.0f, count).ToArray()).Dispose());
                    using (Dataset weightedSlice = slice.Weighted(Enumerable.Repeat(1.0f, 10).ToArray()))
                        Assert.Equal(10L, weightedSlice.Rows, "rows of the weighted slice");
                }
                // Zeros (-0 included) and large finite weights are weights like any other.
                var accepted = new float[Rows];
                accepted[3] = -0.0f;
                accepted[4] = float.MaxValue;
                using (Dataset weighted = data.Weighted(accepted))
                {
                    Assert.Equal((long)Rows, weighted.Rows, "rows");
                    Assert.Equal((long)Data.Features, weighted.Features, "features");
                }
                data.Dispose();
                Assert.Throws<ObjectDisposedException>(() => data.Weighted(new float[Rows]));
            }
        }

        [Test]
        public static void AWeightedDatasetKeepsWorkingAfterItsSourceAndContextAreDisposed()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 28, out x, out y);
            float[] weights = VariedWeights(Rows);
            Context ctx = Data.CpuContext(9);
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Adam()))
            {
                Dataset source = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
                using (Dataset weighted = source.Weighted(weights))
                {
                    source.Dispose();
                    Assert.True(source.IsDisposed && !weighted.IsDisposed, "only the source is disposed");
                    Dataset copy;
                    using (Dataset copySource = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes)) copy = copySource.Weighted(weights);
                    using (copy)
                    {
                        ctx.Dispose();
                        Assert.Equal((long)Rows, weighted.Rows, "rows");
                        Assert.Equal((long)Data.Features, weighted.Features, "features");
                        for (int round = 0; round < 2; round++)
                        {
                            Evaluation evaluation = trainer.Evaluate(weighted, 16);
                            Assert.SequenceEqual(Data.Bits(trainer.Evaluate(copy, 16)), Data.Bits(evaluation), "evaluation bits, round " + round);
                            Assert.Close(WeightedCrossEntropy(trainer.Predict(x), y, weights), evaluation.Loss, "round " + round + ": the weights survive the source");
                            int[] before = Data.WeightBits(model);
                            trainer.Fit(weighted, 2, 16);
                            trainer.Step(weighted, 4, 16);
                            Assert.True(!Data.WeightBits(model).SequenceEqual(before), "training moved the weights, round " + round);
                        }
                        using (Dataset slice = weighted.Slice(1, 5)) Assert.Equal(5L, slice.Rows, "a slice of it after the source is gone");
                    }
                }
            }
        }
    }
}
