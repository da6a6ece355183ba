//! [`TrainerOptions`]: a trainer's hyperparameters, kept in Rust and translated to and from the C
//! options handle (a trainer's own and a checkpoint's included).

use crate::c_arguments::{c_path, count, zeroed_floats};
use crate::enums::{Loss, LossScaling, LrSchedule, Optimizer, Precision};
use crate::error::{check, Error, Result, Status};
use crate::owned_options::OwnedOptions;
use mptrain_sys as sys;
use std::os::raw::c_int;
use std::path::Path;
use std::ptr;

// Named only in doc links.
#[cfg(doc)]
use crate::{Context, Model, Trainer};

/// Dynamic loss scaler parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScalerDynamics {
    /// Factor (> 1) applied after `growth_interval` finite steps.
    pub growth_factor: f32,
    /// Factor in (0, 1) applied on a non-finite gradient.
    pub backoff_factor: f32,
    /// Finite steps between growths (>= 1).
    pub growth_interval: i64,
    /// Lower bound (>= 1).
    pub min_scale: f32,
    /// Upper bound.
    pub max_scale: f32,
}

/// Options of a [`Trainer`]; unset values keep the library's defaults (precision Auto, sparse
/// categorical cross-entropy, SGD with learning rate 0.01, ...).
///
/// Each builder method has a getter, its name with `get_` before it (the plain names are the
/// builder's, as `std::process::Command` has `get_args` beside `args`): `None` where the value was
/// not set, but for [`TrainerOptions::get_rmsprop_centered`] and
/// [`TrainerOptions::get_micro_batch_size`], which give their defaults (false, 0).
/// [`Trainer::options`] gives a trainer's options with every value set,
/// [`TrainerOptions::from_checkpoint`] those of the trainer that wrote a checkpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainerOptions {
    precision: Option<Precision>,
    loss: Option<Loss>,
    huber_delta: Option<f32>,
    label_smoothing: Option<f32>,
    class_weights: Option<Vec<f32>>,
    optimizer: Option<Optimizer>,
    learning_rate: Option<f32>,
    momentum: Option<(f32, bool)>,
    adam: Option<(f32, f32, f32)>,
    rmsprop: Option<(f32, f32)>,
    rmsprop_centered: bool,
    lion: Option<(f32, f32)>,
    weight_decay: Option<f32>,
    global_clipnorm: Option<f32>,
    ema_momentum: Option<f32>,
    micro_batch_size: i64,
    lr_schedule: Option<(LrSchedule, i64, i64, f32)>,
    loss_scaling: Option<(LossScaling, f32)>,
    dynamics: Option<LossScalerDynamics>,
}

