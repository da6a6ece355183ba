// The RMSprop and Lion optimizers (they train, their options change the steps or default as Keras's, bad
// ones are refused) and learning-rate schedules, each step's rate against the header's formula.
using System;
using System.Linq;

namespace Mptrain.Tests
{
    public static class OptimizerTests
    {
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
    }
}
