"""ctypes declarations of the C API (include/mptrain/mptrain.h): the library and every prototype.

The library is found, in order, at $MPTRAIN_LIB (a file), in $MPTRAIN_LIB_DIR, beside this package,
then by the system's search (ctypes.util.find_library, then the soname libmptrain.so.0).
"""
import ctypes
import ctypes.util
import os

c_int = ctypes.c_int
c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_double = ctypes.c_double
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
c_float = ctypes.c_float
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER

# Enums are C ints (checked against the C compiler by the tests).
c_enum = ctypes.c_int

SONAME = "libmptrain.so.0"


class _Opaque(ctypes.Structure):
    """Base of the opaque handle types: only pointers to them exist."""


class mpt_context_t(_Opaque):
    pass


class mpt_context_options_t(_Opaque):
    pass


class mpt_model_t(_Opaque):
    pass


class mpt_dataset_t(_Opaque):
    pass


class mpt_trainer_t(_Opaque):
    pass


class mpt_trainer_options_t(_Opaque):
    pass


mpt_log_fn = ctypes.CFUNCTYPE(None, c_enum, c_char_p, c_void_p)
mpt_progress_fn = ctypes.CFUNCTYPE(c_int, c_int64, c_int64, c_int64, c_float, c_float, c_void_p)
mpt_epoch_end_fn = ctypes.CFUNCTYPE(c_int, c_int64, c_float, c_float, c_void_p)

P = POINTER
ContextP, ContextOptionsP = P(mpt_context_t), P(mpt_context_options_t)
ModelP, DatasetP = P(mpt_model_t), P(mpt_dataset_t)
TrainerP, TrainerOptionsP = P(mpt_trainer_t), P(mpt_trainer_options_t)
FloatP, Int32P, Int64P, SizeP, DoubleP = P(c_float), P(c_int32), P(c_int64), P(c_size_t), P(c_double)

