// TrainerOptions: what a Trainer is created with (loss, optimizer, schedule, loss scaling and its
// LossScalerDynamics), also as read back from a trainer or a checkpoint.
using System;

namespace Mptrain
{
    public struct LossScalerDynamics
    {
        public float GrowthFactor;
        public float BackoffFactor;
        public long GrowthInterval;
        public float MinScale;
        public float MaxScale;
    }

    /// <summary>Options of a Trainer; null values keep the library's defaults. Trainer.GetOptions reads
    /// a trainer's back, every one filled in; FromCheckpoint those of the trainer that wrote a checkpoint.</summary>
    public sealed class TrainerOptions
    {
        /// <summary>The options of the trainer that wrote the training checkpoint at <paramref name="path"/>
        /// (Trainer.SaveCheckpoint), every one filled in as Trainer.GetOptions fills them, so that a run
        /// resumes from the file alone, as Keras's load_model restores the optimizer. The checkpoint holds
        /// the model too:
        /// <code>
        /// Model model = Model.Load(context, path);
        /// var trainer = new Trainer(model, TrainerOptions.FromCheckpoint(path));
        /// trainer.LoadCheckpoint(path);
        /// trainer.Fit(dataset, epochs, batchSize);
        /// </code>
        /// continues the run (bit for bit on the CPU backend, whatever the context's seed). Precision and
        /// LossScaling are the ones the trainer ran, Auto and Default resolved (e.g. Precision.MixedBf16
        /// and LossScaling.Off); LearningRate is the base rate of its next step (the rate set last, not
        /// the one it was created with); every other option is its own value. A checkpoint records no
        /// MicroBatchSize: it reads 0 (set it again for a run that used one). Options that the trainer's
        /// loss or optimizer does not read (HuberDelta without Loss.Huber, Rho without RMSprop) are not
        /// recorded and read as their defaults. MptException statuses: a model file (not a checkpoint)
        /// InvalidArgument, a missing file IoError, a truncated or damaged one CorruptData, one from
        /// another major version Unsupported; a null path throws ArgumentNullException.</summary>
        public static TrainerOptions FromCheckpoint(string path)
        {
            if (path == null) throw new ArgumentNullException("path");
            // The library reads the file alone, thread-safely: no context, so no family to enter.
            TrainerOptionsHandle raw = null;
            MptException.Check(Utf8.WithPath(path, native => Native.mpt_trainer_options_create_from_checkpoint(native, out raw)));
            using (raw) return Trainer.ReadOptions(raw);
        }

