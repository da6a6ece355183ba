"""mptrain: Python bindings (ctypes) of the mptrain mixed-precision training runtime.

    import mptrain
    ctx = mptrain.Context(backend="cpu", seed=7)
    model = mptrain.Model(ctx, 4).add_dense(16, "relu").add_dense(3, "softmax")
    data = mptrain.Dataset.from_f32(ctx, samples, labels, num_classes=3)   # samples: [rows, 4]
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    trainer.fit(data, epochs=5, batch_size=32)
    print(trainer.evaluate(data).accuracy)
    probabilities = trainer.predict_dataset(data)         # [rows, 3]; data.labels: the labels given
    model.save("model.safetensors")                      # later: mptrain.Model.load(ctx, "model.safetensors")

Every failure of the library raises mptrain.Error, carrying .status (a Status) and .message. Wrong
Python types raise TypeError; an integer its C parameter cannot hold raises an Error (INVALID_ARGUMENT)
that is also an OverflowError. numpy arrays are accepted (and returned) when numpy is installed;
otherwise any buffer (array.array, memoryview) or (nested) list works, and outputs are array.array.

Threads: objects may be shared between threads; calls on objects of one Context are serialised by a
lock (the C library allows one thread at a time per context), different contexts run in parallel.
"""
import array
import collections
import collections.abc
import contextlib
import ctypes
import enum
import operator
import os
import threading

from . import _interrupt, _native

# libmptrain loads before numpy where it can: both may use the system's OpenBLAS, which chooses its
# kernels once, when the first of them loads it, and mptrain names the kernels the CPU allows
# (OpenBLAS 0.3.21 takes CPUs it does not know for an SSE3-only Prescott, 3-4x slower).
try:
    _preloaded_lib = _native.load_library()
except OSError:  # raised again, naming what was tried, on first use
    _preloaded_lib = None

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised where numpy is absent
    _np = None

__all__ = [
    "Activation", "Backend", "Context", "Dataset", "DType", "Error", "Evaluation", "LogLevel", "Loss",
    "LossScale", "LossScaling", "LrSchedule", "Model", "Optimizer", "Precision", "Status", "Trainer",
    "cuda_device_count", "version",
]


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


# decay_factor when none is given: a decay to rate 0 (Keras's CosineDecay alpha, PyTorch's
# CosineAnnealingLR eta_min, Hugging Face's linear schedule), PyTorch StepLR's gamma for STEP.
_DEFAULT_DECAY_FACTORS = {LrSchedule.CONSTANT: 1.0, LrSchedule.LINEAR: 0.0, LrSchedule.COSINE: 0.0,
                          LrSchedule.STEP: 0.1}


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

Evaluation = collections.namedtuple("Evaluation", "loss accuracy")
LossScale = collections.namedtuple("LossScale", "scale growth_tracker skipped_steps")
Progress = collections.namedtuple("Progress", "steps epochs")
Memory = collections.namedtuple("Memory", "used peak")
TrainerMemory = collections.namedtuple("TrainerMemory", "planned allocated")
EpochTime = collections.namedtuple("EpochTime", "seconds steps")
UnfinishedEpoch = collections.namedtuple("UnfinishedEpoch", "steps rows batch_size")


class Error(Exception):
    """The one exception type of mptrain: a failed call's status and message."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass  # a status newer than these bindings stays a plain int
        self.status = status
        self.message = message
        name = status.name if isinstance(status, Status) else "status %d" % status
        super().__init__("%s: %s" % (name, message))


class _OutOfRange(Error, OverflowError):
    """An integer argument its C type cannot hold: an Error (INVALID_ARGUMENT) like the library's own
    refusals, and an OverflowError like Python's own conversions to C integers."""

    def __init__(self, message):
        super().__init__(Status.INVALID_ARGUMENT, message)


# ---- the library --------------------------------------------------------------------------------------
_lib_instance = _preloaded_lib
_lib_lock = threading.Lock()


def _lib():
    global _lib_instance
    if _lib_instance is None:
        with _lib_lock:
            if _lib_instance is None:
                _lib_instance = _native.load_library()
    return _lib_instance


def _failure(status):
    """The Error of a failed call's status, its message read now (the next call replaces it); else None."""
    if status == 0:
        return None
    message = _lib().mpt_last_error()
    return Error(status, message.decode("utf-8", "replace") if message else "")


def _check(status):
    failure = _failure(status)
    if failure is not None:
        raise failure


def version():
    """Version string of the loaded library, e.g. "0.1.0"."""
    return _lib().mpt_version().decode()


def cuda_device_count():
    return int(_lib().mpt_cuda_device_count())


def status_string(status):
    return _lib().mpt_status_string(_integer(status, "status", _native.c_enum)).decode()


# Keras's short loss names, beside the functions' and classes' names.
_ENUM_ALIASES = {"Loss": {"MSE": "MEAN_SQUARED_ERROR", "MAE": "MEAN_ABSOLUTE_ERROR"}}


def _squashed(name):
    """A name without case, underscores, hyphens or spaces: Keras's strings ("leaky_relu", "he_normal")
    and class names ("LeakyReLU", "HeNormal", "RMSprop", "AdamW") meet the members' names there."""
    return "".join(c for c in name if c not in "_- ").upper()


def _enum(kind, value, what):
    """An enum member from a member, an int (passed on for the library to check) or a name: the
    member's, in any case, or Keras's string or class name for it."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        wanted = _squashed(value)
        wanted = _squashed(_ENUM_ALIASES.get(kind.__name__, {}).get(wanted, wanted))
        for member in kind:
            if _squashed(member.name) == wanted:
                return member
        raise Error(Status.INVALID_ARGUMENT, "unknown %s %r (one of %s)" % (
            what, value, ", ".join(m.name.lower() for m in kind)))
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be a %s, its name or an int, not %s" % (what, kind.__name__,
                                                                         type(value).__name__))
    return _integer(value, what, _native.c_enum)


def _path(value, what):
    """A file system path (str, bytes or os.PathLike) as the bytes given to C; NUL is refused (C would
    stop there)."""
    try:
        path = os.fsencode(value)
    except TypeError:
        raise TypeError("%s must be a str, bytes or os.PathLike, not %s" % (what, type(value).__name__)) from None
    if b"\0" in path:
        raise Error(Status.INVALID_ARGUMENT, "%s contains NUL" % what)
    return path


def _c_range(ctype):
    """(lowest, highest, C name) of a ctypes integer type."""
    bits = 8 * ctypes.sizeof(ctype)
    if ctype(-1).value == -1:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1, "int%d_t" % bits
    return 0, (1 << bits) - 1, "uint%d_t" % bits


def _integer(value, what, ctype):
    """An int (or anything with __index__, e.g. a numpy integer) that fits the C parameter's type:
    ctypes would silently keep only its low bits (2**64 + 4 becomes 4, -1 as a size_t becomes SIZE_MAX)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an integer, not %s" % (what, type(value).__name__))
    value = value.__index__()
    lowest, highest, name = _c_range(ctype)
    if not lowest <= value <= highest:
        raise _OutOfRange("%s is %d, outside the range of its C type %s [%d, %d]" % (
            what, value, name, lowest, highest))
    return value


# ---- buffers in and out ---------------------------------------------------------------------------
class _Buffer:
    """A C view of caller data: pointer, element count, shape (if known), and what keeps it alive."""

    __slots__ = ("pointer", "count", "shape", "owner")

    def __init__(self, pointer, count, shape, owner):
        self.pointer, self.count, self.shape, self.owner = pointer, count, shape, owner


def _flatten(data):
    if data and isinstance(data[0], (list, tuple)):
        width = len(data[0])
        flat = []
        for row in data:
            if len(row) != width:
                raise Error(Status.SHAPE_MISMATCH, "rows of different lengths")
            flat.extend(row)
        return flat, (len(data), width)
    return list(data), (len(data),)


def _buffer(data, ctype, typecode, np_dtype, what, integer=False):
    if data is None:
        raise TypeError("%s must not be None" % what)
    if _np is not None and isinstance(data, _np.ndarray):
        if integer and data.size and not _np.issubdtype(data.dtype, _np.integer):
            raise TypeError("%s must hold integers, not %s" % (what, data.dtype))
        if integer and data.size:
            info = _np.iinfo(np_dtype)
            if data.min() < info.min or data.max() > info.max:
                raise Error(Status.INVALID_ARGUMENT, "%s has values outside the range of %s" % (what, np_dtype))
        converted = _np.ascontiguousarray(data, dtype=np_dtype)
        return _Buffer(converted.ctypes.data_as(ctypes.POINTER(ctype)), converted.size, data.shape, converted)
    if isinstance(data, (str, dict, set)) or not hasattr(data, "__len__") and not isinstance(data, memoryview):
        raise TypeError("%s must be an array, a buffer or a sequence of numbers, not %s" % (
            what, type(data).__name__))
    shape = None
    try:
        view = memoryview(data)
    except TypeError:
        view = None
    if view is not None and view.format.lstrip("@=") == typecode and view.itemsize == ctypes.sizeof(ctype) \
            and view.c_contiguous:
        count = view.nbytes // view.itemsize
        shape = tuple(view.shape) if view.ndim else (count,)
        if view.readonly:
            holder = (ctype * count).from_buffer_copy(view)
        else:
            holder = (ctype * count).from_buffer(view)
        return _Buffer(ctypes.cast(holder, ctypes.POINTER(ctype)), count, shape, (holder, data))
    values = view.tolist() if view is not None else data
    try:
        flat, shape = _flatten(list(values))
        converted = array.array(typecode, flat)
    except OverflowError:
        raise Error(Status.INVALID_ARGUMENT, "%s has values outside the range of its C type" % what) from None
    except TypeError:
        raise TypeError("%s must hold %s" % (what, "integers" if integer else "numbers")) from None
    count = len(converted)
    holder = (ctype * count).from_buffer(converted) if count else (ctype * 0)()
    return _Buffer(ctypes.cast(holder, ctypes.POINTER(ctype)), count, shape, (holder, converted))


def _floats(data, what):
    return _buffer(data, ctypes.c_float, "f", "float32", what)


