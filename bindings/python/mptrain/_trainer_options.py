"""Trainer options between Python and the library: Keras's class_weight dict as the list the library
takes, values it keeps once, and the options a trainer or checkpoint holds as Trainer's keywords."""
import ctypes
import operator

from . import _native
from ._arguments import _real
from ._enums import Loss, LossScaling, LrSchedule, Optimizer, Precision, Status
from ._errors import Error
from ._library import _check, _lib


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
        by_index[index] = _real(weight, "class_weights[%d]" % index)
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
