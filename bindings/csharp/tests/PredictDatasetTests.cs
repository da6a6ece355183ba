// Trainer.PredictDataset (Keras's model.predict on a data set) and Dataset.GetLabels: predictions over a
// data set are Trainer.Predict's on the same float rows, bit for bit in one batch and within rounding in
// smaller ones, whatever the labels, targets or weights; a slice's predictions and labels are its
// rows'; labels and predictions make a confusion matrix whose diagonal is Evaluate's accuracy; the
// epoch-end callback predicts as between one-epoch fits; and the refusals (targets have no labels,
// another context, another feature count, a negative batch).
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class PredictDatasetTests
    {
        const int Rows = 60;
        const int F = Data.Features, C = Data.Classes;

        static TrainerOptions Adam(Precision precision = Precision.Fp32)
        {
            return new TrainerOptions { Precision = precision, Optimizer = Optimizer.Adam, LearningRate = 0.01f };
        }

        static void SameBits(float[] expected, float[] actual, string what)
        {
            Assert.Equal(expected.Length, actual.Length, what + ": output count");
            Assert.True(Data.Bits(expected).SequenceEqual(Data.Bits(actual)), what + ": bit for bit");
        }

        // Outputs of other batch sizes: the CPU's GEMMs block a batch by its rows and take other kernels
        // for a few rows, so sums of the same products may round differently (in fp32 some 1e-7 of a
        // probability). Mixed precision rounds the hidden activations to 16 bits, where such a sum can
        // round to the neighbouring value: the bound is then the compute dtype's epsilon (mixed-fp16
        // moved 2.5e-5 here on an AMX CPU). Rows mixed up or misplaced move probabilities by tenths.
        static float BatchingTolerance(Precision precision)
        {
            switch (precision)
            {
                case Precision.MixedFp16: return 1.0f / 1024;
                case Precision.MixedBf16: return 1.0f / 128;
                default: return 1e-5f;
            }
        }

        static void Close(float[] expected, float[] actual, Precision precision, string what)
        {
            Assert.Equal(expected.Length, actual.Length, what + ": output count");
            for (int i = 0; i < expected.Length; i++)
                Assert.True(Math.Abs(actual[i] - expected[i]) <= BatchingTolerance(precision),
                            what + ": output " + i + " is " + actual[i] + ", expected " + expected[i]);
        }

        static T[] Part<T>(T[] values, int width, int first, int rows)
        {
            return values.Skip(first * width).Take(rows * width).ToArray();
        }

        // The class of the largest probability of each row (the first of equals, as Evaluate counts).
        static int[] PredictedClasses(float[] probabilities)
        {
            var classes = new int[probabilities.Length / C];
            for (int row = 0; row < classes.Length; row++)
                for (int c = 1; c < C; c++)
                    if (probabilities[row * C + c] > probabilities[row * C + classes[row]]) classes[row] = c;
            return classes;
        }

        [Test]
        public static void PredictionsOverADataSetArePredictsOnItsRowsBitForBitInOneBatchElseClose()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 31, out x, out y);
            foreach (Precision precision in new[] { Precision.Fp32, Precision.MixedFp16, Precision.MixedBf16 })
            {
                using (Context ctx = Data.CpuContext())
                using (Model model = Data.Mlp(ctx))
                using (var trainer = new Trainer(model, Adam(precision)))
                using (Dataset labels = Dataset.FromF32(ctx, x, F, y, C))
                using (Dataset targets = Dataset.FromTargets(ctx, x, F, Data.OneHot(y), C))
                {
                    trainer.Fit(labels, 2, 16);
                    float[] expected = trainer.Predict(x);
                    Assert.Equal(Rows * C, expected.Length, "Predict's output count");
                    foreach (long batch in new long[] { Rows, 1000 }) // one batch, as Predict's on 60 rows
                    {
                        string what = precision + ", batches of " + batch;
                        SameBits(expected, trainer.PredictDataset(labels, batch), what + ", labels");
                        SameBits(expected, trainer.PredictDataset(targets, batch), what + ", targets play no part");
                    }
                    foreach (long batch in new long[] { 0, 1, 7, 16 })
                    {
                        string what = precision + ", batches of " + batch;
                        float[] batched = trainer.PredictDataset(labels, batch);
                        Close(expected, batched, precision, what);
                        SameBits(batched, trainer.PredictDataset(targets, batch), what + ", targets play no part");
                    }
                    Close(expected, trainer.PredictDataset(labels), precision, precision + ", the default batch");

                    // A slice's predictions are its rows', and row weights change nothing.
                    const int first = 25, rows = 20;
                    string part = precision + ", rows 25..45";
                    using (Dataset slice = labels.Slice(first, rows))
                    using (Dataset weighted = slice.Weighted(Enumerable.Repeat(3.0f, rows).ToArray()))
                    using (Dataset targetSlice = targets.Slice(first, rows))
                    {
                        float[] oneBatch = trainer.PredictDataset(slice, rows);
                        SameBits(trainer.Predict(Part(x, F, first, rows)), oneBatch, part + " in one batch, as Predict on its rows");
                        float[] batched = trainer.PredictDataset(slice, 8);
                        Close(Part(expected, C, first, rows), batched, precision, part + " in batches of 8");
                        SameBits(batched, trainer.PredictDataset(weighted, 8), part + ", weights play no part");
                        SameBits(oneBatch, trainer.PredictDataset(targetSlice, rows), part + ", a slice of targets");
                    }
                }
            }
        }

        [Test]
        public static void Uint8SamplesArePredictedFromTheirNormalisedValues()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 32, out x, out y);
            const float scale = 0.05f, offset = -6.4f;
            byte[] bytes = x.Select(v => (byte)Math.Max(0.0, Math.Min(255.0, Math.Round(v * 20.0f + 128.0f)))).ToArray();
            float[] normalised = bytes.Select(b => b * scale + offset).ToArray();
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Adam()))
            using (Dataset data = Dataset.FromU8(ctx, bytes, F, y, C, scale, offset))
            {
                float[] got = trainer.PredictDataset(data), expected = trainer.Predict(normalised);
                Assert.Equal(expected.Length, got.Length, "output count");
                // One rounding of x * scale + offset (fused or not) apart.
                for (int i = 0; i < got.Length; i++)
                    Assert.True(Math.Abs(got[i] - expected[i]) <= 1e-5 * Math.Max(Math.Abs(expected[i]), 1e-3),
                                "output " + i + ": " + got[i] + " vs " + expected[i]);
                Assert.SequenceEqual(y, data.GetLabels(), "a uint8 data set's labels");
            }
        }

        [Test]
        public static void LabelsAreThoseGivenAndASlicesAreItsRows()
        {
            float[] x; int[] unused;
            Data.Blobs(Rows, 33, out x, out unused);
            // Labels with no period, so that a slice's differ from its source's first rows.
            int[] y = Enumerable.Range(0, Rows).Select(r => (r * r + r / 7) % C).ToArray();
            using (Context ctx = Data.CpuContext())
            {
                Dataset data = Dataset.FromF32(ctx, x, F, y, C);
                Dataset slice = data.Slice(41, 9);
                using (Dataset inner = slice.Slice(3, 5))
                {
                    Assert.SequenceEqual(y, data.GetLabels(), "the labels given");
                    Assert.SequenceEqual(Part(y, 1, 41, 9), slice.GetLabels(), "a slice's labels");
                    Assert.SequenceEqual(Part(y, 1, 44, 5), inner.GetLabels(), "a slice of a slice");
                    using (Dataset last = data.Slice(Rows - 1, 1))
                        Assert.SequenceEqual(new[] { y[Rows - 1] }, last.GetLabels(), "the last row");
                    using (Dataset weighted = slice.Weighted(Enumerable.Repeat(0.5f, 9).ToArray()))
                        Assert.SequenceEqual(Part(y, 1, 41, 9), weighted.GetLabels(), "a weighted slice");
                    data.Dispose();
                    slice.Dispose();
                    Assert.SequenceEqual(Part(y, 1, 44, 5), inner.GetLabels(), "after its sources are disposed");
                    Assert.Throws<ObjectDisposedException>(() => data.GetLabels());
                }

                // Float targets have no labels: the library's refusal, for a slice too.
                using (Dataset targets = Dataset.FromTargets(ctx, x, F, Data.OneHot(y), C))
                using (Dataset targetSlice = targets.Slice(10, 5))
                {
                    foreach (Dataset dataset in new[] { targets, targetSlice })
                    {
                        MptException error = Assert.Fails(Status.InvalidArgument, () => dataset.GetLabels());
                        Assert.True(error.NativeMessage.Contains("targets"), "the library's message: " + error.NativeMessage);
                    }
                }
            }
        }

        [Test]
        public static void LabelsAndPredictionsGiveAConfusionMatrixWhoseDiagonalIsEvaluatesAccuracy()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 34, out x, out y);
            var accuracies = new List<float>();
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Adam()))
            using (Dataset data = Dataset.FromF32(ctx, x, F, y, C))
            using (Dataset validation = data.Slice(36, 24))
            {
                // Untrained (some rows wrong, so the diagonal is not just the rows), then trained.
                foreach (int epochs in new[] { 0, 1, 5 })
                {
                    if (epochs > 0) trainer.Fit(data, epochs, 12);
                    foreach (Dataset dataset in new[] { data, validation })
                    {
                        string what = (dataset == data ? "the data set" : "the slice") + " after " + epochs + " epochs";
                        int[] labels = dataset.GetLabels();
                        Assert.Equal(dataset.Rows, labels.LongLength, what + ": one label per row");
                        int[] predicted = PredictedClasses(trainer.PredictDataset(dataset));
                        Assert.Equal(labels.Length, predicted.Length, what + ": one prediction per row");
                        var confusion = new int[C, C]; // [label, predicted class]
                        for (int row = 0; row < labels.Length; row++) confusion[labels[row], predicted[row]]++;
                        int correct = 0;
                        for (int label = 0; label < C; label++)
                        {
                            int given = labels.Count(l => l == label), counted = 0;
                            for (int c = 0; c < C; c++) counted += confusion[label, c];
                            Assert.Equal(given, counted, what + ": row " + label + " of the matrix");
                            correct += confusion[label, label];
                        }
                        float accuracy = trainer.Evaluate(dataset).Accuracy;
                        Assert.True(Math.Abs((double)correct / labels.Length - accuracy) < 1e-6,
                                    what + ": " + correct + " of " + labels.Length + " on the diagonal, Evaluate's accuracy " + accuracy);
                        accuracies.Add(accuracy);
                    }
                }
            }
            Assert.True(accuracies[0] < 0.9f, "untrained: some rows are wrong (" + string.Join(", ", accuracies) + ")");
            Assert.True(accuracies[4] > accuracies[0], "training helps (" + string.Join(", ", accuracies) + ")");
        }

        [Test]
        public static void TheEpochEndCallbackMayPredictADataSetAsBetweenOneEpochFits()
        {
            float[] x, heldX; int[] y, heldY;
            Data.Blobs(Rows, 35, out x, out y); // 5 steps of 12
            Data.Blobs(30, 36, out heldX, out heldY);
            var duringFit = new List<float[]>();
            var refusals = new List<MptException>();
            Status? fromProgress = null;
            int[] duringWeights;
            // One seed: the same initial weights and shuffles.
            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, F, y, C))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, F, heldY, C))
            using (Dataset wide = Dataset.FromF32(ctx, new float[30 * (F + 1)], F + 1, heldY, C))
            using (Context other = Data.CpuContext(17))
            using (Dataset stranger = Dataset.FromF32(other, heldX, F, heldY, C))
            using (var trainer = new Trainer(model, Adam()))
            {
                trainer.SetCallbacks(
                    p =>
                    {
                        if (p.Step != 1 || fromProgress.HasValue) return;
                        try { trainer.PredictDataset(validation); fromProgress = Status.Ok; }
                        catch (MptException error) { fromProgress = error.Status; }
                    },
                    e =>
                    {
                        duringFit.Add(trainer.PredictDataset(validation));
                        if (e.Epoch != 0) return;
                        var calls = new Action[]
                        {
                            () => trainer.PredictDataset(stranger), () => trainer.PredictDataset(wide),
                            () => trainer.PredictDataset(validation, -1),
                        };
                        foreach (Action call in calls)
                        {
                            try { call(); refusals.Add(null); }
                            catch (MptException error) { refusals.Add(error); }
                        }
                    });
                trainer.Fit(training, 2, 12);
                Assert.Equal(10L, trainer.Progress.Steps, "steps");
                Assert.Equal(2L, trainer.Progress.Epochs, "epochs");
                duringWeights = Data.WeightBits(model);
            }
            Assert.Equal((Status?)Status.InvalidState, fromProgress, "PredictDataset from the progress callback (steps in flight)");
            Assert.True(refusals.All(error => error != null), "every refusal threw");
            Assert.SequenceEqual(new[] { Status.InvalidArgument, Status.ShapeMismatch, Status.InvalidArgument },
                                 refusals.Select(error => error.Status), "another context's data set, another feature count, a negative batch");
            // Another context's data set is refused by the bindings, before its context's lock is taken
            // from inside the fit (the library's own refusal would name the model).
            Assert.Equal("the dataset was created on another context than the trainer", refusals[0].NativeMessage,
                         "the refusal of another context's data set");
            Assert.Equal(2, duringFit.Count, "predictions from the epoch-end callback");
            Assert.True(!Data.Bits(duringFit[0]).SequenceEqual(Data.Bits(duringFit[1])), "the epochs' predictions differ");

            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, F, y, C))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, F, heldY, C))
            using (var trainer = new Trainer(model, Adam()))
            {
                for (int epoch = 0; epoch < 2; epoch++)
                {
                    trainer.Fit(training, 1, 12);
                    // Bit for bit on the CPU.
                    SameBits(trainer.PredictDataset(validation), duringFit[epoch], "predictions after epoch " + epoch);
                }
                Assert.SequenceEqual(Data.WeightBits(model), duringWeights, "predicting left the run as it was");
            }
        }

        [Test]
        public static void AnotherContextAnotherFeatureCountOrANegativeBatchIsRefused()
        {
            float[] x; int[] y;
            Data.Blobs(Rows, 37, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Adam()))
            using (Dataset data = Dataset.FromF32(ctx, x, F, y, C))
            using (Context other = Data.CpuContext())
            using (Dataset foreign = Dataset.FromF32(other, x, F, y, C))
            {
                MptException error = Assert.Fails(Status.InvalidArgument, () => trainer.PredictDataset(foreign));
                Assert.True(error.NativeMessage.Contains("context"), "the library's message: " + error.NativeMessage);
                foreach (int features in new[] { F + 1, F - 1 })
                {
                    using (Dataset otherWidth = Dataset.FromF32(ctx, new float[Rows * features], features, y, C))
                        Assert.Fails(Status.ShapeMismatch, () => trainer.PredictDataset(otherWidth));
                }
                Assert.Fails(Status.InvalidArgument, () => trainer.PredictDataset(data, -1));
                Assert.Throws<ArgumentNullException>(() => trainer.PredictDataset(null));
                // The trainer predicts on after the refusals.
                SameBits(trainer.Predict(x), trainer.PredictDataset(data, Rows), "predictions after the refusals");
                data.Dispose();
                Assert.Throws<ObjectDisposedException>(() => trainer.PredictDataset(data));
            }
        }
    }
}
