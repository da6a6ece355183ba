// Trainer.GetOptions (mpt_trainer_get_options and the mpt_trainer_options_get_* getters), Keras's
// get_config for a trainer: a TrainerOptions with every option filled in. Options set read back as set
// (as the float32 values given), with the base rate as set since; left unset, as the defaults the header
// documents and the optimizer's own (AdamW's decay, Lion's betas); a trainer created from them trains bit
// for bit as the original (weights, averaged weights, loss scale), where one of default options trains
// otherwise. TrainerOptions are compared property by property through reflection, so that an option
// added to TrainerOptions is compared too.
using System;
using System.Globalization;
using System.Linq;

namespace Mptrain.Tests
{
    public static class TrainerOptionsTests
    {
        // The defaults mpt_trainer_options_create documents, written out here.
        static TrainerOptions Defaults()
        {
            return new TrainerOptions
            {
                Precision = Precision.Auto, Loss = Loss.SparseCategoricalCrossentropy, HuberDelta = 1.0f, LabelSmoothing = 0.0f,
                ClassWeights = null, Optimizer = Optimizer.Sgd, LearningRate = 0.01f, Momentum = 0.0f, Nesterov = false,
                Beta1 = 0.9f, Beta2 = 0.999f, Epsilon = 1e-7f, Rho = 0.9f, RmsPropCentered = false, LionBeta1 = 0.9f,
                LionBeta2 = 0.999f, WeightDecay = 0.0f, GlobalClipnorm = 0.0f, EmaMomentum = 0.0f, MicroBatchSize = 0,
                LrSchedule = LrSchedule.Constant, WarmupSteps = 0, DecaySteps = 0, DecayFactor = 1.0f,
                LossScaling = LossScaling.Default, InitialScale = 32768.0f,
                LossScalerDynamics = new LossScalerDynamics
                {
                    GrowthFactor = 2.0f, BackoffFactor = 0.5f, GrowthInterval = 2000, MinScale = 1.0f, MaxScale = 16777216.0f
                },
            };
        }

        // A value other than the default for every option. Adam's, RMSprop's and Lion's betas and epsilon
        // agree, as the library keeps one pair of betas and one epsilon.
        static TrainerOptions Given()
        {
            return new TrainerOptions
            {
                Precision = Precision.MixedBf16, Loss = Loss.CategoricalCrossentropy, HuberDelta = 2.5f, LabelSmoothing = 0.125f,
                ClassWeights = new[] { 0.5f, 2.0f, 1.25f }, Optimizer = Optimizer.Adam, LearningRate = 0.03f, Momentum = 0.75f,
                Nesterov = true, Beta1 = 0.8f, Beta2 = 0.95f, Epsilon = 1e-5f, Rho = 0.7f, RmsPropCentered = true,
                LionBeta1 = 0.8f, LionBeta2 = 0.95f, WeightDecay = 0.01f, GlobalClipnorm = 0.9f, EmaMomentum = 0.5f,
                MicroBatchSize = 5, LrSchedule = LrSchedule.Cosine, WarmupSteps = 3, DecaySteps = 40, DecayFactor = 0.25f,
                LossScaling = LossScaling.Dynamic, InitialScale = 64.0f,
                LossScalerDynamics = new LossScalerDynamics
                {
                    GrowthFactor = 4.0f, BackoffFactor = 0.25f, GrowthInterval = 3, MinScale = 2.0f, MaxScale = 1024.0f
                },
            };
        }

        // A float as its round-trip text: equal texts, equal floats.
        static string Show(float value) { return value.ToString("R", CultureInfo.InvariantCulture); }

        static string Show(object value)
        {
            if (value == null) return "null";
            if (value is float) return Show((float)value);
            var weights = value as float[];
            if (weights != null) return "[" + string.Join(", ", weights.Select(Show)) + "]";
            if (value is LossScalerDynamics)
            {
                var d = (LossScalerDynamics)value;
                return string.Join(" ", Show(d.GrowthFactor), Show(d.BackoffFactor), d.GrowthInterval, Show(d.MinScale), Show(d.MaxScale));
            }
            return value.ToString();
        }

        // Every property of the options as "Name = value", in name order.
        static string[] Describe(TrainerOptions options)
        {
            return typeof(TrainerOptions).GetProperties().OrderBy(p => p.Name, StringComparer.Ordinal)
                .Select(p => p.Name + " = " + Show(p.GetValue(options))).ToArray();
        }

        static void CheckOptions(TrainerOptions expected, TrainerOptions actual, string what)
        {
            Assert.SequenceEqual(Describe(expected), Describe(actual), what);
        }