def _int32s(data, what):
    return _buffer(data, ctypes.c_int32, "i", "int32", what, integer=True)


def _int64s(data, what):
    return _buffer(data, ctypes.c_int64, "q", "int64", what, integer=True)


def _bytes(data, what):
    if isinstance(data, (bytes, bytearray)):
        data = memoryview(data).cast("B")
    return _buffer(data, ctypes.c_uint8, "B", "uint8", what, integer=True)


# The most values the library takes in one caller's array: MPT_MAX_HOST_ELEMENTS in mptrain.h.
MAX_HOST_ELEMENTS = 1 << 40


def _output(count, shape, ctype=ctypes.c_float, typecode="f", np_dtype="float32"):
    """An output buffer of float32 (or, given the types, int32: labels): a numpy array of `shape` when
    numpy is installed, else a flat array.array. Refused as the library would refuse it (and before
    allocating) past MAX_HOST_ELEMENTS; a failed allocation is an Error like the library's own, not
    Python's MemoryError."""
    if count > MAX_HOST_ELEMENTS:
        raise Error(Status.INVALID_ARGUMENT, "an output of %d values is more than the library takes in one "
                                             "array (%d)" % (count, MAX_HOST_ELEMENTS))
    try:
        if _np is not None:
            out = _np.empty(shape, dtype=np_dtype)
            return out, out.ctypes.data_as(ctypes.POINTER(ctype))
        out = array.array(typecode, bytes(ctypes.sizeof(ctype) * count))
    except MemoryError:
        raise Error(Status.OUT_OF_MEMORY, "no host memory for an output of %d values" % count) from None
    holder = (ctype * count).from_buffer(out) if count else (ctype * 0)()
    return out, ctypes.cast(holder, ctypes.POINTER(ctype))


def _check_shape(buffer, shape, what):
    """Refuses an array shaped other than `shape` though it holds as many values (transposed weights):
    the library sees only the count. A flat (1-D) sequence stays accepted; its count is checked by C."""
    if buffer.shape is not None and len(buffer.shape) != 1 and tuple(buffer.shape) != shape:
        raise Error(Status.SHAPE_MISMATCH, "%s has shape %s, not %s" % (what, tuple(buffer.shape), shape))


def _rows_of(buffer, width, what):
    if buffer.count == 0 or width <= 0 or buffer.count % width:
        raise Error(Status.SHAPE_MISMATCH, "%s holds %d values, not whole rows of %d" % (what, buffer.count, width))
    return buffer.count // width


# ---- handles ------------------------------------------------------------------------------------------
class _Family:
    """What all objects created from one Context share: the lock that serialises their calls (ctypes
    releases the GIL), and the log callback, alive while any of them is.

    `with family:` holds the lock for a C call. It is refused (Error, INVALID_STATE) on a thread running
    the family's log callback: the C API forbids that callback to call back into mptrain on the same
    context, as the library may log halfway through a call, holding its own locks. Handles closed or
    collected inside the callback are destroyed once the call that logged has returned."""

    __slots__ = ("lock", "log_callback", "in_log_callback", "deferred", "__weakref__")

    def __init__(self):
        self.lock = threading.RLock()
        self.log_callback = None
        self.in_log_callback = threading.local()  # .active: this thread runs the log callback
        self.deferred = []  # (destroy function name, pointer) closed inside the log callback

    def _in_log_callback(self):
        return getattr(self.in_log_callback, "active", False)

    def __enter__(self):
        if self._in_log_callback():
            raise Error(Status.INVALID_STATE, "the log callback called back into mptrain on its own context, "
                                              "which the C API forbids (objects of other contexts may be used)")
        self.lock.acquire()
        return self

    def __exit__(self, *exc):
        try:
            self._destroy_deferred()  # the C call has returned: destroy what its log callback closed
        finally:
            self.lock.release()

    def _destroy_deferred(self):
        while self.deferred:
            name, pointer = self.deferred.pop(0)
            getattr(_lib(), name)(pointer)

    def destroy(self, name, pointer):
        """Calls the C destroy function `name` (a close cannot be refused); inside the log callback, once
        the call that logged has returned."""
        with self.lock:
            if self._in_log_callback():
                self.deferred.append((name, pointer))
                return
            getattr(_lib(), name)(pointer)
            self._destroy_deferred()  # what the log callback closed while the destroy logged


class _Locked:
    """Enters one or more families, in a fixed order."""

    def __init__(self, *families):
        unique = {id(f): f for f in families}
        self.families = [unique[key] for key in sorted(unique)]

    def __enter__(self):
        entered = []
        try:
            for family in self.families:
                family.__enter__()
                entered.append(family)
        except BaseException:
            for family in reversed(entered):
                family.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        self._exit(len(self.families))

    def _exit(self, count):
        """Exits the first `count` families, the last first; each one even if another raised."""
        try:
            self.families[count - 1].__exit__(None, None, None)
        finally:
            if count > 1:
                self._exit(count - 1)


class _Handle:
    _destroy_name = None

    def __init__(self, pointer, family):
        self._ptr = pointer
        self._family = family

    def _get(self):
        if self._ptr is None:
            raise Error(Status.INVALID_ARGUMENT, "this %s is closed" % type(self).__name__)
        return self._ptr

    @property
    def closed(self):
        return self._ptr is None

    def close(self):
        """Releases the handle now (also done when the object is collected). Idempotent; objects created
        from this one stay usable."""
        pointer, self._ptr = getattr(self, "_ptr", None), None
        if pointer is not None:
            self._family.destroy(self._destroy_name, pointer)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def _require(value, kind, what):
    if not isinstance(value, kind):
        raise TypeError("%s must be a mptrain.%s, not %s" % (what, kind.__name__, type(value).__name__))
    return value


class Context(_Handle):
    """Backend, threads, seed, log callback and memory budget; parent of models and datasets.
    `dataset_device_budget` bounds the device bytes of one data set on a GPU (larger ones are streamed
    from host memory).

    `log` is called as log(level: LogLevel, message: str) on the calling thread; its exceptions are
    swallowed (a log message cannot fail a call). It must not call back into this context (the C API
    forbids it): any call on the context or its models, datasets and trainers made from it raises Error
    (INVALID_STATE); other contexts may be used. One of them closed there is destroyed once the call
    that logged has returned."""

    _destroy_name = "mpt_context_destroy"

    def __init__(self, backend=None, threads=None, seed=None, device=None, log=None, log_level=None,
                 memory_budget=None, dataset_device_budget=None):
        lib = _lib()
        family = _Family()
        options = _native.ContextOptionsP()
        _check(lib.mpt_context_options_create(ctypes.byref(options)))
        try:
            if backend is not None:
                _check(lib.mpt_context_options_set_backend(options, _enum(Backend, backend, "backend")))
            if threads is not None:
                _check(lib.mpt_context_options_set_threads(options, _integer(threads, "threads", ctypes.c_int)))
            if seed is not None:
                _check(lib.mpt_context_options_set_seed(options, _integer(seed, "seed", ctypes.c_uint64)))
            if device is not None:
                _check(lib.mpt_context_options_set_device(options, _integer(device, "device", ctypes.c_int)))
            if log_level is not None:
                _check(lib.mpt_context_options_set_log_level(options, _enum(LogLevel, log_level, "log_level")))
            if memory_budget is not None:
                _check(lib.mpt_context_options_set_memory_budget(
                    options, _integer(memory_budget, "memory_budget", ctypes.c_size_t)))
            if dataset_device_budget is not None:
                _check(lib.mpt_context_options_set_dataset_device_budget(
                    options, _integer(dataset_device_budget, "dataset_device_budget", ctypes.c_size_t)))
            if log is not None:
                if not callable(log):
                    raise TypeError("log must be callable")

                marker = family.in_log_callback  # not the family: no reference cycle through the callback

                def trampoline(level, message, _user_data):
                    was_active = getattr(marker, "active", False)
                    marker.active = True
                    try:
                        try:
                            level = LogLevel(level)
                        except ValueError:
                            pass
                        log(level, message.decode("utf-8", "replace") if message else "")
                    except BaseException:  # never unwind into C
                        pass
                    finally:
                        marker.active = was_active

                family.log_callback = _native.mpt_log_fn(trampoline)
                _check(lib.mpt_context_options_set_log_callback(options, family.log_callback, None))
            pointer = _native.ContextP()
            _check(lib.mpt_context_create(options, ctypes.byref(pointer)))
        finally:
            lib.mpt_context_options_destroy(options)
        super().__init__(pointer, family)

    @property
    def backend(self):
        out = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_context_get_backend(self._get(), ctypes.byref(out)))
        return Backend(out.value)

    def resolve_precision(self, requested=Precision.AUTO):
        out = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_context_resolve_precision(self._get(), _enum(Precision, requested, "precision"),
                                                        ctypes.byref(out)))
        return Precision(out.value)

    @property
    def memory(self):
        used, peak = ctypes.c_size_t(), ctypes.c_size_t()
        with self._family:
            _check(_lib().mpt_context_get_memory(self._get(), ctypes.byref(used), ctypes.byref(peak)))
        return Memory(used.value, peak.value)


