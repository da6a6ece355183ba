//! [`Trainer`]: trains a model (fit, step) and evaluates and predicts with it; its state (learning
//! rate, loss scale, progress) and checkpoints.

use crate::c_arguments::{c_path, count, prediction_output, rows_of, zeroed_floats};
use crate::dataset::Dataset;
use crate::enums::Precision;
use crate::error::{check, Error, Result, Status};
use crate::family::{Family, RawHandle};
use crate::fit_callbacks::{epoch_end_trampoline, progress_trampoline, Callbacks, FitControl};
use crate::model::Model;
use crate::trainer_options::TrainerOptions;
use crate::trainer_reports::{
    EpochEnd, EpochTime, Evaluation, LossScaleState, Progress, TrainerMemory, TrainingProgress,
    UnfinishedEpoch,
};
use mptrain_sys as sys;
use std::ffi::c_void;
use std::ops::ControlFlow;
use std::os::raw::c_int;
use std::panic;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Predictions over every row of `dataset` (`mpt_trainer_predict_dataset`), for [`Trainer`] and
/// [`FitControl`] alike; the caller holds the locks of both families. The outputs are `rows *
/// output_features` floats, the count the library expects: its refusals (another context, another
/// feature count, a negative batch) are then the library's own.
pub(crate) fn predict_dataset(
    trainer: NonNull<sys::mpt_trainer_t>,
    output_features: i64,
    dataset: &Dataset,
    batch_size: i64,
) -> Result<Vec<f32>> {
    let mut rows = 0i64;
    check(unsafe { sys::mpt_dataset_get_rows(dataset.raw.as_ptr(), &mut rows) })?;
    // rows <= 2^40: the product overflows only for absurd widths, which no buffer could hold anyway.
    let len = rows
        .checked_mul(output_features)
        .ok_or_else(|| Error::new(Status::OutOfMemory, "out of host memory"))?;
    let mut out = zeroed_floats(len)?;
    check(unsafe {
        sys::mpt_trainer_predict_dataset(
            trainer.as_ptr(),
            dataset.raw.as_ptr(),
            batch_size,
            out.as_mut_ptr(),
            count(out.len()),
        )
    })?;
    Ok(out)
}

/// Trains a model: fit, step, evaluate, predict.
pub struct Trainer {
    pub(crate) raw: NonNull<sys::mpt_trainer_t>,
    family: Arc<Family>,
    callbacks: NonNull<Callbacks>,
    input_features: i64,
    output_features: i64,
}

// SAFETY: as for Context; the callbacks are Send.
unsafe impl Send for Trainer {}

