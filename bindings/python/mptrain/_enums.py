"""The C API's enums (mptrain.h's values, pinned: tests/test_abi.py checks them against the header), and
the C prefix of each."""
import enum


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    SHAPE_MISMATCH = 2
    OUT_OF_MEMORY = 3
    IO_ERROR = 4
    CORRUPT_DATA = 5
    INVALID_STATE = 6
    NON_FINITE = 7
    CANCELLED = 8
    BACKEND_UNAVAILABLE = 9
    BACKEND_ERROR = 10
    UNSUPPORTED = 11
    INTERNAL = 12


class Backend(enum.IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


class DType(enum.IntEnum):
    DEFAULT = 0
    FP32 = 1
    FP16 = 2
    BF16 = 3


class Precision(enum.IntEnum):
    FP32 = 0
    MIXED_FP16 = 1
    MIXED_BF16 = 2
    AUTO = 3


class Activation(enum.IntEnum):
    LINEAR = 0
    RELU = 1
    SIGMOID = 2
    TANH = 3
    SOFTMAX = 4  # last layer only
    LEAKY_RELU = 5  # Keras's "leaky_relu": slope 0.2 below 0
    ELU = 6
    SELU = 7
    SOFTPLUS = 8
    SOFTSIGN = 9


class Initializer(enum.IntEnum):
    """How a layer's weights are drawn when its model is built (Keras's kernel_initializer)."""
    GLOROT_UNIFORM = 0  # the default
    GLOROT_NORMAL = 1
    HE_UNIFORM = 2
    HE_NORMAL = 3
    LECUN_UNIFORM = 4
    LECUN_NORMAL = 5


class Loss(enum.IntEnum):
    SPARSE_CATEGORICAL_CROSSENTROPY = 0
    CATEGORICAL_CROSSENTROPY = 1
    BINARY_CROSSENTROPY = 2
    MEAN_SQUARED_ERROR = 3
    MEAN_ABSOLUTE_ERROR = 4
    HUBER = 5  # Keras's Huber(delta): Trainer's huber_delta


class Optimizer(enum.IntEnum):
    SGD = 0  # momentum and Nesterov through Trainer's momentum and nesterov
    ADAM = 1
    ADAMW = 2
    RMSPROP = 3  # Keras's RMSprop; momentum (not Nesterov) through Trainer's momentum
    LION = 4  # Keras's Lion; betas through Trainer's lion


class LrSchedule(enum.IntEnum):
    """How the learning rate decays after the warm-up (see Trainer's lr_schedule)."""
    CONSTANT = 0
    LINEAR = 1
    COSINE = 2
    STEP = 3


class LossScaling(enum.IntEnum):
    DEFAULT = 0
    OFF = 1
    STATIC = 2
    DYNAMIC = 3


class LogLevel(enum.IntEnum):
    DEBUG = 0
    INFO = 1
    WARNING = 2
    ERROR = 3


# The C prefix of each enum, for the ABI test and for error messages.
ENUM_PREFIXES = {
    Status: "MPT_STATUS_", Backend: "MPT_BACKEND_", DType: "MPT_DTYPE_", Precision: "MPT_PRECISION_",
    Activation: "MPT_ACTIVATION_", Initializer: "MPT_INITIALIZER_", Loss: "MPT_LOSS_", Optimizer: "MPT_OPTIMIZER_",
    LrSchedule: "MPT_LR_SCHEDULE_", LossScaling: "MPT_LOSS_SCALING_", LogLevel: "MPT_LOG_LEVEL_",
}
