//! Raw declarations of the mptrain C API, written by hand from `include/mptrain/mptrain.h` (the
//! specification; read it for each function's contract). Use the `mptrain` crate for a safe API.
//!
//! C enums are `c_int` type aliases with constants (a C library may return a value that a Rust enum
//! could not hold); opaque handles are zero-sized `#[repr(C)]` structs used only behind pointers.
//! The tests check every enum value and function name against the header, and the type sizes
//! against the C compiler.
#![allow(non_camel_case_types)]
#![no_std]

use core::ffi::{c_char, c_float, c_int, c_void};
use core::marker::{PhantomData, PhantomPinned};

pub type mpt_status = c_int;
pub const MPT_STATUS_OK: mpt_status = 0;
pub const MPT_STATUS_INVALID_ARGUMENT: mpt_status = 1;
pub const MPT_STATUS_SHAPE_MISMATCH: mpt_status = 2;
pub const MPT_STATUS_OUT_OF_MEMORY: mpt_status = 3;
pub const MPT_STATUS_IO_ERROR: mpt_status = 4;
pub const MPT_STATUS_CORRUPT_DATA: mpt_status = 5;
pub const MPT_STATUS_INVALID_STATE: mpt_status = 6;
pub const MPT_STATUS_NON_FINITE: mpt_status = 7;
pub const MPT_STATUS_CANCELLED: mpt_status = 8;
pub const MPT_STATUS_BACKEND_UNAVAILABLE: mpt_status = 9;
pub const MPT_STATUS_BACKEND_ERROR: mpt_status = 10;
pub const MPT_STATUS_UNSUPPORTED: mpt_status = 11;
pub const MPT_STATUS_INTERNAL: mpt_status = 12;

pub type mpt_backend = c_int;
pub const MPT_BACKEND_AUTO: mpt_backend = 0;
pub const MPT_BACKEND_CPU: mpt_backend = 1;
pub const MPT_BACKEND_CUDA: mpt_backend = 2;

pub type mpt_dtype = c_int;
pub const MPT_DTYPE_DEFAULT: mpt_dtype = 0;
pub const MPT_DTYPE_FP32: mpt_dtype = 1;
pub const MPT_DTYPE_FP16: mpt_dtype = 2;
pub const MPT_DTYPE_BF16: mpt_dtype = 3;

pub type mpt_precision = c_int;
pub const MPT_PRECISION_FP32: mpt_precision = 0;
pub const MPT_PRECISION_MIXED_FP16: mpt_precision = 1;
pub const MPT_PRECISION_MIXED_BF16: mpt_precision = 2;
pub const MPT_PRECISION_AUTO: mpt_precision = 3;

pub type mpt_activation = c_int;
pub const MPT_ACTIVATION_LINEAR: mpt_activation = 0;
pub const MPT_ACTIVATION_RELU: mpt_activation = 1;
pub const MPT_ACTIVATION_SIGMOID: mpt_activation = 2;
pub const MPT_ACTIVATION_TANH: mpt_activation = 3;
pub const MPT_ACTIVATION_SOFTMAX: mpt_activation = 4;
pub const MPT_ACTIVATION_LEAKY_RELU: mpt_activation = 5;
pub const MPT_ACTIVATION_ELU: mpt_activation = 6;
pub const MPT_ACTIVATION_SELU: mpt_activation = 7;
pub const MPT_ACTIVATION_SOFTPLUS: mpt_activation = 8;
pub const MPT_ACTIVATION_SOFTSIGN: mpt_activation = 9;

pub type mpt_initializer = c_int;
pub const MPT_INITIALIZER_GLOROT_UNIFORM: mpt_initializer = 0;
pub const MPT_INITIALIZER_GLOROT_NORMAL: mpt_initializer = 1;
pub const MPT_INITIALIZER_HE_UNIFORM: mpt_initializer = 2;
pub const MPT_INITIALIZER_HE_NORMAL: mpt_initializer = 3;
pub const MPT_INITIALIZER_LECUN_UNIFORM: mpt_initializer = 4;
pub const MPT_INITIALIZER_LECUN_NORMAL: mpt_initializer = 5;