impl Trainer {
    /// A trainer for `model` (this builds the model: no more layers can be added).
    pub fn new(model: &Model, options: &TrainerOptions) -> Result<Trainer> {
        let options = options.to_c()?;
        let input_features = model.input_features()?;
        let _lock = model.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_trainer_create(model.raw.as_ptr(), options.0, &mut raw) })?;
        let raw = NonNull::new(raw).expect("mpt_trainer_create returned NULL");
        let callbacks = NonNull::from(Box::leak(Box::new(Callbacks {
            trainer: raw,
            output_features: 0,
            family: NonNull::from(&*model.family),
            progress: None,
            epoch_end: None,
            panic: None,
        })));
        let mut trainer = Trainer {
            raw,
            family: model.family.clone(),
            callbacks,
            input_features,
            output_features: 0,
        };
        trainer.output_features = model.output_features()?;
        unsafe { trainer.callbacks.as_mut() }.output_features = trainer.output_features;
        Ok(trainer)
    }

    /// A trainer with the default options.
    pub fn with_defaults(model: &Model) -> Result<Trainer> {
        Self::new(model, &TrainerOptions::default())
    }

    fn register_callbacks(&mut self) -> Result<()> {
        let callbacks = unsafe { self.callbacks.as_ref() };
        let progress: sys::mpt_progress_fn = callbacks
            .progress
            .as_ref()
            .map(|_| progress_trampoline as _);
        let epoch_end: sys::mpt_epoch_end_fn = callbacks
            .epoch_end
            .as_ref()
            .map(|_| epoch_end_trampoline as _);
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_trainer_set_callbacks(
                self.raw.as_ptr(),
                progress,
                epoch_end,
                self.callbacks.as_ptr() as *mut c_void,
            )
        })
    }

    /// Called after every step of `fit` with running means; return `ControlFlow::Break(())` to stop
    /// (fit then fails with [`Status::Cancelled`]). A panic stops training and resumes from `fit`.
    pub fn on_progress(
        &mut self,
        mut callback: impl FnMut(&Progress) -> ControlFlow<()> + Send + 'static,
    ) -> Result<()> {
        self.on_progress_with(move |progress, _| callback(progress))
    }

    /// As [`Trainer::on_progress`], with the running trainer to change between two steps (a
    /// per-step learning-rate warm-up, say) or to read (the step's [`FitControl::gradient_norm`]).
    pub fn on_progress_with(
        &mut self,
        callback: impl FnMut(&Progress, &mut FitControl<'_>) -> ControlFlow<()> + Send + 'static,
    ) -> Result<()> {
        unsafe { self.callbacks.as_mut() }.progress = Some(Box::new(callback));
        self.register_callbacks()
    }

    /// Called after every epoch of `fit`; `Break` stops training as for [`Trainer::on_progress`].
    pub fn on_epoch_end(
        &mut self,
        mut callback: impl FnMut(&EpochEnd) -> ControlFlow<()> + Send + 'static,
    ) -> Result<()> {
        self.on_epoch_end_with(move |end, _| callback(end))
    }

    /// As [`Trainer::on_epoch_end`], with the running trainer to change before the next epoch (a
    /// learning-rate schedule, say) or to validate ([`FitControl::evaluate`] and
    /// [`FitControl::predict_dataset`], which run only here).
    pub fn on_epoch_end_with(
        &mut self,
        callback: impl FnMut(&EpochEnd, &mut FitControl<'_>) -> ControlFlow<()> + Send + 'static,
    ) -> Result<()> {
        unsafe { self.callbacks.as_mut() }.epoch_end = Some(Box::new(callback));
        self.register_callbacks()
    }

    /// Removes both callbacks.
    pub fn clear_callbacks(&mut self) -> Result<()> {
        let callbacks = unsafe { self.callbacks.as_mut() };
        callbacks.progress = None;
        callbacks.epoch_end = None;
        self.register_callbacks()
    }

    /// Trains for `epochs` epochs in batches of `batch_size`, reshuffling each epoch if `shuffle`.
    pub fn fit(
        &mut self,
        dataset: &Dataset,
        epochs: i64,
        batch_size: i64,
        shuffle: bool,
    ) -> Result<()> {
        let status = {
            let _locks = self.family.enter_with(&dataset.family)?;
            unsafe {
                sys::mpt_trainer_fit(
                    self.raw.as_ptr(),
                    dataset.raw.as_ptr(),
                    epochs,
                    batch_size,
                    shuffle as c_int,
                )
            }
        };
        let result = check(status);
        if let Some(payload) = unsafe { self.callbacks.as_mut() }.panic.take() {
            panic::resume_unwind(payload);
        }
        result
    }

    /// One step on rows `[first, first + batch_size)`; returns the batch's mean loss.
    pub fn step(&mut self, dataset: &Dataset, first: i64, batch_size: i64) -> Result<f32> {
        let _locks = self.family.enter_with(&dataset.family)?;
        let mut loss = 0.0f32;
        check(unsafe {
            sys::mpt_trainer_step(
                self.raw.as_ptr(),
                dataset.raw.as_ptr(),
                first,
                batch_size,
                &mut loss,
            )
        })?;
        Ok(loss)
    }

    /// Mean loss and accuracy over `dataset` (batch_size 0: the last training batch size, or 256).
    pub fn evaluate(&mut self, dataset: &Dataset, batch_size: i64) -> Result<Evaluation> {
        let _locks = self.family.enter_with(&dataset.family)?;
        let (mut loss, mut accuracy) = (0.0f32, 0.0f32);
        check(unsafe {
            sys::mpt_trainer_evaluate(
                self.raw.as_ptr(),
                dataset.raw.as_ptr(),
                batch_size,
                &mut loss,
                &mut accuracy,
            )
        })?;
        Ok(Evaluation { loss, accuracy })
    }

    /// Outputs of the last layer for whole rows of input features, in the trainer's precision.
    /// [`Trainer::predict_dataset`] predicts the rows of a [`Dataset`].
    pub fn predict(&mut self, inputs: &[f32]) -> Result<Vec<f32>> {
        let rows = rows_of(inputs.len(), self.input_features, "inputs")?;
        let mut out = prediction_output(rows, self.input_features, self.output_features)?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_trainer_predict(
                self.raw.as_ptr(),
                inputs.as_ptr(),
                rows,
                out.as_mut_ptr(),
                count(out.len()),
            )
        })?;
        Ok(out)
    }

    /// The outputs [`Trainer::predict`] gives, for every row of `dataset` in order (Keras's
    /// `model.predict` on a dataset: the CIFAR-10 test set, a slice): `rows * output_features` values,
    /// row-major, in the trainer's precision, computed in batches of `batch_size` (0: the last training
    /// batch size, or 256). Only the samples are read (uint8 ones normalised as when batched): the
    /// labels, targets and row weights play no part. With [`Dataset::labels`], a confusion matrix.
    ///
    /// The batch size can change the last bits: the CPU's GEMMs block a batch by its rows, so batches
    /// of other sizes than [`Trainer::predict`]'s may round sums differently (some 1e-7 of a
    /// probability in fp32). From fit's epoch-end closure use [`FitControl::predict_dataset`].
    ///
    /// A dataset of another context fails with [`Status::InvalidArgument`] (so does a negative
    /// `batch_size`), one of another feature count than the model's inputs with
    /// [`Status::ShapeMismatch`].
    pub fn predict_dataset(&mut self, dataset: &Dataset, batch_size: i64) -> Result<Vec<f32>> {
        let _locks = self.family.enter_with(&dataset.family)?;
        predict_dataset(self.raw, self.output_features, dataset, batch_size)
    }

    /// The precision this trainer runs in (Auto resolved).
    pub fn precision(&self) -> Result<Precision> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { sys::mpt_trainer_get_precision(self.raw.as_ptr(), &mut out) })?;
        Precision::returned(out)
    }

    /// The base learning rate: the options' until set, or restored by
    /// [`Trainer::load_checkpoint`]. Without a [`TrainerOptions::lr_schedule`] it is the rate of
    /// the next step.
    pub fn learning_rate(&self) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0f32;
        check(unsafe { sys::mpt_trainer_get_learning_rate(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Sets the base learning rate (finite, > 0) from the next step on; from `fit`'s callbacks
    /// through [`FitControl`]. Checkpoints save and restore it; an automatic one at an epoch's end is
    /// written after that epoch's epoch-end callback, so it holds the rate set there.
    pub fn set_learning_rate(&mut self, learning_rate: f32) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_trainer_set_learning_rate(self.raw.as_ptr(), learning_rate) })
    }

    /// The options this trainer was created with, every value set (read them with the
    /// [`TrainerOptions`] getters), to report the hyperparameters it trains with or to create
    /// another trainer like it: `Trainer::new(&model, &trainer.options()?)` trains as this trainer
    /// would from the same weights. A default is read back as its value, the optimizer's own
    /// included (AdamW's weight decay 0.004, Lion's beta2 0.99); the learning rate is the base rate
    /// now ([`Trainer::set_learning_rate`] and [`Trainer::load_checkpoint`] change it); the
    /// precision is as given ([`Precision::Auto`] stays Auto: [`Trainer::precision`] gives the
    /// one it runs in). The library keeps one pair of betas for Adam and Lion and one epsilon for
    /// Adam and RMSprop, so [`TrainerOptions::get_adam`], [`TrainerOptions::get_lion`] and
    /// [`TrainerOptions::get_rmsprop`] give the same ones, and an edit sets each copy:
    /// [`Trainer::new`] refuses differing ones with [`Status::InvalidArgument`] (e.g.
    /// `options.adam(0.5, 0.6, 1e-3).lion(0.5, 0.6)`, and `.rmsprop(rho, 1e-3)` with the rho of
    /// [`TrainerOptions::get_rmsprop`]).
    ///
    /// ```no_run
    /// # use mptrain::{Context, Model, Optimizer, Trainer, TrainerOptions};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let model = Model::new(&ctx, 4)?;
    /// let trainer = Trainer::new(&model, &TrainerOptions::new().optimizer(Optimizer::AdamW))?;
    /// let options = trainer.options()?;
    /// println!("weight decay {:?}", options.get_weight_decay()); // Some(0.004), AdamW's
    /// # Ok(()) }
    /// ```
    ///
    /// As every value is set, changing the optimizer of the options read back keeps their weight
    /// decay and betas (unset, they would follow the new optimizer's defaults).
    pub fn options(&self) -> Result<TrainerOptions> {
        // The copy is the caller's: no lock needed to read it.
        TrainerOptions::from_new_c(|out| {
            let _lock = self.family.enter()?;
            check(unsafe { sys::mpt_trainer_get_options(self.raw.as_ptr(), out) })
        })
    }

    /// The rate the next step trains with: the base rate ([`Trainer::learning_rate`]) times the
    /// [`TrainerOptions::lr_schedule`] factor at the step count (on a GPU this waits for the steps
    /// issued).
    pub fn scheduled_learning_rate(&self) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0f32;
        check(unsafe {
            sys::mpt_trainer_get_scheduled_learning_rate(self.raw.as_ptr(), &mut out)
        })?;
        Ok(out)
    }

    /// The loss scaler's state.
    pub fn loss_scale(&self) -> Result<LossScaleState> {
        let _lock = self.family.enter()?;
        let mut state = LossScaleState {
            scale: 0.0,
            growth_tracker: 0,
            skipped_steps: 0,
        };
        check(unsafe {
            sys::mpt_trainer_get_loss_scale(
                self.raw.as_ptr(),
                &mut state.scale,
                &mut state.growth_tracker,
                &mut state.skipped_steps,
            )
        })?;
        Ok(state)
    }

    /// The global L2 norm of the last step's gradients (all weights and biases, the loss scale
    /// divided out) before clipping: what [`TrainerOptions::global_clipnorm`] compared with its bound
    /// (PyTorch's `clip_grad_norm_` returns the same number). From `fit`'s progress closure, through
    /// [`FitControl::gradient_norm`], the reported step's. Only a clipping trainer computes it: NaN
    /// (not an error) without clipping, before the first step, after [`Trainer::load_checkpoint`],
    /// and for a skipped step (its gradients not finite).
    pub fn gradient_norm(&self) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0f32;
        check(unsafe { sys::mpt_trainer_get_gradient_norm(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Exchanges the model's weights with this trainer's moving averages
    /// ([`TrainerOptions::ema_momentum`]; a trainer without them fails with
    /// [`Status::InvalidState`]) and returns whether the model now holds the averages (`false`: its
    /// own weights are back, bit for bit). Meanwhile [`Trainer::evaluate`], the predictions and the
    /// [`Model`]'s calls (its weights, predictions and saved files) see the averages, and `fit` and
    /// `step` (of any trainer of the model), [`Trainer::save_checkpoint`] and
    /// [`Trainer::load_checkpoint`] fail with [`Status::InvalidState`]. Before the first applied
    /// step the averages are the weights. From `fit`'s epoch-end closure through
    /// [`FitControl::swap_ema_weights`]. A trainer dropped while the model holds its averages leaves
    /// them there (Keras's way of finishing).
    pub fn swap_ema_weights(&mut self) -> Result<bool> {
        let _lock = self.family.enter()?;
        let mut holds_averages: c_int = 0;
        check(unsafe {
            sys::mpt_trainer_swap_ema_weights(self.raw.as_ptr(), &mut holds_averages)
        })?;
        Ok(holds_averages != 0)
    }

    /// Steps and epochs completed.
    pub fn progress(&self) -> Result<TrainingProgress> {
        let (steps, epochs) = self.get_pair(sys::mpt_trainer_get_progress)?;
        Ok(TrainingProgress { steps, epochs })
    }

    /// The rows of the last training step (`fit`'s batch size, or the data set's rows when fewer;
    /// `step`'s rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can
    /// fit on in the saved run's batches (`mpt_trainer_get_batch_size`: the exception of an
    /// unfinished epoch).
    pub fn batch_size(&self) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut rows = 0i64;
        check(unsafe { sys::mpt_trainer_get_batch_size(self.raw.as_ptr(), &mut rows) })?;
        Ok(rows)
    }

    /// The epoch `fit` left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint
    /// that `load_checkpoint` restored), which the next `fit` finishes on the same data in that
    /// batch size and abandons otherwise; all 0 when there is none
    /// (`mpt_trainer_get_unfinished_epoch`).
    pub fn unfinished_epoch(&self) -> Result<UnfinishedEpoch> {
        let _lock = self.family.enter()?;
        let mut epoch = UnfinishedEpoch::default();
        check(unsafe {
            sys::mpt_trainer_get_unfinished_epoch(
                self.raw.as_ptr(),
                &mut epoch.steps,
                &mut epoch.rows,
                &mut epoch.batch_size,
            )
        })?;
        Ok(epoch)
    }

    /// Writes a training checkpoint (atomically, in the model file's format): fp32 master weights,
    /// optimizer and loss-scaler state, the learning rate, step and epoch counters, the position inside the epoch and
    /// the shuffle state. Loading it into a trainer of the same architecture and options and calling
    /// `fit` continues the run bit-exactly on the CPU backend; the file holds both
    /// ([`Model::load`], [`TrainerOptions::from_checkpoint`]).
    pub fn save_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_trainer_save_checkpoint(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Restores a checkpoint, its learning rate included; the whole file is validated first, so a
    /// failure changes nothing. Another architecture fails with [`Status::ShapeMismatch`], other
    /// trainer options (all but the learning rate) with
    /// [`Status::InvalidArgument`], a missing file with [`Status::IoError`], a damaged one with
    /// [`Status::CorruptData`], another major version with [`Status::Unsupported`].
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_trainer_load_checkpoint(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Checkpoints automatically during `fit` into `directory` (which must exist) as
    /// `checkpoint-<step>.safetensors`, every `every_steps` optimizer steps and/or every
    /// `every_epochs`-th epoch (0 = not on that trigger; one of them must be > 0), keeping the
    /// newest `keep_last` (>= 1).
    /// `None` turns checkpointing off. A failed write stops `fit` with [`Status::IoError`].
    pub fn set_checkpointing(
        &mut self,
        directory: Option<&Path>,
        every_steps: i64,
        every_epochs: i64,
        keep_last: i64,
    ) -> Result<()> {
        let directory = directory.map(c_path).transpose()?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_trainer_set_checkpointing(
                self.raw.as_ptr(),
                directory.as_ref().map_or(ptr::null(), |d| d.as_ptr()),
                every_steps,
                every_epochs,
                keep_last,
            )
        })
    }

    /// Arena bytes planned and allocated.
    pub fn memory(&self) -> Result<TrainerMemory> {
        let (planned, allocated) = self.get_pair(sys::mpt_trainer_get_memory)?;
        Ok(TrainerMemory { planned, allocated })
    }

    /// Duration and step count of the last epoch `fit` completed: device time between CUDA events
    /// on a GPU, host time on the CPU; zero before the first.
    pub fn last_epoch_time(&self) -> Result<EpochTime> {
        let (seconds, steps) = self.get_pair(sys::mpt_trainer_get_last_epoch_time)?;
        Ok(EpochTime { seconds, steps })
    }

    /// Calls a C getter that writes two values, under the family's lock.
    fn get_pair<A: Default, B: Default>(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_trainer_t, *mut A, *mut B) -> sys::mpt_status,
    ) -> Result<(A, B)> {
        let _lock = self.family.enter()?;
        let (mut first, mut second) = (A::default(), B::default());
        check(unsafe { getter(self.raw.as_ptr(), &mut first, &mut second) })?;
        Ok((first, second))
    }
}

impl Drop for Trainer {
    fn drop(&mut self) {
        self.family
            .destroy(RawHandle::Trainer(self.raw, self.callbacks));
    }
}
