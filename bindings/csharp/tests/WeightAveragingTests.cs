// TrainerOptions.EmaMomentum and Trainer.SwapEmaWeights: the weights' moving average, swapped in and out bit
// for bit, training refused meanwhile; bad momenta, and the swap without averages, are refused.
using System;
using System.Linq;

namespace Mptrain.Tests
{
    public static class WeightAveragingTests
    {
        [Test]
        public static void SwapEmaWeightsExchangesTheWeightsWithTheirMovingAverageAndBackBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(30, 73, out x, out y);
            using (Context ctx = Data.CpuContext(5))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                         LearningRate = 0.05f, Momentum = 0.0f, EmaMomentum = 0.5f }))
            {
                // Before any step the averages are the weights: the exchange changes no value.
                int[] initial = Data.WeightBits(model);
                Assert.True(trainer.SwapEmaWeights(), "the model holds the averages");
                Assert.SequenceEqual(initial, Data.WeightBits(model), "averages before any step");
                Assert.True(!trainer.SwapEmaWeights(), "the model holds its own weights");
                // Keras's average after each step (the first copies the weights); with momentum 0.5 each
                // product is exact, so float arithmetic here rounds as the library's.
                float[] expected = null;
                for (int step = 0; step < 3; step++)
                {
                    trainer.Step(data, 10 * step, 10);
                    float[] weights = Data.WeightBits(model).Select(BitConverter.Int32BitsToSingle).ToArray();
                    if (expected == null) expected = weights;
                    else for (int i = 0; i < weights.Length; i++) expected[i] = 0.5f * expected[i] + 0.5f * weights[i];
                }
                int[] trained = Data.WeightBits(model);
                float trainedLoss = trainer.Evaluate(data).Loss;
                Assert.True(trainer.SwapEmaWeights(), "the model holds the averages");
                int[] averaged = Data.WeightBits(model);
                Assert.True(!averaged.SequenceEqual(trained), "the averages are not the trained weights");
                Assert.SequenceEqual(Data.Bits(expected), averaged, "the averages against Keras's formula");
                Assert.True(trainer.Evaluate(data).Loss != trainedLoss, "Evaluate sees the averages");
                // Meanwhile training and checkpoints are refused, and change nothing.
                var refusals = new Action[] {
                    () => trainer.Step(data, 0, 10),
                    () => trainer.Fit(data, 1, 10),
                    () => trainer.SaveCheckpoint(System.IO.Path.Combine(System.IO.Path.GetTempPath(), "mptrain-refused-ema.safetensors")),
                };
                foreach (Action refused in refusals)
                {
                    MptException error = Assert.Fails(Status.InvalidState, refused);
                    Assert.True(error.NativeMessage.Contains("averaged weights"), "the message says why: " + error.NativeMessage);
                }
                Assert.SequenceEqual(averaged, Data.WeightBits(model), "the refused calls changed nothing");
                Assert.True(!trainer.SwapEmaWeights(), "the model holds its own weights");
                Assert.SequenceEqual(trained, Data.WeightBits(model), "the trained weights back, bit for bit");
                Assert.Equal(Data.Bits(trainedLoss), Data.Bits(trainer.Evaluate(data).Loss), "Evaluate of the trained weights");
                trainer.Step(data, 0, 10); // trains again
            }
        }

        [Test]
        public static void EmaMomentumOutside01IsRefusedAndATrainerWithoutAveragesRefusesTheSwap()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { 1.5f, 1.0f, -0.5f, float.NaN })
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { EmaMomentum = refused }).Dispose());
                    Assert.True(error.NativeMessage.Contains("ema momentum"), "the message names the option: " + error.NativeMessage);
                }
                int[] initial = Data.WeightBits(model);
                foreach (float? none in new float?[] { null, 0.0f }) // 0: none, accepted
                {
                    using (var plain = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam, EmaMomentum = none }))
                        Assert.Fails(Status.InvalidState, () => plain.SwapEmaWeights());
                }
                Assert.SequenceEqual(initial, Data.WeightBits(model), "the refused swaps changed nothing");
            }
        }
    }
}