pub type mpt_loss = c_int;
pub const MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: mpt_loss = 0;
pub const MPT_LOSS_CATEGORICAL_CROSSENTROPY: mpt_loss = 1;
pub const MPT_LOSS_BINARY_CROSSENTROPY: mpt_loss = 2;
pub const MPT_LOSS_MEAN_SQUARED_ERROR: mpt_loss = 3;
pub const MPT_LOSS_MEAN_ABSOLUTE_ERROR: mpt_loss = 4;
pub const MPT_LOSS_HUBER: mpt_loss = 5;

pub type mpt_optimizer = c_int;
pub const MPT_OPTIMIZER_SGD: mpt_optimizer = 0;
pub const MPT_OPTIMIZER_ADAM: mpt_optimizer = 1;
pub const MPT_OPTIMIZER_ADAMW: mpt_optimizer = 2;
pub const MPT_OPTIMIZER_RMSPROP: mpt_optimizer = 3;
pub const MPT_OPTIMIZER_LION: mpt_optimizer = 4;

pub type mpt_lr_schedule = c_int;
pub const MPT_LR_SCHEDULE_CONSTANT: mpt_lr_schedule = 0;
pub const MPT_LR_SCHEDULE_LINEAR: mpt_lr_schedule = 1;
pub const MPT_LR_SCHEDULE_COSINE: mpt_lr_schedule = 2;
pub const MPT_LR_SCHEDULE_STEP: mpt_lr_schedule = 3;

pub type mpt_loss_scaling = c_int;
pub const MPT_LOSS_SCALING_DEFAULT: mpt_loss_scaling = 0;
pub const MPT_LOSS_SCALING_OFF: mpt_loss_scaling = 1;
pub const MPT_LOSS_SCALING_STATIC: mpt_loss_scaling = 2;
pub const MPT_LOSS_SCALING_DYNAMIC: mpt_loss_scaling = 3;

pub type mpt_log_level = c_int;
pub const MPT_LOG_LEVEL_DEBUG: mpt_log_level = 0;
pub const MPT_LOG_LEVEL_INFO: mpt_log_level = 1;
pub const MPT_LOG_LEVEL_WARNING: mpt_log_level = 2;
pub const MPT_LOG_LEVEL_ERROR: mpt_log_level = 3;

macro_rules! opaque {
    ($($name:ident => $alias:ident),* $(,)?) => {$(
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
        pub type $alias = $name;
    )*};
}
opaque! {
    mpt_context => mpt_context_t,
    mpt_context_options => mpt_context_options_t,
    mpt_model => mpt_model_t,
    mpt_dataset => mpt_dataset_t,
    mpt_trainer => mpt_trainer_t,
    mpt_trainer_options => mpt_trainer_options_t,
}

pub type mpt_log_fn = Option<
    unsafe extern "C" fn(level: mpt_log_level, message: *const c_char, user_data: *mut c_void),
>;
pub type mpt_progress_fn = Option<
    unsafe extern "C" fn(
        epoch: i64,
        step: i64,
        steps_per_epoch: i64,
        loss: c_float,
        accuracy: c_float,
        user_data: *mut c_void,
    ) -> c_int,
>;
pub type mpt_epoch_end_fn = Option<
    unsafe extern "C" fn(
        epoch: i64,
        loss: c_float,
        accuracy: c_float,
        user_data: *mut c_void,
    ) -> c_int,
>;

