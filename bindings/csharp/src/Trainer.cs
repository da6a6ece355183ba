// Trainer: trains a Model on Datasets (Fit, Step), evaluates and predicts, checkpoints, and calls back
// into C# during Fit with StepProgress and EpochProgress.
using System;
using System.Globalization;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;

namespace Mptrain
{
    /// <summary>Passed to the progress callback after each step of Fit; set Stop to end training.</summary>
    public sealed class StepProgress
    {
        public long Epoch { get; internal set; }
        public long Step { get; internal set; }
        public long StepsPerEpoch { get; internal set; }
        public float Loss { get; internal set; }
        public float Accuracy { get; internal set; }
        /// <summary>Set to true to stop Fit (it then throws MptException with Status.Cancelled).</summary>
        public bool Stop { get; set; }
    }

    /// <summary>Passed to the epoch-end callback; set Stop to end training.</summary>
    public sealed class EpochProgress
    {
        public long Epoch { get; internal set; }
        public float Loss { get; internal set; }
        public float Accuracy { get; internal set; }
        public bool Stop { get; set; }
    }

    public sealed class Trainer : NativeObject<TrainerHandle>
    {
        // What C calls back into: reached through a GCHandle (the user data) that the TrainerHandle
        // frees after mpt_trainer_destroy, so it lives exactly as long as C may call it.
        private sealed class Callbacks
        {
            internal Action<StepProgress> Progress;
            internal Action<EpochProgress> EpochEnd;
            internal Exception Error;
        }

        private static readonly ProgressFn ProgressThunk = OnProgress;
        private static readonly EpochEndFn EpochEndThunk = OnEpochEnd;

        private readonly Callbacks callbacks;
        private readonly long inputFeatures;
        private readonly long outputFeatures;
        // ManagedThreadId of the thread inside mpt_trainer_fit (0: none), the only thread that runs this
        // trainer's callbacks. Written by that thread alone, so only it can read its own id here.
        private int fittingThread;

        public Trainer(Model model) : this(model, null) { }

        public Trainer(Model model, TrainerOptions options) : base(Create(model, options))
        {
            callbacks = new Callbacks();
            handle.CallbacksHandle = GCHandle.ToIntPtr(GCHandle.Alloc(callbacks));
            inputFeatures = model.InputFeatures;
            outputFeatures = model.OutputFeatures;
        }

        // From the trainer's own callback, the C destroy is what stops the fit (it then returns
        // MPT_STATUS_CANCELLED, and the library frees the trainer as it returns).
        internal override void Close()
        {
            if (InOwnCallback) handle.DestroyInCallback();
            handle.Dispose();
        }

        // DecayFactor when none is set: a decay to rate 0 for Linear and Cosine (Keras's CosineDecay
        // alpha, PyTorch's CosineAnnealingLR eta_min, Hugging Face's linear schedule), PyTorch
        // StepLR's gamma for Step. An unknown schedule gets 1 and the library refuses it.
        private static float DefaultDecayFactor(LrSchedule schedule)
        {
            switch (schedule)
            {
                case Mptrain.LrSchedule.Linear:
                case Mptrain.LrSchedule.Cosine: return 0.0f;
                case Mptrain.LrSchedule.Step: return 0.1f;
                default: return 1.0f;
            }
        }

        // Refuses two inputs that the library keeps as one value (Adam's and Lion's betas) when they differ:
        // the one set last would silently win. Equal ones (as GetOptions fills them) are taken.
        private static void OneValue(string name, float value, string otherName, float otherValue)
        {
            if (value != otherValue)
                throw new MptException(Status.InvalidArgument, string.Format(CultureInfo.InvariantCulture,
                    "{0} {1} and {2} {3} are one value in the library: set them once, or equal",
                    name, value.ToString("R", CultureInfo.InvariantCulture), otherName,
                    otherValue.ToString("R", CultureInfo.InvariantCulture)));
        }

        // A Lion beta's name for OneValue, saying when it is unset (Lion's default, the other one being set).
        private static string LionName(string name, float? value)
        {
            return value.HasValue ? name : name + " (unset: Lion's default)";
        }

