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
from types import FunctionType as _FunctionType

# One module a concept: _enums (the C API's enums), _errors (Error), _library (the loaded library and its
# failures), _arguments (Python arguments for C), _buffers (arrays in and out), _handles (what handles
# share: locks, closing), _context, _model, _dataset and _trainer (the four classes), _trainer_options and
# _callbacks (the Trainer's helpers), _results (the named tuples getters return); _native declares the
# C API and _interrupt puts off Ctrl-C during fit.
from ._buffers import MAX_HOST_ELEMENTS
from ._context import Context
from ._dataset import Dataset
from ._enums import (ENUM_PREFIXES, Activation, Backend, DType, Initializer, LogLevel, Loss, LossScaling, LrSchedule,
                     Optimizer, Precision, Status)
from ._errors import Error
from ._library import cuda_device_count, status_string, version
from ._model import Model
from ._results import EpochTime, Evaluation, LossScale, Memory, Progress, TrainerMemory, UnfinishedEpoch
from ._trainer import Trainer
# Not public, but shown as mptrain's: _OutOfRange names the error of an integer out of range in tracebacks,
# and _Handle is the base class that help() shows for Context, Model, Dataset and Trainer.
from ._errors import _OutOfRange  # noqa: F401
from ._handles import _Handle  # noqa: F401

__all__ = [
    "Activation", "Backend", "Context", "Dataset", "DType", "Error", "Evaluation", "LogLevel", "Loss",
    "LossScale", "LossScaling", "LrSchedule", "Model", "Optimizer", "Precision", "Status", "Trainer",
    "cuda_device_count", "version",
]

# The classes and functions above were defined in this file until it was split into modules: they keep
# "mptrain" as their module, so that reprs, tracebacks ("mptrain.Error: ..."), pickles (which name the
# module a class is found in) and help() read as they did. Only what the package holds is renamed, so
# that mptrain.<name> always finds what calls itself mptrain's.
for _value in list(globals().values()):
    if isinstance(_value, (type, _FunctionType)) and _value.__module__.startswith(__name__ + "._"):
        _value.__module__ = __name__
del _value, _FunctionType