extern "C" {
    // Version, status, errors
    pub fn mpt_version() -> *const c_char;
    pub fn mpt_status_string(status: mpt_status) -> *const c_char;
    pub fn mpt_last_error() -> *const c_char;
    pub fn mpt_cuda_device_count() -> c_int;

    // Context
    pub fn mpt_context_options_create(out: *mut *mut mpt_context_options_t) -> mpt_status;
    pub fn mpt_context_options_destroy(options: *mut mpt_context_options_t);
    pub fn mpt_context_options_set_backend(
        options: *mut mpt_context_options_t,
        backend: mpt_backend,
    ) -> mpt_status;
    pub fn mpt_context_options_set_threads(
        options: *mut mpt_context_options_t,
        threads: c_int,
    ) -> mpt_status;
    pub fn mpt_context_options_set_seed(
        options: *mut mpt_context_options_t,
        seed: u64,
    ) -> mpt_status;
    pub fn mpt_context_options_set_device(
        options: *mut mpt_context_options_t,
        device: c_int,
    ) -> mpt_status;
    pub fn mpt_context_options_set_log_callback(
        options: *mut mpt_context_options_t,
        callback: mpt_log_fn,
        user_data: *mut c_void,
    ) -> mpt_status;
    pub fn mpt_context_options_set_log_level(
        options: *mut mpt_context_options_t,
        level: mpt_log_level,
    ) -> mpt_status;
    pub fn mpt_context_options_set_memory_budget(
        options: *mut mpt_context_options_t,
        bytes: usize,
    ) -> mpt_status;
    pub fn mpt_context_options_set_dataset_device_budget(
        options: *mut mpt_context_options_t,
        bytes: usize,
    ) -> mpt_status;
    pub fn mpt_context_create(
        options: *const mpt_context_options_t,
        out: *mut *mut mpt_context_t,
    ) -> mpt_status;
    pub fn mpt_context_destroy(context: *mut mpt_context_t);
    pub fn mpt_context_get_backend(
        context: *const mpt_context_t,
        out: *mut mpt_backend,
    ) -> mpt_status;
    pub fn mpt_context_resolve_precision(
        context: *const mpt_context_t,
        requested: mpt_precision,
        out: *mut mpt_precision,
    ) -> mpt_status;
    pub fn mpt_context_get_memory(
        context: *const mpt_context_t,
        used_bytes: *mut usize,
        peak_bytes: *mut usize,
    ) -> mpt_status;
    pub fn mpt_context_describe(
        context: *const mpt_context_t,
        text: *mut c_char,
        capacity: usize,
        length: *mut usize,
    ) -> mpt_status;

    // Model
    pub fn mpt_model_create(
        context: *mut mpt_context_t,
        input_features: i64,
        out: *mut *mut mpt_model_t,
    ) -> mpt_status;
    pub fn mpt_model_destroy(model: *mut mpt_model_t);
    pub fn mpt_model_add_dense(
        model: *mut mpt_model_t,
        units: i64,
        activation: mpt_activation,
    ) -> mpt_status;
    pub fn mpt_model_set_layer_dtype(
        model: *mut mpt_model_t,
        layer: i64,
        dtype: mpt_dtype,
    ) -> mpt_status;
    pub fn mpt_model_set_layer_dropout(
        model: *mut mpt_model_t,
        layer: i64,
        rate: c_float,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_dropout(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_dtype(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut mpt_dtype,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_units(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut i64,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_activation(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut mpt_activation,
    ) -> mpt_status;
    pub fn mpt_model_set_input_dropout(model: *mut mpt_model_t, rate: c_float) -> mpt_status;
    pub fn mpt_model_get_input_dropout(model: *const mpt_model_t, out: *mut c_float) -> mpt_status;
    pub fn mpt_model_set_input_standardization(
        model: *mut mpt_model_t,
        mean: *const c_float,
        stddev: *const c_float,
        count: i64,
    ) -> mpt_status;
    pub fn mpt_model_get_input_standardization(
        model: *const mpt_model_t,
        mean: *mut c_float,
        stddev: *mut c_float,
        count: i64,
        standardizes: *mut c_int,
    ) -> mpt_status;
    pub fn mpt_model_set_layer_initializer(
        model: *mut mpt_model_t,
        layer: i64,
        initializer: mpt_initializer,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_initializer(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut mpt_initializer,
    ) -> mpt_status;
    pub fn mpt_model_set_layer_trainable(
        model: *mut mpt_model_t,
        layer: i64,
        trainable: c_int,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_trainable(
        model: *const mpt_model_t,
        layer: i64,
        out: *mut c_int,
    ) -> mpt_status;
    pub fn mpt_model_get_layer_count(model: *const mpt_model_t, out: *mut i64) -> mpt_status;
    pub fn mpt_model_get_input_features(model: *const mpt_model_t, out: *mut i64) -> mpt_status;
    pub fn mpt_model_get_output_features(model: *const mpt_model_t, out: *mut i64) -> mpt_status;
    pub fn mpt_model_get_parameter_count(model: *const mpt_model_t, out: *mut i64) -> mpt_status;
    pub fn mpt_model_get_weights(
        model: *mut mpt_model_t,
        layer: i64,
        weights: *mut c_float,
        weight_count: i64,
        bias: *mut c_float,
        bias_count: i64,
    ) -> mpt_status;
    pub fn mpt_model_set_weights(
        model: *mut mpt_model_t,
        layer: i64,
        weights: *const c_float,
        weight_count: i64,
        bias: *const c_float,
        bias_count: i64,
    ) -> mpt_status;
    pub fn mpt_model_predict(
        model: *mut mpt_model_t,
        inputs: *const c_float,
        rows: i64,
        out: *mut c_float,
        out_count: i64,
    ) -> mpt_status;
    pub fn mpt_model_save(model: *mut mpt_model_t, path: *const c_char) -> mpt_status;
    pub fn mpt_model_load(
        context: *mut mpt_context_t,
        path: *const c_char,
        out: *mut *mut mpt_model_t,
    ) -> mpt_status;

    // Dataset
    pub fn mpt_dataset_create_u8(
        context: *mut mpt_context_t,
        samples: *const u8,
        rows: i64,
        features: i64,
        labels: *const i32,
        num_classes: i32,
        scale: c_float,
        offset: c_float,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_create_f32(
        context: *mut mpt_context_t,
        samples: *const c_float,
        rows: i64,
        features: i64,
        labels: *const i32,
        num_classes: i32,
        check_finite: c_int,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_create_f32_targets(
        context: *mut mpt_context_t,
        samples: *const c_float,
        rows: i64,
        features: i64,
        targets: *const c_float,
        target_width: i64,
        check_finite: c_int,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_load_cifar10(
        context: *mut mpt_context_t,
        directory: *const c_char,
        train: c_int,
        limit: i64,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_destroy(dataset: *mut mpt_dataset_t);
    pub fn mpt_dataset_get_rows(dataset: *const mpt_dataset_t, out: *mut i64) -> mpt_status;
    pub fn mpt_dataset_get_features(dataset: *const mpt_dataset_t, out: *mut i64) -> mpt_status;
    pub fn mpt_dataset_get_labels(
        dataset: *const mpt_dataset_t,
        out: *mut i32,
        count: i64,
    ) -> mpt_status;
    pub fn mpt_dataset_create_slice(
        dataset: *const mpt_dataset_t,
        first: i64,
        rows: i64,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_create_weighted(
        dataset: *const mpt_dataset_t,
        weights: *const c_float,
        count: i64,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_create_subset(
        dataset: *const mpt_dataset_t,
        rows: *const i64,
        count: i64,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_create_standardized(
        dataset: *const mpt_dataset_t,
        mean: *const c_float,
        stddev: *const c_float,
        count: i64,
        out: *mut *mut mpt_dataset_t,
    ) -> mpt_status;
    pub fn mpt_dataset_get_feature_statistics(
        dataset: *const mpt_dataset_t,
        mean: *mut c_float,
        stddev: *mut c_float,
        count: i64,
    ) -> mpt_status;

    // Trainer options
    pub fn mpt_trainer_options_create(out: *mut *mut mpt_trainer_options_t) -> mpt_status;
    pub fn mpt_trainer_options_destroy(options: *mut mpt_trainer_options_t);
    pub fn mpt_trainer_options_set_precision(
        options: *mut mpt_trainer_options_t,
        precision: mpt_precision,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_loss(
        options: *mut mpt_trainer_options_t,
        loss: mpt_loss,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_huber_delta(
        options: *mut mpt_trainer_options_t,
        delta: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_label_smoothing(
        options: *mut mpt_trainer_options_t,
        label_smoothing: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_class_weights(
        options: *mut mpt_trainer_options_t,
        weights: *const c_float,
        count: i64,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_optimizer(
        options: *mut mpt_trainer_options_t,
        optimizer: mpt_optimizer,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_learning_rate(
        options: *mut mpt_trainer_options_t,
        learning_rate: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_momentum(
        options: *mut mpt_trainer_options_t,
        momentum: c_float,
        nesterov: c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_adam(
        options: *mut mpt_trainer_options_t,
        beta1: c_float,
        beta2: c_float,
        epsilon: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_rmsprop(
        options: *mut mpt_trainer_options_t,
        rho: c_float,
        epsilon: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_rmsprop_centered(
        options: *mut mpt_trainer_options_t,
        centered: c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_lion(
        options: *mut mpt_trainer_options_t,
        beta1: c_float,
        beta2: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_micro_batch_size(
        options: *mut mpt_trainer_options_t,
        rows: i64,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_weight_decay(
        options: *mut mpt_trainer_options_t,
        weight_decay: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_global_clipnorm(
        options: *mut mpt_trainer_options_t,
        clipnorm: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_ema(
        options: *mut mpt_trainer_options_t,
        momentum: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_lr_schedule(
        options: *mut mpt_trainer_options_t,
        schedule: mpt_lr_schedule,
        warmup_steps: i64,
        decay_steps: i64,
        factor: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_loss_scaling(
        options: *mut mpt_trainer_options_t,
        mode: mpt_loss_scaling,
        initial_scale: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_set_loss_scaler_dynamics(
        options: *mut mpt_trainer_options_t,
        growth_factor: c_float,
        backoff_factor: c_float,
        growth_interval: i64,
        min_scale: c_float,
        max_scale: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_precision(
        options: *const mpt_trainer_options_t,
        out: *mut mpt_precision,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_loss(
        options: *const mpt_trainer_options_t,
        out: *mut mpt_loss,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_huber_delta(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_label_smoothing(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_class_weights(
        options: *const mpt_trainer_options_t,
        weights: *mut c_float,
        capacity: i64,
        count: *mut i64,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_optimizer(
        options: *const mpt_trainer_options_t,
        out: *mut mpt_optimizer,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_learning_rate(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_momentum(
        options: *const mpt_trainer_options_t,
        momentum: *mut c_float,
        nesterov: *mut c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_adam(
        options: *const mpt_trainer_options_t,
        beta1: *mut c_float,
        beta2: *mut c_float,
        epsilon: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_lion(
        options: *const mpt_trainer_options_t,
        beta1: *mut c_float,
        beta2: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_rmsprop(
        options: *const mpt_trainer_options_t,
        rho: *mut c_float,
        epsilon: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_rmsprop_centered(
        options: *const mpt_trainer_options_t,
        out: *mut c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_weight_decay(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_global_clipnorm(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_ema(
        options: *const mpt_trainer_options_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_micro_batch_size(
        options: *const mpt_trainer_options_t,
        out: *mut i64,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_lr_schedule(
        options: *const mpt_trainer_options_t,
        schedule: *mut mpt_lr_schedule,
        warmup_steps: *mut i64,
        decay_steps: *mut i64,
        factor: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_loss_scaling(
        options: *const mpt_trainer_options_t,
        mode: *mut mpt_loss_scaling,
        initial_scale: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_get_loss_scaler_dynamics(
        options: *const mpt_trainer_options_t,
        growth_factor: *mut c_float,
        backoff_factor: *mut c_float,
        growth_interval: *mut i64,
        min_scale: *mut c_float,
        max_scale: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_options_create_from_checkpoint(
        path: *const c_char,
        out: *mut *mut mpt_trainer_options_t,
    ) -> mpt_status;

    // Trainer
    pub fn mpt_trainer_create(
        model: *mut mpt_model_t,
        options: *const mpt_trainer_options_t,
        out: *mut *mut mpt_trainer_t,
    ) -> mpt_status;
    pub fn mpt_trainer_destroy(trainer: *mut mpt_trainer_t);
    pub fn mpt_trainer_set_callbacks(
        trainer: *mut mpt_trainer_t,
        progress: mpt_progress_fn,
        epoch_end: mpt_epoch_end_fn,
        user_data: *mut c_void,
    ) -> mpt_status;
    pub fn mpt_trainer_fit(
        trainer: *mut mpt_trainer_t,
        dataset: *const mpt_dataset_t,
        epochs: i64,
        batch_size: i64,
        shuffle: c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_step(
        trainer: *mut mpt_trainer_t,
        dataset: *const mpt_dataset_t,
        first: i64,
        batch_size: i64,
        loss: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_evaluate(
        trainer: *mut mpt_trainer_t,
        dataset: *const mpt_dataset_t,
        batch_size: i64,
        loss: *mut c_float,
        accuracy: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_predict(
        trainer: *mut mpt_trainer_t,
        inputs: *const c_float,
        rows: i64,
        out: *mut c_float,
        out_count: i64,
    ) -> mpt_status;
    pub fn mpt_trainer_predict_dataset(
        trainer: *mut mpt_trainer_t,
        dataset: *const mpt_dataset_t,
        batch_size: i64,
        out: *mut c_float,
        out_count: i64,
    ) -> mpt_status;
    pub fn mpt_trainer_get_precision(
        trainer: *const mpt_trainer_t,
        out: *mut mpt_precision,
    ) -> mpt_status;
    pub fn mpt_trainer_set_learning_rate(
        trainer: *mut mpt_trainer_t,
        learning_rate: c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_get_learning_rate(
        trainer: *const mpt_trainer_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_get_options(
        trainer: *const mpt_trainer_t,
        out: *mut *mut mpt_trainer_options_t,
    ) -> mpt_status;
    pub fn mpt_trainer_get_scheduled_learning_rate(
        trainer: *const mpt_trainer_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_get_loss_scale(
        trainer: *const mpt_trainer_t,
        scale: *mut c_float,
        growth_tracker: *mut i64,
        skipped_steps: *mut i64,
    ) -> mpt_status;
    pub fn mpt_trainer_get_gradient_norm(
        trainer: *const mpt_trainer_t,
        out: *mut c_float,
    ) -> mpt_status;
    pub fn mpt_trainer_swap_ema_weights(
        trainer: *mut mpt_trainer_t,
        holds_averages: *mut c_int,
    ) -> mpt_status;
    pub fn mpt_trainer_get_progress(
        trainer: *const mpt_trainer_t,
        steps: *mut i64,
        epochs: *mut i64,
    ) -> mpt_status;
    pub fn mpt_trainer_get_batch_size(trainer: *const mpt_trainer_t, rows: *mut i64) -> mpt_status;
    pub fn mpt_trainer_get_unfinished_epoch(
        trainer: *const mpt_trainer_t,
        steps: *mut i64,
        rows: *mut i64,
        batch_size: *mut i64,
    ) -> mpt_status;
    pub fn mpt_trainer_save_checkpoint(
        trainer: *mut mpt_trainer_t,
        path: *const c_char,
    ) -> mpt_status;
    pub fn mpt_trainer_load_checkpoint(
        trainer: *mut mpt_trainer_t,
        path: *const c_char,
    ) -> mpt_status;
    pub fn mpt_trainer_set_checkpointing(
        trainer: *mut mpt_trainer_t,
        directory: *const c_char,
        every_steps: i64,
        every_epochs: i64,
        keep_last: i64,
    ) -> mpt_status;
    pub fn mpt_trainer_get_memory(
        trainer: *const mpt_trainer_t,
        planned_bytes: *mut usize,
        allocated_bytes: *mut usize,
    ) -> mpt_status;
    pub fn mpt_trainer_get_last_epoch_time(
        trainer: *const mpt_trainer_t,
        seconds: *mut f64,
        steps: *mut i64,
    ) -> mpt_status;
}
