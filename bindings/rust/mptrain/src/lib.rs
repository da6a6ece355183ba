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

use mptrain_sys as sys;
use std::any::Any;
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::os::raw::{c_char, c_int};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, ThreadId};

// ---- errors ---------------------------------------------------------------------------------------

/// Why a call failed: the C API's `mpt_status` values (other than OK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// NULL handle or pointer, out-of-range value, bad name.
    InvalidArgument,
    /// Data width or label count does not fit the model.
    ShapeMismatch,
    /// Allocation failed or the context's memory budget is exceeded.
    OutOfMemory,
    /// A file could not be opened, read or written.
    IoError,
    /// A file has the wrong size, bad labels or bad structure.
    CorruptData,
    /// The call is not allowed now (e.g. adding a layer after use).
    InvalidState,
    /// NaN/Inf in input data, or a non-finite loss in training.
    NonFinite,
    /// A callback asked to stop.
    Cancelled,
    /// The requested backend is not built in or has no device.
    BackendUnavailable,
    /// The backend (e.g. a CUDA call) failed.
    BackendError,
    /// The combination of options is not supported.
    Unsupported,
    /// A bug in mptrain.
    Internal,
    /// A status newer than these bindings.
    Unknown(i32),
}

impl Status {
    /// The status for a C value; `None` for `MPT_STATUS_OK`.
    pub fn from_code(code: c_int) -> Option<Status> {
        Some(match code {
            sys::MPT_STATUS_OK => return None,
            sys::MPT_STATUS_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::MPT_STATUS_SHAPE_MISMATCH => Status::ShapeMismatch,
            sys::MPT_STATUS_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::MPT_STATUS_IO_ERROR => Status::IoError,
            sys::MPT_STATUS_CORRUPT_DATA => Status::CorruptData,
            sys::MPT_STATUS_INVALID_STATE => Status::InvalidState,
            sys::MPT_STATUS_NON_FINITE => Status::NonFinite,
            sys::MPT_STATUS_CANCELLED => Status::Cancelled,
            sys::MPT_STATUS_BACKEND_UNAVAILABLE => Status::BackendUnavailable,
            sys::MPT_STATUS_BACKEND_ERROR => Status::BackendError,
            sys::MPT_STATUS_UNSUPPORTED => Status::Unsupported,
            sys::MPT_STATUS_INTERNAL => Status::Internal,
            other => Status::Unknown(other),
        })
    }

    /// The C value.
    pub fn code(self) -> c_int {
        match self {
            Status::InvalidArgument => sys::MPT_STATUS_INVALID_ARGUMENT,
            Status::ShapeMismatch => sys::MPT_STATUS_SHAPE_MISMATCH,
            Status::OutOfMemory => sys::MPT_STATUS_OUT_OF_MEMORY,
            Status::IoError => sys::MPT_STATUS_IO_ERROR,
            Status::CorruptData => sys::MPT_STATUS_CORRUPT_DATA,
            Status::InvalidState => sys::MPT_STATUS_INVALID_STATE,
            Status::NonFinite => sys::MPT_STATUS_NON_FINITE,
            Status::Cancelled => sys::MPT_STATUS_CANCELLED,
            Status::BackendUnavailable => sys::MPT_STATUS_BACKEND_UNAVAILABLE,
            Status::BackendError => sys::MPT_STATUS_BACKEND_ERROR,
            Status::Unsupported => sys::MPT_STATUS_UNSUPPORTED,
            Status::Internal => sys::MPT_STATUS_INTERNAL,
            Status::Unknown(code) => code,
        }
    }

    /// The library's name for it, e.g. `"MPT_STATUS_SHAPE_MISMATCH"`.
    pub fn name(self) -> &'static str {
        // Static text owned by the library.
        unsafe { CStr::from_ptr(sys::mpt_status_string(self.code())) }
            .to_str()
            .unwrap_or("MPT_STATUS_UNKNOWN")
    }
}

/// A failed call: the status and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub status: Status,
    /// The library's explanation (from `mpt_last_error()`), or the binding's for checks made here.
    pub message: String,
}

impl Error {
    fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a C status into a Result; the message is read on this thread right after the call.
fn check(code: c_int) -> Result<()> {
    match Status::from_code(code) {
        None => Ok(()),
        Some(status) => {
            let message = unsafe { CStr::from_ptr(sys::mpt_last_error()) }
                .to_string_lossy()
                .into_owned();
            Err(Error { status, message })
        }
    }
}

/// Version of the loaded library, e.g. `"0.1.0"`.
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::mpt_version()) }
        .to_str()
        .unwrap_or("")
}

/// Number of usable CUDA devices (0 without CUDA).
pub fn cuda_device_count() -> i32 {
    unsafe { sys::mpt_cuda_device_count() }
}

// ---- enums ----------------------------------------------------------------------------------------