class Model(_Handle):
    """A sequential stack of Dense layers taking `input_features` floats per sample."""

    _destroy_name = "mpt_model_destroy"

    def __init__(self, context, input_features):
        _require(context, Context, "context")
        input_features = _integer(input_features, "input_features", ctypes.c_int64)
        pointer = _native.ModelP()
        with context._family:
            _check(_lib().mpt_model_create(context._get(), input_features, ctypes.byref(pointer)))
        super().__init__(pointer, context._family)

    def add_dense(self, units, activation=Activation.LINEAR):
        """Appends a Dense layer; returns self, so calls chain."""
        units = _integer(units, "units", ctypes.c_int64)
        with self._family:
            _check(_lib().mpt_model_add_dense(self._get(), units, _enum(Activation, activation, "activation")))
        return self

    def set_layer_dtype(self, layer, dtype):
        with self._family:
            _check(_lib().mpt_model_set_layer_dtype(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                    _enum(DType, dtype, "dtype")))
        return self

    def get_layer_dtype(self, layer):
        """Layer `layer`'s dtype override (DType.DEFAULT: the policy's)."""
        return DType(self._query_layer("mpt_model_get_layer_dtype", layer, ctypes.c_int))

    def set_layer_dropout(self, layer, rate):
        """Dropout after hidden layer `layer`, as a Keras Dropout(rate) layer after it: while a trainer
        trains (fit, step), each of its outputs is dropped with probability `rate` in [0, 1) and the
        kept ones are scaled by 1 / (1 - rate); evaluate and predict use every output. 0 (the default)
        means none. Before the model is built; another rate or layer raises Error (INVALID_ARGUMENT).
        Building a model whose last layer has dropout (a Trainer, predict, weights) raises Error
        (INVALID_STATE). Saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_dropout(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                      float(rate)))
        return self

    def set_input_dropout(self, rate):
        """Dropout on the inputs, as a Keras Dropout(rate) before the first Dense layer: while a trainer
        trains, each input value is dropped with probability `rate` in [0, 1) and the kept ones are
        scaled by 1 / (1 - rate); evaluate and predict use every input. Before the model is built;
        saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_input_dropout(self._get(), float(rate)))
        return self

    def get_input_dropout(self):
        """The inputs' dropout rate (0.0: none)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_model_get_input_dropout(self._get(), ctypes.byref(out)))
        return out.value

    def set_input_standardization(self, mean, stddev):
        """Standardizes the inputs inside the model, as a Keras Normalization layer before the first
        Dense layer: input feature f becomes (x - mean[f]) / max(stddev[f], 1e-7), each operation
        rounded in float32, in fit, step, evaluate and predict_dataset and in predict alike. Saved with
        the model, so a loaded model predicts from raw inputs as the trained one did. A training set's
        statistics are the values to give (Keras's adapt):

            mean, stddev = training.feature_statistics()
            model.set_input_standardization(mean, stddev)   # then fit on the raw training set

        `mean` and `stddev` are sequences of floats, one per input feature, as for
        Dataset.standardized: another count (or counts that differ), or an array of more than one
        dimension, raises Error with Status.SHAPE_MISMATCH; a non-finite mean or a negative or
        non-finite standard deviation Status.INVALID_ARGUMENT naming the first such; anything but
        numbers TypeError. They are copied and replace any the model had. A trainer refuses a
        standardized Dataset for such a model (Status.INVALID_ARGUMENT: that would standardize twice).
        At any time but while a trainer fits the model (Status.INVALID_STATE). Returns self, so calls
        chain."""
        mean_data = _floats(mean, "mean")
        stddev_data = _floats(stddev, "stddev")
        for data, what in ((mean_data, "mean"), (stddev_data, "stddev")):
            if data.shape is not None and len(data.shape) != 1:
                raise Error(Status.SHAPE_MISMATCH, "%s must be one-dimensional (one per input feature), not of "
                            "shape %s" % (what, data.shape))
        # One count reaches C: sequences of different lengths are the shape mismatch it reports for a
        # count other than the input features.
        if mean_data.count != stddev_data.count:
            raise Error(Status.SHAPE_MISMATCH, "standardization takes one mean and one stddev per input feature "
                        "(%d means and %d stddevs given)" % (mean_data.count, stddev_data.count))
        with self._family:
            _check(_lib().mpt_model_set_input_standardization(self._get(), mean_data.pointer, stddev_data.pointer,
                                                              mean_data.count))
        return self

    def clear_input_standardization(self):
        """Removes the model's input standardization, if any: it takes its inputs as given again.
        Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_input_standardization(self._get(), None, None, 0))
        return self

    def get_input_standardization(self):
        """(mean, stddev) the model standardizes its inputs by, as set (not floored), each a float32
        numpy array [input_features] when numpy is installed, else array.array("f"), as
        Dataset.feature_statistics gives them; None when the model takes its inputs as given."""
        standardizes = ctypes.c_int()
        with self._family:
            features = self.input_features
            mean, mean_ptr = _output(features, (features,))
            stddev, stddev_ptr = _output(features, (features,))
            _check(_lib().mpt_model_get_input_standardization(self._get(), mean_ptr, stddev_ptr, features,
                                                              ctypes.byref(standardizes)))
        return (mean, stddev) if standardizes.value else None

    def set_layer_initializer(self, layer, initializer):
        """How layer `layer`'s weights are drawn when the model is built: an Initializer or its Keras
        name ("he_normal", "lecun_normal", ...; default "glorot_uniform"), from the context's seed.
        Before the model is built (else Error INVALID_STATE); not saved with the model, whose file
        holds the weights. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_initializer(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                          _enum(Initializer, initializer, "initializer")))
        return self

    def get_layer_initializer(self, layer):
        """Layer `layer`'s Initializer (a loaded model's are the default: its file holds weights)."""
        return Initializer(self._query_layer("mpt_model_get_layer_initializer", layer, ctypes.c_int))

    def get_layer_dropout(self, layer):
        """Layer `layer`'s dropout rate (0.0: none)."""
        return self._query_layer("mpt_model_get_layer_dropout", layer, ctypes.c_float)

    def set_layer_trainable(self, layer, trainable):
        """Freezes layer `layer` (False) or lets it train (True, the default), as Keras's
        layer.trainable: trainers' steps leave a frozen layer's weights, bias and optimizer state
        exactly as they are (no gradient, no weight decay, no share of the clipped norm, no averaging:
        swapped in, the averages leave it as it is), while gradients still flow through it to the layers
        below. At any time: every trainer's next step reads it. Training with every layer frozen
        raises Error (INVALID_STATE). Saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_trainable(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                        1 if trainable else 0))
        return self

    def get_layer_trainable(self, layer):
        """Whether layer `layer` trains (False: frozen)."""
        return self._query_layer("mpt_model_get_layer_trainable", layer, ctypes.c_int) != 0

    def _query(self, name):
        out = ctypes.c_int64()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), ctypes.byref(out)))
        return out.value

    def _query_layer(self, name, layer, ctype):
        """What the per-layer getter `name` writes for `layer`, read as `ctype`."""
        out = ctype()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), _integer(layer, "layer", ctypes.c_int64), ctypes.byref(out)))
        return out.value

    @property
    def layer_count(self):
        return self._query("mpt_model_get_layer_count")

    @property
    def input_features(self):
        return self._query("mpt_model_get_input_features")

    @property
    def output_features(self):
        return self._query("mpt_model_get_output_features")

    @property
    def parameter_count(self):
        return self._query("mpt_model_get_parameter_count")

    def get_layer_units(self, layer):
        """Layer `layer`'s width, as added or as a loaded file holds it."""
        return self._query_layer("mpt_model_get_layer_units", layer, ctypes.c_int64)

    def get_layer_activation(self, layer):
        """Layer `layer`'s Activation, as added or as a loaded file holds it."""
        return Activation(self._query_layer("mpt_model_get_layer_activation", layer, ctypes.c_int))

    def _layer_shape(self, layer):
        layer = _integer(layer, "layer", ctypes.c_int64)
        units = self.get_layer_units(layer)  # raises for a layer out of range
        inputs = self.input_features if layer == 0 else self.get_layer_units(layer - 1)
        return layer, units, inputs

    def get_weights(self, layer):
        """(weights [units, inputs], bias [units]) of a layer: its fp32 master copy."""
        layer, units, inputs = self._layer_shape(layer)
        weights, weights_ptr = _output(units * inputs, (units, inputs))
        bias, bias_ptr = _output(units, (units,))
        with self._family:
            _check(_lib().mpt_model_get_weights(self._get(), layer, weights_ptr, units * inputs, bias_ptr, units))
        return weights, bias

    def set_weights(self, layer, weights=None, bias=None):
        """Sets a layer's weights ([units, inputs] row-major) and/or bias ([units]); None keeps one."""
        layer, units, inputs = self._layer_shape(layer)
        w = _floats(weights, "weights") if weights is not None else None
        b = _floats(bias, "bias") if bias is not None else None
        if w is not None:
            _check_shape(w, (units, inputs), "weights of layer %d" % layer)
        if b is not None:
            _check_shape(b, (units,), "bias of layer %d" % layer)
        with self._family:
            _check(_lib().mpt_model_set_weights(self._get(), layer, w.pointer if w else None, w.count if w else 0,
                                                b.pointer if b else None, b.count if b else 0))

    def predict(self, inputs):
        """fp32 forward pass: outputs [rows, output_features] for inputs of whole rows."""
        data = _floats(inputs, "inputs")
        rows = _rows_of(data, self.input_features, "inputs")
        width = self.output_features
        out, out_ptr = _output(rows * width, (rows, width))
        with self._family:
            _check(_lib().mpt_model_predict(self._get(), data.pointer, rows, out_ptr, rows * width))
        return out

    def save(self, path):
        """Saves the architecture and fp32 weights as a .safetensors file at `path` (str or
        os.PathLike), atomically: a crash leaves the old file or the new one. Builds the model."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_model_save(self._get(), encoded))

    @classmethod
    def load(cls, context, path):
        """A model read from a file written by save (or from a training checkpoint). A missing file
        raises Error with Status.IO_ERROR, a truncated or damaged one Status.CORRUPT_DATA, one from
        another major version Status.UNSUPPORTED."""
        _require(context, Context, "context")
        encoded = _path(path, "path")
        pointer = _native.ModelP()
        with context._family:
            _check(_lib().mpt_model_load(context._get(), encoded, ctypes.byref(pointer)))
            model = cls.__new__(cls)
            _Handle.__init__(model, pointer, context._family)
        return model


class Dataset(_Handle):
    """Training data, copied into the library: build one with from_f32, from_u8, from_targets or
    load_cifar10, or take rows of one without a copy with slice(first, rows) or dataset[a:b], or with
    a weight per row (Keras's sample_weight) with weighted(weights), or standardized feature by
    feature (Keras's Normalization) with standardized(mean, stddev) from feature_statistics()."""

    _destroy_name = "mpt_dataset_destroy"

    @staticmethod
    def _shape(buffer, rows, features, what):
        if features is None:
            if buffer.shape is not None and len(buffer.shape) == 2:
                features = buffer.shape[1]
            elif rows:
                features = buffer.count // rows
            else:
                features = 0
        features = _integer(features, "features", ctypes.c_int64)
        if rows == 0 or features <= 0 or buffer.count != rows * features:
            raise Error(Status.SHAPE_MISMATCH, "%s holds %d values; %d rows of %d features need %d" % (
                what, buffer.count, rows, features, rows * features))
        return features

    @classmethod
    def _create(cls, context, function, *args):
        _require(context, Context, "context")
        pointer = _native.DatasetP()
        with context._family:
            _check(getattr(_lib(), function)(context._get(), *args, ctypes.byref(pointer)))
        return cls(pointer, context._family)

    @classmethod
    def from_f32(cls, context, samples, labels, num_classes, features=None, check_finite=True):
        """float32 samples ([rows, features]) with int labels in [0, num_classes)."""
        label_data = _int32s(labels, "labels")
        sample_data = _floats(samples, "samples")
        features = cls._shape(sample_data, label_data.count, features, "samples")
        num_classes = _integer(num_classes, "num_classes", ctypes.c_int32)
        return cls._create(context, "mpt_dataset_create_f32", sample_data.pointer, label_data.count, features,
                           label_data.pointer, num_classes, 1 if check_finite else 0)

    @classmethod
    def from_u8(cls, context, samples, labels, num_classes, features=None, scale=1.0 / 255.0, offset=0.0):
        """uint8 samples, normalised as x * scale + offset when batched (CIFAR: 1/255, 0)."""
        label_data = _int32s(labels, "labels")
        sample_data = _bytes(samples, "samples")
        features = cls._shape(sample_data, label_data.count, features, "samples")
        num_classes = _integer(num_classes, "num_classes", ctypes.c_int32)
        return cls._create(context, "mpt_dataset_create_u8", sample_data.pointer, label_data.count, features,
                           label_data.pointer, num_classes, float(scale), float(offset))

    @classmethod
    def from_targets(cls, context, samples, targets, features=None, target_width=None, check_finite=True):
        """float32 samples with float32 targets ([rows, target_width]) for one-hot, binary or MSE losses."""
        sample_data = _floats(samples, "samples")
        target_data = _floats(targets, "targets")
        if target_width is None:
            if target_data.shape is not None and len(target_data.shape) == 2:
                target_width = target_data.shape[1]
            else:
                target_width = 1
        target_width = _integer(target_width, "target_width", ctypes.c_int64)
        if target_width <= 0 or target_data.count % target_width:
            raise Error(Status.SHAPE_MISMATCH, "targets hold %d values, not whole rows of %d" % (
                target_data.count, target_width))
        rows = target_data.count // target_width
        features = cls._shape(sample_data, rows, features, "samples")
        return cls._create(context, "mpt_dataset_create_f32_targets", sample_data.pointer, rows, features,
                           target_data.pointer, target_width, 1 if check_finite else 0)

    @classmethod
    def load_cifar10(cls, context, directory, train=True, limit=0):
        """CIFAR-10 from the binary release's directory (data_batch_*.bin or test_batch.bin)."""
        path = _path(directory, "directory")
        limit = _integer(limit, "limit", ctypes.c_int64)
        return cls._create(context, "mpt_dataset_load_cifar10", path, 1 if train else 0, limit)

    def _query(self, name):
        out = ctypes.c_int64()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), ctypes.byref(out)))
        return out.value

    @property
    def rows(self):
        return self._query("mpt_dataset_get_rows")

    @property
    def features(self):
        return self._query("mpt_dataset_get_features")

    @property
    def labels(self):
        """A copy of the integer labels, one per row (a slice's own rows'; a weighted dataset's are its
        source's): an int32 numpy array [rows] when numpy is installed, else array.array("i"). With
        Trainer.predict_dataset, a confusion matrix or per-class accuracy of a loaded data set:

            predicted = trainer.predict_dataset(test).argmax(axis=1)     # numpy
            matrix = numpy.zeros((classes, classes), dtype=int)
            numpy.add.at(matrix, (test.labels, predicted), 1)            # rows: true class

        A dataset of float targets (from_targets) has none: Error with Status.INVALID_ARGUMENT."""
        with self._family:
            rows = self.rows
            out, out_ptr = _output(rows, (rows,), ctypes.c_int32, "i", "int32")
            _check(_lib().mpt_dataset_get_labels(self._get(), out_ptr, rows))
        return out

    def __len__(self):
        return self.rows

    def slice(self, first, rows):
        """A Dataset of rows [first, first + rows) of this one that shares its storage: nothing is
        copied, and on a GPU one device copy serves this dataset and all its slices. Labels or targets,
        classes and normalisation are this dataset's; a slice of a slice counts from that slice's
        first row. For a held-out validation set or a first or last fold; dataset[a:b] (see
        __getitem__) takes the same rows with Python's slice bounds.

        The slice keeps the storage (and its context) alive: it stays usable when this Dataset, its
        Context or both are closed or collected. `first` outside [0, rows) or `rows` outside
        [1, rows - first] raises Error with Status.INVALID_ARGUMENT."""
        first = _integer(first, "first", ctypes.c_int64)
        rows = _integer(rows, "rows", ctypes.c_int64)
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_slice(self._get(), first, rows, ctypes.byref(pointer)))
        # The source's family: the slice shares its context's lock and keeps its log callback alive.
        return type(self)(pointer, self._family)

    def subset(self, rows):
        """A Dataset of copies of this one's rows rows[0], rows[1], ... in that order: any rows, where a
        slice is one range. For k-fold cross-validation (a fold's training rows are all the others), a
        stratified or shuffled split, or a bootstrap sample (a row may be listed more than once):

            for train_index, test_index in KFold(5).split(x):      # scikit-learn's indices
                training, validation = data[train_index], data[test_index]

        Each row brings its label or targets and its weight (of a weighted dataset); classes and
        normalisation are this dataset's. Unlike a slice the rows are copied, into a storage of the
        subset's own (on a GPU placed on the device apart from this dataset's); dataset[indices] (see
        __getitem__) is the same subset.

        `rows` is a sequence of ints counted from this dataset's first row (a slice's own): a list, a
        tuple, a range, an array.array or a 1-D numpy array of an integer type. No rows, or an index
        outside [0, rows) (negative ones too), raises Error with Status.INVALID_ARGUMENT naming the
        first such; an array of more than one dimension Status.SHAPE_MISMATCH; floats or bools (a
        boolean mask is not a list of rows) TypeError.

        The subset keeps its context alive: it stays usable when this Dataset, its Context or both are
        closed or collected."""
        if isinstance(rows, (list, tuple)) and any(isinstance(row, bool) for row in rows):
            raise TypeError("rows must hold integers, not bools (a boolean mask is not a list of rows)")
        data = _int64s(rows, "rows")
        if data.shape is not None and len(data.shape) != 1:
            raise Error(Status.SHAPE_MISMATCH, "rows must be one-dimensional (a list of row indices), not of "
                        "shape %s" % (data.shape,))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_subset(self._get(), data.pointer, data.count, ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def weighted(self, weights):
        """A Dataset of this one's rows with a weight per row: Keras's sample_weight, for fit and evaluate
        alike. The rows are shared, not copied, as by a slice; the weights are copied.

            model.fit(x, y, sample_weight=w)          # Keras
            trainer.fit(data.weighted(w), ...)        # mptrain

        and Keras's model.evaluate(x, y, sample_weight=w) is trainer.evaluate(data.weighted(w)). In fit,
        step and evaluate each row's loss (and in training its gradient) is multiplied by its weight, and
        in training by its class weight too where the Trainer has class_weights (evaluate weighs by the
        rows' weights only), then averaged over the rows as before: the weights are not normalised
        (Keras's sum_over_batch_size), so the losses reported are the weighted ones. Accuracy counts
        every row once. Every loss takes row weights.

        `weights` is a sequence of floats, one per row: a list, a tuple, an array.array or a 1-D numpy
        array. A count other than this dataset's rows, or an array of more than one dimension, raises
        Error with Status.SHAPE_MISMATCH; a negative, NaN or infinite weight Status.INVALID_ARGUMENT;
        anything but numbers TypeError. Weights replace any this dataset had; a slice of a weighted
        dataset keeps its rows' weights. On a GPU the weights are placed beside the rows (4 bytes a row).

        The weighted dataset keeps the storage (and its context) alive: it stays usable when this
        Dataset, its Context or both are closed or collected."""
        data = _floats(weights, "weights")
        if data.shape is not None and len(data.shape) != 1:
            raise Error(Status.SHAPE_MISMATCH, "weights must be one-dimensional (one per row), not of shape %s"
                        % (data.shape,))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_weighted(self._get(), data.pointer, data.count,
                                                      ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def standardized(self, mean, stddev):
        """A Dataset of this one's rows standardized feature by feature, as Keras's Normalization layer
        does: feature f of every batch holds (x - mean[f]) / max(stddev[f], 1e-7), where x is what this
        dataset gives (a uint8 sample after its scale and offset), each operation rounded in float32.
        For fit, step, evaluate and predict_dataset alike; predict takes its inputs as given, so
        standardize those yourself, or have the model standardize them (Model.set_input_standardization,
        saved with it) instead. Use the training set's statistics for the others too:

            layer = keras.layers.Normalization(); layer.adapt(x_train)       # Keras
            mean, stddev = training.feature_statistics()                     # mptrain
            training, validation = training.standardized(mean, stddev), validation.standardized(mean, stddev)

        The rows are shared, not copied, as by a slice (a uint8 dataset stays 1 byte a value); the
        statistics are copied and replace any standardization this dataset had, and slices, weighted
        datasets and subsets of the result keep them.

        `mean` and `stddev` are sequences of floats, one per feature: lists, tuples, array.arrays or
        1-D numpy arrays. Another count (or counts that differ), or an array of more than one
        dimension, raises Error with Status.SHAPE_MISMATCH; a non-finite mean or a negative or
        non-finite standard deviation Status.INVALID_ARGUMENT naming the first such; anything but
        numbers TypeError.

        The standardized dataset keeps the storage (and its context) alive: it stays usable when this
        Dataset, its Context or both are closed or collected."""
        mean_data = _floats(mean, "mean")
        stddev_data = _floats(stddev, "stddev")
        for data, what in ((mean_data, "mean"), (stddev_data, "stddev")):
            if data.shape is not None and len(data.shape) != 1:
                raise Error(Status.SHAPE_MISMATCH, "%s must be one-dimensional (one per feature), not of shape %s"
                            % (what, data.shape))
        # One count reaches C: sequences of different lengths are the shape mismatch it reports for a
        # count other than the features.
        if mean_data.count != stddev_data.count:
            raise Error(Status.SHAPE_MISMATCH, "standardization takes one mean and one stddev per feature (%d "
                        "means and %d stddevs given)" % (mean_data.count, stddev_data.count))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_standardized(self._get(), mean_data.pointer, stddev_data.pointer,
                                                          mean_data.count, ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def feature_statistics(self):
        """(mean, stddev): each feature's mean and standard deviation over this dataset's rows (a slice's
        own), of the values its batches hold (standardized ones, for a standardized dataset): the
        population's, divided by the rows, as Keras's Normalization.adapt, summed in double. Each a
        float32 numpy array [features] when numpy is installed, else array.array("f").
        standardized(mean, stddev) with them gives features of mean 0 and standard deviation 1."""
        with self._family:
            features = self.features
            mean, mean_ptr = _output(features, (features,))
            stddev, stddev_ptr = _output(features, (features,))
            _check(_lib().mpt_dataset_get_feature_statistics(self._get(), mean_ptr, stddev_ptr, features))
        return mean, stddev

    def __getitem__(self, key):
        """dataset[a:b]: rows a to b as a slice (see slice), bounds as Python's: negative ones count
        from the end, omitted ones are the start and the end, and out-of-range ones are clipped. The
        step must be omitted or 1; an empty range raises ValueError (a Dataset has at least one row),
        an integer index TypeError (one row is dataset[i:i + 1]).

        dataset[indices], indices a list, a range, an array.array or a numpy array of ints: those rows
        copied, in that order, as subset(indices) (indices from 0, negative or out-of-range ones
        refused, not counted from the end or clipped). A tuple is not a list of rows (TypeError).

        Keras's validation_split holds out the last rows, taken before any shuffling (fit shuffles
        each slice's own rows only), so validation_split=0.2 is:

            split = int(len(data) * (1 - 0.2))
            training, validation = data[:split], data[split:]"""
        if isinstance(key, (list, range, array.array)) or (
                _np is not None and isinstance(key, _np.ndarray) and key.ndim >= 1):
            return self.subset(key)
        if not isinstance(key, slice):  # the builtin: methods do not see the class's own slice
            raise TypeError("Dataset indices must be slices or lists of rows, not %s (one row is "
                            "dataset[i:i + 1])" % type(key).__name__)
        step = 1 if key.step is None else operator.index(key.step)
        if step != 1:
            raise ValueError("a Dataset slice takes consecutive rows: its step must be 1 or omitted, not %d"
                             % step)
        rows = len(self)
        start, stop, _ = key.indices(rows)
        if stop <= start:
            raise ValueError("dataset[%s:%s] of a Dataset of %d rows is empty (a Dataset has at least one row)"
                             % ("" if key.start is None else key.start, "" if key.stop is None else key.stop,
                                rows))
        return self.slice(start, stop - start)

    __iter__ = None  # not a sequence of rows: without this, iter() would call __getitem__(0)


def _class_weights_by_index(weights, classes):
    """Keras's class_weight dict {class index: weight} as the list the library takes: one weight per
    class of the model's outputs, 1 where the dict has none (Keras's default); {} is no weights."""
    if not weights:
        return None
    by_index = [1.0] * classes
    for key, weight in weights.items():
        try:
            index = operator.index(key)
        except TypeError:
            raise TypeError("class_weights' keys must be class indices (integers), not %r" % (key,)) from None
        if not 0 <= index < classes:
            raise Error(Status.SHAPE_MISMATCH, "class_weights has a weight for class %d, but the model's outputs "
                        "are classes 0 to %d" % (index, classes - 1))
        by_index[index] = float(weight)
    return by_index


def _option(options, name, *types):
    """mpt_trainer_options_get_<name> read into an out of each ctypes type: the one value, or a tuple."""
    outs = [kind() for kind in types]
    _check(getattr(_lib(), "mpt_trainer_options_get_" + name)(options, *[ctypes.byref(out) for out in outs]))
    values = tuple(out.value for out in outs)
    return values[0] if len(values) == 1 else values


def _class_weights_of(options):
    """The class weights the options hold as a list, None when there are none: their count first, then them."""
    count = ctypes.c_int64()
    _check(_lib().mpt_trainer_options_get_class_weights(options, None, 0, ctypes.byref(count)))
    if count.value == 0:
        return None
    weights = (ctypes.c_float * count.value)()
    _check(_lib().mpt_trainer_options_get_class_weights(options, weights, count.value, ctypes.byref(count)))
    return list(weights)


def _trainer_keywords(options):
    """What trainer options hold, as Trainer's keyword arguments (in its signature's order)."""
    F, I64, E, I = ctypes.c_float, ctypes.c_int64, _native.c_enum, ctypes.c_int
    momentum, nesterov = _option(options, "momentum", F, I)
    scaling, initial_scale = _option(options, "loss_scaling", E, F)
    schedule, warmup_steps, decay_steps, decay_factor = _option(options, "lr_schedule", E, I64, I64, F)
    return {
        "precision": Precision(_option(options, "precision", E)),
        "loss": Loss(_option(options, "loss", E)),
        "optimizer": Optimizer(_option(options, "optimizer", E)),
        "learning_rate": _option(options, "learning_rate", F),
        "momentum": momentum,
        "nesterov": nesterov != 0,
        "adam": _option(options, "adam", F, F, F),
        "rmsprop": _option(options, "rmsprop", F, F),
        "weight_decay": _option(options, "weight_decay", F),
        "loss_scaling": LossScaling(scaling),
        "initial_scale": initial_scale,
        "loss_scaler_dynamics": _option(options, "loss_scaler_dynamics", F, F, I64, F, F),
        "lr_schedule": LrSchedule(schedule),
        "warmup_steps": warmup_steps,
        "decay_steps": decay_steps,
        "decay_factor": decay_factor,
        "label_smoothing": _option(options, "label_smoothing", F),
        "class_weights": _class_weights_of(options),
        "global_clipnorm": _option(options, "global_clipnorm", F),
        "ema_momentum": _option(options, "ema", F),
        "huber_delta": _option(options, "huber_delta", F),
        "rmsprop_centered": _option(options, "rmsprop_centered", I) != 0,
        "micro_batch_size": _option(options, "micro_batch_size", I64),
        "lion": _option(options, "lion", F, F),
    }


def _one_value(name, value, other_name, other_value):
    """Refuses two keyword values the library keeps in one place (adam's and lion's betas, adam's and
    rmsprop's epsilon) when they differ as the float32 values it keeps: one would silently overwrite the
    other. Equal ones (as the options property reads them back) are taken."""
    if ctypes.c_float(value).value != ctypes.c_float(other_value).value:
        raise Error(Status.INVALID_ARGUMENT, "%s %r and %s %r are one value in the library: give them once, "
                                             "or equal" % (name, value, other_name, other_value))


def _keywords_of_new(options):
    """_trainer_keywords of new options (a trainer's copy, or a checkpoint's), which are the caller's to
    destroy: destroyed here, also when reading them fails."""
    try:
        return _trainer_keywords(options)
    finally:
        _lib().mpt_trainer_options_destroy(options)


def _nothing_at_epoch_end(epoch, loss, accuracy):
    """The epoch-end call a main-thread fit makes when the caller set none: running Python code there
    lets Python run a pending SIGINT's handler (_interrupt.py)."""
    return False


class _CallbackState:
    """What fit's callbacks share with fit: the error one raised, and the interrupt noted while fit
    runs. Held by the callbacks instead of the Trainer, so that a Trainer is in no reference cycle and
    frees its memory when its last reference goes."""

    def __init__(self):
        self.error = None
        self.interrupt = None  # while fit runs: its _interrupt.NotedInterrupt

    def guarded(self, function):
        """`function` as fit calls it: True stops fit, an exception stops it and is kept for fit to
        raise (it must not unwind into C), and so does a noted Ctrl-C, once the call has run."""
        def call(*args):
            if self.error is not None:
                return 1
            try:
                stop = function(*args[:-1])
            except BaseException as error:
                self.error = error
                return 1
            return 1 if stop or (self.interrupt is not None and self.interrupt.noted) else 0
        return call


class Trainer(_Handle):
    """Trains a model: fit, step, evaluate, predict (float rows), predict_dataset. Options as keywords
    (None = the library default): precision, loss, optimizer ("sgd", "adam", "adamw", "rmsprop", "lion" or
    an Optimizer), learning_rate, momentum (+ nesterov), adam=(beta1, beta2, epsilon), rmsprop=(rho, epsilon),
    weight_decay, lr_schedule (+ warmup_steps, decay_steps, decay_factor),
    loss_scaling (+ initial_scale), loss_scaler_dynamics=(growth_factor, backoff_factor, growth_interval,
    min_scale, max_scale), label_smoothing, class_weights, global_clipnorm, ema_momentum, huber_delta,
    rmsprop_centered, micro_batch_size, lion=(beta1, beta2). The options property gives them back as
    these keywords, to create another trainer like this one; options_from_checkpoint(path) gives those of
    the trainer that wrote a checkpoint, to resume its run from the file alone.

    loss is a Loss or its name: "sparse_categorical_crossentropy", "categorical_crossentropy",
    "binary_crossentropy", or a regression loss averaged over the outputs as Keras's, on float targets
    (Dataset.from_targets): "mean_squared_error" (y - t)^2, "mean_absolute_error" |y - t|, or "huber",
    (y - t)^2 / 2 where |y - t| <= huber_delta, else huber_delta * (|y - t| - huber_delta / 2), so that
    outlying targets pull no harder than huber_delta. huber_delta (None: the library's 1, Keras's) must
    be finite and above 0, else Error with Status.INVALID_ARGUMENT; only Huber reads it, and
    checkpoints of a Huber trainer must match it.

    rmsprop=(rho, epsilon) sets RMSprop's (optimizer "rmsprop"), as Keras computes it:
    v = rho * v + (1 - rho) * g^2, w -= learning_rate * g / sqrt(v + epsilon); rho in [0, 1), epsilon
    finite and > 0 (defaults 0.9 and 1e-7), else Error with Status.INVALID_ARGUMENT. RMSprop takes
    momentum too (u = momentum * u + learning_rate * g / sqrt(v + epsilon), w -= u), but not
    nesterov=True (Error with Status.INVALID_ARGUMENT). Adam and RMSprop share one epsilon: given
    both, adam's and rmsprop's must be equal as float32 values, else Error with
    Status.INVALID_ARGUMENT. rmsprop_centered=True is Keras's centered=True: the gradients' average a
    is kept too and v - a^2 (held at >= 0) replaces v under the root. Checkpoints of an RMSprop
    trainer must match its rho and centered.

    lion=(beta1, beta2) sets Lion's (optimizer "lion"), as Keras computes it:
    w -= learning_rate * sign(beta1 * m + (1 - beta1) * g), then m = beta2 * m + (1 - beta2) * g; each
    in [0, 1) (defaults 0.9 and 0.99, Keras's), else Error with Status.INVALID_ARGUMENT. Every weight
    moves by the rate or not at all, so Lion wants a rate 3-10 times smaller than AdamW's. Lion ignores
    momentum. Adam and Lion share the betas: given both, adam's and lion's must be equal as float32
    values, else Error with Status.INVALID_ARGUMENT. Checkpoints of a Lion trainer must match its betas.

    label_smoothing s in [0, 1) (default 0: none) makes the cross-entropy losses train towards
    t (1 - s) + s / n instead of each target t (n: the model's outputs, 2 for binary cross-entropy), as
    Keras's label_smoothing and PyTorch's CrossEntropyLoss(label_smoothing=) do; fit, step and evaluate
    report the smoothed loss, accuracy compares with the given labels. Another value, or a non-zero one
    with a regression loss, raises Error with Status.INVALID_ARGUMENT. Checkpoints must match it.

    class_weights (a sequence of floats: a list, a tuple, an array.array or a 1-D numpy array; None or
    empty: none) are Keras's fit(class_weight=) for the categorical cross-entropy losses, one weight per
    model output: in training (fit, step) each row's loss and gradient are multiplied by the weight of
    its class (its label, or for float targets the first largest target), still averaged over the
    batch's rows, so fit's and step's losses are the weighted ones; evaluate reports the unweighted
    loss. A negative, NaN or infinite weight, or all weights 0, raises Error with
    Status.INVALID_ARGUMENT, as do class weights with binary cross-entropy or a regression loss; a
    count other than the model's outputs raises it with Status.SHAPE_MISMATCH. Keras's dict form
    {class index: weight} is taken too: a class it leaves out weighs 1, as in Keras, and a key that is
    not a class index of the model's outputs raises Error with Status.SHAPE_MISMATCH. Checkpoints must
    match them.

    global_clipnorm (default 0: none) clips the gradients by their global norm, as Keras's
    global_clipnorm and PyTorch's clip_grad_norm_(max_norm) do: every step, the gradients of all weights
    and biases together are scaled by global_clipnorm / max(norm, global_clipnorm), norm their L2 norm
    (with loss scaling, that of the unscaled gradients), so a step keeps its direction and its length is
    bounded; weight decay is not clipped. A negative, NaN or infinite bound raises Error with
    Status.INVALID_ARGUMENT. Checkpoints must match it.

    ema_momentum (default 0: none) keeps an exponential moving average of the weights, as Keras's
    use_ema with ema_momentum (PyTorch's AveragedModel with get_ema_multi_avg_fn): after every applied
    step each weight's and bias's average becomes ema_momentum * average + (1 - ema_momentum) * weight,
    the first applied step copying the weights and a skipped step leaving them. swap_ema_weights (or the
    with-block ema_weights) puts them in the model, to evaluate, predict or save them. A value outside
    (0, 1) other than 0 raises Error with Status.INVALID_ARGUMENT. Checkpoints must match it (and then
    hold the averages).

    micro_batch_size (default 0: none) is gradient accumulation: a step over a batch of more rows runs
    forward and backward on micro-batches of micro_batch_size rows (the last may have fewer), adds up
    their gradients and makes the whole batch's one update, the same step as in one pass but for
    rounding (its loss, clipping, loss-scale skip, schedule step and dropout masks are the whole
    batch's), with the step memory of a micro-batch plus the sums, 4 bytes a parameter (the memory
    property). After such a step it is evaluate's and predict_dataset's default batch size. A
    negative size raises Error with Status.INVALID_ARGUMENT. It is not recorded in checkpoints.

    lr_schedule (an LrSchedule or its name) is a learning-rate schedule the library evaluates at every
    step, the steps counted from 0 over the trainer's life: the base rate (learning_rate) times a factor,
    (s + 1) / warmup_steps over the first warmup_steps steps (0: no warm-up), then, d steps later,
    CONSTANT 1 (decay_steps 0, decay_factor 1), LINEAR and COSINE from 1 down to decay_factor (in [0, 1])
    over decay_steps (>= 1) along a straight line or half a cosine period, and decay_factor after it,
    STEP decay_factor (in (0, 1]) ** (d // decay_steps). decay_factor None (the default) is 1 for
    CONSTANT, 0 for LINEAR and COSINE (a decay to rate 0, as Keras's CosineDecay, PyTorch's
    CosineAnnealingLR and Hugging Face's linear schedule) and 0.1 for STEP (PyTorch's StepLR); a value
    given is passed on as it is. warmup_steps alone gives CONSTANT with a warm-up. The rate of the next
    step is scheduled_learning_rate."""

    _destroy_name = "mpt_trainer_destroy"

    def __init__(self, model, precision=None, loss=None, optimizer=None, learning_rate=None, momentum=None,
                 nesterov=False, adam=None, rmsprop=None, weight_decay=None, loss_scaling=None, initial_scale=32768.0,
                 loss_scaler_dynamics=None, lr_schedule=None, warmup_steps=0, decay_steps=0, decay_factor=None,
                 label_smoothing=0.0, class_weights=None, global_clipnorm=0.0,
                 ema_momentum=0.0, huber_delta=None, rmsprop_centered=False, micro_batch_size=0, lion=None):
        _require(model, Model, "model")
        lib = _lib()
        options = _native.TrainerOptionsP()
        _check(lib.mpt_trainer_options_create(ctypes.byref(options)))
        try:
            if precision is not None:
                _check(lib.mpt_trainer_options_set_precision(options, _enum(Precision, precision, "precision")))
            if loss is not None:
                _check(lib.mpt_trainer_options_set_loss(options, _enum(Loss, loss, "loss")))
            if huber_delta is not None:
                _check(lib.mpt_trainer_options_set_huber_delta(options, float(huber_delta)))
            _check(lib.mpt_trainer_options_set_label_smoothing(options, float(label_smoothing)))
            if isinstance(class_weights, collections.abc.Mapping):
                class_weights = _class_weights_by_index(class_weights, model.output_features)
            if class_weights is not None:
                weights = _floats(class_weights, "class_weights")
                if weights.shape is not None and len(weights.shape) != 1:
                    raise Error(Status.SHAPE_MISMATCH, "class_weights must be one-dimensional, not of shape %s"
                                % (weights.shape,))
                _check(lib.mpt_trainer_options_set_class_weights(options, weights.pointer, weights.count))
            if optimizer is not None:
                _check(lib.mpt_trainer_options_set_optimizer(options, _enum(Optimizer, optimizer, "optimizer")))
            if learning_rate is not None:
                _check(lib.mpt_trainer_options_set_learning_rate(options, float(learning_rate)))
            if momentum is not None:
                _check(lib.mpt_trainer_options_set_momentum(options, float(momentum), 1 if nesterov else 0))
            if adam is not None:
                beta1, beta2, epsilon = adam
                adam = float(beta1), float(beta2), float(epsilon)
                _check(lib.mpt_trainer_options_set_adam(options, *adam))
            if rmsprop is not None:
                rho, epsilon = rmsprop
                rmsprop = float(rho), float(epsilon)
                _check(lib.mpt_trainer_options_set_rmsprop(options, *rmsprop))
            _check(lib.mpt_trainer_options_set_rmsprop_centered(options, 1 if rmsprop_centered else 0))
            if lion is not None:
                beta1, beta2 = lion
                lion = float(beta1), float(beta2)
                _check(lib.mpt_trainer_options_set_lion(options, *lion))
            # After the setters, which refuse values out of range (NaN among them) with their own message.
            if adam is not None and lion is not None:
                _one_value("adam's beta1", adam[0], "lion's beta1", lion[0])
                _one_value("adam's beta2", adam[1], "lion's beta2", lion[1])
            if adam is not None and rmsprop is not None:
                _one_value("adam's epsilon", adam[2], "rmsprop's epsilon", rmsprop[1])
            if weight_decay is not None:
                _check(lib.mpt_trainer_options_set_weight_decay(options, float(weight_decay)))
            _check(lib.mpt_trainer_options_set_global_clipnorm(options, float(global_clipnorm)))
            _check(lib.mpt_trainer_options_set_ema(options, float(ema_momentum)))
            _check(lib.mpt_trainer_options_set_micro_batch_size(
                options, _integer(micro_batch_size, "micro_batch_size", ctypes.c_int64)))
            # Checked before the comparison with 0, so that warmup_steps=0.0 is refused as 1.0 is.
            warmup_steps = _integer(warmup_steps, "warmup_steps", ctypes.c_int64)
            decay_steps = _integer(decay_steps, "decay_steps", ctypes.c_int64)
            if lr_schedule is not None or warmup_steps != 0 or decay_steps != 0 or decay_factor is not None:
                schedule = _enum(LrSchedule, LrSchedule.CONSTANT if lr_schedule is None else lr_schedule,
                                 "lr_schedule")
                if decay_factor is None:
                    decay_factor = _DEFAULT_DECAY_FACTORS.get(schedule, 1.0)  # an unknown value: C refuses it
                _check(lib.mpt_trainer_options_set_lr_schedule(
                    options, schedule, warmup_steps, decay_steps, float(decay_factor)))
            if loss_scaling is not None:
                _check(lib.mpt_trainer_options_set_loss_scaling(
                    options, _enum(LossScaling, loss_scaling, "loss_scaling"), float(initial_scale)))
            if loss_scaler_dynamics is not None:
                growth, backoff, interval, low, high = loss_scaler_dynamics
                _check(lib.mpt_trainer_options_set_loss_scaler_dynamics(
                    options, float(growth), float(backoff), _integer(interval, "growth_interval", ctypes.c_int64),
                    float(low), float(high)))
            pointer = _native.TrainerP()
            with model._family:
                _check(lib.mpt_trainer_create(model._get(), options, ctypes.byref(pointer)))
        finally:
            lib.mpt_trainer_options_destroy(options)
        super().__init__(pointer, model._family)
        self._input_features = model.input_features
        self._output_features = model.output_features
        self._callback_state = _CallbackState()
        self._callback_functions = (None, None)  # the caller's (progress, epoch_end)
        self._callbacks = None  # (progress, epoch_end) ctypes objects, kept alive while C holds them
        self._fitting_thread = None  # the thread running fit, whose callbacks must not re-enter this trainer

    def set_callbacks(self, progress=None, epoch_end=None):
        """progress(epoch, step, steps_per_epoch, loss, accuracy) after each step of fit, and
        epoch_end(epoch, loss, accuracy) after each epoch (running means). Return True to stop training
        (fit then raises Error with Status.CANCELLED); an exception raised by a callback stops training
        and is re-raised by fit.

        Ctrl-C (or a notebook's interrupt) while fit runs on the main thread stops it at the end of the
        epoch under way, or after the step under way when a progress callback is set, and then runs the
        SIGINT handler that was in place: fit raises KeyboardInterrupt by default. The trainer stays
        usable, and a fit on the same data finishes a stopped epoch. (Python sees the signal only when it
        runs Python code: fit gives it a call at each epoch's end, which does nothing when no epoch_end
        is set; see _interrupt.py.) A fit on another thread leaves SIGINT to Python, which raises
        KeyboardInterrupt on the main thread as usual.

        From these callbacks, this trainer's evaluate and predict_dataset run in epoch_end: validation
        each epoch (the numbers of a call between one-epoch fits, and fit's run goes on unchanged), on a
        data set of this trainer's context (one of another is refused with Status.INVALID_ARGUMENT). The
        library refuses them in progress, and fit, step and predict (rows) in either, with
        Status.INVALID_STATE. The learning rate may be read and set in both, and a checkpoint saved; the
        gradient_norm read in progress is the reported step's."""
        for name, function in (("progress", progress), ("epoch_end", epoch_end)):
            if function is not None and not callable(function):
                raise TypeError("%s must be callable or None" % name)

        with self._family:
            self._install_callbacks(progress, epoch_end)
            self._callback_functions = (progress, epoch_end)

    def _install_callbacks(self, progress, epoch_end):
        state = self._callback_state
        progress_c = _native.mpt_progress_fn(state.guarded(progress)) if progress else _native.mpt_progress_fn()
        epoch_end_c = _native.mpt_epoch_end_fn(state.guarded(epoch_end)) if epoch_end else _native.mpt_epoch_end_fn()
        _check(_lib().mpt_trainer_set_callbacks(self._get(), progress_c, epoch_end_c, None))
        self._callbacks = (progress_c, epoch_end_c)

    def _refuse_reentry(self):
        """Refuses fit, step and predict from this trainer's own callbacks, which run on the thread of
        fit (the library refuses them too, but a nested fit would first clobber the state of the running
        one). Another thread is not refused: it waits for the lock, as the module promises. evaluate and
        predict_dataset are left to the library, which runs them from the epoch-end callback (see
        set_callbacks)."""
        if self._in_own_callback():
            raise Error(Status.INVALID_STATE,
                        "fit, step and predict cannot be called from this trainer's callbacks")

    def _in_own_callback(self):
        return self._fitting_thread == threading.get_ident()

    @staticmethod
    def _dataset(dataset):
        return _require(dataset, Dataset, "dataset")._get()

    def fit(self, dataset, epochs=1, batch_size=32, shuffle=True):
        """Trains for `epochs` epochs in batches of `batch_size`."""
        self._refuse_reentry()
        pointer = self._dataset(dataset)
        epochs = _integer(epochs, "epochs", ctypes.c_int64)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        state = self._callback_state
        with _Locked(self._family, dataset._family):
            state.error = None  # under the lock: another thread's fit may be running its callbacks
            self._fitting_thread = threading.get_ident()
            progress, epoch_end = self._callback_functions
            with _interrupt.NotedInterrupt() as interrupt:
                state.interrupt = interrupt
                # Where a Ctrl-C is noted, fit must run Python code now and then for Python to note it:
                # an epoch-end call for the duration of this fit, when the caller set none.
                adds_epoch_end = interrupt.active and epoch_end is None
                try:
                    if adds_epoch_end:
                        self._install_callbacks(progress, _nothing_at_epoch_end)
                    failure = _failure(
                        _lib().mpt_trainer_fit(self._get(), pointer, epochs, batch_size, 1 if shuffle else 0))
                finally:
                    self._fitting_thread = None
                    state.interrupt = None
                    if adds_epoch_end:  # the caller's, as they are now (a callback may have set others)
                        self._install_callbacks(*self._callback_functions)
            # Leaving the interrupt's context ran the SIGINT handler it put off: KeyboardInterrupt by
            # default. A handler that returns leaves fit to report what it stopped with: CANCELLED.
            error, state.error = state.error, None
            if error is not None:
                raise error
            if failure is not None:
                raise failure

    def step(self, dataset, first, batch_size):
        """One training step on rows [first, first + batch_size); returns the batch's mean loss."""
        self._refuse_reentry()
        pointer = self._dataset(dataset)
        first = _integer(first, "first", ctypes.c_int64)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        loss = ctypes.c_float()
        with _Locked(self._family, dataset._family):
            _check(_lib().mpt_trainer_step(self._get(), pointer, first, batch_size, ctypes.byref(loss)))
        return loss.value

    def evaluate(self, dataset, batch_size=0):
        """Mean loss and accuracy over the dataset, in the trainer's precision (batch_size 0: the last
        training batch size, or 256); the loss weighted by the rows' weights of a Dataset.weighted, as
        Keras's evaluate(sample_weight=). Also from fit's epoch-end callback (see set_callbacks)."""
        pointer = self._dataset(dataset)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        if self._in_own_callback() and dataset._family is not self._family:
            # fit holds its context's lock: taking another's here, out of _Locked's order, could
            # deadlock with a thread that holds that one and waits for ours. The library refuses such
            # a data set anyway.
            raise Error(Status.INVALID_ARGUMENT, "the dataset was created on another context than the trainer")
        loss, accuracy = ctypes.c_float(), ctypes.c_float()
        with _Locked(self._family, dataset._family):
            _check(_lib().mpt_trainer_evaluate(self._get(), pointer, batch_size, ctypes.byref(loss),
                                               ctypes.byref(accuracy)))
        return Evaluation(loss.value, accuracy.value)

    def predict(self, inputs):
        """Outputs [rows, output_features] of the last layer, in the trainer's precision, for float rows
        (predictions over a Dataset: predict_dataset)."""
        self._refuse_reentry()
        if isinstance(inputs, Dataset):
            raise TypeError("inputs must be float rows, not a mptrain.Dataset: predictions over a dataset are "
                            "predict_dataset(dataset, batch_size=0)")
        data = _floats(inputs, "inputs")
        rows = _rows_of(data, self._input_features, "inputs")
        out, out_ptr = _output(rows * self._output_features, (rows, self._output_features))
        with self._family:
            _check(_lib().mpt_trainer_predict(self._get(), data.pointer, rows, out_ptr,
                                              rows * self._output_features))
        return out

    def predict_dataset(self, dataset, batch_size=0):
        """The outputs predict gives, for every row of `dataset` in order: Keras's model.predict on a
        dataset (a test set from Dataset.load_cifar10, a slice), returned as predict returns them ([rows,
        output_features] float32: a numpy array when numpy is installed, else a flat array.array), in the
        trainer's precision, in batches of `batch_size` rows (0: the last training batch size, or 256,
        as evaluate). Only the samples are read (u8 ones normalised as in training): labels, targets
        and row weights play no part. Predicted in one batch (batch_size >= rows), the outputs are those
        of predict on the same float rows; other batch sizes may differ from them in the last bits.

        With Dataset.labels: a confusion matrix or per-class accuracy (see Dataset.labels). Like
        evaluate, it also runs from fit's epoch-end callback (the predictions of a call between
        one-epoch fits), not from its progress callback (see set_callbacks). A dataset of another
        context raises Error with Status.INVALID_ARGUMENT, one of another feature count
        Status.SHAPE_MISMATCH, a negative batch_size Status.INVALID_ARGUMENT."""
        pointer = self._dataset(dataset)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        if self._in_own_callback() and dataset._family is not self._family:
            # As evaluate: fit holds its context's lock, and taking another's here, out of _Locked's
            # order, could deadlock. The library refuses such a data set anyway.
            raise Error(Status.INVALID_ARGUMENT, "the dataset was created on another context than the trainer")
        width = self._output_features
        with _Locked(self._family, dataset._family):
            rows = dataset.rows
            out, out_ptr = _output(rows * width, (rows, width))
            _check(_lib().mpt_trainer_predict_dataset(self._get(), pointer, batch_size, out_ptr, rows * width))
        return out

    @property
    def precision(self):
        out = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_trainer_get_precision(self._get(), ctypes.byref(out)))
        return Precision(out.value)

    @property
    def learning_rate(self):
        """The base rate: the options' until set, or restored by load_checkpoint; without an
        lr_schedule, the rate of the next step. Setting it (finite, > 0) applies from the next step
        on, also from fit's callbacks: a schedule of one's own (an lr_schedule multiplies it). The
        rate is part of the run, so checkpoints save and restore it; an automatic checkpoint at an
        epoch's end is written after that epoch's epoch-end callback, so it holds the rate set there."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_learning_rate(self._get(), ctypes.byref(out)))
        return out.value

    @learning_rate.setter
    def learning_rate(self, value):
        with self._family:
            _check(_lib().mpt_trainer_set_learning_rate(self._get(), float(value)))

    @property
    def options(self):
        """The options this trainer was created with, as a dict of Trainer's keyword arguments, every
        one of them: Trainer(model, **trainer.options) creates a trainer that trains as this one would
        (Keras's get_config), given the same model weights and context seed. Each read is a new dict;
        changing it changes nothing here.

        The values are those the library holds, not the ones given: floats as the float32 values it
        keeps (learning_rate=0.03 reads 0.029999999329447746), enums as Precision, Loss, Optimizer,
        LrSchedule and LossScaling members, nesterov and rmsprop_centered as bools, class_weights as a
        list of floats (a dict given reads as the list it stood for), or None when there are none.
        Options left out read as the defaults the trainer uses: the optimizer's own (AdamW's
        weight_decay 0.004, Lion's betas (0.9, 0.99)), decay_factor the one the schedule took
        (0 for a cosine schedule given none), and precision AUTO stays AUTO (the precision property
        is the one it runs in). learning_rate is the base rate now: the learning_rate setter and
        load_checkpoint change it. adam's and lion's betas are one pair, and adam's and rmsprop's
        epsilon one value, as the library keeps them: each copy reads the same, and Trainer refuses
        copies that differ (Error with Status.INVALID_ARGUMENT), so an edit changes every copy, e.g.
        dict(options, adam=(0.5, 0.6, 1e-3), lion=(0.5, 0.6), rmsprop=(options["rmsprop"][0], 1e-3)).
        Also from fit's callbacks."""
        options = _native.TrainerOptionsP()
        with self._family:
            _check(_lib().mpt_trainer_get_options(self._get(), ctypes.byref(options)))
        return _keywords_of_new(options)

    @staticmethod
    def options_from_checkpoint(path):
        """The options of the trainer that wrote the training checkpoint at `path` (str, bytes or
        os.PathLike; see save_checkpoint), as the dict of Trainer's keyword arguments the options
        property gives, so that a run resumes from the file alone, as Keras's load_model restores the
        optimizer. The checkpoint holds the model too:

            model = mptrain.Model.load(context, path)
            trainer = mptrain.Trainer(model, **mptrain.Trainer.options_from_checkpoint(path))
            trainer.load_checkpoint(path)
            trainer.fit(dataset, epochs=...)

        continues the run (bit for bit on the CPU backend, whatever the context's seed). precision and
        loss_scaling are the ones the trainer ran, AUTO and DEFAULT resolved (e.g. Precision.MIXED_BF16
        and LossScaling.OFF); learning_rate is the base rate of its next step (the rate set last, not
        the one it was created with); every other option is its own value. A checkpoint records no
        micro_batch_size: it reads 0 (give it again for a run that used one:
        Trainer(model, **dict(options, micro_batch_size=8))). Options that the trainer's loss or
        optimizer does not read (huber_delta without the Huber loss, rmsprop without RMSprop) are not
        recorded and read as their defaults. A model file (not a checkpoint) raises Error with
        Status.INVALID_ARGUMENT, a missing file Status.IO_ERROR, a truncated or damaged one
        Status.CORRUPT_DATA, one from another major version Status.UNSUPPORTED."""
        encoded = _path(path, "path")
        options = _native.TrainerOptionsP()
        # The library reads the file alone, thread-safely: no context, so no family's lock to take.
        _check(_lib().mpt_trainer_options_create_from_checkpoint(encoded, ctypes.byref(options)))
        return _keywords_of_new(options)

    @property
    def scheduled_learning_rate(self):
        """The rate the next step trains with: learning_rate times the lr_schedule's factor at the
        step count (progress.steps; on a GPU, reading it waits for the steps issued)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_scheduled_learning_rate(self._get(), ctypes.byref(out)))
        return out.value

    @property
    def loss_scale(self):
        scale, tracker, skipped = ctypes.c_float(), ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_loss_scale(self._get(), ctypes.byref(scale), ctypes.byref(tracker),
                                                     ctypes.byref(skipped)))
        return LossScale(scale.value, tracker.value, skipped.value)

    @property
    def gradient_norm(self):
        """The global L2 norm of the last step's gradients (all weights and biases, the loss scale
        divided out) before clipping: what global_clipnorm compared with its bound (PyTorch's
        clip_grad_norm_ returns the same number). From a progress callback, the reported step's. Only a
        clipping trainer computes it: NaN (a float) without global_clipnorm, before the first step,
        after load_checkpoint, and for a skipped step (its gradients not finite)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_gradient_norm(self._get(), ctypes.byref(out)))
        return out.value

    def swap_ema_weights(self):
        """Exchanges the model's weights with this trainer's moving averages (ema_momentum; a trainer
        without them raises Error with Status.INVALID_STATE) and returns True when the model now holds
        the averages, False when its own weights are back (bit for bit). Meanwhile evaluate, predict,
        predict_dataset and the Model's calls (get_weights, predict, save) see the averages, and fit and
        step (of any trainer of the model), save_checkpoint and load_checkpoint raise Error with
        Status.INVALID_STATE. Before the first applied step the averages are the weights. Allowed from
        fit's epoch_end callback (exchange back before it returns, or fit's next epoch is refused), not
        from its progress callback. A trainer closed while the model holds its averages leaves them
        there (Keras's way of finishing). The with-block ema_weights exchanges back for you."""
        holds = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_trainer_swap_ema_weights(self._get(), ctypes.byref(holds)))
        return holds.value != 0

    @contextlib.contextmanager
    def ema_weights(self):
        """`with trainer.ema_weights():` runs its block with the moving averages in the model (see
        swap_ema_weights) and puts the trained weights back when the block ends, also when it raises.
        Yields the trainer. Entered while the model already holds the averages (swap_ema_weights called
        before), it raises Error with Status.INVALID_STATE and leaves them there; a trainer closed
        inside the block leaves the averages in the model, as swap_ema_weights says."""
        if not self.swap_ema_weights():
            self.swap_ema_weights()  # the averages back where they were
            raise Error(Status.INVALID_STATE, "the model already holds this trainer's averaged weights: "
                                              "ema_weights cannot put them in again")
        try:
            yield self
        finally:
            if not self.closed:
                self.swap_ema_weights()

    @property
    def progress(self):
        steps, epochs = ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_progress(self._get(), ctypes.byref(steps), ctypes.byref(epochs)))
        return Progress(steps.value, epochs.value)

    @property
    def batch_size(self):
        """The rows of the last training step (fit's batch_size, or the data set's rows when fewer; step's
        rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can fit on in the
        saved run's batches (mpt_trainer_get_batch_size: the exception of an unfinished epoch)."""
        rows = ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_batch_size(self._get(), ctypes.byref(rows)))
        return rows.value

    @property
    def unfinished_epoch(self):
        """The epoch fit left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint that
        load_checkpoint restored), as UnfinishedEpoch(steps that ran, rows of its data set, batch_size):
        the next fit finishes it on the same data in that batch size and abandons it otherwise; all 0
        when there is none (mpt_trainer_get_unfinished_epoch)."""
        steps, rows, batch_size = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_unfinished_epoch(self._get(), ctypes.byref(steps), ctypes.byref(rows),
                                                           ctypes.byref(batch_size)))
        return UnfinishedEpoch(steps.value, rows.value, batch_size.value)

    def save_checkpoint(self, path):
        """Writes a training checkpoint to `path` (str or os.PathLike), atomically: fp32 master weights,
        optimizer and loss-scaler state, the learning rate, step and epoch counters, the position inside
        the epoch and the shuffle state. Loading it into a trainer of the same architecture and options and calling fit
        continues the run bit-exactly on the CPU backend."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_trainer_save_checkpoint(self._get(), encoded))

    def load_checkpoint(self, path):
        """Restores a checkpoint; the whole file is validated first, so a failure changes nothing.
        The learning rate becomes the checkpoint's. Error statuses: another architecture
        SHAPE_MISMATCH, other trainer options (all but the learning rate) or a model file
        INVALID_ARGUMENT, a missing file IO_ERROR, a damaged one CORRUPT_DATA, another major version
        UNSUPPORTED."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_trainer_load_checkpoint(self._get(), encoded))

    def set_checkpointing(self, directory, every_steps=0, every_epochs=None, keep_last=1):
        """Checkpoints automatically during fit into `directory` (which must exist) as
        checkpoint-<step>.safetensors, every `every_steps` optimizer steps and/or every
        `every_epochs`-th epoch (0 = not on that trigger; None: every epoch unless every_steps is
        given), keeping the newest `keep_last`. None turns
        checkpointing off. A failed write stops fit with Status.IO_ERROR."""
        encoded = None if directory is None else _path(directory, "directory")
        if every_epochs is None:
            every_epochs = 1 if every_steps == 0 else 0
        with self._family:
            _check(_lib().mpt_trainer_set_checkpointing(
                self._get(), encoded, _integer(every_steps, "every_steps", ctypes.c_int64),
                _integer(every_epochs, "every_epochs", ctypes.c_int64),
                _integer(keep_last, "keep_last", ctypes.c_int64)))

    @property
    def memory(self):
        planned, allocated = ctypes.c_size_t(), ctypes.c_size_t()
        with self._family:
            _check(_lib().mpt_trainer_get_memory(self._get(), ctypes.byref(planned), ctypes.byref(allocated)))
        return TrainerMemory(planned.value, allocated.value)

    @property
    def last_epoch_time(self):
        """EpochTime(seconds, steps) of the last epoch fit completed: device time between CUDA events on
        a GPU, host time on the CPU; (0.0, 0) before the first."""
        seconds, steps = ctypes.c_double(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_last_epoch_time(self._get(), ctypes.byref(seconds), ctypes.byref(steps)))
        return EpochTime(seconds.value, steps.value)
