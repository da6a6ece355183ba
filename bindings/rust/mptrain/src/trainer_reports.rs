//! The plain values a trainer reports: what its callbacks see, evaluations, the loss scaler's state,
//! progress, memory and epoch time.

// Named only in doc links.
#[cfg(doc)]
use crate::Trainer;

/// What the progress callback sees after each step of `fit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Epoch index, from 0.
    pub epoch: i64,
    /// Step within the epoch, from 1.
    pub step: i64,
    /// Steps in an epoch.
    pub steps_per_epoch: i64,
    /// Running mean loss of the epoch.
    pub loss: f32,
    /// Running accuracy of the epoch.
    pub accuracy: f32,
}

/// What the epoch-end callback sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochEnd {
    /// Epoch index, from 0.
    pub epoch: i64,
    /// Mean loss of the epoch.
    pub loss: f32,
    /// Accuracy of the epoch.
    pub accuracy: f32,
}

/// Mean loss and accuracy over a dataset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// Mean loss.
    pub loss: f32,
    /// Fraction classified correctly.
    pub accuracy: f32,
}

/// The dynamic loss scaler's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleState {
    /// Current scale.
    pub scale: f32,
    /// Consecutive finite steps since the last change.
    pub growth_tracker: i64,
    /// Updates skipped for non-finite gradients.
    pub skipped_steps: i64,
}

/// Steps and epochs a trainer has completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainingProgress {
    /// Optimizer steps (skipped updates included).
    pub steps: i64,
    /// Completed epochs.
    pub epochs: i64,
}

/// The epoch `fit` left unfinished ([`Trainer::unfinished_epoch`]); all 0 when there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnfinishedEpoch {
    /// Its steps that ran.
    pub steps: i64,
    /// The rows of the data set it trains on.
    pub rows: i64,
    /// Its batch size.
    pub batch_size: i64,
}

/// Arena bytes of a trainer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainerMemory {
    /// Planned for the current batch size.
    pub planned: usize,
    /// Allocated.
    pub allocated: usize,
}

/// The last completed epoch of `fit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochTime {
    /// Device time on a GPU (CUDA events), host time on the CPU.
    pub seconds: f64,
    /// Steps timed.
    pub steps: i64,
}