macro_rules! c_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:path),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name { $($(#[$vmeta])* $variant = $value),* }
        impl $name {
            /// The C value.
            pub fn code(self) -> c_int { self as c_int }
            /// The variant for a C value, if these bindings know it.
            pub fn from_code(code: c_int) -> Option<Self> {
                match code { $(x if x == $value => Some($name::$variant),)* _ => None }
            }
            /// Every variant, in C order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The variant for a value the library returned: one these bindings do not know means
            /// the library and the bindings disagree, an internal error rather than a panic.
            #[allow(dead_code)] // LogLevel's: the log callback reads an unknown level as Error
            fn returned(code: c_int) -> Result<Self> {
                Self::from_code(code).ok_or_else(|| {
                    Error::new(
                        Status::Internal,
                        format!(concat!("unknown ", stringify!($name), " {}"), code),
                    )
                })
            }
        }
    };
}

c_enum!(
    /// Where a context computes.
    Backend {
        /// CUDA when a usable GPU exists, else the CPU.
        Auto = sys::MPT_BACKEND_AUTO,
        /// The CPU backend.
        Cpu = sys::MPT_BACKEND_CPU,
        /// The CUDA backend.
        Cuda = sys::MPT_BACKEND_CUDA,
    }
);
c_enum!(
    /// Per-layer compute dtype override.
    DType {
        /// Follow the precision policy.
        Default = sys::MPT_DTYPE_DEFAULT,
        /// float32.
        Fp32 = sys::MPT_DTYPE_FP32,
        /// float16.
        Fp16 = sys::MPT_DTYPE_FP16,
        /// bfloat16.
        Bf16 = sys::MPT_DTYPE_BF16,
    }
);
c_enum!(
    /// Precision policy of a trainer.
    Precision {
        /// Everything in fp32.
        Fp32 = sys::MPT_PRECISION_FP32,
        /// fp16 compute, fp32 master weights, dynamic loss scaling.
        MixedFp16 = sys::MPT_PRECISION_MIXED_FP16,
        /// bf16 compute, fp32 master weights.
        MixedBf16 = sys::MPT_PRECISION_MIXED_BF16,
        /// Chosen per device (on the CPU: bf16 where it has AMX, else fp32).
        Auto = sys::MPT_PRECISION_AUTO,
    }
);
c_enum!(
    /// Activation of a Dense layer.
    Activation {
        /// Identity.
        Linear = sys::MPT_ACTIVATION_LINEAR,
        /// max(0, x).
        Relu = sys::MPT_ACTIVATION_RELU,
        /// 1 / (1 + e^-x).
        Sigmoid = sys::MPT_ACTIVATION_SIGMOID,
        /// tanh.
        Tanh = sys::MPT_ACTIVATION_TANH,
        /// Softmax (last layer only).
        Softmax = sys::MPT_ACTIVATION_SOFTMAX,
        /// x above 0, else 0.2 x (Keras's "leaky_relu").
        LeakyRelu = sys::MPT_ACTIVATION_LEAKY_RELU,
        /// x above 0, else e^x - 1 (Keras's "elu", alpha 1).
        Elu = sys::MPT_ACTIVATION_ELU,
        /// 1.0507 elu(x) with alpha 1.6733 (Keras's "selu").
        Selu = sys::MPT_ACTIVATION_SELU,
        /// log(1 + e^x).
        Softplus = sys::MPT_ACTIVATION_SOFTPLUS,
        /// x / (1 + |x|).
        Softsign = sys::MPT_ACTIVATION_SOFTSIGN,
    }
);
c_enum!(
    /// How a layer's weights are drawn when its model is built (Keras's `kernel_initializer`).
    Initializer {
        /// Uniform, variance 2 / (fan_in + fan_out): the default.
        GlorotUniform = sys::MPT_INITIALIZER_GLOROT_UNIFORM,
        /// Truncated normal, variance 2 / (fan_in + fan_out).
        GlorotNormal = sys::MPT_INITIALIZER_GLOROT_NORMAL,
        /// Uniform, variance 2 / fan_in.
        HeUniform = sys::MPT_INITIALIZER_HE_UNIFORM,
        /// Truncated normal, variance 2 / fan_in (for ReLU layers).
        HeNormal = sys::MPT_INITIALIZER_HE_NORMAL,
        /// Uniform, variance 1 / fan_in.
        LecunUniform = sys::MPT_INITIALIZER_LECUN_UNIFORM,
        /// Truncated normal, variance 1 / fan_in (for SELU layers).
        LecunNormal = sys::MPT_INITIALIZER_LECUN_NORMAL,
    }
);
c_enum!(
    /// Training loss.
    Loss {
        /// Integer labels.
        SparseCategoricalCrossentropy = sys::MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        /// One-hot float targets.
        CategoricalCrossentropy = sys::MPT_LOSS_CATEGORICAL_CROSSENTROPY,
        /// Float targets in [0, 1].
        BinaryCrossentropy = sys::MPT_LOSS_BINARY_CROSSENTROPY,
        /// Float targets: the mean over the outputs of `(y - t)^2`.
        MeanSquaredError = sys::MPT_LOSS_MEAN_SQUARED_ERROR,
        /// Float targets: the mean over the outputs of `|y - t|`.
        MeanAbsoluteError = sys::MPT_LOSS_MEAN_ABSOLUTE_ERROR,
        /// Float targets: Keras's Huber, delta through [`TrainerOptions::huber_delta`].
        Huber = sys::MPT_LOSS_HUBER,
    }
);
c_enum!(
    /// Optimizer.
    Optimizer {
        /// SGD (momentum and Nesterov through the options).
        Sgd = sys::MPT_OPTIMIZER_SGD,
        /// Adam.
        Adam = sys::MPT_OPTIMIZER_ADAM,
        /// AdamW (decoupled weight decay).
        AdamW = sys::MPT_OPTIMIZER_ADAMW,
        /// RMSprop as Keras computes it (rho and epsilon through [`TrainerOptions::rmsprop`]);
        /// momentum, not Nesterov's, through [`TrainerOptions::momentum`].
        RmsProp = sys::MPT_OPTIMIZER_RMSPROP,
        /// Lion as Keras computes it (betas through [`TrainerOptions::lion`]); no momentum.
        Lion = sys::MPT_OPTIMIZER_LION,
    }
);
c_enum!(
    /// How a learning-rate schedule decays the rate after its warm-up (see
    /// [`TrainerOptions::lr_schedule`]).
    LrSchedule {
        /// The base rate throughout (decay_steps 0, factor 1).
        Constant = sys::MPT_LR_SCHEDULE_CONSTANT,
        /// Down to base * factor in a straight line over decay_steps.
        Linear = sys::MPT_LR_SCHEDULE_LINEAR,
        /// Down to base * factor along half a cosine period over decay_steps.
        Cosine = sys::MPT_LR_SCHEDULE_COSINE,
        /// Multiplied by factor after every decay_steps steps.
        Step = sys::MPT_LR_SCHEDULE_STEP,
    }
);
c_enum!(
    /// Loss scaling mode.
    LossScaling {
        /// Dynamic for fp16, off otherwise.
        Default = sys::MPT_LOSS_SCALING_DEFAULT,
        /// No scaling.
        Off = sys::MPT_LOSS_SCALING_OFF,
        /// A fixed scale.
        Static = sys::MPT_LOSS_SCALING_STATIC,
        /// Grows and backs off with the gradients' finiteness.
        Dynamic = sys::MPT_LOSS_SCALING_DYNAMIC,
    }
);
c_enum!(
    /// Severity of a log message.
    LogLevel {
        /// Debug.
        Debug = sys::MPT_LOG_LEVEL_DEBUG,
        /// Info.
        Info = sys::MPT_LOG_LEVEL_INFO,
        /// Warning.
        Warning = sys::MPT_LOG_LEVEL_WARNING,
        /// Error.
        Error = sys::MPT_LOG_LEVEL_ERROR,
    }
);

// ---- the per-context lock -------------------------------------------------------------------------

/// A reentrant lock: the thread holding it may take it again (a callback running inside `fit` may
/// call other functions of the same context).
#[derive(Default)]
struct ReentrantLock {
    state: Mutex<(Option<ThreadId>, usize)>,
    released: Condvar,
}

struct LockGuard<'a>(&'a ReentrantLock);

impl ReentrantLock {
    fn lock(&self) -> LockGuard<'_> {
        let me = thread::current().id();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            match state.0 {
                None => {
                    *state = (Some(me), 1);
                    break;
                }
                Some(owner) if owner == me => {
                    state.1 += 1;
                    break;
                }
                Some(_) => {
                    state = self
                        .released
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                }
            }
        }
        LockGuard(self)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        let mut state = self
            .0
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.1 -= 1;
        if state.1 == 0 {
            state.0 = None;
            self.0.released.notify_one();
        }
    }
}

type LogCallback = Box<dyn FnMut(LogLevel, &str) + Send>;

/// The log callback, given to C as user_data.
struct Logger {
    callback: Mutex<LogCallback>,
    /// Set while the callback runs. C logs only from calls made under the family's lock (and from
    /// mpt_context_create, before anything else can reach the family), so a thread that takes the
    /// lock and finds this set is the logging thread, calling back from its callback; the lock also
    /// orders the accesses, hence Relaxed.
    running: AtomicBool,
}

