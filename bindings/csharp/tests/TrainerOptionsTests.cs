// Trainer.GetOptions (mpt_trainer_get_options and the mpt_trainer_options_get_* getters), Keras's
// get_config for a trainer: a TrainerOptions with every option filled in. Options set read back as set
// (as the float32 values given), with the base rate as set since; left unset, as the defaults the header
// documents and the optimizer's own (AdamW's decay, Lion's betas); a trainer created from them trains bit
// for bit as the original (weights, averaged weights, loss scale), where one of default options trains
// otherwise. TrainerOptions are compared property by property through reflection, so that an option
// added to TrainerOptions is compared too. Adam's and Lion's betas, one pair in the library, must agree: a
// read-back edited in one pair is refused (InvalidArgument) before a trainer is created, one edited in both
// reads back the new values.
//
// TrainerOptions.FromCheckpoint (mpt_trainer_options_create_from_checkpoint), the same for the trainer that
// wrote a checkpoint: a run resumed from the file alone (model, options, checkpoint) ends bit for bit as the
// run that went on; Precision and LossScaling read back resolved, MicroBatchSize 0; a model file, a missing
// and a damaged file throw MptException with their status.
using System;
using System.Collections.Generic;
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

                // The library keeps one pair of betas and one epsilon: Lion's betas, set alone, are Adam's too.
                TrainerOptions shared = read(new TrainerOptions
                {
                    Epsilon = 1e-5f, Rho = 0.7f, LionBeta1 = 0.85f, LionBeta2 = 0.97f
                });
                Assert.SequenceEqual(new float?[] { 0.85f, 0.97f, 1e-5f, 0.7f, 0.85f, 0.97f },
                                     new float?[] { shared.Beta1, shared.Beta2, shared.Epsilon, shared.Rho, shared.LionBeta1, shared.LionBeta2 },
                                     "the shared betas and epsilon");
            }
        }

        // Expects `options` refused by the Trainer constructor with InvalidArgument, naming `first` and `second`
        // as one value, before a trainer is created: `model` is still unbuilt, so its initializers can change.
        static void RefusedAsOneValue(Model model, TrainerOptions options, string first, string second)
        {
            MptException error = Assert.Fails(Status.InvalidArgument, () => new Trainer(model, options).Dispose());
            string message = error.NativeMessage;
            Assert.True(message.Contains(first) && message.Contains(second) && message.Contains("one value in the library"),
                        "'" + message + "' names " + first + " and " + second);
            model.SetLayerInitializer(0, Initializer.HeNormal); // MptException (InvalidState) once built
        }

        // The library keeps one pair of betas for Adam's Beta1 and Beta2 and Lion's LionBeta1 and LionBeta2, which
        // a read-back fills alike: editing one pair alone is refused. (Adam and RMSprop have one Epsilon property
        // here: no copies to disagree.)
        [Test]
        public static void AReadBackWithOneCopyOfTheBetasEditedIsRefusedBeforeATrainerIsCreated()
        {
            using (Context ctx = Data.CpuContext())
            using (Model original = Data.Mlp(ctx))
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(original, Given()))
            {
                TrainerOptions adamEdited = trainer.GetOptions();
                adamEdited.Beta1 = 0.5f;
                adamEdited.Beta2 = 0.6f;
                RefusedAsOneValue(model, adamEdited, "Beta1 0.5", "LionBeta1 0.8");
                TrainerOptions lionEdited = trainer.GetOptions();
                lionEdited.LionBeta2 = 0.6f;
                RefusedAsOneValue(model, lionEdited, "Beta2 0.95", "LionBeta2 0.6");
                // Set directly, Lion's unset beta counting as its default (0.9), which differs from Beta1.
                RefusedAsOneValue(model, new TrainerOptions { Beta1 = 0.5f, Beta2 = 0.99f, LionBeta2 = 0.99f },
                                  "Beta1 0.5", "LionBeta1 (unset: Lion's default) 0.9");
            }
        }

        [Test]
        public static void AReadBackWithBothCopiesOfTheBetasEditedCreatesATrainerThatReadsBackTheNewValues()
        {
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, Given()))
            {
                TrainerOptions edited = trainer.GetOptions();
                edited.Beta1 = edited.LionBeta1 = 0.5f;
                edited.LionBeta2 = edited.Beta2 = 0.6f;
                edited.Epsilon = 1e-3f;
                using (var copy = new Trainer(model, edited))
                    CheckOptions(edited, copy.GetOptions(), "the betas and epsilon edited");
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
                var rates = new List<float>();
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

        // The loss scaling a trainer of `precision` (resolved) runs: Default is dynamic for fp16, else off.
        static LossScaling ResolvedScaling(LossScaling scaling, Precision precision)
        {
            if (scaling != LossScaling.Default) return scaling;
            return precision == Precision.MixedFp16 ? LossScaling.Dynamic : LossScaling.Off;
        }

        // The options a checkpoint of `trainer` holds: its own, but for the precision and loss scaling it
        // runs and the micro-batch size, which no checkpoint records.
        static TrainerOptions AsCheckpointed(Trainer trainer)
        {
            TrainerOptions options = trainer.GetOptions();
            options.Precision = trainer.Precision;
            options.LossScaling = ResolvedScaling(options.LossScaling.Value, trainer.Precision);
            options.MicroBatchSize = 0;
            return options;
        }

        // Runs to resume, each with averages (Fitted compares them).
        static Dictionary<string, TrainerOptions> Resumed()
        {
            return new Dictionary<string, TrainerOptions>
            {
                // fp16 with the default (dynamic) scaling starting at 2^24, so that steps overflow and the scale
                // moves; a schedule, label smoothing, class weights and clipping.
                {
                    "fp16 Adam", new TrainerOptions
                    {
                        Precision = Precision.MixedFp16, Optimizer = Optimizer.Adam, LearningRate = 0.03f,
                        LossScaling = LossScaling.Default, InitialScale = 16777216.0f, LrSchedule = LrSchedule.Cosine,
                        WarmupSteps = 3, DecaySteps = 40, LabelSmoothing = 0.1f, ClassWeights = new[] { 0.5f, 2.0f, 1.25f },
                        GlobalClipnorm = 0.5f, EmaMomentum = 0.9f,
                    }
                },
                {
                    "fp32 Nesterov SGD", new TrainerOptions
                    {
                        Precision = Precision.Fp32, Optimizer = Optimizer.Sgd, Momentum = 0.8f, Nesterov = true,
                        WeightDecay = 0.01f, LrSchedule = LrSchedule.Step, WarmupSteps = 2, DecaySteps = 5, DecayFactor = 0.5f,
                        EmaMomentum = 0.5f,
                    }
                },
                {
                    "bf16 centered RMSprop", new TrainerOptions
                    {
                        Precision = Precision.MixedBf16, Optimizer = Optimizer.RmsProp, Rho = 0.8f, Epsilon = 1e-6f,
                        RmsPropCentered = true, Momentum = 0.5f, LossScaling = LossScaling.Static, InitialScale = 128.0f,
                        LossScalerDynamics = new LossScalerDynamics
                        {
                            GrowthFactor = 4.0f, BackoffFactor = 0.25f, GrowthInterval = 7, MinScale = 2.0f, MaxScale = 4096.0f
                        },
                        EmaMomentum = 0.75f,
                    }
                },
            };
        }

        [Test]
        public static void ARunResumedFromItsCheckpointAloneEndsBitForBitAsTheRunThatWentOn()
        {
            foreach (KeyValuePair<string, TrainerOptions> recipe in Resumed())
            {
                using (var dir = new TempDir())
                using (Context ctx = Data.CpuContext(5))
                using (Model model = Data.Mlp(ctx))
                using (Context other = Data.CpuContext(99)) // another seed: what the resumed run has, it has from the file
                {
                    model.SetLayerDropout(0, 0.25f);
                    string path = dir.File("run.safetensors");
                    using (var original = new Trainer(model, recipe.Value))
                    {
                        Fitted(ctx, model, original);
                        // The run's base rate, no longer its options' (nor the default 0.01): the file's must be the run's.
                        original.LearningRate *= 0.5f;
                        original.SaveCheckpoint(path);
                        using (Model loaded = Model.Load(other, path))
                        {
                            TrainerOptions options = TrainerOptions.FromCheckpoint(path);
                            CheckOptions(AsCheckpointed(original), options, recipe.Key + ": the options read");
                            using (var resumed = new Trainer(loaded, options))
                            {
                                Assert.Equal(0L, resumed.BatchSize, recipe.Key + ": the batch size before any");
                                resumed.LoadCheckpoint(path);
                                Assert.Equal(15L, original.BatchSize, recipe.Key + ": the run's batch size");
                                Assert.Equal(15L, resumed.BatchSize, recipe.Key + ": the saved run's batch size, restored");
                                Assert.SequenceEqual(Fitted(ctx, model, original), Fitted(other, loaded, resumed),
                                                     recipe.Key + ": the resumed run");
                                Assert.Equal(original.Progress, resumed.Progress, recipe.Key + ": the progress");
                            }
                        }
                    }
                }
            }
        }

        [Test]
        public static void OptionsFromACheckpointAreTheOnesTheTrainerRanAutoAndDefaultResolved()
        {
            var cases = new[]
            {
                new KeyValuePair<Precision, LossScaling>(Precision.MixedFp16, LossScaling.Default),
                new KeyValuePair<Precision, LossScaling>(Precision.MixedBf16, LossScaling.Default),
                new KeyValuePair<Precision, LossScaling>(Precision.Fp32, LossScaling.Default),
                new KeyValuePair<Precision, LossScaling>(Precision.Fp32, LossScaling.Static),
                new KeyValuePair<Precision, LossScaling>(Precision.Auto, LossScaling.Default),
                new KeyValuePair<Precision, LossScaling>(Precision.Auto, LossScaling.Off),
            };
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            {
                string path = dir.File("run.safetensors");
                foreach (KeyValuePair<Precision, LossScaling> c in cases)
                {
                    string what = c.Key + " with " + c.Value + " loss scaling";
                    using (var trainer = new Trainer(model, new TrainerOptions
                    {
                        Precision = c.Key, LossScaling = c.Value, Optimizer = Optimizer.AdamW, MicroBatchSize = 4
                    }))
                    {
                        trainer.SaveCheckpoint(path);
                        TrainerOptions options = TrainerOptions.FromCheckpoint(path);
                        Assert.Equal<Precision?>(trainer.Precision, options.Precision, what + ": the precision");
                        Assert.True(options.Precision != Precision.Auto, what + ": the precision resolved");
                        Assert.Equal<LossScaling?>(ResolvedScaling(c.Value, trainer.Precision), options.LossScaling,
                                                   what + ": the loss scaling");
                        Assert.True(options.LossScaling != LossScaling.Default, what + ": the loss scaling resolved");
                        Assert.Equal(0L, options.MicroBatchSize, what + ": the micro-batch size");
                        CheckOptions(AsCheckpointed(trainer), options, what);
                    }
                }
            }
        }

        [Test]
        public static void OptionsFromCheckpointOfAModelFileAMissingOrADamagedFileThrowWithTheirStatus()
        {
            using (var dir = new TempDir())
            using (Context ctx = Data.CpuContext())
            using (Model model = Data.Mlp(ctx))
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = Optimizer.Adam }))
            {
                string modelFile = dir.File("model.safetensors"), checkpoint = dir.File("run.safetensors");
                string damaged = dir.File("damaged.safetensors");
                model.Save(modelFile);
                trainer.SaveCheckpoint(checkpoint);
                Data.Truncate(checkpoint, damaged);
                Assert.Fails(Status.InvalidArgument, () => TrainerOptions.FromCheckpoint(modelFile));
                Assert.Fails(Status.IoError, () => TrainerOptions.FromCheckpoint(dir.File("missing.safetensors")));
                Assert.Fails(Status.CorruptData, () => TrainerOptions.FromCheckpoint(damaged));
                Assert.Fails(Status.InvalidArgument, () => TrainerOptions.FromCheckpoint("bad\0path"));
                Assert.Throws<ArgumentNullException>(() => TrainerOptions.FromCheckpoint(null));
                Assert.Equal<Optimizer?>(Optimizer.Adam, TrainerOptions.FromCheckpoint(checkpoint).Optimizer, "the file itself is fine");
            }
        }
    }
}