        public Precision? Precision { get; set; }
        public Loss? Loss { get; set; }
        /// <summary>Huber's delta for Loss.Huber (null: the library's 1, Keras's): the loss is (y - t)^2 / 2
        /// where |y - t| &lt;= delta, else delta (|y - t| - delta / 2), so outlying targets pull no harder
        /// than delta. 0, a negative, NaN or infinite delta throws MptException (InvalidArgument) from the
        /// Trainer constructor. Only Huber reads it; checkpoints of a Huber trainer must match it.</summary>
        public float? HuberDelta { get; set; }
        /// <summary>Label smoothing s in [0, 1) for the cross-entropy losses (null or 0: none): training
        /// aims at t (1 - s) + s / n instead of each target t, n the model's outputs (2 for binary
        /// cross-entropy), as Keras's label_smoothing and PyTorch's CrossEntropyLoss(label_smoothing=).
        /// Fit, Step and Evaluate report the smoothed loss; accuracy compares with the given labels.
        /// Another value, or a non-zero one with a regression loss, throws MptException (InvalidArgument)
        /// from the Trainer constructor. Checkpoints must match it.</summary>
        public float? LabelSmoothing { get; set; }
        /// <summary>Class weights for the categorical cross-entropy losses (null or empty: none), one per
        /// model output, as Keras's fit(class_weight=): in training (Fit, Step) each row's loss and
        /// gradient are multiplied by the weight of its class (its label, or for float targets the first
        /// largest target), still averaged over the batch's rows, so Fit's and Step's losses are the
        /// weighted ones; Evaluate reports the unweighted loss. The Trainer constructor throws
        /// MptException: InvalidArgument for a negative, NaN or infinite weight, all weights 0, or class
        /// weights with BinaryCrossentropy or a regression loss; ShapeMismatch for a count other than the
        /// model's outputs. The array is read when a Trainer is constructed. Checkpoints must match them.</summary>
        public float[] ClassWeights { get; set; }
        public Optimizer? Optimizer { get; set; }
        public float? LearningRate { get; set; }
        /// <summary>SGD momentum in [0, 1), Nesterov's when Nesterov is true. Optimizer.RmsProp takes the
        /// momentum too, not Nesterov's (the Trainer constructor then throws MptException with
        /// InvalidArgument); Adam and Optimizer.Lion ignore it.</summary>
        public float? Momentum { get; set; }
        public bool Nesterov { get; set; }
        /// <summary>Adam's beta1, beta2 and epsilon, set together when Beta1 has a value. The library keeps
        /// one pair of betas for Adam and Lion: with LionBeta1 or LionBeta2 set too, Beta1 and Beta2 must
        /// equal Lion's (as GetOptions fills them), else the Trainer constructor throws MptException
        /// (InvalidArgument).</summary>
        public float? Beta1 { get; set; }
        public float Beta2 { get; set; } = 0.999f;
        /// <summary>Adam's and RMSprop's epsilon (one value, as the library keeps one), passed on when Beta1 or
        /// Rho has a value.</summary>
        public float Epsilon { get; set; } = 1e-7f;
        /// <summary>RMSprop's rho and epsilon (Epsilon), set together when Rho has a value, for
        /// Optimizer.RmsProp, as Keras computes it: v = rho v + (1 - rho) g^2,
        /// w -= lr g / sqrt(v + epsilon). Rho in [0, 1), Epsilon finite and &gt; 0 (library defaults 0.9
        /// and 1e-7); other values throw MptException (InvalidArgument) from the Trainer constructor.
        /// Checkpoints of an RMSprop trainer must match its rho.</summary>
        public float? Rho { get; set; }
        /// <summary>Centered RMSprop (Keras's centered=True, default false): the gradients' average a is
        /// kept too and v - a^2 (held at &gt;= 0) replaces v under the root. Read by Optimizer.RmsProp
        /// only; checkpoints of an RMSprop trainer must match it.</summary>
        public bool RmsPropCentered { get; set; }
        /// <summary>Lion's beta1 and beta2 for Optimizer.Lion, as Keras computes it:
        /// w -= lr sign(beta1 m + (1 - beta1) g), then m = beta2 m + (1 - beta2) g. Set together when
        /// either has a value, the other then Keras's default (0.9 for LionBeta1, 0.99 for LionBeta2,
        /// the library's defaults when neither is set). Each in [0, 1); other values throw MptException
        /// (InvalidArgument) from the Trainer constructor. Every weight moves by the rate or not at all,
        /// so Lion wants a rate 3-10 times smaller than AdamW's. Adam and Lion share the betas: with
        /// Beta1 set too, Beta1 and Beta2 must equal Lion's (an unset one counting as its default), else
        /// the Trainer constructor throws MptException (InvalidArgument). Checkpoints of a Lion trainer
        /// must match its betas.</summary>
        public float? LionBeta1 { get; set; }
        /// <summary>Lion's beta2: see LionBeta1.</summary>
        public float? LionBeta2 { get; set; }
        /// <summary>Decoupled weight decay, Keras's for every optimizer (AdamW's default 0.004, the others' 0).</summary>
        public float? WeightDecay { get; set; }
        /// <summary>Gradient clipping by global norm (null or 0: none), as Keras's global_clipnorm and
        /// PyTorch's clip_grad_norm_(max_norm): every step, the gradients of all weights and biases
        /// together are scaled by clipnorm / max(norm, clipnorm), norm their L2 norm (with loss scaling,
        /// that of the unscaled gradients), so a step keeps its direction and its length is bounded;
        /// weight decay is not clipped. A negative, NaN or infinite bound throws MptException
        /// (InvalidArgument) from the Trainer constructor. Checkpoints must match it.</summary>
        public float? GlobalClipnorm { get; set; }
        /// <summary>An exponential moving average of the weights (null or 0: none), as Keras's use_ema
        /// with ema_momentum (PyTorch's AveragedModel with get_ema_multi_avg_fn): after every applied step
        /// each weight's and bias's average becomes momentum * average + (1 - momentum) * weight, the first
        /// applied step copying the weights and a skipped step leaving them. Trainer.SwapEmaWeights puts
        /// them in the model. A momentum outside (0, 1) other than 0 throws MptException
        /// (InvalidArgument) from the Trainer constructor. Checkpoints must match it (and then hold the
        /// averages).</summary>
        public float? EmaMomentum { get; set; }
        /// <summary>Gradient accumulation (0: none): a step over a batch of more rows runs forward and
        /// backward on micro-batches of this many rows (the last may have fewer), adds up their gradients
        /// and makes the whole batch's one update, the same step as in one pass but for rounding (its
        /// loss, clipping, loss-scale skip, schedule step and dropout masks are the whole batch's), with
        /// the step memory of a micro-batch plus the sums, 4 bytes a parameter (Trainer.Memory). After
        /// such a step it is Evaluate's and PredictDataset's default batch size. A negative size throws
        /// MptException (InvalidArgument) from the Trainer constructor. Not recorded in checkpoints.</summary>
        public long MicroBatchSize { get; set; }
        /// <summary>A learning-rate schedule the library evaluates at every step, with WarmupSteps,
        /// DecaySteps and DecayFactor (all four set together when LrSchedule or DecayFactor has a value
        /// or WarmupSteps or DecaySteps is not 0; WarmupSteps alone: Constant with a warm-up). Step s,
        /// counted from 0 over the trainer's life (Trainer.Progress.Steps), trains with the base rate times
        /// (s + 1) / WarmupSteps during the warm-up (WarmupSteps &gt;= 0; 0: none), then, d steps after
        /// it: Constant 1 (DecaySteps 0, DecayFactor 1); Linear and Cosine from 1 down to DecayFactor (in
        /// [0, 1]) over DecaySteps (&gt;= 1) in a straight line or along half a cosine period, and
        /// DecayFactor after; Step DecayFactor (in (0, 1]) to the power floor(d / DecaySteps). A null
        /// DecayFactor (the default) is 1 for Constant, 0 for Linear and Cosine (a decay to rate 0) and
        /// 0.1 for Step; a value set is passed on as it is. Other values throw MptException
        /// (InvalidArgument) from the Trainer constructor. The next step's rate is
        /// Trainer.ScheduledLearningRate.</summary>
        public LrSchedule? LrSchedule { get; set; }
        public long WarmupSteps { get; set; }
        public long DecaySteps { get; set; }
        public float? DecayFactor { get; set; }
        public LossScaling? LossScaling { get; set; }
        public float InitialScale { get; set; } = 32768.0f;
        public LossScalerDynamics? LossScalerDynamics { get; set; }
    }
}
