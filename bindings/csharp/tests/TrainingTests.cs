// Training through the C# API: fit, evaluate, predict, step and weights; u8 and target data sets;
// micro-batches.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Mptrain.Tests
{
    public static class TrainingTests
    {
        [Test]
        public static void FitLearnsSeparableBlobs()
        {
            float[] x; int[] y;
            Data.Blobs(300, 1, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                Assert.Equal(300L, data.Rows, "rows");
                Assert.Equal((long)Data.Features, data.Features, "features");
                Evaluation before = trainer.Evaluate(data);
                trainer.Fit(data, 5, 32);
                Evaluation after = trainer.Evaluate(data);
                Assert.True(after.Accuracy >= 0.95f, "accuracy " + after.Accuracy);
                Assert.True(after.Loss < before.Loss, "loss fell");
                Assert.Equal(5L * (300 / 32), trainer.Progress.Steps, "steps");
                Assert.Equal(5L, trainer.Progress.Epochs, "epochs");
                // AUTO on the CPU: bf16 where AMX multiplies it natively, else fp32.
                Assert.True(trainer.Precision == Precision.Fp32 || trainer.Precision == Precision.MixedBf16,
                            "AUTO resolves to fp32 or mixed-bf16 on the CPU, not " + trainer.Precision);
                Assert.True(trainer.Memory.Planned > 0 && trainer.Memory.Allocated >= trainer.Memory.Planned, "trainer memory");
                Assert.True(trainer.LastEpochTime.Steps == 300 / 32 && trainer.LastEpochTime.Seconds > 0, "last epoch time");
                Assert.Equal(Backend.Cpu, ctx.Backend, "backend");
                Assert.True(ctx.Memory.Peak > 0, "context memory");
                Assert.Equal(trainer.Precision, ctx.ResolvePrecision(Precision.Auto), "resolved precision");
            }
        }

        [Test]
        public static void PredictGivesProbabilitiesOfTheRightClass()
        {
            float[] x; int[] y;
            Data.Blobs(300, 2, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Data.Adam))
            {
                trainer.Fit(data, 5, 32);
                float[] points = { 2.5f, 0, 0, 2.5f, 0, 2.5f, 0, 0, 0, 0, 2.5f, 0 };
                foreach (float[] output in new[] { trainer.Predict(points), model.Predict(points) })
                {
                    Assert.Equal(9, output.Length, "outputs");
                    for (int row = 0; row < 3; row++)
                    {
                        float[] p = output.Skip(row * 3).Take(3).ToArray();
                        Assert.True(Math.Abs(p.Sum() - 1.0f) < 1e-4f, "probabilities sum to 1");
                        Assert.Equal(row, Array.IndexOf(p, p.Max()), "predicted class");
                    }
                }
            }
        }

        [Test]
        public static void WeightsRoundTripAndDrivePredict()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = new Model(ctx, 3).AddDense(2, Activation.Linear))
            {
                model.SetWeights(0, new[] { 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 0.0f }, new[] { 0.5f, -0.5f });
                float[] w, b;
                model.GetWeights(0, out w, out b);
                Assert.SequenceEqual(new[] { 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 0.0f }, w, "weights");
                Assert.SequenceEqual(new[] { 0.5f, -0.5f }, b, "bias");
                Assert.SequenceEqual(new[] { 6.5f, -1.0f }, model.Predict(new[] { 1.0f, 1.0f, 1.0f }), "W x + b by hand");
                Assert.Equal(8L, model.ParameterCount, "parameters");
                Assert.Equal(1L, model.LayerCount, "layers");
            }
        }

        [Test]
        public static void StepReturnsAFallingBatchLoss()
        {
            float[] x; int[] y;
            Data.Blobs(120, 3, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, new TrainerOptions { LearningRate = 0.1f }))
            {
                float[] losses = Enumerable.Range(0, 20).Select(_ => trainer.Step(data, 0, 60)).ToArray();
                Assert.True(losses.All(l => !float.IsNaN(l) && !float.IsInfinity(l)), "finite losses");
                Assert.True(losses[19] < losses[0], "loss fell: " + losses[0] + " -> " + losses[19]);
            }
        }

        [Test]
        public static void MicroBatchesTrainTheWholeBatchsStepsInLessMemory()
        {
            float[] x; int[] y;
            Data.Blobs(120, 21, out x, out y);
            Func<long, Tuple<float[], float[], ulong>> train = micro =>
            {
                using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
                using (Model model = new Model(ctx, Data.Features).AddDense(256, Activation.Relu).AddDense(Data.Classes, Activation.Softmax))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                           LearningRate = 0.05f, Momentum = 0.9f, MicroBatchSize = micro }))
                {
                    var losses = new float[3];
                    for (int step = 0; step < 3; step++) losses[step] = trainer.Step(data, 40 * step, 40);
                    var weights = new List<float>();
                    for (int layer = 0; layer < model.LayerCount; layer++)
                    {
                        float[] w, b;
                        model.GetWeights(layer, out w, out b);
                        weights.AddRange(w.Concat(b));
                    }
                    return Tuple.Create(weights.ToArray(), losses, trainer.Memory.Planned);
                }
            };
            var whole = train(0);
            var parts = train(16); // micro-batches of 16, 16 and 8 rows
            double largest = whole.Item1.Max(value => Math.Abs(value));
            for (int i = 0; i < whole.Item1.Length; i++)
                Assert.True(Math.Abs(parts.Item1[i] - whole.Item1[i]) <= 1e-6 * largest, "weight " + i + " as in one pass");
            for (int step = 0; step < 3; step++) Assert.Close(whole.Item2[step], parts.Item2[step], "step " + step + "'s loss", 1e-6);
            Assert.True(parts.Item3 < whole.Item3, "micro-batches plan less memory");
            Assert.SequenceEqual(Data.Bits(whole.Item1), Data.Bits(train(40).Item1), "a micro-batch as large as the batch: the same bits");
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { MicroBatchSize = -1 }).Dispose());
                Assert.True(error.Message.Contains("micro-batch"), "the message names the micro-batch size");
            }
        }

        [Test]
        public static void U8AndTargetDatasetsTrainWithOtherOptions()
        {
            float[] x; int[] y;
            Data.Blobs(120, 4, out x, out y);
            using (Context ctx = Data.CpuContext())
            {
                byte[] bytes = x.Select(v => (byte)Math.Max(0, Math.Min(255, v * 40 + 60))).ToArray();
                using (Dataset u8 = Dataset.FromU8(ctx, bytes, Data.Features, y, Data.Classes))
                    Assert.Equal(120L, u8.Rows, "u8 rows");
                float[] oneHot = y.SelectMany(label => Enumerable.Range(0, 3).Select(c => c == label ? 1.0f : 0.0f)).ToArray();
                using (Dataset targets = Dataset.FromTargets(ctx, x, Data.Features, oneHot, 3))
                using (Model model = new Model(ctx, Data.Features).AddDense(8, Activation.Tanh).AddDense(3, Activation.Softmax))
                using (var trainer = new Trainer(model, new TrainerOptions
                {
                    Loss = Loss.CategoricalCrossentropy, Optimizer = Optimizer.Sgd, LearningRate = 0.05f, Momentum = 0.9f, Nesterov = true,
                }))
                {
                    trainer.Fit(targets, 3, 16);
                    Assert.True(trainer.Evaluate(targets).Accuracy > 0.8f, "one-hot accuracy");
                }
                using (Dataset values = Dataset.FromTargets(ctx, x, Data.Features, y.Select(l => (float)l).ToArray(), 1))
                using (Model regression = new Model(ctx, Data.Features).AddDense(1, Activation.Linear))
                using (var trainer = new Trainer(regression, new TrainerOptions
                {
                    Loss = Loss.MeanSquaredError, Optimizer = Optimizer.AdamW, Beta1 = 0.9f, WeightDecay = 0.01f,
                    Precision = Precision.Fp32, LossScaling = LossScaling.Off,
                    LossScalerDynamics = new LossScalerDynamics { GrowthFactor = 2, BackoffFactor = 0.5f, GrowthInterval = 100, MinScale = 1, MaxScale = 65536 },
                }))
                {
                    trainer.Fit(values, 2, 16, shuffle: false);
                    Assert.Equal(0L, trainer.LossScale.SkippedSteps, "skipped steps");
                }
            }
        }
    }
}