# name: (restype, [argtypes]); a restype of c_enum is an mpt_status.
PROTOTYPES = {
    "mpt_version": (c_char_p, []),
    "mpt_status_string": (c_char_p, [c_enum]),
    "mpt_last_error": (c_char_p, []),
    "mpt_cuda_device_count": (c_int, []),
    "mpt_context_options_create": (c_enum, [P(ContextOptionsP)]),
    "mpt_context_options_destroy": (None, [ContextOptionsP]),
    "mpt_context_options_set_backend": (c_enum, [ContextOptionsP, c_enum]),
    "mpt_context_options_set_threads": (c_enum, [ContextOptionsP, c_int]),
    "mpt_context_options_set_seed": (c_enum, [ContextOptionsP, c_uint64]),
    "mpt_context_options_set_device": (c_enum, [ContextOptionsP, c_int]),
    "mpt_context_options_set_log_callback": (c_enum, [ContextOptionsP, mpt_log_fn, c_void_p]),
    "mpt_context_options_set_log_level": (c_enum, [ContextOptionsP, c_enum]),
    "mpt_context_options_set_memory_budget": (c_enum, [ContextOptionsP, c_size_t]),
    "mpt_context_options_set_dataset_device_budget": (c_enum, [ContextOptionsP, c_size_t]),
    "mpt_context_create": (c_enum, [ContextOptionsP, P(ContextP)]),
    "mpt_context_destroy": (None, [ContextP]),
    "mpt_context_get_backend": (c_enum, [ContextP, P(c_enum)]),
    "mpt_context_resolve_precision": (c_enum, [ContextP, c_enum, P(c_enum)]),
    "mpt_context_get_memory": (c_enum, [ContextP, SizeP, SizeP]),
    "mpt_context_describe": (c_enum, [ContextP, c_char_p, c_size_t, SizeP]),
    "mpt_model_create": (c_enum, [ContextP, c_int64, P(ModelP)]),
    "mpt_model_destroy": (None, [ModelP]),
    "mpt_model_add_dense": (c_enum, [ModelP, c_int64, c_enum]),
    "mpt_model_set_layer_dtype": (c_enum, [ModelP, c_int64, c_enum]),
    "mpt_model_set_layer_dropout": (c_enum, [ModelP, c_int64, c_float]),
    "mpt_model_get_layer_dropout": (c_enum, [ModelP, c_int64, FloatP]),
    "mpt_model_get_layer_units": (c_enum, [ModelP, c_int64, P(c_int64)]),
    "mpt_model_get_layer_dtype": (c_enum, [ModelP, c_int64, P(c_enum)]),
    "mpt_model_get_layer_activation": (c_enum, [ModelP, c_int64, P(c_enum)]),
    "mpt_model_set_input_dropout": (c_enum, [ModelP, c_float]),
    "mpt_model_get_input_dropout": (c_enum, [ModelP, FloatP]),
    "mpt_model_set_input_standardization": (c_enum, [ModelP, FloatP, FloatP, c_int64]),
    "mpt_model_get_input_standardization": (c_enum, [ModelP, FloatP, FloatP, c_int64, P(c_int)]),
    "mpt_model_set_layer_initializer": (c_enum, [ModelP, c_int64, c_enum]),
    "mpt_model_get_layer_initializer": (c_enum, [ModelP, c_int64, P(c_enum)]),
    "mpt_model_set_layer_trainable": (c_enum, [ModelP, c_int64, c_int]),
    "mpt_model_get_layer_trainable": (c_enum, [ModelP, c_int64, P(c_int)]),
    "mpt_model_get_layer_count": (c_enum, [ModelP, Int64P]),
    "mpt_model_get_input_features": (c_enum, [ModelP, Int64P]),
    "mpt_model_get_output_features": (c_enum, [ModelP, Int64P]),
    "mpt_model_get_parameter_count": (c_enum, [ModelP, Int64P]),
    "mpt_model_get_weights": (c_enum, [ModelP, c_int64, FloatP, c_int64, FloatP, c_int64]),
    "mpt_model_set_weights": (c_enum, [ModelP, c_int64, FloatP, c_int64, FloatP, c_int64]),
    "mpt_model_predict": (c_enum, [ModelP, FloatP, c_int64, FloatP, c_int64]),
    "mpt_model_save": (c_enum, [ModelP, c_char_p]),
    "mpt_model_load": (c_enum, [ContextP, c_char_p, P(ModelP)]),
    "mpt_dataset_create_u8": (c_enum, [ContextP, P(ctypes.c_uint8), c_int64, c_int64, Int32P, c_int32,
                                       c_float, c_float, P(DatasetP)]),
    "mpt_dataset_create_f32": (c_enum, [ContextP, FloatP, c_int64, c_int64, Int32P, c_int32, c_int,
                                        P(DatasetP)]),
    "mpt_dataset_create_f32_targets": (c_enum, [ContextP, FloatP, c_int64, c_int64, FloatP, c_int64, c_int,
                                                P(DatasetP)]),
    "mpt_dataset_load_cifar10": (c_enum, [ContextP, c_char_p, c_int, c_int64, P(DatasetP)]),
    "mpt_dataset_destroy": (None, [DatasetP]),
    "mpt_dataset_get_rows": (c_enum, [DatasetP, Int64P]),
    "mpt_dataset_get_features": (c_enum, [DatasetP, Int64P]),
    "mpt_dataset_get_labels": (c_enum, [DatasetP, Int32P, c_int64]),
    "mpt_dataset_create_slice": (c_enum, [DatasetP, c_int64, c_int64, P(DatasetP)]),
    "mpt_dataset_create_weighted": (c_enum, [DatasetP, FloatP, c_int64, P(DatasetP)]),
    "mpt_dataset_create_subset": (c_enum, [DatasetP, Int64P, c_int64, P(DatasetP)]),
    "mpt_dataset_create_standardized": (c_enum, [DatasetP, FloatP, FloatP, c_int64, P(DatasetP)]),
    "mpt_dataset_get_feature_statistics": (c_enum, [DatasetP, FloatP, FloatP, c_int64]),
    "mpt_trainer_options_create": (c_enum, [P(TrainerOptionsP)]),
    "mpt_trainer_options_destroy": (None, [TrainerOptionsP]),
    "mpt_trainer_options_set_precision": (c_enum, [TrainerOptionsP, c_enum]),
    "mpt_trainer_options_set_loss": (c_enum, [TrainerOptionsP, c_enum]),
    "mpt_trainer_options_set_huber_delta": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_label_smoothing": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_class_weights": (c_enum, [TrainerOptionsP, FloatP, c_int64]),
    "mpt_trainer_options_set_optimizer": (c_enum, [TrainerOptionsP, c_enum]),
    "mpt_trainer_options_set_learning_rate": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_momentum": (c_enum, [TrainerOptionsP, c_float, c_int]),
    "mpt_trainer_options_set_adam": (c_enum, [TrainerOptionsP, c_float, c_float, c_float]),
    "mpt_trainer_options_set_rmsprop": (c_enum, [TrainerOptionsP, c_float, c_float]),
    "mpt_trainer_options_set_rmsprop_centered": (c_enum, [TrainerOptionsP, c_int]),
    "mpt_trainer_options_set_lion": (c_enum, [TrainerOptionsP, c_float, c_float]),
    "mpt_trainer_options_set_weight_decay": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_global_clipnorm": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_ema": (c_enum, [TrainerOptionsP, c_float]),
    "mpt_trainer_options_set_micro_batch_size": (c_enum, [TrainerOptionsP, c_int64]),
    "mpt_trainer_options_set_lr_schedule": (c_enum, [TrainerOptionsP, c_enum, c_int64, c_int64, c_float]),
    "mpt_trainer_options_set_loss_scaling": (c_enum, [TrainerOptionsP, c_enum, c_float]),
    "mpt_trainer_options_set_loss_scaler_dynamics": (c_enum, [TrainerOptionsP, c_float, c_float, c_int64,
                                                              c_float, c_float]),
    "mpt_trainer_options_get_precision": (c_enum, [TrainerOptionsP, P(c_enum)]),
    "mpt_trainer_options_get_loss": (c_enum, [TrainerOptionsP, P(c_enum)]),
    "mpt_trainer_options_get_huber_delta": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_label_smoothing": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_class_weights": (c_enum, [TrainerOptionsP, FloatP, c_int64, Int64P]),
    "mpt_trainer_options_get_optimizer": (c_enum, [TrainerOptionsP, P(c_enum)]),
    "mpt_trainer_options_get_learning_rate": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_momentum": (c_enum, [TrainerOptionsP, FloatP, P(c_int)]),
    "mpt_trainer_options_get_adam": (c_enum, [TrainerOptionsP, FloatP, FloatP, FloatP]),
    "mpt_trainer_options_get_lion": (c_enum, [TrainerOptionsP, FloatP, FloatP]),
    "mpt_trainer_options_get_rmsprop": (c_enum, [TrainerOptionsP, FloatP, FloatP]),
    "mpt_trainer_options_get_rmsprop_centered": (c_enum, [TrainerOptionsP, P(c_int)]),
    "mpt_trainer_options_get_weight_decay": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_global_clipnorm": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_ema": (c_enum, [TrainerOptionsP, FloatP]),
    "mpt_trainer_options_get_micro_batch_size": (c_enum, [TrainerOptionsP, Int64P]),
    "mpt_trainer_options_get_lr_schedule": (c_enum, [TrainerOptionsP, P(c_enum), Int64P, Int64P, FloatP]),
    "mpt_trainer_options_get_loss_scaling": (c_enum, [TrainerOptionsP, P(c_enum), FloatP]),
    "mpt_trainer_options_get_loss_scaler_dynamics": (c_enum, [TrainerOptionsP, FloatP, FloatP, Int64P, FloatP,
                                                              FloatP]),
    "mpt_trainer_options_create_from_checkpoint": (c_enum, [c_char_p, P(TrainerOptionsP)]),
    "mpt_trainer_create": (c_enum, [ModelP, TrainerOptionsP, P(TrainerP)]),
    "mpt_trainer_destroy": (None, [TrainerP]),
    "mpt_trainer_set_callbacks": (c_enum, [TrainerP, mpt_progress_fn, mpt_epoch_end_fn, c_void_p]),
    "mpt_trainer_fit": (c_enum, [TrainerP, DatasetP, c_int64, c_int64, c_int]),
    "mpt_trainer_step": (c_enum, [TrainerP, DatasetP, c_int64, c_int64, FloatP]),
    "mpt_trainer_evaluate": (c_enum, [TrainerP, DatasetP, c_int64, FloatP, FloatP]),
    "mpt_trainer_predict": (c_enum, [TrainerP, FloatP, c_int64, FloatP, c_int64]),
    "mpt_trainer_predict_dataset": (c_enum, [TrainerP, DatasetP, c_int64, FloatP, c_int64]),
    "mpt_trainer_get_precision": (c_enum, [TrainerP, P(c_enum)]),
    "mpt_trainer_set_learning_rate": (c_enum, [TrainerP, c_float]),
    "mpt_trainer_get_learning_rate": (c_enum, [TrainerP, FloatP]),
    "mpt_trainer_get_options": (c_enum, [TrainerP, P(TrainerOptionsP)]),
    "mpt_trainer_get_scheduled_learning_rate": (c_enum, [TrainerP, FloatP]),
    "mpt_trainer_get_loss_scale": (c_enum, [TrainerP, FloatP, Int64P, Int64P]),
    "mpt_trainer_get_gradient_norm": (c_enum, [TrainerP, FloatP]),
    "mpt_trainer_swap_ema_weights": (c_enum, [TrainerP, P(c_int)]),
    "mpt_trainer_get_progress": (c_enum, [TrainerP, Int64P, Int64P]),
    "mpt_trainer_get_batch_size": (c_enum, [TrainerP, Int64P]),
    "mpt_trainer_get_unfinished_epoch": (c_enum, [TrainerP, Int64P, Int64P, Int64P]),
    "mpt_trainer_save_checkpoint": (c_enum, [TrainerP, c_char_p]),
    "mpt_trainer_load_checkpoint": (c_enum, [TrainerP, c_char_p]),
    "mpt_trainer_set_checkpointing": (c_enum, [TrainerP, c_char_p, c_int64, c_int64, c_int64]),
    "mpt_trainer_get_memory": (c_enum, [TrainerP, SizeP, SizeP]),
    "mpt_trainer_get_last_epoch_time": (c_enum, [TrainerP, DoubleP, Int64P]),
}


def _candidates():
    explicit = os.environ.get("MPTRAIN_LIB")
    if explicit:
        yield explicit
    directory = os.environ.get("MPTRAIN_LIB_DIR")
    if directory:
        yield os.path.join(directory, "libmptrain.so")
        yield os.path.join(directory, SONAME)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libmptrain.so", SONAME):
        path = os.path.join(here, name)
        if os.path.exists(path):
            yield path
    found = ctypes.util.find_library("mptrain")
    if found:
        yield found
    yield SONAME


def load_library():
    """Loads libmptrain and declares every prototype; raises OSError naming what was tried."""
    tried = []
    for candidate in _candidates():
        try:
            library = ctypes.CDLL(candidate)
        except OSError as error:
            tried.append("%s (%s)" % (candidate, error))
            continue
        for name, (restype, argtypes) in PROTOTYPES.items():
            function = getattr(library, name)
            function.restype = restype
            function.argtypes = argtypes
        return library
    raise OSError("libmptrain not found; set MPTRAIN_LIB_DIR to the directory of libmptrain.so. Tried: "
                  + "; ".join(tried))
