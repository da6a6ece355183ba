// Training through the C# API: fit, evaluate, predict, step, weights, options, callbacks, lifetimes.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;

namespace Mptrain.Tests
{
    public static class TrainingTests
    {
        static readonly TrainerOptions Adam = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f };

        [Test]
        public static void FitLearnsSeparableBlobs()
        {
            float[] x; int[] y;
            Data.Blobs(300, 1, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Adam))
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
            using (var trainer = new Trainer(model, Adam))
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

        // The mean over rows of (1 - s) (-log p_label) + s mean_c(-log p_c), in double from the
        // probabilities: the cross-entropy towards the labels smoothed as mptrain.h defines it.
        static double SmoothedCrossEntropy(float[] probabilities, int[] labels, int rows, double s)
        {
            double total = 0;
            for (int row = 0; row < rows; row++)
            {
                double towardsUniform = 0;
                for (int c = 0; c < Data.Classes; c++) towardsUniform -= Math.Log(probabilities[row * Data.Classes + c]) / Data.Classes;
                total += (1 - s) * -Math.Log(probabilities[row * Data.Classes + labels[row]]) + s * towardsUniform;
            }
            return total / rows;
        }

        static TrainerOptions Smoothed(float? smoothing)
        {
            return new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f, LabelSmoothing = smoothing };
        }

        [Test]
        public static void LabelSmoothingMakesTheLossTheSmoothedCrossEntropyOfThePredictions()
        {
            float[] x; int[] y;
            Data.Blobs(90, 51, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var plain = new Trainer(model, Smoothed(null)))
            using (var smoothed = new Trainer(model, Smoothed(0.1f)))
            {
                float[] probabilities = plain.Predict(x);
                double towardsLabel = SmoothedCrossEntropy(probabilities, y, 90, 0.0);
                double expected = SmoothedCrossEntropy(probabilities, y, 90, 0.1f);
                Assert.True(Math.Abs(expected - towardsLabel) > 1e-3 * towardsLabel, "the two can be told apart");
                Evaluation without = plain.Evaluate(data), with = smoothed.Evaluate(data);
                Assert.Close(towardsLabel, without.Loss, "loss without smoothing");
                Assert.Close(expected, with.Loss, "loss with smoothing 0.1");
                Assert.Equal(without.Accuracy, with.Accuracy, "accuracy reads the given labels");
            }

            // Training follows the smoothed targets: a step's loss is its batch's smoothed one, and one
            // step from equal weights ends elsewhere than without smoothing.
            Func<float, float[]> stepFromStart = smoothing =>
            {
                using (Context ctx = Data.CpuContext(3))
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, Smoothed(smoothing)))
                {
                    double batchExpected = SmoothedCrossEntropy(trainer.Predict(x.Take(30 * Data.Features).ToArray()), y, 30, smoothing);
                    Assert.Close(batchExpected, trainer.Step(data, 0, 30), "step loss with smoothing " + smoothing);
                    var weights = new List<float>();
                    for (int layer = 0; layer < model.LayerCount; layer++)
                    {
                        float[] w, b;
                        model.GetWeights(layer, out w, out b);
                        weights.AddRange(w.Concat(b));
                    }
                    return weights.ToArray();
                }
            };
            Assert.True(!stepFromStart(0.1f).SequenceEqual(stepFromStart(0.0f)), "smoothing changes the step's weights");
        }

        [Test]
        public static void LabelSmoothingOutsideZeroToOneOrWithMeanSquaredErrorIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { -0.01f, 1.0f, 1.5f, float.NaN, float.PositiveInfinity })
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, Smoothed(refused)).Dispose());
                    Assert.True(error.NativeMessage.Contains("label_smoothing"), "the message names the option: " + error.NativeMessage);
                }
                var regressions = new Dictionary<Loss, string> { { Loss.MeanSquaredError, "mean_squared_error" },
                                                                 { Loss.MeanAbsoluteError, "mean_absolute_error" }, { Loss.Huber, "huber" } };
                foreach (var loss in regressions)
                {
                    new Trainer(model, new TrainerOptions { Loss = loss.Key, LabelSmoothing = 0.0f }).Dispose(); // 0: none
                    MptException error = Assert.Fails(Status.InvalidArgument,
                        () => new Trainer(model, new TrainerOptions { Loss = loss.Key, LabelSmoothing = 0.1f }).Dispose());
                    Assert.True(error.NativeMessage.Contains(loss.Value + " has no labels"), "the message names the loss: " + error.NativeMessage);
                }
            }
        }

        // fp32 SGD at rate 0.05 from seed 5 over `steps` batches of 10 rows: the weights' bits after them,
        // the L2 norm of the change of all weights and biases over the rate (for one plain SGD step, the
        // norm of the gradient it applied), and the trainer's GradientNorm before the first step and after
        // each (byFit: the steps are one unshuffled Fit's over all rows, the norms read from its progress
        // callback).
        static Tuple<int[], double, List<float>> ClipnormSgd(float[] x, int[] y, int steps, float momentum, float? clipnorm, bool byFit = false)
        {
            using (Context ctx = Data.CpuContext(5))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                         LearningRate = 0.05f, Momentum = momentum, GlobalClipnorm = clipnorm }))
            {
                int[] start = Data.WeightBits(model);
                var norms = new List<float> { trainer.GradientNorm };
                if (byFit)
                {
                    Assert.Equal(y.Length / 10, steps, "steps of one epoch");
                    trainer.SetCallbacks(progress => norms.Add(trainer.GradientNorm));
                    trainer.Fit(data, 1, 10, false);
                }
                else
                {
                    for (int step = 0; step < steps; step++)
                    {
                        trainer.Step(data, 10 * step, 10);
                        norms.Add(trainer.GradientNorm);
                    }
                }
                int[] trained = Data.WeightBits(model);
                double sum = 0;
                for (int i = 0; i < trained.Length; i++)
                {
                    double change = (double)BitConverter.Int32BitsToSingle(trained[i]) - BitConverter.Int32BitsToSingle(start[i]);
                    sum += change * change;
                }
                return Tuple.Create(trained, Math.Sqrt(sum) / 0.05f, norms);
            }
        }

        [Test]
        public static void GlobalClipnormBoundsAStepsGradientNormAndOneAboveItChangesNothingBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(30, 71, out x, out y);
            Func<int, float, float?, Tuple<int[], double, List<float>>> train = (steps, momentum, clipnorm) => ClipnormSgd(x, y, steps, momentum, clipnorm);
            // A bound far above the gradients' norm: momentum SGD steps as without clipping, bit for bit.
            int[] plain = train(3, 0.9f, null).Item1;
            Assert.True(!plain.SequenceEqual(train(0, 0.9f, null).Item1), "the steps move the weights");
            Assert.True(train(3, 0.9f, 1e30f).Item1.SequenceEqual(plain), "a bound of 1e30 steps as no clipping, bit for bit");
            // A bound far below it: the first plain SGD step's gradient is scaled down to the bound's length.
            Tuple<int[], double, List<float>> unclipped = train(1, 0.0f, null), clipped = train(1, 0.0f, 1e-3f);
            Assert.True(unclipped.Item2 > 100 * 1e-3, "so that the bound clips: " + unclipped.Item2);
            Assert.Close(1e-3, clipped.Item2, "the clipped step's gradient norm against the bound", 1e-3);
            Assert.True(!clipped.Item1.SequenceEqual(unclipped.Item1), "clipping moves the step");
        }

        [Test]
        public static void GradientNormIsTheLastStepsBeforeClippingAndNaNWhereNoneWasTaken()
        {
            float[] x; int[] y;
            Data.Blobs(30, 71, out x, out y);
            // The norm of the gradient one unclipped plain SGD step applied, from its weight change.
            Tuple<int[], double, List<float>> unclipped = ClipnormSgd(x, y, 1, 0.0f, null), clipped = ClipnormSgd(x, y, 1, 0.0f, 1e-3f);
            Assert.True(float.IsNaN(clipped.Item3[0]), "before the first step: " + clipped.Item3[0]);
            Assert.Close(unclipped.Item2, clipped.Item3[1], "the clipped step's norm before clipping against the unclipped step's", 1e-4);
            Assert.True(clipped.Item3[1] > 1e-3f, "so that step was clipped: " + clipped.Item3[1]);
            Assert.True(float.IsNaN(unclipped.Item3[1]), "no clipping, none taken: " + unclipped.Item3[1]);
            // From a progress callback of a clipping Fit (one epoch of the same three batches, unshuffled):
            // each reported step's norm, finite and as step by step, with the same weights after it.
            Tuple<int[], double, List<float>> stepped = ClipnormSgd(x, y, 3, 0.0f, 1e-3f), fitted = ClipnormSgd(x, y, 3, 0.0f, 1e-3f, true);
            Assert.True(fitted.Item1.SequenceEqual(stepped.Item1), "Fit takes the steps taken one by one");
            Assert.Equal(4, fitted.Item3.Count, "norms read: " + string.Join(" ", fitted.Item3));
            Assert.True(fitted.Item3.Skip(1).All(norm => !float.IsNaN(norm) && !float.IsInfinity(norm) && norm > 1e-3f),
                        "finite and above the bound: " + string.Join(" ", fitted.Item3));
            Assert.SequenceEqual(stepped.Item3.Skip(1), fitted.Item3.Skip(1), "the progress callback's norms against step by step");
            Assert.Equal(3, fitted.Item3.Skip(1).Distinct().Count(), "three steps' own norms, not one read three times");
        }

        [Test]
        public static void GlobalClipnormNegativeNaNOrInfiniteIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { -1.0f, -1e-30f, float.NaN, float.PositiveInfinity })
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { GlobalClipnorm = refused }).Dispose());
                    Assert.True(error.NativeMessage.Contains("global_clipnorm"), "the message names the option: " + error.NativeMessage);
                }
                new Trainer(model, new TrainerOptions { GlobalClipnorm = 0.0f }).Dispose(); // 0: none
            }
        }

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

        static TrainerOptions RmsProp(float rho, float? momentum = null, bool nesterov = false)
        {
            return new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.RmsProp, LearningRate = 0.01f, Rho = rho,
                                        Epsilon = 1e-7f, Momentum = momentum, Nesterov = nesterov };
        }

        [Test]
        public static void RmsPropFitLowersTheLossWithAndWithoutMomentum()
        {
            float[] x; int[] y;
            Data.Blobs(300, 1, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (float momentum in new[] { 0.0f, 0.5f })
                {
                    using (Model model = Data.Mlp(ctx))
                    using (var trainer = new Trainer(model, RmsProp(0.9f, momentum)))
                    {
                        Evaluation before = trainer.Evaluate(data);
                        trainer.Fit(data, 3, 32);
                        Evaluation after = trainer.Evaluate(data);
                        Assert.True(after.Loss < 0.5f * before.Loss, "momentum " + momentum + ": loss " + before.Loss + " -> " + after.Loss);
                        Assert.True(after.Accuracy >= 0.95f, "momentum " + momentum + ": accuracy " + after.Accuracy);
                    }
                }
            }
        }

        [Test]
        public static void RmsPropRhoAndCenteredChangeTheStepsTheSameOptionsGiveTheSameWeights()
        {
            float[] x; int[] y;
            Data.Blobs(30, 73, out x, out y);
            Func<float, bool, int[]> train = (rho, centered) =>
            {
                TrainerOptions options = RmsProp(rho);
                options.RmsPropCentered = centered;
                using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, options))
                {
                    int[] initial = Data.WeightBits(model);
                    for (int step = 0; step < 3; step++) trainer.Step(data, 10 * step, 10);
                    int[] trained = Data.WeightBits(model);
                    Assert.True(!trained.SequenceEqual(initial), "the steps moved the weights");
                    return trained;
                }
            };
            int[] rho08 = train(0.8f, false);
            Assert.SequenceEqual(rho08, train(0.8f, false), "the same rho, the same weights");
            Assert.True(!train(0.5f, false).SequenceEqual(rho08), "another rho, other weights");
            int[] centeredWeights = train(0.8f, true);
            Assert.True(!centeredWeights.SequenceEqual(rho08), "centered, other weights");
            Assert.SequenceEqual(centeredWeights, train(0.8f, true), "centered again, the same weights");
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
        public static void RmsPropRhoOutside01ANonPositiveEpsilonAndNesterovAreRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                var refused = new[] { Tuple.Create(1.5f, 1e-7f, "rho"), Tuple.Create(1.0f, 1e-7f, "rho"), Tuple.Create(-0.1f, 1e-7f, "rho"),
                                      Tuple.Create(0.9f, 0.0f, "epsilon"), Tuple.Create(0.9f, -1e-7f, "epsilon"),
                                      Tuple.Create(0.9f, float.NaN, "epsilon") };
                foreach (var values in refused)
                {
                    var options = new TrainerOptions { Optimizer = Optimizer.RmsProp, Rho = values.Item1, Epsilon = values.Item2 };
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
                    Assert.True(error.NativeMessage.Contains(values.Item3), "the message names " + values.Item3 + ": " + error.NativeMessage);
                }
                MptException nesterov = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, RmsProp(0.9f, 0.9f, true)).Dispose());
                Assert.True(nesterov.NativeMessage.Contains("Nesterov"), "the message names Nesterov: " + nesterov.NativeMessage);
                new Trainer(model, RmsProp(0.0f, 0.9f)).Dispose(); // plain momentum, and rho 0: accepted
            }
        }

        static TrainerOptions Lion(float learningRate, float? beta1 = null, float? beta2 = null)
        {
            return new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Lion, LearningRate = learningRate,
                                        LionBeta1 = beta1, LionBeta2 = beta2 };
        }

        [Test]
        public static void LionFitLowersTheLoss()
        {
            float[] x; int[] y;
            Data.Blobs(300, 1, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Lion(0.003f, 0.9f, 0.99f)))
            {
                Evaluation before = trainer.Evaluate(data);
                trainer.Fit(data, 3, 32);
                Evaluation after = trainer.Evaluate(data);
                Assert.True(!float.IsNaN(after.Loss) && !float.IsInfinity(after.Loss), "a finite loss: " + after.Loss);
                Assert.True(after.Loss < before.Loss, "loss " + before.Loss + " -> " + after.Loss);
            }
        }

        [Test]
        public static void LionUnsetBetasAreKerass09And099()
        {
            float[] x; int[] y;
            Data.Blobs(30, 73, out x, out y);
            Func<TrainerOptions, int[]> train = options =>
            {
                using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, options))
                {
                    int[] initial = Data.WeightBits(model);
                    for (int step = 0; step < 3; step++)
                    {
                        float loss = trainer.Step(data, 10 * step, 10);
                        Assert.True(!float.IsNaN(loss) && !float.IsInfinity(loss), "step " + step + "'s loss is finite");
                    }
                    int[] trained = Data.WeightBits(model);
                    Assert.True(!trained.SequenceEqual(initial), "the steps moved the weights");
                    return trained;
                }
            };
            int[] defaults = train(Lion(0.001f));
            Assert.SequenceEqual(defaults, train(Lion(0.001f, 0.9f, 0.99f)), "0.9 and 0.99 are the defaults");
            Assert.SequenceEqual(defaults, train(Lion(0.001f, 0.9f)), "LionBeta2 unset: 0.99");
            Assert.SequenceEqual(defaults, train(Lion(0.001f, null, 0.99f)), "LionBeta1 unset: 0.9");
            Assert.True(!train(Lion(0.001f, 0.9f, 0.999f)).SequenceEqual(defaults), "Adam's beta2 is not Lion's default");
        }

        [Test]
        public static void LionBetasOutside01AreRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                var refused = new[] { Tuple.Create(1.0f, 0.99f, "beta1"), Tuple.Create(float.NaN, 0.99f, "beta1"),
                                      Tuple.Create(-0.1f, 0.99f, "beta1"), Tuple.Create(0.9f, 1.0f, "beta2"),
                                      Tuple.Create(0.9f, float.NaN, "beta2") };
                foreach (var values in refused)
                {
                    TrainerOptions options = Lion(0.001f, values.Item1, values.Item2);
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
                    Assert.True(error.NativeMessage.Contains(values.Item3), "the message names " + values.Item3 + ": " + error.NativeMessage);
                }
                new Trainer(model, Lion(0.001f, 0.0f, 0.0f)).Dispose(); // 0 is in range
            }
        }

        const int LineRows = 100;

        // LineRows points x evenly in [-1, 1] on y = 2x + 1, every tenth target 20 above it.
        static void LineWithOutliers(out float[] xs, out float[] targets)
        {
            xs = new float[LineRows];
            targets = new float[LineRows];
            for (int row = 0; row < LineRows; row++)
            {
                xs[row] = -1.0f + 2.0f * row / (LineRows - 1);
                targets[row] = 2.0f * xs[row] + 1.0f + (row % 10 == 3 ? 20.0f : 0.0f);
            }
        }

        // One output's loss as mptrain.h defines it, in double: (y - t)^2, |y - t|, or Huber's
        // (y - t)^2 / 2 up to |y - t| = delta, then delta (|y - t| - delta / 2).
        static double RegressionTerm(Loss loss, double difference, double delta)
        {
            double size = Math.Abs(difference);
            if (loss == Loss.MeanSquaredError) return difference * difference;
            if (loss == Loss.MeanAbsoluteError) return size;
            return size <= delta ? 0.5 * difference * difference : delta * (size - 0.5 * delta);
        }

        sealed class LineFit
        {
            public float Slope, Intercept;
            public float Evaluated;  // Evaluate's loss
            public double Expected;  // the mean loss of the predictions, in double
            public override string ToString()
            {
                return "slope " + Slope + ", intercept " + Intercept + ", loss " + Evaluated + " (expected " + Expected + ")";
            }
        }

        // One input, one linear output fitted by fp32 Adam (rate 0.05, seed 5) to LineWithOutliers under
        // `loss` (and Huber's delta, when given).
        static LineFit FitLine(Loss loss, float? huberDelta = null)
        {
            float[] xs, targets;
            LineWithOutliers(out xs, out targets);
            using (Context ctx = Data.CpuContext(5))
            using (Model model = new Model(ctx, 1).AddDense(1, Activation.Linear))
            using (Dataset data = Dataset.FromTargets(ctx, xs, 1, targets, 1))
            using (var trainer = new Trainer(model, new TrainerOptions {
                Precision = Precision.Fp32, Loss = loss, HuberDelta = huberDelta, Optimizer = Optimizer.Adam, LearningRate = 0.05f }))
            {
                trainer.Fit(data, 200, 20);
                var fit = new LineFit { Evaluated = trainer.Evaluate(data).Loss };
                float[] weights, bias;
                model.GetWeights(0, out weights, out bias);
                fit.Slope = weights[0];
                fit.Intercept = bias[0];
                float[] predictions = model.Predict(xs);
                double delta = huberDelta ?? 1.0f;
                for (int row = 0; row < LineRows; row++)
                    fit.Expected += RegressionTerm(loss, (double)predictions[row] - targets[row], delta);
                fit.Expected /= LineRows;
                return fit;
            }
        }

        // The weights' bits after three fp32 SGD steps (rate 0.1, batches of 20, seed 5) of one linear
        // output on LineWithOutliers under Huber with this delta (null: the library's default).
        static int[] HuberSteps(float? delta)
        {
            float[] xs, targets;
            LineWithOutliers(out xs, out targets);
            using (Context ctx = Data.CpuContext(5)) // one seed: the same initial weights
            using (Model model = new Model(ctx, 1).AddDense(1, Activation.Linear))
            using (Dataset data = Dataset.FromTargets(ctx, xs, 1, targets, 1))
            using (var trainer = new Trainer(model, new TrainerOptions {
                Precision = Precision.Fp32, Loss = Loss.Huber, HuberDelta = delta, Optimizer = Optimizer.Sgd, LearningRate = 0.1f }))
            {
                int[] initial = Data.WeightBits(model);
                for (int step = 0; step < 3; step++) trainer.Step(data, 20 * step, 20);
                int[] trained = Data.WeightBits(model);
                Assert.True(!trained.SequenceEqual(initial), "the steps moved the weights");
                return trained;
            }
        }

        [Test]
        public static void MeanAbsoluteErrorAndHuberFitTheLineWhereMeanSquaredErrorIsPulledToTheOutliers()
        {
            LineFit squared = FitLine(Loss.MeanSquaredError);
            var robust = new Dictionary<Loss, LineFit> { { Loss.MeanAbsoluteError, FitLine(Loss.MeanAbsoluteError) },
                                                         { Loss.Huber, FitLine(Loss.Huber) } };
            // The loss each member stands for.
            Assert.Close(squared.Expected, squared.Evaluated, "MeanSquaredError's loss");
            foreach (var fit in robust) Assert.Close(fit.Value.Expected, fit.Value.Evaluated, fit.Key + "'s loss");
            // The least-squares intercept is 1 + 20 / 10 (the outliers' mean pull); the median's is 1, and
            // Huber's (delta 1) 1 + 10 / 90 (each outlier pulls with delta against 90 points on the line).
            Assert.True(squared.Intercept > 2.5f, "MeanSquaredError pulled to the outliers: " + squared);
            foreach (var fit in robust)
            {
                Assert.True(Math.Abs(fit.Value.Intercept - 1.0f) < 0.25f, fit.Key + " near the line's intercept: " + fit.Value);
                Assert.True(Math.Abs(fit.Value.Slope - 2.0f) < 0.1f, fit.Key + " near the line's slope: " + fit.Value);
                Assert.True(Math.Abs(fit.Value.Intercept - 1.0f) < Math.Abs(squared.Intercept - 1.0f),
                            fit.Key + " nearer the line than MeanSquaredError: " + fit.Value + " vs " + squared);
            }
        }

        [Test]
        public static void TheHuberDeltaChangesWhatHuberTrainsAndDefaultsTo1()
        {
            int[] delta1 = HuberSteps(1.0f);
            Assert.SequenceEqual(delta1, HuberSteps(null), "the library's default is 1");
            Assert.True(!HuberSteps(0.25f).SequenceEqual(delta1), "another delta, other weights");
            // A delta above every residual leaves Huber quadratic: pulled to the outliers as mean squared error.
            LineFit wide = FitLine(Loss.Huber, 100.0f);
            Assert.True(wide.Intercept > 2.5f, "Huber with delta 100 pulled to the outliers: " + wide);
        }

        [Test]
        public static void AHuberDeltaOf0NegativeNaNOrInfiniteIsRefused()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                foreach (float refused in new[] { 0.0f, -0.0f, -1.0f, float.NaN, float.PositiveInfinity, float.NegativeInfinity })
                {
                    var options = new TrainerOptions { Loss = Loss.Huber, HuberDelta = refused };
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
                    Assert.True(error.NativeMessage.Contains("Huber delta"), "the message names the delta: " + error.NativeMessage);
                }
                new Trainer(model, new TrainerOptions { Loss = Loss.Huber, HuberDelta = 1e-3f }).Dispose(); // finite, above 0: accepted
            }
        }

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
                using (var trainer = new Trainer(model, Adam))
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

        // The mean over rows of -sum_c t_c log p_c, each row's times weights[c], c its first largest
        // target (every weight 1 when weights is null), in double from the probabilities: class weights
        // as mptrain.h defines them. targets: rows * Classes floats.
        static double WeightedCrossEntropy(float[] probabilities, float[] targets, float[] weights)
        {
            int rows = targets.Length / Data.Classes;
            double total = 0;
            for (int row = 0; row < rows; row++)
            {
                double loss = 0;
                int firstLargest = 0;
                for (int c = 0; c < Data.Classes; c++)
                {
                    float t = targets[row * Data.Classes + c];
                    if (t != 0) loss -= t * Math.Log(probabilities[row * Data.Classes + c]);
                    if (t > targets[row * Data.Classes + firstLargest]) firstLargest = c;
                }
                total += (weights == null ? 1.0 : weights[firstLargest]) * loss;
            }
            return total / rows;
        }

        [Test]
        public static void ClassWeightsOfTwoTrainOneSgdStepAsTwiceTheLearningRateBitForBit()
        {
            float[] x; int[] y;
            Data.Blobs(30, 61, out x, out y);
            // Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
            Func<float, float[], Tuple<float, int[]>> oneStep = (learningRate, classWeights) =>
            {
                using (Context ctx = Data.CpuContext(5))
                using (Model model = Data.Mlp(ctx))
                using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                using (var trainer = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Sgd,
                                                                             LearningRate = learningRate, Momentum = 0.0f, ClassWeights = classWeights }))
                {
                    int[] start = Data.WeightBits(model);
                    float loss = trainer.Step(data, 0, 30);
                    int[] weights = Data.WeightBits(model);
                    Assert.True(!weights.SequenceEqual(start), "the step moves the weights");
                    return Tuple.Create(loss, weights);
                }
            };
            Tuple<float, int[]> unweighted = oneStep(0.05f, null), doubledRate = oneStep(2 * 0.05f, null);
            Tuple<float, int[]> weighted = oneStep(0.05f, new[] { 2.0f, 2.0f, 2.0f });
            Assert.True(weighted.Item2.SequenceEqual(doubledRate.Item2), "weights 2 step as twice the rate, bit for bit");
            Assert.True(!weighted.Item2.SequenceEqual(unweighted.Item2), "weights 2 step elsewhere than the rate alone");
            Assert.Equal(unweighted.Item1, doubledRate.Item1, "the loss is that of the weights before the step");
            Assert.Equal(2 * unweighted.Item1, weighted.Item1, "the weighted loss is twice the unweighted one");
        }

        [Test]
        public static void ClassWeightsWeightStepsLossByEachRowsClassAndLeaveEvaluatesUnweighted()
        {
            var classWeights = new[] { 0.5f, 2.0f, 1.25f };
            float[] x; int[] y;
            Data.Blobs(30, 62, out x, out y);
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var weighted = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam,
                                                                          LearningRate = 0.01f, ClassWeights = classWeights }))
            using (var plain = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Optimizer = Optimizer.Adam, LearningRate = 0.01f }))
            {
                float[] probabilities = weighted.Predict(x);
                double unweightedLoss = WeightedCrossEntropy(probabilities, Data.OneHot(y), null);
                double expected = WeightedCrossEntropy(probabilities, Data.OneHot(y), classWeights);
                Assert.True(Math.Abs(expected - unweightedLoss) > 1e-3 * unweightedLoss, "the two can be told apart");
                Evaluation evaluation = weighted.Evaluate(data);
                Assert.Close(unweightedLoss, evaluation.Loss, "evaluate's loss (unweighted)");
                Assert.Equal(plain.Evaluate(data).Loss, evaluation.Loss, "evaluate's loss against a trainer's without weights");
                Assert.Close(expected, weighted.Step(data, 0, 30), "step's loss (weighted)");
            }

            // Float targets weigh a row by its first largest target: row 0 ties classes 1 and 2 (weight 2).
            float[] targets = Data.OneHot(y);
            targets[0] = 0.0f; targets[1] = 0.5f; targets[2] = 0.5f;
            targets[3] = 0.2f; targets[4] = 0.3f; targets[5] = 0.5f;
            using (Context ctx = Data.CpuContext(9))
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromTargets(ctx, x, Data.Features, targets, Data.Classes))
            using (var categorical = new Trainer(model, new TrainerOptions { Precision = Precision.Fp32, Loss = Loss.CategoricalCrossentropy,
                                                                             Optimizer = Optimizer.Adam, LearningRate = 0.01f, ClassWeights = classWeights }))
            {
                float[] probabilities = categorical.Predict(x);
                double expected = WeightedCrossEntropy(probabilities, targets, classWeights);
                var tieToTheLast = (float[])targets.Clone();  // row 0 weighed as class 2 (1.25) instead
                tieToTheLast[2] = 0.5000001f;
                Assert.True(Math.Abs(WeightedCrossEntropy(probabilities, tieToTheLast, classWeights) - expected) > 1e-4 * expected,
                            "the tie's two readings can be told apart");
                Assert.Close(expected, categorical.Step(data, 0, 30), "step's loss on float targets");
            }
        }

        [Test]
        public static void ClassWeightsRefusedByValueCountOrLoss()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                var refusals = new[] {
                    new[] { 1.0f, -0.5f, 1.0f }, new[] { 1.0f, float.NaN, 1.0f }, new[] { float.PositiveInfinity, 1.0f, 1.0f }, new[] { 0.0f, 0.0f, 0.0f } };
                foreach (float[] refused in refusals)
                {
                    MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, new TrainerOptions { ClassWeights = refused }).Dispose());
                    Assert.True(error.NativeMessage.Contains("class weights"), "the message names them: " + error.NativeMessage);
                }
                foreach (int count in new[] { 2, 4 })
                    Assert.Fails(Status.ShapeMismatch, () => new Trainer(model, new TrainerOptions { ClassWeights = Enumerable.Repeat(1.0f, count).ToArray() }).Dispose());
                new Trainer(model, new TrainerOptions { ClassWeights = new float[0] }).Dispose(); // empty: none
                new Trainer(model, new TrainerOptions { ClassWeights = new[] { 0.0f, 1.0f, 0.0f } }).Dispose(); // some zeros are fine
                foreach (Loss loss in new[] { Loss.BinaryCrossentropy, Loss.MeanSquaredError })
                {
                    new Trainer(model, new TrainerOptions { Loss = loss }).Dispose(); // accepted without class weights
                    Assert.Fails(Status.InvalidArgument,
                                 () => new Trainer(model, new TrainerOptions { Loss = loss, ClassWeights = new[] { 1.0f, 2.0f, 3.0f } }).Dispose());
                }
            }
        }

        // The factor on the base rate at `step` as mptrain.h defines each schedule, in double.
        static double ScheduleFactor(LrSchedule schedule, long warmupSteps, long decaySteps, double factor, long step)
        {
            if (step < warmupSteps) return (double)(step + 1) / warmupSteps;
            double decayed = step - warmupSteps;
            double progress = decaySteps > 0 ? Math.Min(1.0, decayed / decaySteps) : 0.0;
            switch (schedule)
            {
                case LrSchedule.Constant: return 1.0;
                case LrSchedule.Linear: return factor + (1 - factor) * (1 - progress);
                case LrSchedule.Cosine: return factor + (1 - factor) * (1 + Math.Cos(Math.PI * progress)) / 2;
                case LrSchedule.Step: return Math.Pow(factor, Math.Floor(decayed / decaySteps));
            }
            throw new ArgumentException("schedule " + schedule);
        }

        [Test]
        public static void ALearningRateScheduleGivesEachStepTheRateOfTheHeaderFormula()
        {
            float[] x; int[] y;
            Data.Blobs(200, 43, out x, out y);
            var cases = new[]
            {
                new TrainerOptions { LrSchedule = LrSchedule.Cosine, WarmupSteps = 3, DecaySteps = 5, DecayFactor = 0.25f },
                new TrainerOptions { LrSchedule = LrSchedule.Constant, WarmupSteps = 4 },
                new TrainerOptions { LrSchedule = LrSchedule.Linear, WarmupSteps = 2, DecaySteps = 4, DecayFactor = 0.5f },
                new TrainerOptions { LrSchedule = LrSchedule.Step, WarmupSteps = 1, DecaySteps = 3, DecayFactor = 0.5f },
                new TrainerOptions { WarmupSteps = 2 },  // a warm-up alone: a constant schedule
            };
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (TrainerOptions options in cases)
                {
                    options.Optimizer = Optimizer.Adam;
                    options.LearningRate = 0.01f;
                    LrSchedule schedule = options.LrSchedule ?? LrSchedule.Constant;
                    using (Model model = Data.Mlp(ctx))
                    using (var trainer = new Trainer(model, options))
                    {
                        for (long step = 0; step < 11; step++)
                        {
                            string what = schedule + " at step " + step;
                            Assert.Equal(step, trainer.Progress.Steps, "steps before " + what);
                            // Only the constant cases have no factor, which their formula does not read.
                            double expected = 0.01 * ScheduleFactor(schedule, options.WarmupSteps, options.DecaySteps, options.DecayFactor ?? double.NaN, step);
                            double rate = trainer.ScheduledLearningRate;
                            Assert.True(Math.Abs(rate - expected) <= 1e-6 * expected, what + ": " + rate + " against " + expected);
                            trainer.Step(data, step * 20 % 200, 20);
                        }
                        Assert.Equal(0.01f, trainer.LearningRate, "the base rate, multiplied by the schedule, never changed");
                    }
                }

                var refused = new[]
                {
                    new TrainerOptions { LrSchedule = LrSchedule.Cosine, WarmupSteps = 2, DecaySteps = 0, DecayFactor = 0 },  // no decay length
                    new TrainerOptions { LrSchedule = LrSchedule.Linear, DecaySteps = 10, DecayFactor = 1.5f },  // above the base rate
                    new TrainerOptions { LrSchedule = LrSchedule.Step, DecaySteps = 3, DecayFactor = 0 },  // a step factor must be > 0
                    new TrainerOptions { DecaySteps = 5 },  // a constant schedule has no decay
                    new TrainerOptions { LrSchedule = LrSchedule.Cosine, WarmupSteps = -1, DecaySteps = 10, DecayFactor = 0 },
                    new TrainerOptions { LrSchedule = (LrSchedule)99, DecaySteps = 10, DecayFactor = 0.5f },
                };
                using (Model model = Data.Mlp(ctx))
                {
                    foreach (TrainerOptions options in refused)
                        Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
                    using (var unscheduled = new Trainer(model, new TrainerOptions { LearningRate = 0.05f }))
                        Assert.Equal(0.05f, unscheduled.ScheduledLearningRate, "no schedule asked for: none set");
                }
            }
        }

        [Test]
        public static void AScheduleWithoutADecayFactorDecaysToRate0OrByATenthPerStepAndAFactorGivenIsKept()
        {
            float[] x; int[] y;
            Data.Blobs(200, 43, out x, out y);
            var cases = new[]
            {
                // (schedule, DecayFactor set, the factor the header's formula must then follow)
                Tuple.Create(LrSchedule.Cosine, (float?)null, 0.0),  // Keras's CosineDecay, PyTorch's CosineAnnealingLR
                Tuple.Create(LrSchedule.Linear, (float?)null, 0.0),  // Hugging Face's linear schedule
                Tuple.Create(LrSchedule.Step, (float?)null, 0.1),    // PyTorch StepLR's gamma
                Tuple.Create(LrSchedule.Cosine, (float?)1.0f, 1.0),  // 1 set is the caller's
                Tuple.Create(LrSchedule.Step, (float?)1.0f, 1.0),
            };
            using (Context ctx = Data.CpuContext())
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (var c in cases)
                {
                    LrSchedule schedule = c.Item1;
                    double factor = c.Item3;
                    var options = new TrainerOptions { Optimizer = Optimizer.Adam, LearningRate = 0.01f, LrSchedule = schedule, DecaySteps = 4 };
                    if (c.Item2.HasValue) options.DecayFactor = c.Item2.Value;
                    var rates = new float[10];
                    using (Model model = Data.Mlp(ctx))
                    using (var trainer = new Trainer(model, options))
                    {
                        for (long step = 0; step < 10; step++)
                        {
                            string what = schedule + " (factor " + factor + ") at step " + step;
                            rates[step] = trainer.ScheduledLearningRate;
                            double expected = 0.01 * ScheduleFactor(schedule, 0, 4, factor, step);
                            Assert.True(Math.Abs(rates[step] - expected) <= 1e-6 * expected, what + ": " + rates[step] + " against " + expected);
                            trainer.Step(data, step * 20 % 200, 20);
                        }
                    }
                    string name = schedule + " (factor " + factor + ")";
                    if (factor == 1.0)
                        Assert.True(rates.All(r => r == 0.01f), name + ": the base rate throughout: " + string.Join(" ", rates));
                    else if (schedule == LrSchedule.Step)
                        Assert.True(Math.Abs(rates[4] - 0.001) <= 1e-9 && Math.Abs(rates[8] - 0.0001) <= 1e-10,
                                    name + ": a tenth every 4 steps: " + string.Join(" ", rates));
                    else
                        Assert.True(rates[2] > 0 && rates[2] < 0.01f && rates.Skip(4).All(r => r == 0.0f),
                                    name + ": between the base rate and 0 mid-way, exactly 0 from step 4: " + string.Join(" ", rates));
                }
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

        [Test]
        public static void CallbacksSeeEveryStepAndStopEndsTraining()
        {
            float[] x; int[] y;
            Data.Blobs(300, 5, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, Adam))
            {
                var steps = new List<string>();
                var epochs = new List<long>();
                trainer.SetCallbacks(p => steps.Add(p.Epoch + "." + p.Step + "/" + p.StepsPerEpoch), e => epochs.Add(e.Epoch));
                trainer.Fit(data, 2, 100);
                Assert.SequenceEqual(new[] { "0.1/3", "0.2/3", "0.3/3", "1.1/3", "1.2/3", "1.3/3" }, steps, "steps");
                Assert.SequenceEqual(new[] { 0L, 1L }, epochs, "epochs");
                Assert.Equal(new UnfinishedEpoch(), trainer.UnfinishedEpoch, "no unfinished epoch");
                trainer.SetCallbacks(p => p.Stop = p.Step == 2);
                Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 100));
                Assert.Equal(new UnfinishedEpoch { Steps = 2, Rows = 300, BatchSize = 100 }, trainer.UnfinishedEpoch,
                             "the cancelled epoch");
                trainer.SetCallbacks(null, e => e.Stop = true);
                Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 100));
                Assert.Equal(1L, trainer.Progress.Epochs - 2, "stopped after one more epoch");
                Assert.Equal(new UnfinishedEpoch(), trainer.UnfinishedEpoch, "that epoch finished");
                trainer.SetCallbacks(null);
                trainer.Fit(data, 1, 100);
            }
        }

        [Test]
        public static void AnExceptionInACallbackStopsFitAndIsRethrown()
        {
            float[] x; int[] y;
            Data.Blobs(90, 6, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                int calls = 0;
                trainer.SetCallbacks(p => { calls++; throw new InvalidOperationException("from the callback"); });
                var error = Assert.Throws<InvalidOperationException>(() => trainer.Fit(data, 2, 30));
                Assert.Equal("from the callback", error.Message, "message");
                Assert.Equal(1, calls, "calls");
                trainer.SetCallbacks(null, e => trainer.Fit(data, 1, 30)); // re-entry is refused
                Assert.Fails(Status.InvalidState, () => trainer.Fit(data, 1, 30));
                trainer.SetCallbacks(null);
                trainer.Fit(data, 1, 30); // still usable
            }
        }

        [Test]
        public static void OtherThreadsWaitForAFitButItsOwnCallbacksAreRefused()
        {
            float[] x; int[] y;
            Data.Blobs(300, 11, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var inCallback = new ManualResetEventSlim();
                var refusals = new Dictionary<string, string>();
                Status? evaluateFromProgress = null; // refused by the library itself (TheEpochEndCallbackMayEvaluate...)
                trainer.SetCallbacks(p =>
                {
                    if (inCallback.IsSet) return;
                    var calls = new Dictionary<string, Action>
                    {
                        { "Fit", () => trainer.Fit(data, 1, 30) },
                        { "Step", () => trainer.Step(data, 0, 30) },
                    };
                    foreach (var call in calls)
                    {
                        try { call.Value(); refusals[call.Key] = "nothing thrown"; }
                        catch (MptException error) { refusals[call.Key] = error.Message; }
                    }
                    try { trainer.Evaluate(data); evaluateFromProgress = Status.Ok; }
                    catch (MptException error) { evaluateFromProgress = error.Status; }
                    inCallback.Set();
                    Thread.Sleep(300); // the other thread's calls below arrive while this fit holds the lock
                });
                Exception failure = null;
                var fitter = new Thread(() => { try { trainer.Fit(data, 2, 30); } catch (Exception e) { failure = e; } });
                fitter.Start();
                Assert.True(inCallback.Wait(TimeSpan.FromSeconds(30)), "the fit reached its callback");
                trainer.Evaluate(data); // waits for the fit, as calls on one context are serialised
                trainer.Step(data, 0, 30);
                fitter.Join();
                Assert.True(failure == null, "the fit succeeded: " + failure);
                Assert.Equal(2L, trainer.Progress.Epochs, "epochs");
                foreach (var refusal in refusals)
                    Assert.True(refusal.Value.StartsWith("MPT_STATUS_INVALID_STATE: ") && refusal.Value.Contains(refusal.Key),
                                refusal.Key + " from the trainer's own callback: " + refusal.Value);
                Assert.Equal(2, refusals.Count, "refusals");
                Assert.Equal((Status?)Status.InvalidState, evaluateFromProgress, "Evaluate from the progress callback");
            }
        }

        [Test]
        public static void TheEpochEndCallbackMayEvaluateAValidationSetAsBetweenOneEpochFits()
        {
            float[] x, heldX; int[] y, heldY;
            Data.Blobs(160, 31, out x, out y); // 10 steps of 16
            Data.Blobs(70, 32, out heldX, out heldY);
            var duringFit = new List<Evaluation>();
            Status? fromProgress = null, foreign = null;
            // One seed: the same initial weights and shuffles.
            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, Data.Features, heldY, Data.Classes))
            using (Context other = Data.CpuContext(17))
            using (Dataset stranger = Dataset.FromF32(other, heldX, Data.Features, heldY, Data.Classes))
            using (var trainer = new Trainer(model, Adam))
            {
                trainer.SetCallbacks(
                    p =>
                    {
                        if (p.Step != 2 || fromProgress.HasValue) return;
                        try { trainer.Evaluate(validation); fromProgress = Status.Ok; }
                        catch (MptException error) { fromProgress = error.Status; }
                    },
                    e =>
                    {
                        duringFit.Add(trainer.Evaluate(validation));
                        if (foreign.HasValue) return;
                        try { trainer.Evaluate(stranger); foreign = Status.Ok; }
                        catch (MptException error) { foreign = error.Status; }
                    });
                trainer.Fit(training, 3, 16);
                Assert.Equal(30L, trainer.Progress.Steps, "steps");
                Assert.Equal(3L, trainer.Progress.Epochs, "epochs");
            }
            Assert.Equal((Status?)Status.InvalidState, fromProgress, "Evaluate from the progress callback (steps in flight)");
            Assert.Equal((Status?)Status.InvalidArgument, foreign, "Evaluate of another context's data set");
            Assert.Equal(3, duringFit.Count, "evaluations from the epoch-end callback");

            using (Context ctx = Data.CpuContext(17))
            using (Model model = Data.Mlp(ctx))
            using (Dataset training = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (Dataset validation = Dataset.FromF32(ctx, heldX, Data.Features, heldY, Data.Classes))
            using (var trainer = new Trainer(model, Adam))
            {
                for (int epoch = 0; epoch < 3; epoch++)
                {
                    trainer.Fit(training, 1, 16);
                    Evaluation between = trainer.Evaluate(validation);
                    // Bit for bit on the CPU.
                    Assert.Equal(BitConverter.SingleToInt32Bits(between.Loss), BitConverter.SingleToInt32Bits(duringFit[epoch].Loss),
                                 "loss bits after epoch " + epoch + " (" + between.Loss + " between fits, " + duringFit[epoch].Loss + " during fit)");
                    Assert.Equal(BitConverter.SingleToInt32Bits(between.Accuracy), BitConverter.SingleToInt32Bits(duringFit[epoch].Accuracy),
                                 "accuracy bits after epoch " + epoch);
                }
            }
            Assert.True(duringFit[2].Loss < duringFit[0].Loss, "the validation loss falls");
        }

        // Trainers left to the finalizer, each holding an arena in the context's memory; a method of its
        // own, so no local of the caller keeps them reachable.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void AbandonTrainers(Model model, Dataset data)
        {
            for (int i = 0; i < 10; i++) new Trainer(model).Step(data, 0, 30);
        }

        [Test]
        public static void FinalizersDoNotWaitForAFitInProgress()
        {
            float[] x; int[] y;
            Data.Blobs(300, 12, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                trainer.Fit(data, 1, 30); // plans its arena, so the context's memory below moves with the others only
                AbandonTrainers(model, data);
                ulong withAbandoned = ctx.Memory.Used;
                bool finalized = true;
                trainer.SetCallbacks(p =>
                {
                    if (p.Step != 1) return;
                    // The fit holds the context's lock here: a finalizer waiting for it would stall the
                    // finalizer thread (and deadlock a WaitForPendingFinalizers on this thread), so the
                    // wait happens on another thread, with a bound.
                    var waiter = new Thread(() => { GC.Collect(); GC.WaitForPendingFinalizers(); }) { IsBackground = true };
                    waiter.Start();
                    finalized = waiter.Join(TimeSpan.FromSeconds(10));
                });
                trainer.Fit(data, 1, 30);
                Assert.True(finalized, "finalizers ran while the fit was in a callback");
                Assert.True(ctx.Memory.Used < withAbandoned, "the abandoned trainers were destroyed once the fit let go of the lock");
            }
        }

        [Test]
        public static void DisposingTheTrainerInItsOwnCallbackCancelsFit()
        {
            float[] x; int[] y;
            Data.Blobs(90, 13, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            {
                foreach (bool atEpochEnd in new[] { false, true })
                {
                    var trainer = new Trainer(model);
                    int calls = 0;
                    if (atEpochEnd) trainer.SetCallbacks(null, e => { calls++; trainer.Dispose(); });
                    else trainer.SetCallbacks(p => { calls++; trainer.Dispose(); trainer.Dispose(); });
                    Assert.Fails(Status.Cancelled, () => trainer.Fit(data, 3, 30));
                    Assert.Equal(1, calls, "callbacks (epoch end: " + atEpochEnd + ")");
                    Assert.True(trainer.IsDisposed, "disposed");
                    Assert.Throws<ObjectDisposedException>(() => trainer.Predict(new float[Data.Features]));
                    trainer.Dispose(); // the library freed the trainer as fit returned: nothing to destroy again
                }
                using (var trainer = new Trainer(model))
                {
                    trainer.Fit(data, 1, 30);
                    Assert.Equal(1L, trainer.Progress.Epochs, "the model and data set still train");
                }
            }
        }

        [Test]
        public static void CallbacksMayUseTheModelDuringFit()
        {
            float[] x; int[] y;
            Data.Blobs(90, 7, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var biases = new List<float[]>();
                trainer.SetCallbacks(null, e => { float[] w, b; model.GetWeights(1, out w, out b); biases.Add(b); });
                trainer.Fit(data, 2, 30);
                Assert.Equal(2, biases.Count, "epochs seen");
                Assert.True(!biases[0].SequenceEqual(biases[1]), "the bias changed between epochs");
            }
        }

        [Test]
        public static void LogCallbackReceivesMessagesAndAThrowingLoggerIsContained()
        {
            float[] x; int[] y;
            Data.Blobs(60, 8, out x, out y);
            var messages = new List<string>();
            foreach (bool throwing in new[] { false, true })
            {
                var options = new ContextOptions
                {
                    Backend = Backend.Cpu, Threads = 1, LogLevel = LogLevel.Debug,
                    Log = (level, text) => { if (throwing) throw new Exception("logger"); messages.Add(level + ": " + text); },
                };
                Model model;
                Dataset data;
                using (var ctx = new Context(options))
                {
                    model = Data.Mlp(ctx);
                    data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
                } // the model keeps the C context, and so the logger, alive
                using (model)
                using (data)
                using (var trainer = new Trainer(model))
                    trainer.Fit(data, 1, 20);
            }
            Assert.True(messages.All(m => m != null), "messages are strings");
        }

        [Test]
        public static void ObjectsMayBeDisposedInAnyOrderOrLeftToTheFinalizer()
        {
            float[] x; int[] y;
            Data.Blobs(60, 9, out x, out y);
            Context ctx = Data.CpuContext();
            Model model = Data.Mlp(ctx);
            Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes);
            var trainer = new Trainer(model);
            trainer.SetCallbacks(p => { });
            ctx.Dispose();
            model.Dispose();
            trainer.Fit(data, 1, 20);
            data.Dispose();
            Assert.Equal(3, trainer.Predict(new float[Data.Features]).Length, "predict after the others are gone");
            trainer.Dispose();
            trainer.Dispose(); // idempotent
            for (int i = 0; i < 20; i++) // abandoned objects, released by finalizers in any order
            {
                var abandonedContext = Data.CpuContext();
                var abandonedTrainer = new Trainer(Data.Mlp(abandonedContext));
                abandonedTrainer.SetCallbacks(p => { });
            }
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        [Test]
        public static void ContextsTrainInParallelAndSharedObjectsAreSerialised()
        {
            var accuracies = new float[3];
            Exception failure = null;
            var threads = Enumerable.Range(0, 3).Select(i => new Thread(() =>
            {
                try
                {
                    float[] x; int[] y;
                    Data.Blobs(120, 10 + i, out x, out y);
                    using (Context ctx = Data.CpuContext((ulong)i))
                    using (Model model = Data.Mlp(ctx))
                    using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                    using (var trainer = new Trainer(model, Adam))
                    {
                        trainer.Fit(data, 3, 16);
                        accuracies[i] = trainer.Evaluate(data).Accuracy;
                    }
                }
                catch (Exception error) { failure = error; }
            })).ToList();
            threads.ForEach(t => t.Start());
            threads.ForEach(t => t.Join());
            Assert.True(failure == null, "no failure: " + failure);
            Assert.True(accuracies.All(a => a > 0.8f), "accuracies " + string.Join(", ", accuracies));

            float[] xs; int[] ys;
            Data.Blobs(120, 20, out xs, out ys);
            using (Context shared = Data.CpuContext())
            using (Model model = Data.Mlp(shared))
            using (Dataset data = Dataset.FromF32(shared, xs, Data.Features, ys, Data.Classes))
            using (var trainer = new Trainer(model))
            {
                var fitter = new Thread(() => { try { for (int i = 0; i < 3; i++) trainer.Fit(data, 1, 16); } catch (Exception e) { failure = e; } });
                var reader = new Thread(() =>
                {
                    try { for (int i = 0; i < 50; i++) { model.Predict(new float[Data.Features]); float[] w, b; model.GetWeights(0, out w, out b); } }
                    catch (Exception e) { failure = e; }
                });
                fitter.Start(); reader.Start();
                fitter.Join(); reader.Join();
                Assert.True(failure == null, "no failure: " + failure);
                Assert.Equal(3L, trainer.Progress.Epochs, "epochs");
            }
        }
    }
}
