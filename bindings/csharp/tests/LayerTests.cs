// Per-layer settings: a frozen layer keeps its weights while the others train; dropout rates read back, are
// refused out of range or on the last layer, and change training but not inference.
using System;
using System.Linq;

namespace Mptrain.Tests
{
    public static class LayerTests
    {
        [Test]
        public static void AFrozenLayerKeepsItsWeightsWhileTheOthersTrainAndThawedItTrains()
        {
            float[] x; int[] y;
            Data.Blobs(300, 1, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                Assert.True(model.GetLayerTrainable(0) && model.GetLayerTrainable(1), "trainable by default");
                model.SetLayerTrainable(0, false);
                Assert.True(!model.GetLayerTrainable(0), "layer 0 frozen");
                Func<int, int[]> layerBits = layer =>
                {
                    float[] weights, bias;
                    model.GetWeights(layer, out weights, out bias);
                    return Data.Bits(weights.Concat(bias).ToArray());
                };
                using (var trainer = new Trainer(model, Data.Adam))
                {
                    int[] frozen = layerBits(0), other = layerBits(1);
                    trainer.Fit(data, 1, 32);
                    Assert.SequenceEqual(frozen, layerBits(0), "the frozen layer, bit for bit");
                    Assert.True(!other.SequenceEqual(layerBits(1)), "the other layer trained");
                    model.SetLayerTrainable(0, true); // between fits
                    trainer.Fit(data, 1, 32);
                    Assert.True(!frozen.SequenceEqual(layerBits(0)), "thawed, it trains");
                    Assert.Fails(Status.InvalidArgument, () => model.SetLayerTrainable(2, false));
                    model.SetLayerTrainable(0, false);
                    model.SetLayerTrainable(1, false);
                    MptException error = Assert.Fails(Status.InvalidState, () => trainer.Fit(data, 1, 32));
                    Assert.True(error.NativeMessage.Contains("frozen"), "the message says why: " + error.NativeMessage);
                }
            }
        }

        [Test]
        public static void ADropoutRateSetReadsBackOnItsLayerAloneAndMinusZeroAsZero()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                Assert.Equal(0.0f, model.GetLayerDropout(0), "layer 0 by default");
                Assert.Equal(0.0f, model.GetLayerDropout(1), "layer 1 by default");
                model.SetLayerDropout(0, 0.25f);
                Assert.Equal(0.25f, model.GetLayerDropout(0), "layer 0");
                Assert.Equal(0.0f, model.GetLayerDropout(1), "layer 1");
                model.SetLayerDropout(0, -0.0f);
                Assert.Equal(Data.Bits(0.0f), Data.Bits(model.GetLayerDropout(0)), "bits of -0 set: +0");
                float largest = BitConverter.Int32BitsToSingle(Data.Bits(1.0f) - 1); // the largest rate below 1 is in range
                model.SetLayerDropout(0, largest);
                Assert.Equal(largest, model.GetLayerDropout(0), "the largest rate below 1");
            }
        }

        [Test]
        public static void ADropoutRateOutside01OrALayerOutOfRangeIsRefusedTheRateUnchanged()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                model.SetLayerDropout(0, 0.5f);
                foreach (float rate in new[] { 1.0f, -0.1f, float.NaN, 1.5f, float.PositiveInfinity })
                {
                    Assert.Fails(Status.InvalidArgument, () => model.SetLayerDropout(0, rate));
                    Assert.Equal(0.5f, model.GetLayerDropout(0), "the rate after refusing " + rate);
                }
                foreach (int layer in new[] { -1, 2, int.MaxValue })
                {
                    Assert.Fails(Status.InvalidArgument, () => model.SetLayerDropout(layer, 0.25f));
                    Assert.Fails(Status.InvalidArgument, () => model.GetLayerDropout(layer));
                }
                new Trainer(model, new TrainerOptions()).Dispose(); // the refusals left a model that builds
            }
        }

        [Test]
        public static void DropoutOnTheLastLayerMakesBuildingFailWithInvalidStateAndABuiltModelsRatesAreFixed()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                model.SetLayerDropout(1, 0.5f); // accepted: only building refuses it
                Assert.Equal(0.5f, model.GetLayerDropout(1), "the last layer's rate");
                MptException error = Assert.Fails(Status.InvalidState, () => new Trainer(model, new TrainerOptions()).Dispose());
                Assert.True(error.NativeMessage.Contains("last layer"), "the message names the last layer: " + error.NativeMessage);
                Assert.Fails(Status.InvalidState, () => model.Predict(new float[Data.Features]));
                model.SetLayerDropout(1, 0.0f); // the refused builds left the model unbuilt
                using (new Trainer(model, new TrainerOptions()))
                {
                    Assert.Fails(Status.InvalidState, () => model.SetLayerDropout(0, 0.25f));
                    Assert.Equal(0.0f, model.GetLayerDropout(0), "the built model's rate");
                }
            }
        }

        [Test]
        public static void AFitWithDropoutOnAHiddenLayerLearnsAndTrainsOtherwiseAndInferenceUsesEveryOutput()
        {
            float[] x, points; int[] y, unused;
            Data.Blobs(240, 81, out x, out y);
            Data.Blobs(30, 83, out points, out unused);
            var options = new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f };
            using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
            using (Context plainCtx = Data.CpuContext(5))
            using (Context copyCtx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Model plain = Data.Mlp(plainCtx))
            using (Model copy = Data.Mlp(copyCtx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset plainData = Dataset.FromF32(plainCtx, x, Data.Features, y, Data.Classes))
            using (Dataset copyData = Dataset.FromF32(copyCtx, x, Data.Features, y, Data.Classes))
            {
                model.SetLayerDropout(0, 0.5f);
                using (var trainer = new Trainer(model, options))
                using (var plainTrainer = new Trainer(plain, options))
                {
                    Assert.SequenceEqual(Data.WeightBits(plain), Data.WeightBits(model), "initial weight bits");
                    trainer.Fit(data, 5, 16);
                    plainTrainer.Fit(plainData, 5, 16);
                    Assert.True(!Data.WeightBits(model).SequenceEqual(Data.WeightBits(plain)), "the dropped outputs changed the steps");
                    Evaluation evaluation = trainer.Evaluate(data);
                    Assert.True(evaluation.Accuracy >= 0.9f, "accuracy " + evaluation.Accuracy);

                    // The trained weights in a model without dropout: every evaluation and prediction the same, bit for bit.
                    for (int layer = 0; layer < 2; layer++)
                    {
                        float[] w, b;
                        model.GetWeights(layer, out w, out b);
                        copy.SetWeights(layer, w, b);
                    }
                    using (var copyTrainer = new Trainer(copy, options))
                    {
                        Assert.SequenceEqual(Data.Bits(evaluation), Data.Bits(copyTrainer.Evaluate(copyData)), "evaluation bits");
                        Assert.SequenceEqual(Data.Bits(copy.Predict(points)), Data.Bits(model.Predict(points)), "model prediction bits");
                        Assert.SequenceEqual(Data.Bits(copyTrainer.Predict(points)), Data.Bits(trainer.Predict(points)), "trainer prediction bits");
                        Assert.SequenceEqual(Data.Bits(model.Predict(points)), Data.Bits(model.Predict(points)), "no mask at inference");
                    }
                }
            }
        }
    }
}