/// A C handle to destroy, with what must be freed after it.
enum RawHandle {
    Context(NonNull<sys::mpt_context_t>),
    Model(NonNull<sys::mpt_model_t>),
    Dataset(NonNull<sys::mpt_dataset_t>),
    Trainer(NonNull<sys::mpt_trainer_t>, NonNull<Callbacks>),
}

// SAFETY: as for the objects that owned them.
unsafe impl Send for RawHandle {}

impl RawHandle {
    /// Destroys the C handle; returns a trainer's closures, which C can no longer call, to be dropped
    /// by the caller outside the family's lock (they may own objects of other contexts).
    fn destroy(self) -> Option<Box<Callbacks>> {
        unsafe {
            match self {
                RawHandle::Context(raw) => sys::mpt_context_destroy(raw.as_ptr()),
                RawHandle::Model(raw) => sys::mpt_model_destroy(raw.as_ptr()),
                RawHandle::Dataset(raw) => sys::mpt_dataset_destroy(raw.as_ptr()),
                RawHandle::Trainer(raw, callbacks) => {
                    sys::mpt_trainer_destroy(raw.as_ptr());
                    return Some(Box::from_raw(callbacks.as_ptr()));
                }
            }
        }
        None
    }
}

/// Shared by every object created from one context: the lock, and the log callback, which must live
/// as long as any C handle of the context may call it (the C handles are destroyed before this).
struct Family {
    lock: ReentrantLock,
    log: Option<Box<Logger>>,
    /// Handles dropped inside the log callback, destroyed once the call that logged has returned.
    deferred: Mutex<Vec<RawHandle>>,
}

/// The family's lock, held for a C call.
struct Entered<'a> {
    family: &'a Family,
    lock: Option<LockGuard<'a>>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // The C call has returned: destroy what its log callback dropped.
        let deferred = std::mem::take(
            &mut *self
                .family
                .deferred
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let callbacks: Vec<_> = deferred
            .into_iter()
            .filter_map(RawHandle::destroy)
            .collect();
        self.lock = None;
        drop(callbacks);
    }
}

impl Family {
    fn logging(&self) -> bool {
        self.log
            .as_ref()
            .is_some_and(|logger| logger.running.load(Ordering::Relaxed))
    }

    /// Locks the family for a C call. Refused inside its log callback: the C API forbids that
    /// callback to call back into mptrain on the same context, as the library may log halfway
    /// through a call, holding its own locks (a GPU data set logs with its upload mutex held).
    fn enter(&self) -> Result<Entered<'_>> {
        let lock = self.lock.lock();
        if self.logging() {
            return Err(Error::new(
                Status::InvalidState,
                "the log callback called back into mptrain on its own context, which the C API forbids",
            ));
        }
        Ok(Entered {
            family: self,
            lock: Some(lock),
        })
    }

    /// Enters this family and, when different, another one (in address order, so two threads
    /// locking the same pair cannot deadlock).
    fn enter_with<'a>(&'a self, other: &'a Family) -> Result<(Entered<'a>, Option<Entered<'a>>)> {
        let (a, b) = (self as *const Family, other as *const Family);
        Ok(if a == b {
            (self.enter()?, None)
        } else if a < b {
            let first = self.enter()?;
            (first, Some(other.enter()?))
        } else {
            let first = other.enter()?;
            (first, Some(self.enter()?))
        })
    }

    /// Destroys a handle (a drop cannot be refused); inside the log callback, once the call that
    /// logged has returned.
    fn destroy(&self, handle: RawHandle) {
        let callbacks = {
            let _lock = self.lock.lock();
            if self.logging() {
                self.deferred
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(handle);
                return;
            }
            handle.destroy()
        };
        drop(callbacks);
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        // Normally empty (emptied as each call returns); a handle dropped by the logger during a
        // destroy, which is no such call, could still wait here.
        let deferred = std::mem::take(
            self.deferred
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for handle in deferred {
            drop(handle.destroy());
        }
    }
}

unsafe extern "C" fn log_trampoline(
    level: sys::mpt_log_level,
    message: *const c_char,
    user_data: *mut c_void,
) {
    let logger = &*(user_data as *const Logger);
    // try_lock: a log call re-entered from the callback itself is dropped rather than aliased.
    if let Ok(mut callback) = logger.callback.try_lock() {
        let text = if message.is_null() {
            "".into()
        } else {
            CStr::from_ptr(message).to_string_lossy()
        };
        let level = LogLevel::from_code(level).unwrap_or(LogLevel::Error);
        logger.running.store(true, Ordering::Relaxed);
        // A panicking logger must not unwind into C; its message is dropped.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| callback(level, &text)));
        logger.running.store(false, Ordering::Relaxed);
    }
}

// ---- context --------------------------------------------------------------------------------------

/// Owns a C options handle while it is filled in or read.
struct OwnedOptions<T>(*mut T, unsafe extern "C" fn(*mut T));
impl<T> Drop for OwnedOptions<T> {
    fn drop(&mut self) {
        unsafe { (self.1)(self.0) }
    }
}

impl OwnedOptions<sys::mpt_trainer_options_t> {
    /// The value a getter of one value reads.
    fn get<V: Default>(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_trainer_options_t, *mut V) -> sys::mpt_status,
    ) -> Result<V> {
        let mut out = V::default();
        // SAFETY: the handle lives as long as self; `out` is a local.
        check(unsafe { getter(self.0, &mut out) })?;
        Ok(out)
    }
}

/// Options of a [`Context`]; unset values keep the library's defaults (backend Auto, all cores,
/// seed 42, device 0, log level Info, no memory budget).
#[derive(Default)]
pub struct ContextBuilder {
    backend: Option<Backend>,
    threads: Option<i32>,
    seed: Option<u64>,
    device: Option<i32>,
    log_level: Option<LogLevel>,
    memory_budget: Option<usize>,
    dataset_device_budget: Option<usize>,
    log: Option<LogCallback>,
}

