//! The C API's enums as Rust enums of the same values, all made by one macro so that each converts
//! to and from its C code alike.

use crate::error::{Error, Result, Status};
use mptrain_sys as sys;
use std::os::raw::c_int;

// Named only in doc links.
#[cfg(doc)]
use crate::TrainerOptions;

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
            pub(crate) fn returned(code: c_int) -> Result<Self> {
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