impl TrainerOptions {
    /// The library's defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Precision policy.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = Some(precision);
        self
    }
    /// Loss function.
    pub fn loss(mut self, loss: Loss) -> Self {
        self.loss = Some(loss);
        self
    }
    /// Huber's delta for [`Loss::Huber`] (default 1, Keras's): the mean over the outputs of
    /// `(y - t)^2 / 2` where `|y - t| <= delta`, else `delta * (|y - t| - delta / 2)`, so outlying
    /// targets pull no harder than `delta`. 0, a negative, NaN or infinite delta fails
    /// [`Trainer::new`] with [`Status::InvalidArgument`]. Only Huber reads it; checkpoints of a
    /// Huber trainer must match it.
    pub fn huber_delta(mut self, delta: f32) -> Self {
        self.huber_delta = Some(delta);
        self
    }
    /// Label smoothing `s` in [0, 1) for the cross-entropy losses (default 0: none): training aims
    /// at `t (1 - s) + s / n` instead of each target `t`, `n` the model's outputs (2 for binary
    /// cross-entropy), as Keras's `label_smoothing` and PyTorch's `CrossEntropyLoss(label_smoothing=)`.
    /// Fit, step and evaluate report the smoothed loss; accuracy compares with the given labels.
    /// Another value, or a non-zero one with a regression loss ([`Loss::MeanSquaredError`],
    /// [`Loss::MeanAbsoluteError`], [`Loss::Huber`]), fails [`Trainer::new`] with
    /// [`Status::InvalidArgument`]. Checkpoints must match it.
    pub fn label_smoothing(mut self, label_smoothing: f32) -> Self {
        self.label_smoothing = Some(label_smoothing);
        self
    }
    /// Class weights for the categorical cross-entropy losses, one per model output (default, or an
    /// empty slice: none), as Keras's `fit(class_weight=)`: in training (fit, step) each row's loss
    /// and gradient are multiplied by the weight of its class (its label, or for float targets the
    /// first largest target), still averaged over the batch's rows, so fit's and step's losses are
    /// the weighted ones; evaluate reports the unweighted loss. A negative, NaN or infinite weight,
    /// all weights 0, or class weights with [`Loss::BinaryCrossentropy`] or a regression loss
    /// ([`Loss::MeanSquaredError`], ...) fail [`Trainer::new`] with [`Status::InvalidArgument`]; a count
    /// other than the model's outputs with [`Status::ShapeMismatch`]. The weights are copied.
    /// Checkpoints must match them.
    pub fn class_weights(mut self, weights: &[f32]) -> Self {
        self.class_weights = Some(weights.to_vec());
        self
    }
    /// Optimizer.
    pub fn optimizer(mut self, optimizer: Optimizer) -> Self {
        self.optimizer = Some(optimizer);
        self
    }
    /// Learning rate (> 0).
    pub fn learning_rate(mut self, learning_rate: f32) -> Self {
        self.learning_rate = Some(learning_rate);
        self
    }
    /// SGD momentum in [0, 1), optionally Nesterov. [`Optimizer::RmsProp`] takes the momentum too,
    /// not Nesterov's ([`Trainer::new`] then fails with [`Status::InvalidArgument`]); Adam and
    /// [`Optimizer::Lion`] ignore it.
    pub fn momentum(mut self, momentum: f32, nesterov: bool) -> Self {
        self.momentum = Some((momentum, nesterov));
        self
    }
    /// Adam's beta1, beta2 and epsilon. The library keeps one pair of betas for Adam and Lion and
    /// one epsilon for Adam and RMSprop: with [`TrainerOptions::lion`] or
    /// [`TrainerOptions::rmsprop`] set too, their betas or epsilon must equal these (as
    /// [`Trainer::options`] reads them back), else [`Trainer::new`] fails with
    /// [`Status::InvalidArgument`].
    pub fn adam(mut self, beta1: f32, beta2: f32, epsilon: f32) -> Self {
        self.adam = Some((beta1, beta2, epsilon));
        self
    }
    /// RMSprop's rho and epsilon ([`Optimizer::RmsProp`]), as Keras computes it:
    /// `v = rho * v + (1 - rho) * g^2`, `w -= lr * g / sqrt(v + epsilon)`. `rho` in [0, 1),
    /// `epsilon` finite and > 0 (defaults 0.9 and 1e-7); other values fail [`Trainer::new`] with
    /// [`Status::InvalidArgument`]. Adam and RMSprop share one epsilon: with both set, the two must
    /// be equal, else [`Trainer::new`] fails with [`Status::InvalidArgument`]. Checkpoints of an
    /// RMSprop trainer must match its rho.
    pub fn rmsprop(mut self, rho: f32, epsilon: f32) -> Self {
        self.rmsprop = Some((rho, epsilon));
        self
    }
    /// Centered RMSprop (Keras's `centered=True`, default false): the gradients' average `a` is kept
    /// too and `v - a^2` (held at >= 0) replaces `v` under the root. Read by
    /// [`Optimizer::RmsProp`] only; checkpoints of an RMSprop trainer must match it.
    pub fn rmsprop_centered(mut self, centered: bool) -> Self {
        self.rmsprop_centered = centered;
        self
    }
    /// Lion's beta1 and beta2 ([`Optimizer::Lion`]), as Keras computes it:
    /// `w -= lr * sign(beta1 * m + (1 - beta1) * g)`, then `m = beta2 * m + (1 - beta2) * g`. Each in
    /// [0, 1) (defaults 0.9 and 0.99, Keras's); other values fail [`Trainer::new`] with
    /// [`Status::InvalidArgument`]. Every weight moves by the rate or not at all, so Lion wants a
    /// rate 3-10 times smaller than AdamW's. Adam and Lion share the betas: with both set, the two
    /// pairs must be equal, else [`Trainer::new`] fails with [`Status::InvalidArgument`].
    /// Checkpoints of a Lion trainer must match its betas.
    pub fn lion(mut self, beta1: f32, beta2: f32) -> Self {
        self.lion = Some((beta1, beta2));
        self
    }
    /// Decoupled weight decay, Keras's for every optimizer (AdamW's default 0.004, the others' 0).
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }
    /// Gradient clipping by global norm (default 0: none), as Keras's `global_clipnorm` and
    /// PyTorch's `clip_grad_norm_(max_norm)`: every step, the gradients of all weights and biases
    /// together are scaled by `clipnorm / max(norm, clipnorm)`, `norm` their L2 norm (with loss
    /// scaling, that of the unscaled gradients), so a step keeps its direction and its length is
    /// bounded; weight decay is not clipped. A negative, NaN or infinite bound fails
    /// [`Trainer::new`] with [`Status::InvalidArgument`]. Checkpoints must match it.
    pub fn global_clipnorm(mut self, clipnorm: f32) -> Self {
        self.global_clipnorm = Some(clipnorm);
        self
    }
    /// An exponential moving average of the weights (default 0: none), as Keras's `use_ema` with
    /// `ema_momentum` (PyTorch's `AveragedModel` with `get_ema_multi_avg_fn`): after every applied
    /// step each weight's and bias's average becomes `momentum * average + (1 - momentum) * weight`,
    /// the first applied step copying the weights and a skipped step leaving them.
    /// [`Trainer::swap_ema_weights`] puts them in the model. A momentum outside (0, 1) other than 0
    /// fails [`Trainer::new`] with [`Status::InvalidArgument`]. Checkpoints must match it (and then
    /// hold the averages).
    pub fn ema_momentum(mut self, momentum: f32) -> Self {
        self.ema_momentum = Some(momentum);
        self
    }
    /// Gradient accumulation (default 0: none): a step over a batch of more rows runs forward and
    /// backward on micro-batches of `rows` rows (the last may have fewer), adds up their gradients
    /// and makes the whole batch's one update, the same step as in one pass but for rounding (its
    /// loss, clipping, loss-scale skip, schedule step and dropout masks are the whole batch's), with
    /// the step memory of a micro-batch plus the sums, 4 bytes a parameter ([`Trainer::memory`]).
    /// After such a step it is evaluation's and `predict_dataset`'s default batch size. A negative
    /// size fails [`Trainer::new`] with [`Status::InvalidArgument`]. Not recorded in checkpoints.
    pub fn micro_batch_size(mut self, rows: i64) -> Self {
        self.micro_batch_size = rows;
        self
    }
    /// A learning-rate schedule the library evaluates at every step: step `s` (counted from 0 over
    /// the trainer's life, as [`Trainer::progress`] counts) trains with the base rate times
    /// `(s + 1) / warmup_steps` during the warm-up (`warmup_steps` >= 0; 0: none), then, `d` steps
    /// after it, times 1 ([`LrSchedule::Constant`]: `decay_steps` 0, `factor` 1), from 1 down to
    /// `factor` over `decay_steps` (>= 1) in a straight line or along half a cosine period and
    /// `factor` after ([`LrSchedule::Linear`], [`LrSchedule::Cosine`]: `factor` in [0, 1]), or
    /// `factor^floor(d / decay_steps)` ([`LrSchedule::Step`]: `factor` in (0, 1]). Other values
    /// fail [`Trainer::new`] with [`Status::InvalidArgument`]. [`Trainer::scheduled_learning_rate`]
    /// gives the next step's rate.
    pub fn lr_schedule(
        mut self,
        schedule: LrSchedule,
        warmup_steps: i64,
        decay_steps: i64,
        factor: f32,
    ) -> Self {
        self.lr_schedule = Some((schedule, warmup_steps, decay_steps, factor));
        self
    }
    /// Loss scaling mode and initial scale.
    pub fn loss_scaling(mut self, mode: LossScaling, initial_scale: f32) -> Self {
        self.loss_scaling = Some((mode, initial_scale));
        self
    }
    /// Dynamic loss scaler parameters.
    pub fn loss_scaler_dynamics(mut self, dynamics: LossScalerDynamics) -> Self {
        self.dynamics = Some(dynamics);
        self
    }

    /// What [`TrainerOptions::precision`] set.
    pub fn get_precision(&self) -> Option<Precision> {
        self.precision
    }
    /// What [`TrainerOptions::loss`] set.
    pub fn get_loss(&self) -> Option<Loss> {
        self.loss
    }
    /// What [`TrainerOptions::huber_delta`] set.
    pub fn get_huber_delta(&self) -> Option<f32> {
        self.huber_delta
    }
    /// What [`TrainerOptions::label_smoothing`] set.
    pub fn get_label_smoothing(&self) -> Option<f32> {
        self.label_smoothing
    }
    /// What [`TrainerOptions::class_weights`] set (empty: none).
    pub fn get_class_weights(&self) -> Option<&[f32]> {
        self.class_weights.as_deref()
    }
    /// What [`TrainerOptions::optimizer`] set.
    pub fn get_optimizer(&self) -> Option<Optimizer> {
        self.optimizer
    }
    /// What [`TrainerOptions::learning_rate`] set.
    pub fn get_learning_rate(&self) -> Option<f32> {
        self.learning_rate
    }
    /// What [`TrainerOptions::momentum`] set: the momentum and whether it is Nesterov's.
    pub fn get_momentum(&self) -> Option<(f32, bool)> {
        self.momentum
    }
    /// What [`TrainerOptions::adam`] set: beta1, beta2, epsilon.
    pub fn get_adam(&self) -> Option<(f32, f32, f32)> {
        self.adam
    }
    /// What [`TrainerOptions::rmsprop`] set: rho, epsilon.
    pub fn get_rmsprop(&self) -> Option<(f32, f32)> {
        self.rmsprop
    }
    /// What [`TrainerOptions::rmsprop_centered`] set (default false).
    pub fn get_rmsprop_centered(&self) -> bool {
        self.rmsprop_centered
    }
    /// What [`TrainerOptions::lion`] set: beta1, beta2.
    pub fn get_lion(&self) -> Option<(f32, f32)> {
        self.lion
    }
    /// What [`TrainerOptions::weight_decay`] set.
    pub fn get_weight_decay(&self) -> Option<f32> {
        self.weight_decay
    }
    /// What [`TrainerOptions::global_clipnorm`] set.
    pub fn get_global_clipnorm(&self) -> Option<f32> {
        self.global_clipnorm
    }
    /// What [`TrainerOptions::ema_momentum`] set.
    pub fn get_ema_momentum(&self) -> Option<f32> {
        self.ema_momentum
    }
    /// What [`TrainerOptions::micro_batch_size`] set (default 0).
    pub fn get_micro_batch_size(&self) -> i64 {
        self.micro_batch_size
    }
    /// What [`TrainerOptions::lr_schedule`] set: schedule, warm-up steps, decay steps, factor.
    pub fn get_lr_schedule(&self) -> Option<(LrSchedule, i64, i64, f32)> {
        self.lr_schedule
    }
    /// What [`TrainerOptions::loss_scaling`] set: mode, initial scale.
    pub fn get_loss_scaling(&self) -> Option<(LossScaling, f32)> {
        self.loss_scaling
    }
    /// What [`TrainerOptions::loss_scaler_dynamics`] set.
    pub fn get_loss_scaler_dynamics(&self) -> Option<LossScalerDynamics> {
        self.dynamics
    }

    /// The options of the trainer that wrote the training checkpoint at `path`
    /// ([`Trainer::save_checkpoint`], or [`Trainer::set_checkpointing`]'s), every value set, so that
    /// a run resumes from the file alone, as Keras's `load_model` restores the optimizer: the model
    /// from the file ([`Model::load`]: a checkpoint holds the model), a trainer of these options,
    /// the checkpoint loaded into it ([`Trainer::load_checkpoint`]), then `fit`, which continues as
    /// the trainer that wrote the file would have (bit for bit on the CPU backend):
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset, Model, Trainer, TrainerOptions};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let data = Dataset::from_f32(&ctx, &[0.0, 1.0, 1.0, 0.0], 2, &[0, 1], 2, true)?;
    /// let path = "run/checkpoint-120.safetensors";
    /// let model = Model::load(&ctx, path)?;
    /// let mut trainer = Trainer::new(&model, &TrainerOptions::from_checkpoint(path)?)?;
    /// trainer.load_checkpoint(path)?; // weights, optimizer state, steps, rate, shuffle
    /// trainer.fit(&data, 5, 32, true)?;
    /// # Ok(()) }
    /// ```
    ///
    /// The precision and loss scaling are the ones the trainer ran ([`Precision::Auto`] and
    /// [`LossScaling::Default`] resolved, e.g. [`Precision::MixedBf16`] and [`LossScaling::Off`]: as
    /// [`Trainer::precision`] gives); the learning rate is the base rate of the next step (as
    /// [`Trainer::learning_rate`] gives after loading); every other option is the trainer's own, set
    /// (as [`Trainer::options`] gives them). A checkpoint records no micro-batch size: it reads 0,
    /// so a run that used one sets it again
    /// (`TrainerOptions::from_checkpoint(path)?.micro_batch_size(8)`). Options the trainer's loss or
    /// optimizer does not read (Huber's delta without [`Loss::Huber`], RMSprop's rho without
    /// [`Optimizer::RmsProp`]) are not recorded and read as their defaults.
    ///
    /// A model file (not a checkpoint) fails with [`Status::InvalidArgument`], as does a path that
    /// is not UTF-8 or holds a NUL; a missing file with [`Status::IoError`]; a truncated or damaged
    /// one, or options no trainer takes, with [`Status::CorruptData`]; one from another major
    /// version with [`Status::Unsupported`]. Needs no [`Context`]; any thread may call it.
    pub fn from_checkpoint(path: impl AsRef<Path>) -> Result<TrainerOptions> {
        let path = c_path(path.as_ref())?;
        TrainerOptions::from_new_c(|out| {
            check(unsafe { sys::mpt_trainer_options_create_from_checkpoint(path.as_ptr(), out) })
        })
    }

    /// Reads the new C options `create` makes (writing them to its argument, the caller's to
    /// destroy, when it succeeds) and destroys them.
    pub(crate) fn from_new_c(
        create: impl FnOnce(*mut *mut sys::mpt_trainer_options_t) -> Result<()>,
    ) -> Result<TrainerOptions> {
        let mut raw = ptr::null_mut();
        create(&mut raw)?;
        TrainerOptions::from_c(&OwnedOptions(raw, sys::mpt_trainer_options_destroy))
    }

    /// Every value C options hold, each set, so that [`TrainerOptions::to_c`] sets them all again.
    /// Each is read through its own getter, Lion's betas and RMSprop's epsilon too although the
    /// library holds one of each with Adam's: each getter gives what its setter must set, and
    /// to_c takes the copies as they are equal.
    fn from_c(options: &OwnedOptions<sys::mpt_trainer_options_t>) -> Result<TrainerOptions> {
        // SAFETY of the calls below: `options` owns the live handle, and every out-pointer is a
        // local or a buffer of the capacity given.
        let o = options.0;
        let class_weights = {
            let mut held = 0i64;
            check(unsafe {
                sys::mpt_trainer_options_get_class_weights(o, ptr::null_mut(), 0, &mut held)
            })?;
            let mut weights = zeroed_floats(held)?;
            check(unsafe {
                sys::mpt_trainer_options_get_class_weights(o, weights.as_mut_ptr(), held, &mut held)
            })?;
            weights
        };
        let (mut momentum, mut nesterov) = (0.0, 0);
        check(unsafe { sys::mpt_trainer_options_get_momentum(o, &mut momentum, &mut nesterov) })?;
        let mut adam = (0.0, 0.0, 0.0);
        check(unsafe {
            sys::mpt_trainer_options_get_adam(o, &mut adam.0, &mut adam.1, &mut adam.2)
        })?;
        let mut lion = (0.0, 0.0);
        check(unsafe { sys::mpt_trainer_options_get_lion(o, &mut lion.0, &mut lion.1) })?;
        let mut rmsprop = (0.0, 0.0);
        check(unsafe { sys::mpt_trainer_options_get_rmsprop(o, &mut rmsprop.0, &mut rmsprop.1) })?;
        let (mut schedule, mut warmup, mut decay, mut factor) = (0, 0, 0, 0.0);
        check(unsafe {
            sys::mpt_trainer_options_get_lr_schedule(
                o,
                &mut schedule,
                &mut warmup,
                &mut decay,
                &mut factor,
            )
        })?;
        let (mut scaling, mut initial_scale) = (0, 0.0);
        check(unsafe {
            sys::mpt_trainer_options_get_loss_scaling(o, &mut scaling, &mut initial_scale)
        })?;
        let mut dynamics = LossScalerDynamics {
            growth_factor: 0.0,
            backoff_factor: 0.0,
            growth_interval: 0,
            min_scale: 0.0,
            max_scale: 0.0,
        };
        check(unsafe {
            sys::mpt_trainer_options_get_loss_scaler_dynamics(
                o,
                &mut dynamics.growth_factor,
                &mut dynamics.backoff_factor,
                &mut dynamics.growth_interval,
                &mut dynamics.min_scale,
                &mut dynamics.max_scale,
            )
        })?;
        Ok(TrainerOptions {
            precision: Some(Precision::returned(
                options.get(sys::mpt_trainer_options_get_precision)?,
            )?),
            loss: Some(Loss::returned(
                options.get(sys::mpt_trainer_options_get_loss)?,
            )?),
            huber_delta: Some(options.get(sys::mpt_trainer_options_get_huber_delta)?),
            label_smoothing: Some(options.get(sys::mpt_trainer_options_get_label_smoothing)?),
            class_weights: Some(class_weights),
            optimizer: Some(Optimizer::returned(
                options.get(sys::mpt_trainer_options_get_optimizer)?,
            )?),
            learning_rate: Some(options.get(sys::mpt_trainer_options_get_learning_rate)?),
            momentum: Some((momentum, nesterov != 0)),
            adam: Some(adam),
            rmsprop: Some(rmsprop),
            rmsprop_centered: options.get(sys::mpt_trainer_options_get_rmsprop_centered)? != 0,
            lion: Some(lion),
            weight_decay: Some(options.get(sys::mpt_trainer_options_get_weight_decay)?),
            global_clipnorm: Some(options.get(sys::mpt_trainer_options_get_global_clipnorm)?),
            ema_momentum: Some(options.get(sys::mpt_trainer_options_get_ema)?),
            micro_batch_size: options.get(sys::mpt_trainer_options_get_micro_batch_size)?,
            lr_schedule: Some((LrSchedule::returned(schedule)?, warmup, decay, factor)),
            loss_scaling: Some((LossScaling::returned(scaling)?, initial_scale)),
            dynamics: Some(dynamics),
        })
    }

    pub(crate) fn to_c(&self) -> Result<OwnedOptions<sys::mpt_trainer_options_t>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_trainer_options_create(&mut raw) })?;
        let options = OwnedOptions(raw, sys::mpt_trainer_options_destroy);
        let o = options.0;
        unsafe {
            if let Some(p) = self.precision {
                check(sys::mpt_trainer_options_set_precision(o, p.code()))?;
            }
            if let Some(l) = self.loss {
                check(sys::mpt_trainer_options_set_loss(o, l.code()))?;
            }
            if let Some(delta) = self.huber_delta {
                check(sys::mpt_trainer_options_set_huber_delta(o, delta))?;
            }
            if let Some(s) = self.label_smoothing {
                check(sys::mpt_trainer_options_set_label_smoothing(o, s))?;
            }
            if let Some(weights) = &self.class_weights {
                check(sys::mpt_trainer_options_set_class_weights(
                    o,
                    weights.as_ptr(),
                    count(weights.len()),
                ))?;
            }
            if let Some(opt) = self.optimizer {
                check(sys::mpt_trainer_options_set_optimizer(o, opt.code()))?;
            }
            if let Some(lr) = self.learning_rate {
                check(sys::mpt_trainer_options_set_learning_rate(o, lr))?;
            }
            if let Some((m, nesterov)) = self.momentum {
                check(sys::mpt_trainer_options_set_momentum(
                    o,
                    m,
                    nesterov as c_int,
                ))?;
            }
            if let Some((b1, b2, eps)) = self.adam {
                check(sys::mpt_trainer_options_set_adam(o, b1, b2, eps))?;
            }
            if let Some((rho, eps)) = self.rmsprop {
                check(sys::mpt_trainer_options_set_rmsprop(o, rho, eps))?;
            }
            check(sys::mpt_trainer_options_set_rmsprop_centered(
                o,
                c_int::from(self.rmsprop_centered),
            ))?;
            if let Some((b1, b2)) = self.lion {
                check(sys::mpt_trainer_options_set_lion(o, b1, b2))?;
            }
            if let Some(wd) = self.weight_decay {
                check(sys::mpt_trainer_options_set_weight_decay(o, wd))?;
            }
            if let Some(clipnorm) = self.global_clipnorm {
                check(sys::mpt_trainer_options_set_global_clipnorm(o, clipnorm))?;
            }
            if let Some(momentum) = self.ema_momentum {
                check(sys::mpt_trainer_options_set_ema(o, momentum))?;
            }
            check(sys::mpt_trainer_options_set_micro_batch_size(
                o,
                self.micro_batch_size,
            ))?;
            if let Some((schedule, warmup, decay, factor)) = self.lr_schedule {
                check(sys::mpt_trainer_options_set_lr_schedule(
                    o,
                    schedule.code(),
                    warmup,
                    decay,
                    factor,
                ))?;
            }
            if let Some((mode, scale)) = self.loss_scaling {
                check(sys::mpt_trainer_options_set_loss_scaling(
                    o,
                    mode.code(),
                    scale,
                ))?;
            }
            if let Some(d) = self.dynamics {
                check(sys::mpt_trainer_options_set_loss_scaler_dynamics(
                    o,
                    d.growth_factor,
                    d.backoff_factor,
                    d.growth_interval,
                    d.min_scale,
                    d.max_scale,
                ))?;
            }
        }
        // After the setters, which refuse values out of range (NaN among them) with their own message.
        if let (Some(adam), Some(lion)) = (self.adam, self.lion) {
            one_value(("adam's beta1", adam.0), ("lion's beta1", lion.0))?;
            one_value(("adam's beta2", adam.1), ("lion's beta2", lion.1))?;
        }
        if let (Some(adam), Some(rmsprop)) = (self.adam, self.rmsprop) {
            one_value(("adam's epsilon", adam.2), ("rmsprop's epsilon", rmsprop.1))?;
        }
        Ok(options)
    }
}

/// Refuses two inputs that the library keeps as one value (Adam's and Lion's betas, Adam's and
/// RMSprop's epsilon) when they differ: the one set last would silently win. Equal ones (as
/// [`Trainer::options`] reads them back) are taken.
fn one_value((name, value): (&str, f32), (other_name, other_value): (&str, f32)) -> Result<()> {
    if value == other_value {
        return Ok(());
    }
    Err(Error::new(
        Status::InvalidArgument,
        format!(
            "{name} {value} and {other_name} {other_value} are one value in the library: give them \
             once, or equal"
        ),
    ))
}