impl ContextBuilder {
    /// The backend to run on.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }
    /// CPU compute threads; 0 = number of cores.
    pub fn threads(mut self, threads: i32) -> Self {
        self.threads = Some(threads);
        self
    }
    /// Seed of initialisation and shuffling.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// CUDA device index.
    pub fn device(mut self, device: i32) -> Self {
        self.device = Some(device);
        self
    }
    /// Minimum level passed to the log callback.
    pub fn log_level(mut self, level: LogLevel) -> Self {
        self.log_level = Some(level);
        self
    }
    /// Upper bound on the arena bytes of the context; 0 = unlimited.
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }
    /// Device bytes one data set may occupy on a GPU; larger ones are streamed from host memory.
    pub fn dataset_device_budget(mut self, bytes: usize) -> Self {
        self.dataset_device_budget = Some(bytes);
        self
    }
    /// Receives the library's log messages, on the thread making the call. Calls on objects of this
    /// context fail there with [`Status::InvalidState`] (see the crate's documentation).
    pub fn log(mut self, callback: impl FnMut(LogLevel, &str) + Send + 'static) -> Self {
        self.log = Some(Box::new(callback));
        self
    }

    /// Creates the context.
    pub fn build(self) -> Result<Context> {
        let mut raw_options = ptr::null_mut();
        check(unsafe { sys::mpt_context_options_create(&mut raw_options) })?;
        let options = OwnedOptions(raw_options, sys::mpt_context_options_destroy);
        unsafe {
            if let Some(backend) = self.backend {
                check(sys::mpt_context_options_set_backend(
                    options.0,
                    backend.code(),
                ))?;
            }
            if let Some(threads) = self.threads {
                check(sys::mpt_context_options_set_threads(options.0, threads))?;
            }
            if let Some(seed) = self.seed {
                check(sys::mpt_context_options_set_seed(options.0, seed))?;
            }
            if let Some(device) = self.device {
                check(sys::mpt_context_options_set_device(options.0, device))?;
            }
            if let Some(level) = self.log_level {
                check(sys::mpt_context_options_set_log_level(
                    options.0,
                    level.code(),
                ))?;
            }
            if let Some(bytes) = self.memory_budget {
                check(sys::mpt_context_options_set_memory_budget(options.0, bytes))?;
            }
            if let Some(bytes) = self.dataset_device_budget {
                check(sys::mpt_context_options_set_dataset_device_budget(
                    options.0, bytes,
                ))?;
            }
        }
        let log = self.log.map(|callback| {
            Box::new(Logger {
                callback: Mutex::new(callback),
                running: AtomicBool::new(false),
            })
        });
        if let Some(logger) = &log {
            let user_data = &**logger as *const Logger as *mut c_void;
            check(unsafe {
                sys::mpt_context_options_set_log_callback(
                    options.0,
                    Some(log_trampoline),
                    user_data,
                )
            })?;
        }
        let family = Arc::new(Family {
            lock: ReentrantLock::default(),
            log,
            deferred: Mutex::default(),
        });
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_context_create(options.0, &mut raw) })?;
        Ok(Context {
            raw: NonNull::new(raw).expect("mpt_context_create returned NULL"),
            family,
        })
    }
}

/// Backend, threads, seed and log callback; parent of models and datasets.
pub struct Context {
    raw: NonNull<sys::mpt_context_t>,
    family: Arc<Family>,
}

// SAFETY: the C handle may be used from any thread, one at a time; &self methods take the context's
// lock. Not Sync (the raw pointer makes that automatic).
unsafe impl Send for Context {}

/// Arena bytes of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// Held now.
    pub used: usize,
    /// The most ever held.
    pub peak: usize,
}

impl Context {
    /// A context with the library's defaults.
    pub fn new() -> Result<Context> {
        ContextBuilder::default().build()
    }
    /// Options for a new context.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }
    /// The backend this context runs on (never Auto).
    pub fn backend(&self) -> Result<Backend> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { sys::mpt_context_get_backend(self.raw.as_ptr(), &mut out) })?;
        Backend::returned(out)
    }
    /// What a requested precision resolves to here (Auto on the CPU: bf16 with AMX, else fp32).
    pub fn resolve_precision(&self, requested: Precision) -> Result<Precision> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_context_resolve_precision(self.raw.as_ptr(), requested.code(), &mut out)
        })?;
        Precision::returned(out)
    }
    /// Arena bytes held now and at most.
    pub fn memory(&self) -> Result<Memory> {
        let _lock = self.family.enter()?;
        let (mut used, mut peak) = (0, 0);
        check(unsafe { sys::mpt_context_get_memory(self.raw.as_ptr(), &mut used, &mut peak) })?;
        Ok(Memory { used, peak })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Context(self.raw));
    }
}

// ---- model ----------------------------------------------------------------------------------------

fn count(len: usize) -> i64 {
    len as i64
}

fn rows_of(values: usize, width: i64, what: &str) -> Result<i64> {
    if width <= 0 || values == 0 || values as i64 % width != 0 {
        return Err(Error::new(
            Status::ShapeMismatch,
            format!("{what} holds {values} values, not whole rows of {width}"),
        ));
    }
    Ok(values as i64 / width)
}

/// The most elements the library accepts in one caller's array (a data set's samples, a prediction's
/// inputs or outputs): `MPT_MAX_HOST_ELEMENTS` in mptrain.h. Checked here too, so that what the
/// library would refuse is refused before this crate allocates for it.
const MAX_HOST_ELEMENTS: i64 = 1 << 40;

/// `rows * width` (both positive) as an element count, refused as the library refuses it: the same
/// status and message.
fn host_elements(rows: i64, width: i64, what: &str) -> Result<i64> {
    match rows.checked_mul(width) {
        Some(elements) if elements <= MAX_HOST_ELEMENTS => Ok(elements),
        _ => Err(Error::new(
            Status::InvalidArgument,
            format!("{what} would hold more than 2^40 elements"),
        )),
    }
}

/// `len` zeroed values (floats, labels) for C to fill. A failed allocation is an error, as it is in
/// C, rather than the abort of `vec!`.
fn zeroed<T: Copy + Default>(len: i64) -> Result<Vec<T>> {
    let out_of_memory = || Error::new(Status::OutOfMemory, "out of host memory");
    let len = usize::try_from(len).map_err(|_| out_of_memory())?;
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).map_err(|_| out_of_memory())?;
    buffer.resize(len, T::default());
    Ok(buffer)
}

fn zeroed_floats(len: i64) -> Result<Vec<f32>> {
    zeroed(len)
}

/// The output buffer of a prediction on `rows` rows, after the library's checks of them (the inputs,
/// then the outputs, within MAX_HOST_ELEMENTS).
fn prediction_output(rows: i64, input_features: i64, output_features: i64) -> Result<Vec<f32>> {
    host_elements(rows, input_features, "the inputs (rows * input features)")?;
    zeroed_floats(host_elements(
        rows,
        output_features.max(1),
        "the outputs (rows * output features)",
    )?)
}