        private static TrainerHandle Create(Model model, TrainerOptions options)
        {
            NotNull(model, "model");
            TrainerOptionsHandle raw;
            MptException.Check(Native.mpt_trainer_options_create(out raw));
            using (raw)
            {
                if (options != null)
                {
                    if (options.Precision.HasValue) MptException.Check(Native.mpt_trainer_options_set_precision(raw, options.Precision.Value));
                    if (options.Loss.HasValue) MptException.Check(Native.mpt_trainer_options_set_loss(raw, options.Loss.Value));
                    if (options.HuberDelta.HasValue) MptException.Check(Native.mpt_trainer_options_set_huber_delta(raw, options.HuberDelta.Value));
                    if (options.LabelSmoothing.HasValue) MptException.Check(Native.mpt_trainer_options_set_label_smoothing(raw, options.LabelSmoothing.Value));
                    if (options.ClassWeights != null) MptException.Check(Native.mpt_trainer_options_set_class_weights(raw, options.ClassWeights, options.ClassWeights.Length));
                    if (options.Optimizer.HasValue) MptException.Check(Native.mpt_trainer_options_set_optimizer(raw, options.Optimizer.Value));
                    if (options.LearningRate.HasValue) MptException.Check(Native.mpt_trainer_options_set_learning_rate(raw, options.LearningRate.Value));
                    if (options.Momentum.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_momentum(raw, options.Momentum.Value, options.Nesterov ? 1 : 0));
                    if (options.Beta1.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_adam(raw, options.Beta1.Value, options.Beta2, options.Epsilon));
                    if (options.Rho.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_rmsprop(raw, options.Rho.Value, options.Epsilon));
                    MptException.Check(Native.mpt_trainer_options_set_rmsprop_centered(raw, options.RmsPropCentered ? 1 : 0));
                    if (options.LionBeta1.HasValue || options.LionBeta2.HasValue)
                    {
                        float lionBeta1 = options.LionBeta1 ?? 0.9f, lionBeta2 = options.LionBeta2 ?? 0.99f;
                        MptException.Check(Native.mpt_trainer_options_set_lion(raw, lionBeta1, lionBeta2));
                        // After both setters, which refuse values out of range (NaN among them) with their own message.
                        if (options.Beta1.HasValue)
                        {
                            OneValue("Beta1", options.Beta1.Value, LionName("LionBeta1", options.LionBeta1), lionBeta1);
                            OneValue("Beta2", options.Beta2, LionName("LionBeta2", options.LionBeta2), lionBeta2);
                        }
                    }
                    if (options.WeightDecay.HasValue) MptException.Check(Native.mpt_trainer_options_set_weight_decay(raw, options.WeightDecay.Value));
                    if (options.GlobalClipnorm.HasValue) MptException.Check(Native.mpt_trainer_options_set_global_clipnorm(raw, options.GlobalClipnorm.Value));
                    if (options.EmaMomentum.HasValue) MptException.Check(Native.mpt_trainer_options_set_ema(raw, options.EmaMomentum.Value));
                    MptException.Check(Native.mpt_trainer_options_set_micro_batch_size(raw, options.MicroBatchSize));
                    if (options.LrSchedule.HasValue || options.WarmupSteps != 0 || options.DecaySteps != 0 || options.DecayFactor.HasValue)
                    {
                        LrSchedule schedule = options.LrSchedule ?? Mptrain.LrSchedule.Constant;
                        MptException.Check(Native.mpt_trainer_options_set_lr_schedule(
                            raw, schedule, options.WarmupSteps, options.DecaySteps, options.DecayFactor ?? DefaultDecayFactor(schedule)));
                    }
                    if (options.LossScaling.HasValue)
                        MptException.Check(Native.mpt_trainer_options_set_loss_scaling(raw, options.LossScaling.Value, options.InitialScale));
                    if (options.LossScalerDynamics.HasValue)
                    {
                        LossScalerDynamics d = options.LossScalerDynamics.Value;
                        MptException.Check(Native.mpt_trainer_options_set_loss_scaler_dynamics(
                            raw, d.GrowthFactor, d.BackoffFactor, d.GrowthInterval, d.MinScale, d.MaxScale));
                    }
                }
                using (model.Family.Enter())
                {
                    TrainerHandle trainer;
                    MptException.Check(Native.mpt_trainer_create(model.Live, raw, out trainer));
                    trainer.Attach(model.Family);
                    return trainer;
                }
            }
        }

