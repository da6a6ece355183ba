//! Safe Rust bindings of mptrain, an embeddable mixed-precision training runtime.
//!
//! ```no_run
//! use mptrain::{Activation, Context, Dataset, Model, Optimizer, Trainer, TrainerOptions};
//! # fn main() -> mptrain::Result<()> {
//! let ctx = Context::builder().backend(mptrain::Backend::Cpu).seed(7).build()?;
//! let mut model = Model::new(&ctx, 2)?;
//! model.add_dense(16, Activation::Relu)?.add_dense(2, Activation::Softmax)?;
//! let samples = [0.0f32, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0];
//! let labels = [0, 0, 1, 1];
//! let data = Dataset::from_f32(&ctx, &samples, 2, &labels, 2, true)?;
//! let mut trainer = Trainer::new(&model, &TrainerOptions::new().optimizer(Optimizer::Adam).learning_rate(0.01))?;
//! trainer.fit(&data, 10, 4, true)?;
//! println!("accuracy {}", trainer.evaluate(&data, 0)?.accuracy);
//! # Ok(()) }
//! ```
//!
//! Ownership: [`Context`], [`Model`], [`Dataset`] and [`Trainer`] own one C handle each and destroy it
//! on drop. The C library reference-counts parents, so they may be dropped in any order.
//!
//! Errors: every fallible call returns [`Result`], whose [`Error`] carries the C status and the
//! library's message (`mpt_last_error()`). Panics in callbacks are caught at the C boundary, stop
//! training, and resume when `fit` returns.
//!
//! Files: [`Model::save`] and [`Model::load`] write and read `.safetensors` model files;
//! [`Trainer::save_checkpoint`], [`Trainer::load_checkpoint`] and [`Trainer::set_checkpointing`]
//! let a run continue bit-exactly, from the checkpoint alone with [`TrainerOptions::from_checkpoint`].
//! Paths must be UTF-8 (the C API's strings are).
//!
//! Threads: the C API lets one thread at a time use the objects of a context. Handles are `Send` (move
//! them to another thread) but not `Sync`; and because a [`Model`] and a [`Trainer`] of one context are
//! separate values that could be sent to two threads, every call also takes a lock shared by all
//! objects of that context (reentrant, so callbacks may call back in). Different contexts run in
//! parallel.
//!
//! The log callback is the exception: the C API forbids it to call back into mptrain on its own
//! context (the library may log halfway through a call, holding its own locks), so there every call
//! on an object of that context fails with [`Status::InvalidState`], and an object of it dropped
//! there is destroyed when the call that logged returns. Other contexts may be used from it.
#![warn(missing_docs)]

// One module per concept; the public items are re-exported here, at the crate root, where callers
// name them (the modules themselves are private).
mod c_arguments;
mod context;
mod dataset;
mod enums;
mod error;
mod family;
mod fit_callbacks;
mod handle_debug;
mod library_info;
mod model;
mod owned_options;
mod reentrant_lock;
mod trainer;
mod trainer_options;
mod trainer_reports;

pub use context::{Context, ContextBuilder, Memory};
pub use dataset::Dataset;
pub use enums::{
    Activation, Backend, DType, Initializer, LogLevel, Loss, LossScaling, LrSchedule, Optimizer,
    Precision,
};
pub use error::{Error, Result, Status};
pub use fit_callbacks::FitControl;
pub use library_info::{cuda_device_count, version};
pub use model::Model;
pub use trainer::Trainer;
pub use trainer_options::{LossScalerDynamics, TrainerOptions};
pub use trainer_reports::{
    EpochEnd, EpochTime, Evaluation, LossScaleState, Progress, TrainerMemory, TrainingProgress,
    UnfinishedEpoch,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn handles_are_send() {
        assert_send::<Context>();
        assert_send::<Model>();
        assert_send::<Dataset>();
        assert_send::<Trainer>();
        assert_send::<Error>();
    }
}