/// Predictions over every row of `dataset` (`mpt_trainer_predict_dataset`), for [`Trainer`] and
/// [`FitControl`] alike; the caller holds the locks of both families. The outputs are `rows *
/// output_features` floats, the count the library expects: its refusals (another context, another
/// feature count, a negative batch) are then the library's own.
fn predict_dataset(
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

/// A path for C: UTF-8 (the C API's strings are) without NUL.
fn c_path(path: &Path) -> Result<CString> {
    let text = path
        .to_str()
        .ok_or_else(|| Error::new(Status::InvalidArgument, "path is not UTF-8"))?;
    CString::new(text).map_err(|_| Error::new(Status::InvalidArgument, "path contains NUL"))
}

/// A sequential stack of Dense layers.
pub struct Model {
    raw: NonNull<sys::mpt_model_t>,
    family: Arc<Family>,
    input_features: i64,
}

// SAFETY: as for Context.
unsafe impl Send for Model {}

impl Model {
    /// An empty model taking `input_features` floats per sample.
    pub fn new(context: &Context, input_features: i64) -> Result<Model> {
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_model_create(context.raw.as_ptr(), input_features, &mut raw) })?;
        Ok(Model {
            raw: NonNull::new(raw).expect("mpt_model_create returned NULL"),
            family: context.family.clone(),
            input_features,
        })
    }

    /// Appends a Dense layer; chainable: `model.add_dense(64, Relu)?.add_dense(10, Softmax)?`.
    pub fn add_dense(&mut self, units: i64, activation: Activation) -> Result<&mut Self> {
        {
            let _lock = self.family.enter()?;
            check(unsafe {
                sys::mpt_model_add_dense(self.raw.as_ptr(), units, activation.code())
            })?;
        }
        Ok(self)
    }

    /// Overrides one layer's compute dtype (before the model is built).
    pub fn set_layer_dtype(&mut self, layer: usize, dtype: DType) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_dtype(self.raw.as_ptr(), layer as i64, dtype.code())
        })
    }

    /// Layer `layer`'s dtype override ([`DType::Default`]: the policy's).
    pub fn layer_dtype(&self, layer: usize) -> Result<DType> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_dtype(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        DType::returned(out)
    }

    /// Dropout after hidden layer `layer`, as a Keras `Dropout(rate)` layer after it: while a trainer
    /// trains (fit, step), each of its outputs is dropped with probability `rate` in [0, 1) and the
    /// kept ones are scaled by `1 / (1 - rate)`; evaluate and predict use every output. 0 (the
    /// default) means none. Before the model is built; another rate or layer fails with
    /// [`Status::InvalidArgument`]. Building a model whose last layer has dropout ([`Trainer::new`],
    /// predict, weights) fails with [`Status::InvalidState`]. Saved with the model.
    pub fn set_layer_dropout(&mut self, layer: usize, rate: f32) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_set_layer_dropout(self.raw.as_ptr(), layer as i64, rate) })
    }

    /// Dropout on the inputs, as a Keras `Dropout(rate)` before the first Dense layer: while a
    /// trainer trains, each input value is dropped with probability `rate` in [0, 1) and the kept
    /// ones are scaled by `1 / (1 - rate)`; evaluate and predict use every input. Before the model
    /// is built; saved with the model.
    pub fn set_input_dropout(&mut self, rate: f32) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_set_input_dropout(self.raw.as_ptr(), rate) })
    }

    /// The inputs' dropout rate (0: none).
    pub fn input_dropout(&self) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0;
        check(unsafe { sys::mpt_model_get_input_dropout(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Standardizes the inputs inside the model, as a Keras `Normalization` layer before the first
    /// Dense layer: input feature `f` becomes `(x - mean[f]) / max(stddev[f], 1e-7)`, each operation
    /// rounded in `f32`, in [`Trainer::fit`], [`Trainer::step`], [`Trainer::evaluate`] and
    /// [`Trainer::predict_dataset`] and in [`Model::predict`] and [`Trainer::predict`] alike. Saved
    /// with the model, so a loaded model predicts from raw inputs as the trained one did. A training
    /// set's [`Dataset::feature_statistics`] are the values to give (Keras's `adapt`):
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset, Model};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// # let mut model = Model::new(&ctx, 4)?;
    /// let training = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let (mean, stddev) = training.feature_statistics()?;
    /// model.set_input_standardization(&mean, &stddev)?; // then fit on the raw training set
    /// # Ok(()) }
    /// ```
    ///
    /// `mean` and `stddev` hold one value per input feature: another count (or lengths that differ)
    /// fails with [`Status::ShapeMismatch`], a non-finite mean or a negative or non-finite standard
    /// deviation with [`Status::InvalidArgument`] naming the first such. They are copied and replace
    /// any the model had. A trainer refuses a [`Dataset::standardized`] dataset for such a model
    /// ([`Status::InvalidArgument`]: that would standardize twice). At any time but while a trainer
    /// fits the model ([`Status::InvalidState`]).
    pub fn set_input_standardization(&mut self, mean: &[f32], stddev: &[f32]) -> Result<()> {
        // One count reaches C: slices of different lengths are the shape mismatch it reports for a
        // count other than the input features. (Empty slices point somewhere, not NULL: C sees a
        // count of 0, not a removal.)
        if mean.len() != stddev.len() {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!(
                    "standardization takes one mean and one stddev per input feature ({} means and {} \
                     stddevs given)",
                    mean.len(),
                    stddev.len()
                ),
            ));
        }
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_input_standardization(
                self.raw.as_ptr(),
                mean.as_ptr(),
                stddev.as_ptr(),
                count(mean.len()),
            )
        })
    }

    /// Removes the model's input standardization, if any: it takes its inputs as given again.
    pub fn clear_input_standardization(&mut self) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_input_standardization(self.raw.as_ptr(), ptr::null(), ptr::null(), 0)
        })
    }

    /// The `(mean, stddev)` the model standardizes its inputs by, as set (not floored), as
    /// [`Dataset::feature_statistics`] gives them; `None` when it takes its inputs as given.
    pub fn input_standardization(&self) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        let _lock = self.family.enter()?;
        let mut mean = zeroed_floats(self.input_features)?;
        let mut stddev = zeroed_floats(self.input_features)?;
        let mut standardizes: c_int = 0;
        check(unsafe {
            sys::mpt_model_get_input_standardization(
                self.raw.as_ptr(),
                mean.as_mut_ptr(),
                stddev.as_mut_ptr(),
                self.input_features,
                &mut standardizes,
            )
        })?;
        Ok((standardizes != 0).then_some((mean, stddev)))
    }

    /// How layer `layer`'s weights are drawn when the model is built (default
    /// [`Initializer::GlorotUniform`]), from the context's seed. Before the model is built (else
    /// [`Status::InvalidState`]); not saved with the model, whose file holds the weights.
    pub fn set_layer_initializer(&mut self, layer: usize, initializer: Initializer) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_initializer(
                self.raw.as_ptr(),
                layer as i64,
                initializer as c_int,
            )
        })
    }

    /// Layer `layer`'s initializer (a loaded model's are the default: its file holds weights).
    pub fn layer_initializer(&self, layer: usize) -> Result<Initializer> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_initializer(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Initializer::returned(out)
    }

    /// Freezes layer `layer` (`false`) or lets it train (`true`, the default), as Keras's
    /// `layer.trainable`: trainers' steps leave a frozen layer's weights, bias and optimizer state
    /// exactly as they are (no gradient, no weight decay, no share of the clipped norm, no
    /// averaging: swapped in, the averages leave it as it is), while gradients still flow through it to the layers
    /// below. At any time: every trainer's next step reads it. Training with every layer frozen
    /// fails with [`Status::InvalidState`]. Saved with the model.
    pub fn set_layer_trainable(&mut self, layer: usize, trainable: bool) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_layer_trainable(
                self.raw.as_ptr(),
                layer as i64,
                c_int::from(trainable),
            )
        })
    }

    /// Whether layer `layer` trains (`false`: frozen).
    pub fn layer_trainable(&self, layer: usize) -> Result<bool> {
        let _lock = self.family.enter()?;
        let mut out: c_int = 0;
        check(unsafe {
            sys::mpt_model_get_layer_trainable(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out != 0)
    }

    /// Layer `layer`'s dropout rate (0: none).
    pub fn layer_dropout(&self, layer: usize) -> Result<f32> {
        let _lock = self.family.enter()?;
        let mut out = 0.0;
        check(unsafe {
            sys::mpt_model_get_layer_dropout(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out)
    }

    fn query(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_model_t, *mut i64) -> c_int,
    ) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { getter(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }
    /// Number of layers.
    pub fn layer_count(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_layer_count)
    }
    /// Floats per input sample.
    pub fn input_features(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_input_features)
    }
    /// Width of the last layer.
    pub fn output_features(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_output_features)
    }
    /// Trainable parameters (weights and biases).
    pub fn parameter_count(&self) -> Result<i64> {
        self.query(sys::mpt_model_get_parameter_count)
    }

    fn layer_shape(&self, layer: usize) -> Result<(i64, i64)> {
        let units = self.layer_units(layer)?; // fails for a layer out of range
        let inputs = if layer == 0 {
            self.input_features
        } else {
            self.layer_units(layer - 1)?
        };
        Ok((units, inputs))
    }

    /// Layer `layer`'s width, as added or as a loaded file holds it.
    pub fn layer_units(&self, layer: usize) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_units(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Ok(out)
    }

    /// Layer `layer`'s activation, as added or as a loaded file holds it.
    pub fn layer_activation(&self, layer: usize) -> Result<Activation> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_model_get_layer_activation(self.raw.as_ptr(), layer as i64, &mut out)
        })?;
        Activation::returned(out)
    }

    /// A layer's fp32 master weights (row-major `[units, inputs]`) and bias (`[units]`).
    pub fn weights(&mut self, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let (units, inputs) = self.layer_shape(layer)?;
        // The library caps both at 2^24, so no overflow, but 2^48 floats fit no memory.
        let mut weights = zeroed_floats(units.saturating_mul(inputs))?;
        let mut bias = zeroed_floats(units)?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_get_weights(
                self.raw.as_ptr(),
                layer as i64,
                weights.as_mut_ptr(),
                count(weights.len()),
                bias.as_mut_ptr(),
                count(bias.len()),
            )
        })?;
        Ok((weights, bias))
    }

    /// Sets a layer's weights and bias (same layout as [`Model::weights`]); the lengths must match.
    pub fn set_weights(&mut self, layer: usize, weights: &[f32], bias: &[f32]) -> Result<()> {
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_set_weights(
                self.raw.as_ptr(),
                layer as i64,
                weights.as_ptr(),
                count(weights.len()),
                bias.as_ptr(),
                count(bias.len()),
            )
        })
    }

    /// fp32 forward pass for whole rows of `input_features` floats; returns `rows * output_features`
    /// values, row-major.
    pub fn predict(&mut self, inputs: &[f32]) -> Result<Vec<f32>> {
        let rows = rows_of(inputs.len(), self.input_features, "inputs")?;
        let mut out = prediction_output(rows, self.input_features, self.output_features()?)?;
        self.predict_into(inputs, &mut out)?;
        Ok(out)
    }

    /// As [`Model::predict`], into a caller's buffer of exactly `rows * output_features` floats.
    pub fn predict_into(&mut self, inputs: &[f32], out: &mut [f32]) -> Result<()> {
        let rows = rows_of(inputs.len(), self.input_features, "inputs")?;
        let _lock = self.family.enter()?;
        check(unsafe {
            sys::mpt_model_predict(
                self.raw.as_ptr(),
                inputs.as_ptr(),
                rows,
                out.as_mut_ptr(),
                count(out.len()),
            )
        })
    }

    /// Saves the architecture and fp32 weights as a .safetensors file (atomically: a crash leaves the
    /// old file or the new one). Builds the model. [`Status::IoError`] when it cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let _lock = self.family.enter()?;
        check(unsafe { sys::mpt_model_save(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Loads a model written by [`Model::save`] (or the model inside a training checkpoint). A missing
    /// file fails with [`Status::IoError`], a truncated or damaged one with [`Status::CorruptData`], one
    /// from another major version with [`Status::Unsupported`].
    pub fn load(context: &Context, path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let c_path = c_path(path)?;
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_model_load(context.raw.as_ptr(), c_path.as_ptr(), &mut raw) })?;
        let mut model = Model {
            raw: NonNull::new(raw).expect("mpt_model_load returned NULL"),
            family: context.family.clone(),
            input_features: 0,
        };
        model.input_features = model.input_features()?;
        Ok(model)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Model(self.raw));
    }
}