        // The inverse of Create's conversion: every option filled, so that Create sets each to the value
        // held. Beta1 and Rho make it set the betas and the epsilon, LionBeta1 the betas again (the same
        // pair), LrSchedule the schedule with its DecayFactor as held. For GetOptions and
        // TrainerOptions.FromCheckpoint, which dispose of `raw`.
        internal static TrainerOptions ReadOptions(TrainerOptionsHandle raw)
        {
            MptException.Check(Native.mpt_trainer_options_get_precision(raw, out Precision precision));
            MptException.Check(Native.mpt_trainer_options_get_loss(raw, out Loss loss));
            MptException.Check(Native.mpt_trainer_options_get_huber_delta(raw, out float huberDelta));
            MptException.Check(Native.mpt_trainer_options_get_label_smoothing(raw, out float labelSmoothing));
            MptException.Check(Native.mpt_trainer_options_get_optimizer(raw, out Optimizer optimizer));
            MptException.Check(Native.mpt_trainer_options_get_learning_rate(raw, out float learningRate));
            MptException.Check(Native.mpt_trainer_options_get_momentum(raw, out float momentum, out int nesterov));
            MptException.Check(Native.mpt_trainer_options_get_adam(raw, out float beta1, out float beta2, out float epsilon));
            MptException.Check(Native.mpt_trainer_options_get_rmsprop(raw, out float rho, out float _)); // its epsilon is Adam's
            MptException.Check(Native.mpt_trainer_options_get_rmsprop_centered(raw, out int centered));
            MptException.Check(Native.mpt_trainer_options_get_lion(raw, out float lionBeta1, out float lionBeta2));
            MptException.Check(Native.mpt_trainer_options_get_weight_decay(raw, out float weightDecay));
            MptException.Check(Native.mpt_trainer_options_get_global_clipnorm(raw, out float clipnorm));
            MptException.Check(Native.mpt_trainer_options_get_ema(raw, out float emaMomentum));
            MptException.Check(Native.mpt_trainer_options_get_micro_batch_size(raw, out long microBatchSize));
            MptException.Check(Native.mpt_trainer_options_get_lr_schedule(raw, out LrSchedule schedule, out long warmupSteps,
                                                                          out long decaySteps, out float decayFactor));
            MptException.Check(Native.mpt_trainer_options_get_loss_scaling(raw, out LossScaling scaling, out float initialScale));
            var dynamics = new LossScalerDynamics();
            MptException.Check(Native.mpt_trainer_options_get_loss_scaler_dynamics(
                raw, out dynamics.GrowthFactor, out dynamics.BackoffFactor, out dynamics.GrowthInterval, out dynamics.MinScale, out dynamics.MaxScale));
            return new TrainerOptions
            {
                Precision = precision, Loss = loss, HuberDelta = huberDelta, LabelSmoothing = labelSmoothing,
                ClassWeights = ReadClassWeights(raw), Optimizer = optimizer, LearningRate = learningRate,
                Momentum = momentum, Nesterov = nesterov != 0, Beta1 = beta1, Beta2 = beta2, Epsilon = epsilon,
                Rho = rho, RmsPropCentered = centered != 0, LionBeta1 = lionBeta1, LionBeta2 = lionBeta2,
                WeightDecay = weightDecay, GlobalClipnorm = clipnorm, EmaMomentum = emaMomentum,
                MicroBatchSize = microBatchSize, LrSchedule = schedule, WarmupSteps = warmupSteps,
                DecaySteps = decaySteps, DecayFactor = decayFactor, LossScaling = scaling,
                InitialScale = initialScale, LossScalerDynamics = dynamics,
            };
        }

        // The class weights held (their count first), null when there are none, as Create takes them.
        private static float[] ReadClassWeights(TrainerOptionsHandle raw)
        {
            MptException.Check(Native.mpt_trainer_options_get_class_weights(raw, null, 0, out long count));
            if (count == 0) return null;
            float[] weights = Shape.ZeroedFloats(count);
            MptException.Check(Native.mpt_trainer_options_get_class_weights(raw, weights, count, out count));
            return weights;
        }