        [Test]
        public static void AFreshTrainersOptionsAreTheDefaultsTheHeaderDocuments()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                using (var trainer = new Trainer(model))
                    CheckOptions(Defaults(), trainer.GetOptions(), "a fresh trainer's options");
                using (var trainer = new Trainer(model, Defaults()))
                    CheckOptions(Defaults(), trainer.GetOptions(), "the defaults, set");
            }
        }

        [Test]
        public static void OptionsSetReadBackAsSetAndTheLearningRateAsSetSince()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Given()))
            {
                CheckOptions(Given(), trainer.GetOptions(), "every option set");
                trainer.LearningRate = 0.125f;
                TrainerOptions options = trainer.GetOptions();
                TrainerOptions expected = Given();
                expected.LearningRate = 0.125f;
                CheckOptions(expected, options, "the learning rate set since");
                options.LearningRate = 1.0f; // a new object each call, the trainer's own untouched
                Assert.Equal(0.125f, trainer.GetOptions().LearningRate, "the learning rate");
            }
        }

        [Test]
        public static void OptionsLeftUnsetReadBackAsTheOptimizersAndSchedulesDefaults()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                Func<TrainerOptions, TrainerOptions> read = options =>
                {
                    using (var trainer = new Trainer(model, options)) return trainer.GetOptions();
                };
                Assert.Equal(0.004f, read(new TrainerOptions { Optimizer = Optimizer.AdamW }).WeightDecay, "AdamW's decay");
                Assert.Equal(0.0f, read(new TrainerOptions { Optimizer = Optimizer.AdamW, WeightDecay = 0.0f }).WeightDecay,
                             "AdamW's decay set to 0");
                TrainerOptions lion = read(new TrainerOptions { Optimizer = Optimizer.Lion });
                Assert.SequenceEqual(new float?[] { 0.9f, 0.99f, 0.9f, 0.99f },
                                     new[] { lion.LionBeta1, lion.LionBeta2, lion.Beta1, lion.Beta2 }, "Lion's betas, Adam's alike");
                Assert.Equal(0.0f, read(new TrainerOptions { LrSchedule = LrSchedule.Cosine, DecaySteps = 9 }).DecayFactor,
                             "a cosine schedule's decay factor");
                Assert.Equal(0.1f, read(new TrainerOptions { LrSchedule = LrSchedule.Step, DecaySteps = 9 }).DecayFactor,
                             "a step schedule's decay factor");

                // The library keeps one pair of betas and one epsilon: Lion's betas and RMSprop's epsilon, set last.
                TrainerOptions shared = read(new TrainerOptions
                {
                    Beta1 = 0.8f, Beta2 = 0.95f, Epsilon = 1e-5f, Rho = 0.7f, LionBeta1 = 0.85f, LionBeta2 = 0.97f
                });
                Assert.SequenceEqual(new float?[] { 0.85f, 0.97f, 1e-5f, 0.7f, 0.85f, 0.97f },
                                     new float?[] { shared.Beta1, shared.Beta2, shared.Epsilon, shared.Rho, shared.LionBeta1, shared.LionBeta2 },
                                     "the shared betas and epsilon");
            }
        }

        [Test]
        public static void OptionsReadFromFitsCallbackHoldTheRateSetThere()
        {
            float[] x; int[] y;
            Data.Blobs(100, 5, out x, out y);
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam }))
            {
                var rates = new System.Collections.Generic.List<float>();
                trainer.SetCallbacks(null, epoch =>
                {
                    trainer.LearningRate = 0.5f / (epoch.Epoch + 1);
                    rates.Add(trainer.GetOptions().LearningRate.Value);
                });
                trainer.Fit(data, 2, 50);
                Assert.SequenceEqual(new[] { 0.5f, 0.25f }, rates, "the rates read in the callback");
            }
        }

        // 3 epochs in batches of 15: 18 steps, the warm-up and part of the decay.
        static void FitBlobs(Context ctx, Trainer trainer)
        {
            float[] x; int[] y;
            Data.Blobs(90, 4, out x, out y);
            using (Dataset data = Dataset.FromF32(ctx, x, Data.Features, y, Data.Classes))
                trainer.Fit(data, 3, 15);
        }

        // What FitBlobs leaves: the weights, the loss scale and the moving averages, as bit patterns.
        static int[] Fitted(Context ctx, Model model, Trainer trainer)
        {
            FitBlobs(ctx, trainer);
            var bits = Data.WeightBits(model).Concat(new[] { Data.Bits(trainer.LossScale.Scale) }).ToList();
            Assert.True(trainer.SwapEmaWeights(), "the model holds the averages");
            bits.AddRange(Data.WeightBits(model));
            trainer.SwapEmaWeights();
            return bits.ToArray();
        }

        [Test]
        public static void ATrainerCreatedFromTheOptionsReadBackTrainsBitForBitAsTheOriginal()
        {
            foreach (Optimizer optimizer in new[] { Optimizer.AdamW, Optimizer.Lion, Optimizer.RmsProp, Optimizer.Sgd })
            {
                // Given() for labels, in fp16 so that the loss scaler's options count; RMSprop refuses Nesterov's momentum.
                TrainerOptions given = Given();
                given.Optimizer = optimizer;
                given.Loss = Loss.SparseCategoricalCrossentropy;
                given.Precision = Precision.MixedFp16;
                given.Nesterov = optimizer == Optimizer.Sgd;
                // Contexts of one seed: the same initial weights every time.
                using (Context ctx = Data.CpuContext(5))
                using (Model model = Data.Mlp(ctx))
                using (var original = new Trainer(model, given))
                using (Context again = Data.CpuContext(5))
                using (Model copy = Data.Mlp(again))
                using (Context plainContext = Data.CpuContext(5))
                using (Model plainModel = Data.Mlp(plainContext))
                using (var plain = new Trainer(plainModel))
                {
                    original.LearningRate = 0.02f; // a base rate other than the one given
                    using (var recreated = new Trainer(copy, original.GetOptions()))
                    {
                        Assert.SequenceEqual(Data.WeightBits(model), Data.WeightBits(copy), optimizer + ": the same initial weights");
                        int[] expected = Fitted(ctx, model, original);
                        Assert.SequenceEqual(expected, Fitted(again, copy, recreated), optimizer + ": the recreated trainer's run");
                        FitBlobs(plainContext, plain);
                        Assert.True(!Data.WeightBits(plainModel).SequenceEqual(Data.WeightBits(model)),
                                    optimizer + ": a trainer of default options trains otherwise");
                    }
                }
            }
        }
    }
}