// ---- dataset --------------------------------------------------------------------------------------

/// Training data, copied into the library (the caller's slices are not retained); [`Dataset::slice`]
/// makes a dataset of some of its rows without a copy, [`Dataset::subset`] one of copies of any of
/// its rows, [`Dataset::weighted`] one of its rows with a weight per row, [`Dataset::standardized`]
/// one of its rows standardized feature by feature; [`Dataset::labels`] copies its labels back out,
/// [`Dataset::feature_statistics`] each feature's mean and standard deviation.
pub struct Dataset {
    raw: NonNull<sys::mpt_dataset_t>,
    family: Arc<Family>,
}

// SAFETY: as for Context.
unsafe impl Send for Dataset {}

impl Dataset {
    fn check_samples(samples: usize, features: i64, rows: usize) -> Result<()> {
        // Beyond the library's limit (i64 overflow included) no slice can be right: that is the
        // library's refusal, with its status and message.
        let expected = if features > 0 && rows > 0 {
            Some(host_elements(
                rows as i64,
                features,
                "the dataset (rows * features)",
            )?)
        } else {
            None
        };
        if expected != Some(samples as i64) {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!("{samples} sample values do not make {rows} rows of {features} features"),
            ));
        }
        Ok(())
    }

    fn create(
        context: &Context,
        make: impl FnOnce(*mut sys::mpt_context_t, *mut *mut sys::mpt_dataset_t) -> c_int,
    ) -> Result<Dataset> {
        let _lock = context.family.enter()?;
        let mut raw = ptr::null_mut();
        check(make(context.raw.as_ptr(), &mut raw))?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("dataset creation returned NULL"),
            family: context.family.clone(),
        })
    }

    /// float32 samples (`labels.len()` rows of `features`) with labels in `[0, num_classes)`.
    pub fn from_f32(
        context: &Context,
        samples: &[f32],
        features: i64,
        labels: &[i32],
        num_classes: i32,
        check_finite: bool,
    ) -> Result<Dataset> {
        Self::check_samples(samples.len(), features, labels.len())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_f32(
                ctx,
                samples.as_ptr(),
                count(labels.len()),
                features,
                labels.as_ptr(),
                num_classes,
                check_finite as c_int,
                out,
            )
        })
    }

    /// uint8 samples, normalised as `x * scale + offset` when batched (CIFAR: 1/255, 0).
    pub fn from_u8(
        context: &Context,
        samples: &[u8],
        features: i64,
        labels: &[i32],
        num_classes: i32,
        scale: f32,
        offset: f32,
    ) -> Result<Dataset> {
        Self::check_samples(samples.len(), features, labels.len())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_u8(
                ctx,
                samples.as_ptr(),
                count(labels.len()),
                features,
                labels.as_ptr(),
                num_classes,
                scale,
                offset,
                out,
            )
        })
    }

    /// float32 samples with float32 targets (`[rows, target_width]`) for one-hot categorical, binary
    /// cross-entropy or the regression losses.
    pub fn from_f32_targets(
        context: &Context,
        samples: &[f32],
        features: i64,
        targets: &[f32],
        target_width: i64,
        check_finite: bool,
    ) -> Result<Dataset> {
        let rows = rows_of(targets.len(), target_width, "targets")?;
        Self::check_samples(samples.len(), features, rows as usize)?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_create_f32_targets(
                ctx,
                samples.as_ptr(),
                rows,
                features,
                targets.as_ptr(),
                target_width,
                check_finite as c_int,
                out,
            )
        })
    }

    /// CIFAR-10 from the binary release's directory; `limit` > 0 keeps the first `limit` records.
    pub fn load_cifar10(
        context: &Context,
        directory: impl AsRef<Path>,
        train: bool,
        limit: i64,
    ) -> Result<Dataset> {
        let path = c_path(directory.as_ref())?;
        Self::create(context, |ctx, out| unsafe {
            sys::mpt_dataset_load_cifar10(ctx, path.as_ptr(), train as c_int, limit, out)
        })
    }

    fn query(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_dataset_t, *mut i64) -> c_int,
    ) -> Result<i64> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { getter(self.raw.as_ptr(), &mut out) })?;
        Ok(out)
    }
    /// Number of samples.
    pub fn rows(&self) -> Result<i64> {
        self.query(sys::mpt_dataset_get_rows)
    }
    /// Values per sample.
    pub fn features(&self) -> Result<i64> {
        self.query(sys::mpt_dataset_get_features)
    }

    /// The integer labels, one per row (a slice's own rows', from its first): with
    /// [`Trainer::predict_dataset`], a confusion matrix or the per-class accuracy of a loaded data set
    /// (the CIFAR-10 test set, a validation slice):
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset, Model, Trainer};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let model = Model::new(&ctx, 3072)?;
    /// # let mut trainer = Trainer::with_defaults(&model)?;
    /// let test = Dataset::load_cifar10(&ctx, "cifar-10-batches-bin", false, 0)?;
    /// let probabilities = trainer.predict_dataset(&test, 0)?; // rows * 10
    /// let mut confusion = [[0u32; 10]; 10]; // [label][predicted class]
    /// for (label, row) in test.labels()?.into_iter().zip(probabilities.chunks(10)) {
    ///     let predicted = (0..10).fold(0, |best, c| if row[c] > row[best] { c } else { best });
    ///     confusion[label as usize][predicted] += 1;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// A dataset of float targets ([`Dataset::from_f32_targets`]) has no labels: that fails with
    /// [`Status::InvalidArgument`].
    pub fn labels(&self) -> Result<Vec<i32>> {
        let _lock = self.family.enter()?;
        let mut rows = 0i64;
        check(unsafe { sys::mpt_dataset_get_rows(self.raw.as_ptr(), &mut rows) })?;
        let mut out = zeroed::<i32>(rows)?;
        check(unsafe {
            sys::mpt_dataset_get_labels(self.raw.as_ptr(), out.as_mut_ptr(), count(out.len()))
        })?;
        Ok(out)
    }

    /// A dataset of rows `[first, first + rows)` of this one that shares its storage: nothing is
    /// copied, and on a GPU one device copy serves this dataset and all its slices (placed when any of
    /// them is first used, within the context's dataset device budget as a whole). Labels or targets,
    /// classes and normalisation are this dataset's. For a held-out validation set or a first or last
    /// fold; Keras's `validation_split` holds out the last rows, before any shuffling:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let rows = data.rows()?;
    /// let held_out = rows - rows * 4 / 5; // validation_split = 0.2: Keras trains on floor(0.8 rows)
    /// let training = data.slice(0, rows - held_out)?;
    /// let validation = data.slice(rows - held_out, held_out)?;
    /// drop(data); // the slices keep the rows
    /// # Ok(()) }
    /// ```
    ///
    /// The slice keeps the storage alive after this `Dataset` is dropped; a slice of a slice counts
    /// from that slice's first row. `first` outside `[0, rows)` or `rows` outside
    /// `[1, rows - first]` fails with [`Status::InvalidArgument`].
    pub fn slice(&self, first: i64, rows: i64) -> Result<Dataset> {
        let _lock = self.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_dataset_create_slice(self.raw.as_ptr(), first, rows, &mut raw) })?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("mpt_dataset_create_slice returned NULL"),
            family: self.family.clone(),
        })
    }

    /// A dataset of copies of this one's rows `rows[0]`, `rows[1]`, ... in that order: any rows,
    /// where a slice is one range. For k-fold cross-validation (a fold's training rows are all the
    /// others), a stratified or shuffled split, or a bootstrap sample (a row may be listed more than
    /// once). Each row brings its label or targets and its weight (of a [`Dataset::weighted`]
    /// dataset); classes and normalisation are this dataset's:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// // The third of five folds (rows 40..60) held out; the rows around it train.
    /// let training_rows: Vec<i64> = (0..40).chain(60..100).collect();
    /// let training = data.subset(&training_rows)?;
    /// let validation = data.slice(40, 20)?;
    /// # Ok(()) }
    /// ```
    ///
    /// Unlike a slice the rows are copied, into a storage of the subset's own (on a GPU placed on
    /// the device apart from this dataset's when first used). Indices count from this dataset's first
    /// row (a slice's own); no rows, or an index outside `[0, rows)`, fails with
    /// [`Status::InvalidArgument`] naming the first such.
    pub fn subset(&self, rows: &[i64]) -> Result<Dataset> {
        let _lock = self.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::mpt_dataset_create_subset(
                self.raw.as_ptr(),
                rows.as_ptr(),
                count(rows.len()),
                &mut raw,
            )
        })?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("mpt_dataset_create_subset returned NULL"),
            family: self.family.clone(),
        })
    }

    /// A dataset of this one's rows with a weight per row: Keras's `sample_weight`, for fit and
    /// evaluate alike. In [`Trainer::fit`], [`Trainer::step`] and [`Trainer::evaluate`] each row's
    /// loss (and in training its gradient) is multiplied by its weight, and in training by its class
    /// weight too where the trainer has [`TrainerOptions::class_weights`] (evaluate leaves those out,
    /// as without row weights), then averaged over the rows as before: the weights are not
    /// normalised (Keras's `sum_over_batch_size`), so the losses reported, evaluate's included, are
    /// the weighted ones. Accuracy counts every row once. Every loss takes row weights:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// // Rows of label 0 count twice as much as the others.
    /// let weights: Vec<f32> = labels.iter().map(|&l| if l == 0 { 2.0 } else { 1.0 }).collect();
    /// let weighted = data.weighted(&weights)?;
    /// drop(data); // the weighted dataset keeps the rows
    /// # Ok(()) }
    /// ```
    ///
    /// The rows are shared, not copied, as by [`Dataset::slice`], and kept alive after this
    /// `Dataset` is dropped; the weights are copied (on a GPU placed beside the rows, 4 bytes a row)
    /// and replace any weights this dataset had; a slice of a weighted dataset keeps its rows'
    /// weights. `weights` holds one weight per row: another count fails with
    /// [`Status::ShapeMismatch`]; a negative, NaN or infinite weight with [`Status::InvalidArgument`].
    pub fn weighted(&self, weights: &[f32]) -> Result<Dataset> {
        let _lock = self.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::mpt_dataset_create_weighted(
                self.raw.as_ptr(),
                weights.as_ptr(),
                count(weights.len()),
                &mut raw,
            )
        })?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("mpt_dataset_create_weighted returned NULL"),
            family: self.family.clone(),
        })
    }

    /// A dataset of this one's rows standardized feature by feature, as Keras's `Normalization`
    /// layer does: feature `f` of every batch holds `(x - mean[f]) / max(stddev[f], 1e-7)`, where `x`
    /// is what this dataset gives (a uint8 sample after its scale and offset), each operation rounded
    /// in `f32`. For [`Trainer::fit`], [`Trainer::step`], [`Trainer::evaluate`] and
    /// [`Trainer::predict_dataset`] alike; [`Trainer::predict`] and [`Model::predict`] take their
    /// inputs as given, so standardize those yourself, or have the model standardize them
    /// ([`Model::set_input_standardization`], saved with it) instead. Use the training set's
    /// [`Dataset::feature_statistics`] for the validation and test sets too:
    ///
    /// ```no_run
    /// # use mptrain::{Context, Dataset};
    /// # fn main() -> mptrain::Result<()> {
    /// # let ctx = Context::new()?;
    /// # let (samples, labels) = (vec![0.0f32; 400], vec![0; 100]);
    /// let data = Dataset::from_f32(&ctx, &samples, 4, &labels, 3, true)?;
    /// let (mean, stddev) = data.slice(0, 80)?.feature_statistics()?;
    /// let training = data.slice(0, 80)?.standardized(&mean, &stddev)?;
    /// let validation = data.slice(80, 20)?.standardized(&mean, &stddev)?;
    /// # Ok(()) }
    /// ```
    ///
    /// The rows are shared, not copied, as by [`Dataset::slice`] (a uint8 dataset stays 1 byte a
    /// value), and kept alive after this `Dataset` is dropped; the statistics are copied and replace
    /// any standardization this dataset had, and slices, weighted datasets and subsets of the result
    /// keep them. `mean` and `stddev` hold one value per feature: another count (or lengths that
    /// differ) fails with [`Status::ShapeMismatch`], a non-finite mean or a negative or non-finite
    /// standard deviation with [`Status::InvalidArgument`] naming the first such.
    pub fn standardized(&self, mean: &[f32], stddev: &[f32]) -> Result<Dataset> {
        // One count reaches C: slices of different lengths are the shape mismatch it reports for a
        // count other than the features.
        if mean.len() != stddev.len() {
            return Err(Error::new(
                Status::ShapeMismatch,
                format!(
                    "standardization takes one mean and one stddev per feature ({} means and {} \
                     stddevs given)",
                    mean.len(),
                    stddev.len()
                ),
            ));
        }
        let _lock = self.family.enter()?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::mpt_dataset_create_standardized(
                self.raw.as_ptr(),
                mean.as_ptr(),
                stddev.as_ptr(),
                count(mean.len()),
                &mut raw,
            )
        })?;
        Ok(Dataset {
            raw: NonNull::new(raw).expect("mpt_dataset_create_standardized returned NULL"),
            family: self.family.clone(),
        })
    }

    /// Each feature's mean and standard deviation `(mean, stddev)` over this dataset's rows (a
    /// slice's own), of the values its batches hold (standardized ones, for a
    /// [`Dataset::standardized`] dataset): the population's, divided by the rows, as Keras's
    /// `Normalization.adapt`, summed in `f64`. [`Dataset::standardized`] with them gives features of
    /// mean 0 and standard deviation 1.
    pub fn feature_statistics(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        let _lock = self.family.enter()?;
        let mut features = 0i64;
        check(unsafe { sys::mpt_dataset_get_features(self.raw.as_ptr(), &mut features) })?;
        let mut mean = zeroed_floats(features)?;
        let mut stddev = zeroed_floats(features)?;
        check(unsafe {
            sys::mpt_dataset_get_feature_statistics(
                self.raw.as_ptr(),
                mean.as_mut_ptr(),
                stddev.as_mut_ptr(),
                features,
            )
        })?;
        Ok((mean, stddev))
    }
}