        private static Callbacks From(IntPtr userData)
        {
            return (Callbacks)GCHandle.FromIntPtr(userData).Target;
        }

        private static int OnProgress(long epoch, long step, long steps, float loss, float accuracy, IntPtr userData)
        {
            Callbacks self = null;
            try
            {
                self = From(userData);
                if (self.Error != null || self.Progress == null) return self.Error != null ? 1 : 0;
                var info = new StepProgress { Epoch = epoch, Step = step, StepsPerEpoch = steps, Loss = loss, Accuracy = accuracy };
                self.Progress(info);
                return info.Stop ? 1 : 0;
            }
            catch (Exception error)
            {
                if (self != null) self.Error = error; // rethrown by Fit; never unwinds into C
                return 1;
            }
        }

        private static int OnEpochEnd(long epoch, float loss, float accuracy, IntPtr userData)
        {
            Callbacks self = null;
            try
            {
                self = From(userData);
                if (self.Error != null || self.EpochEnd == null) return self.Error != null ? 1 : 0;
                var info = new EpochProgress { Epoch = epoch, Loss = loss, Accuracy = accuracy };
                self.EpochEnd(info);
                return info.Stop ? 1 : 0;
            }
            catch (Exception error)
            {
                if (self != null) self.Error = error;
                return 1;
            }
        }

        /// <summary>Callbacks of Fit (either may be null). An exception thrown by one stops training
        /// and is rethrown by Fit. They run on Fit's thread, which may call back into this trainer:
        /// Evaluate and PredictDataset run from the epoch-end callback (validation each epoch: the
        /// numbers and outputs of an Evaluate or a PredictDataset between one-epoch fits, and Fit's run
        /// goes on unchanged), on a data set of this trainer's context (one of another throws
        /// InvalidArgument); the library refuses them from the progress callback, and Fit, Step and
        /// Predict from either, with Status.InvalidState. LearningRate may be read and set from both,
        /// and SaveCheckpoint called; GradientNorm read from the progress callback is the reported
        /// step's.</summary>
        public void SetCallbacks(Action<StepProgress> progress, Action<EpochProgress> epochEnd = null)
        {
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                callbacks.Progress = progress;
                callbacks.EpochEnd = epochEnd;
                MptException.Check(Native.mpt_trainer_set_callbacks(live, progress != null ? ProgressThunk : null,
                                                                     epochEnd != null ? EpochEndThunk : null,
                                                                     live.CallbacksHandle));
            }
        }

        private bool InOwnCallback { get { return fittingThread == Environment.CurrentManagedThreadId; } }

        // The C library refuses Fit and Step from the trainer's own callbacks too, but the refusal must
        // come before LockBoth: the fit holds its families' locks, and taking another family's lock
        // from the callback could break the Id order. Evaluate and PredictDataset are the library's to
        // allow (from the epoch-end callback) or refuse, on a data set of the fit's own family, whose
        // (re-entrant) lock this thread holds; one of another family is refused here, as the library
        // would refuse it.
        // Other threads just wait for the lock.
        private DatasetHandle Use(Dataset dataset, string call, bool libraryDecides = false)
        {
            NotNull(dataset, "dataset");
            if (InOwnCallback)
            {
                if (!libraryDecides)
                    throw new MptException(Status.InvalidState, call + " cannot be called from this trainer's callbacks");
                if (!ReferenceEquals(dataset.Family, Family))
                    throw new MptException(Status.InvalidArgument, "the dataset was created on another context than the trainer");
            }
            return dataset.Live;
        }

        // Locks the trainer's and the dataset's families in Id order, so two threads cannot deadlock.
        private Family LockBoth(Dataset dataset, out Family second)
        {
            Family a = Family, b = dataset.Family;
            if (ReferenceEquals(a, b)) { second = null; return a; }
            if (a.Id < b.Id) { second = b; return a; }
            second = a;
            return b;
        }

