//! The callbacks of `fit`: the closures a trainer keeps for C, the trampolines C calls, and
//! [`FitControl`], the running trainer a closure may read and change between two steps.

use crate::dataset::Dataset;
use crate::error::{check, Error, Result, Status};
use crate::family::Family;
use crate::trainer::predict_dataset;
use crate::trainer_options::TrainerOptions;
use crate::trainer_reports::{EpochEnd, Evaluation, Progress};
use mptrain_sys as sys;
use std::any::Any;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::os::raw::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::Arc;

// Named only in doc links.
#[cfg(doc)]
use crate::Trainer;

type ProgressCallback = Box<dyn FnMut(&Progress, &mut FitControl<'_>) -> ControlFlow<()> + Send>;
type EpochEndCallback = Box<dyn FnMut(&EpochEnd, &mut FitControl<'_>) -> ControlFlow<()> + Send>;

/// The trainer whose `fit` is running, as a callback given to [`Trainer::on_progress_with`] or
/// [`Trainer::on_epoch_end_with`] may change it between two steps. It lives for one call only.
pub struct FitControl<'call> {
    trainer: NonNull<sys::mpt_trainer_t>,
    /// The trainer's model's output features (a prediction's row width).
    output_features: i64,
    /// The trainer's family, whose lock `fit`'s thread (this one) holds for the whole call.
    family: &'call Family,
    _call: PhantomData<&'call mut ()>,
}

impl FitControl<'_> {
    /// The base learning rate (the next step's unless a [`TrainerOptions::lr_schedule`] scales it).
    pub fn learning_rate(&self) -> Result<f32> {
        let mut out = 0.0f32;
        check(unsafe { sys::mpt_trainer_get_learning_rate(self.trainer.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Sets the learning rate (finite, > 0) from the next step `fit` issues on: a schedule. See
    /// [`Trainer::set_learning_rate`].
    pub fn set_learning_rate(&mut self, learning_rate: f32) -> Result<()> {
        check(unsafe { sys::mpt_trainer_set_learning_rate(self.trainer.as_ptr(), learning_rate) })
    }

    /// The rate the next step `fit` issues trains with: the base rate times the schedule's factor.
    /// See [`Trainer::scheduled_learning_rate`].
    pub fn scheduled_learning_rate(&self) -> Result<f32> {
        let mut out = 0.0f32;
        check(unsafe {
            sys::mpt_trainer_get_scheduled_learning_rate(self.trainer.as_ptr(), &mut out)
        })?;
        Ok(out)
    }

    /// A copy of the trainer's options, as [`Trainer::options`] gives it (the base rate as it is
    /// now): from either closure, to report what the run trains with, or to keep with an epoch's
    /// results the options that produced them.
    pub fn options(&self) -> Result<TrainerOptions> {
        TrainerOptions::from_new_c(|out| {
            // As in evaluate: the lock is this thread's already; entering keeps the log callback's rule.
            let _lock = self.family.enter()?;
            check(unsafe { sys::mpt_trainer_get_options(self.trainer.as_ptr(), out) })
        })
    }

    /// The norm of the reported step's gradients before clipping (NaN for a skipped step or without
    /// clipping): a closure given to [`Trainer::on_progress_with`] logs each step's. See
    /// [`Trainer::gradient_norm`].
    pub fn gradient_norm(&self) -> Result<f32> {
        let mut out = 0.0f32;
        check(unsafe { sys::mpt_trainer_get_gradient_norm(self.trainer.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Exchanges the model's weights with the trainer's moving averages, as
    /// [`Trainer::swap_ema_weights`]: from the epoch-end closure ([`Trainer::on_epoch_end_with`]) to
    /// evaluate the averages each epoch with [`FitControl::evaluate`]. Exchange them back before the
    /// closure returns, or `fit` refuses its next epoch (and an automatic checkpoint due then) with
    /// [`Status::InvalidState`]. From the progress closure the library refuses it with
    /// [`Status::InvalidState`].
    pub fn swap_ema_weights(&mut self) -> Result<bool> {
        let mut holds_averages: c_int = 0;
        check(unsafe {
            sys::mpt_trainer_swap_ema_weights(self.trainer.as_ptr(), &mut holds_averages)
        })?;
        Ok(holds_averages != 0)
    }

    /// Mean loss and accuracy over `dataset`, as [`Trainer::evaluate`] (batch_size 0: fit's): the
    /// validation of each epoch, for early stopping (return `Break`) or a schedule of your own.
    ///
    /// From the epoch-end closure ([`Trainer::on_epoch_end_with`]) it runs: `fit` is between two
    /// epochs there with nothing queued, and the run goes on as it would have (weights, the epoch's
    /// means, row order, the shuffles to come); the numbers are those of a [`Trainer::evaluate`]
    /// between two `fit` calls of one epoch each. A batch above fit's plans the step buffers again
    /// (on a GPU fit's next steps lose their CUDA graphs until captured again). From the progress
    /// closure ([`Trainer::on_progress_with`]) steps are in flight and the library refuses it with
    /// [`Status::InvalidState`].
    ///
    /// `dataset` (which the `'static` closure owns, or reaches through an `Arc<Mutex<Dataset>>`) must
    /// come from the trainer's context; one of another context is refused with
    /// [`Status::InvalidArgument`], as the library refuses it, without taking that context's lock
    /// (taken inside `fit`, out of the crate's lock order, it could deadlock with another thread).
    pub fn evaluate(&mut self, dataset: &Dataset, batch_size: i64) -> Result<Evaluation> {
        if !ptr::eq(Arc::as_ptr(&dataset.family), self.family) {
            return Err(Error::new(
                Status::InvalidArgument,
                "the dataset was created on another context than the trainer",
            ));
        }
        // The same family as the trainer: this thread holds its lock through `fit`. Entering it again
        // only keeps the rule of every call (refused inside the log callback).
        let _lock = self.family.enter()?;
        let (mut loss, mut accuracy) = (0.0f32, 0.0f32);
        check(unsafe {
            sys::mpt_trainer_evaluate(
                self.trainer.as_ptr(),
                dataset.raw.as_ptr(),
                batch_size,
                &mut loss,
                &mut accuracy,
            )
        })?;
        Ok(Evaluation { loss, accuracy })
    }

    /// The outputs of the last layer for every row of `dataset`, as [`Trainer::predict_dataset`]
    /// (batch_size 0: fit's): the predictions of each epoch on a validation set, for metrics of your
    /// own (a confusion matrix with [`Dataset::labels`], a per-class accuracy).
    ///
    /// It runs where [`FitControl::evaluate`] runs, under the same rules: from the epoch-end closure
    /// ([`Trainer::on_epoch_end_with`]), with the run going on as it would have, the outputs being
    /// those of a [`Trainer::predict_dataset`] between two `fit` calls of one epoch each; from the
    /// progress closure the library refuses it with [`Status::InvalidState`]. `dataset` must come from
    /// the trainer's context: one of another context is refused with [`Status::InvalidArgument`]
    /// without taking that context's lock.
    pub fn predict_dataset(&mut self, dataset: &Dataset, batch_size: i64) -> Result<Vec<f32>> {
        if !ptr::eq(Arc::as_ptr(&dataset.family), self.family) {
            return Err(Error::new(
                Status::InvalidArgument,
                "the dataset was created on another context than the trainer",
            ));
        }
        // As in evaluate: the lock is this thread's already; entering keeps the log callback's rule.
        let _lock = self.family.enter()?;
        predict_dataset(self.trainer, self.output_features, dataset, batch_size)
    }
}

/// The closures given to C as user_data, with their trainer. Heap-allocated once per trainer (a
/// stable address), freed after the C trainer is destroyed.
pub(crate) struct Callbacks {
    pub(crate) trainer: NonNull<sys::mpt_trainer_t>,
    /// The model's output features, for [`FitControl::predict_dataset`].
    pub(crate) output_features: i64,
    /// The trainer's family (its `Arc` outlives every call of `fit`, the only caller of these).
    pub(crate) family: NonNull<Family>,
    pub(crate) progress: Option<ProgressCallback>,
    pub(crate) epoch_end: Option<EpochEndCallback>,
    pub(crate) panic: Option<Box<dyn Any + Send>>,
}

impl Callbacks {
    /// Runs a callback, turning Break or a panic into "stop" (non-zero) for C. The callback runs
    /// inside `fit` on its thread, which holds the family's lock: the trainer is usable there.
    fn run(
        &mut self,
        call: impl FnOnce(&mut Self, &mut FitControl<'_>) -> ControlFlow<()>,
    ) -> c_int {
        if self.panic.is_some() {
            return 1;
        }
        let mut control = FitControl {
            trainer: self.trainer,
            output_features: self.output_features,
            // SAFETY: fit runs with `&mut Trainer`, whose Arc keeps the family alive.
            family: unsafe { self.family.as_ref() },
            _call: PhantomData,
        };
        match panic::catch_unwind(AssertUnwindSafe(|| call(self, &mut control))) {
            Ok(ControlFlow::Continue(())) => 0,
            Ok(ControlFlow::Break(())) => 1,
            Err(payload) => {
                self.panic = Some(payload);
                1
            }
        }
    }
}

pub(crate) unsafe extern "C" fn progress_trampoline(
    epoch: i64,
    step: i64,
    steps_per_epoch: i64,
    loss: f32,
    accuracy: f32,
    user_data: *mut c_void,
) -> c_int {
    let callbacks = &mut *(user_data as *mut Callbacks);
    let progress = Progress {
        epoch,
        step,
        steps_per_epoch,
        loss,
        accuracy,
    };
    callbacks.run(|c, control| {
        c.progress
            .as_mut()
            .map_or(ControlFlow::Continue(()), |f| f(&progress, control))
    })
}

pub(crate) unsafe extern "C" fn epoch_end_trampoline(
    epoch: i64,
    loss: f32,
    accuracy: f32,
    user_data: *mut c_void,
) -> c_int {
    let callbacks = &mut *(user_data as *mut Callbacks);
    let end = EpochEnd {
        epoch,
        loss,
        accuracy,
    };
    callbacks.run(|c, control| {
        c.epoch_end
            .as_mut()
            .map_or(ControlFlow::Continue(()), |f| f(&end, control))
    })
}