impl Drop for Dataset {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Dataset(self.raw));
    }
}

// ---- trainer --------------------------------------------------------------------------------------

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
    fn from_new_c(
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

    fn to_c(&self) -> Result<OwnedOptions<sys::mpt_trainer_options_t>> {
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
struct Callbacks {
    trainer: NonNull<sys::mpt_trainer_t>,
    /// The model's output features, for [`FitControl::predict_dataset`].
    output_features: i64,
    /// The trainer's family (its `Arc` outlives every call of `fit`, the only caller of these).
    family: NonNull<Family>,
    progress: Option<ProgressCallback>,
    epoch_end: Option<EpochEndCallback>,
    panic: Option<Box<dyn Any + Send>>,
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

unsafe extern "C" fn progress_trampoline(
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

unsafe extern "C" fn epoch_end_trampoline(
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

/// Trains a model: fit, step, evaluate, predict.
pub struct Trainer {
    raw: NonNull<sys::mpt_trainer_t>,
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

macro_rules! debug_handle {
    ($($name:ident),*) => {$(
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw.as_ptr())
            }
        }
    )*};
}
debug_handle!(Context, Model, Dataset, Trainer);

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

    #[test]
    fn the_context_lock_is_reentrant_and_exclusive() {
        let lock = Arc::new(ReentrantLock::default());
        let outer = lock.lock();
        let inner = lock.lock();
        let other = {
            let lock = lock.clone();
            thread::spawn(move || {
                let _held = lock.lock();
                thread::current().id()
            })
        };
        thread::sleep(std::time::Duration::from_millis(20));
        assert!(!other.is_finished(), "another thread took a held lock");
        drop(inner);
        thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !other.is_finished(),
            "released after one of two nested guards"
        );
        drop(outer);
        other.join().unwrap();
    }

    #[test]
    fn statuses_round_trip_through_their_codes() {
        for code in 1..=12 {
            let status = Status::from_code(code).unwrap();
            assert_eq!(status.code(), code);
            assert!(status.name().starts_with("MPT_STATUS_"));
        }
        assert_eq!(Status::from_code(0), None);
        assert_eq!(Status::from_code(99), Some(Status::Unknown(99)));
        assert_eq!(Status::Unknown(99).name(), "MPT_STATUS_UNKNOWN");
    }

    #[test]
    fn errors_display_status_and_message() {
        let error = Error::new(Status::ShapeMismatch, "output count is 5, expected 6");
        assert_eq!(
            error.to_string(),
            "MPT_STATUS_SHAPE_MISMATCH: output count is 5, expected 6"
        );
    }
}