        private T WithDataset<T>(Dataset dataset, string name, Func<DatasetHandle, T> call, bool libraryDecides = false)
        {
            DatasetHandle data = Use(dataset, name, libraryDecides);
            Family second;
            Family first = LockBoth(dataset, out second);
            using (first.Enter())
            {
                if (second == null) return call(data);
                using (second.Enter()) return call(data);
            }
        }

        /// <summary>Trains for `epochs` epochs in batches of `batchSize`.</summary>
        public void Fit(Dataset dataset, long epochs, long batchSize, bool shuffle = true)
        {
            TrainerHandle live = Live;
            Status status = WithDataset(dataset, "Fit", data =>
            {
                callbacks.Error = null;
                fittingThread = Environment.CurrentManagedThreadId;
                try
                {
                    return Native.mpt_trainer_fit(live, data, epochs, batchSize, shuffle ? 1 : 0);
                }
                finally
                {
                    fittingThread = 0;
                }
            });
            Exception error = callbacks.Error;
            callbacks.Error = null;
            if (error != null) ExceptionDispatchInfo.Capture(error).Throw();
            MptException.Check(status);
            GC.KeepAlive(this);
        }

        /// <summary>One step on rows [first, first + batchSize); returns the batch's mean loss.</summary>
        public float Step(Dataset dataset, long first, long batchSize)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "Step", data =>
            {
                float loss;
                MptException.Check(Native.mpt_trainer_step(live, data, first, batchSize, out loss));
                return loss;
            });
        }

        /// <summary>Mean loss and accuracy over the data set, in the trainer's precision (batchSize 0: the
        /// last training batch size, or 256). Also from Fit's epoch-end callback (see SetCallbacks).</summary>
        public Evaluation Evaluate(Dataset dataset, long batchSize = 0)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "Evaluate", data =>
            {
                float loss, accuracy;
                MptException.Check(Native.mpt_trainer_evaluate(live, data, batchSize, out loss, out accuracy));
                return new Evaluation { Loss = loss, Accuracy = accuracy };
            }, libraryDecides: true);
        }

        /// <summary>Outputs of the last layer for whole rows of inputs, in the trainer's precision
        /// (PredictDataset predicts the rows of a Dataset).</summary>
        public float[] Predict(float[] inputs)
        {
            long rows = Shape.Of(NotNull(inputs, "inputs").LongLength, inputFeatures, "inputs");
            float[] output = Shape.PredictionOutput(rows, inputFeatures, outputFeatures);
            using (Family.Enter()) MptException.Check(Native.mpt_trainer_predict(Live, inputs, rows, output, output.LongLength));
            return output;
        }

        /// <summary>The outputs Predict gives, for every row of the data set in order (Keras's
        /// model.predict on a data set: the CIFAR-10 test set, a slice): Rows * OutputFeatures values,
        /// row-major, in the trainer's precision, computed in batches of `batchSize` (0: the last training
        /// batch size, or 256). Only the samples are read (uint8 ones normalised as when batched): the
        /// labels, targets and row weights play no part. With Dataset.GetLabels, a confusion matrix. The
        /// batch size can change the last bits: the CPU's GEMMs block a batch by its rows, so batches of
        /// other sizes than Predict's may round sums differently (some 1e-7 of a probability in fp32).
        /// Like Evaluate it runs from Fit's epoch-end callback (the outputs of a PredictDataset between
        /// one-epoch fits; see SetCallbacks). A data set of another context throws MptException with
        /// Status.InvalidArgument (so does a negative `batchSize`), one of another feature count than
        /// the model's inputs with Status.ShapeMismatch.</summary>
        public float[] PredictDataset(Dataset dataset, long batchSize = 0)
        {
            TrainerHandle live = Live;
            return WithDataset(dataset, "PredictDataset", data =>
            {
                long rows;
                MptException.Check(Native.mpt_dataset_get_rows(data, out rows));
                // rows <= 2^40: only an absurd width overflows, which no array could hold anyway.
                if (outputFeatures > 0 && rows > long.MaxValue / outputFeatures)
                    throw new MptException(Status.OutOfMemory, "out of host memory");
                // The count the library expects: its refusals (another context, another feature count,
                // a negative batch) are then its own.
                float[] output = Shape.ZeroedFloats(rows * outputFeatures);
                MptException.Check(Native.mpt_trainer_predict_dataset(live, data, batchSize, output, output.LongLength));
                return output;
            }, libraryDecides: true);
        }

        public Precision Precision { get { return Query<Precision>(Native.mpt_trainer_get_precision); } }

        /// <summary>The base learning rate: the options' until set, or restored by LoadCheckpoint; without
        /// an LrSchedule, the rate of the next step. Setting it (finite, &gt; 0) applies from the next step
        /// on, also from Fit's callbacks: a schedule of one's own (an LrSchedule multiplies it).
        /// Checkpoints save and restore it; an automatic one at an epoch's end is written after that
        /// epoch's epoch-end callback, so it holds the rate set there.</summary>
        public float LearningRate
        {
            get { return Query<float>(Native.mpt_trainer_get_learning_rate); }
            set
            {
                using (Family.Enter()) MptException.Check(Native.mpt_trainer_set_learning_rate(Live, value));
            }
        }

        /// <summary>The options this trainer was created with, every one filled in:
        /// <c>new Trainer(model, trainer.GetOptions())</c> creates a trainer that trains as this one would
        /// (Keras's get_config), given the same model weights and context seed. A new object each call;
        /// changing it changes nothing here. The values are those the library holds: floats as kept in
        /// float32, options not set as the defaults the trainer uses (the optimizer's own: AdamW's
        /// WeightDecay 0.004, Lion's betas 0.9 and 0.99; the DecayFactor the schedule took), Precision
        /// Auto as Auto (Precision is the one it runs in), ClassWeights null when there are none.
        /// LearningRate is the base rate now: setting LearningRate or LoadCheckpoint changes it. Beta1 and
        /// Beta2 equal LionBeta1 and LionBeta2, and Epsilon is RMSprop's too: the library keeps one pair
        /// of betas and one epsilon. An edit of the betas changes both pairs: the Trainer constructor
        /// refuses differing ones (MptException, InvalidArgument). Also from Fit's callbacks.</summary>
        public TrainerOptions GetOptions()
        {
            TrainerOptionsHandle copy;
            using (Family.Enter()) MptException.Check(Native.mpt_trainer_get_options(Live, out copy));
            using (copy) return ReadOptions(copy);
        }

        /// <summary>The rate the next step trains with: LearningRate times the LrSchedule's factor at the
        /// step count (Progress.Steps; on a GPU, reading it waits for the steps issued).</summary>
        public float ScheduledLearningRate { get { return Query<float>(Native.mpt_trainer_get_scheduled_learning_rate); } }

        public LossScaleState LossScale
        {
            get
            {
                using (Family.Enter())
                {
                    var state = new LossScaleState();
                    MptException.Check(Native.mpt_trainer_get_loss_scale(Live, out state.Scale, out state.GrowthTracker, out state.SkippedSteps));
                    return state;
                }
            }
        }

        /// <summary>The global L2 norm of the last step's gradients (all weights and biases, the loss scale
        /// divided out) before clipping: what TrainerOptions.GlobalClipnorm compared with its bound
        /// (PyTorch's clip_grad_norm_ returns the same number). From a progress callback, the reported
        /// step's. Only a clipping trainer computes it: NaN (not an exception) without clipping, before
        /// the first step, after LoadCheckpoint, and for a skipped step (its gradients not finite).</summary>
        public float GradientNorm { get { return Query<float>(Native.mpt_trainer_get_gradient_norm); } }

        /// <summary>Exchanges the model's weights with this trainer's moving averages
        /// (TrainerOptions.EmaMomentum; a trainer without them throws MptException with
        /// Status.InvalidState) and returns true when the model now holds the averages, false when its own
        /// weights are back (bit for bit). Meanwhile Evaluate, Predict, PredictDataset and the Model's
        /// calls (GetWeights, Predict, Save) see the averages, and Fit and Step (of any trainer of the
        /// model), SaveCheckpoint and LoadCheckpoint throw MptException with Status.InvalidState. Before
        /// the first applied step the averages are the weights. Allowed from Fit's epoch-end callback
        /// (exchange them back before it returns, or Fit's next epoch is refused), not from its progress
        /// callback. A trainer disposed while the model holds its averages leaves them there (Keras's way
        /// of finishing).</summary>
        public bool SwapEmaWeights()
        {
            using (Family.Enter())
            {
                int holdsAverages;
                MptException.Check(Native.mpt_trainer_swap_ema_weights(Live, out holdsAverages));
                return holdsAverages != 0;
            }
        }

        public TrainingProgress Progress
        {
            get
            {
                using (Family.Enter())
                {
                    var progress = new TrainingProgress();
                    MptException.Check(Native.mpt_trainer_get_progress(Live, out progress.Steps, out progress.Epochs));
                    return progress;
                }
            }
        }

        /// <summary>The rows of the last training step (Fit's batch size, or the data set's rows when fewer;
        /// Step's rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can fit on
        /// in the saved run's batches (mpt_trainer_get_batch_size: the exception of an unfinished epoch).</summary>
        public long BatchSize { get { return Query<long>(Native.mpt_trainer_get_batch_size); } }

        /// <summary>The epoch Fit left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint
        /// that LoadCheckpoint restored), which the next Fit finishes on the same data in that batch size and
        /// abandons otherwise; all 0 when there is none (mpt_trainer_get_unfinished_epoch).</summary>
        public UnfinishedEpoch UnfinishedEpoch
        {
            get
            {
                using (Family.Enter())
                {
                    var epoch = new UnfinishedEpoch();
                    MptException.Check(Native.mpt_trainer_get_unfinished_epoch(Live, out epoch.Steps, out epoch.Rows, out epoch.BatchSize));
                    return epoch;
                }
            }
        }

        /// <summary>Writes a training checkpoint, atomically: fp32 master weights, optimizer and loss-scaler
        /// state, the learning rate, step and epoch counters, the position inside the epoch and the shuffle state. Loading it
        /// into a trainer of the same architecture and options and calling Fit continues the run
        /// bit-exactly on the CPU backend.</summary>
        public void SaveCheckpoint(string path)
        {
            NotNull(path, "path");
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_save_checkpoint(live, native)));
            }
        }

        /// <summary>Restores a checkpoint, its learning rate included; the whole file is validated first,
        /// so a failure changes nothing. MptException statuses: another architecture ShapeMismatch, other
        /// trainer options (all but the learning rate) InvalidArgument, a missing file IoError, a damaged one CorruptData, another major version
        /// Unsupported.</summary>
        public void LoadCheckpoint(string path)
        {
            NotNull(path, "path");
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_load_checkpoint(live, native)));
            }
        }

        /// <summary>Checkpoints automatically during Fit into `directory` (which must exist) as
        /// checkpoint-&lt;step&gt;.safetensors, every `everySteps` optimizer steps and/or every
        /// `everyEpochs`-th epoch (0 = not on that trigger; null: every epoch unless `everySteps` is
        /// given), keeping the newest `keepLast` (&gt;= 1). A null directory turns checkpointing off. A
        /// failed write stops Fit with Status.IoError.</summary>
        public void SetCheckpointing(string directory, long everySteps = 0, long? everyEpochs = null, long keepLast = 1)
        {
            using (Family.Enter())
            {
                TrainerHandle live = Live;
                long epochs = everyEpochs ?? (everySteps == 0 ? 1 : 0);
                MptException.Check(Utf8.WithPath(directory, native =>
                    Native.mpt_trainer_set_checkpointing(live, native, everySteps, epochs, keepLast)));
            }
        }

        public TrainerMemory Memory
        {
            get
            {
                using (Family.Enter())
                {
                    UIntPtr planned, allocated;
                    MptException.Check(Native.mpt_trainer_get_memory(Live, out planned, out allocated));
                    return new TrainerMemory { Planned = planned.ToUInt64(), Allocated = allocated.ToUInt64() };
                }
            }
        }

        public EpochTime LastEpochTime
        {
            get
            {
                using (Family.Enter())
                {
                    double seconds;
                    long steps;
                    MptException.Check(Native.mpt_trainer_get_last_epoch_time(Live, out seconds, out steps));
                    return new EpochTime { Seconds = seconds, Steps = steps };
                }
            }
        }
    }
}
