"""Context: backend, threads, seed, log callback and memory budgets; the parent of models and datasets."""
import ctypes
import json

from . import _native
from ._arguments import _enum, _integer
from ._enums import Backend, LogLevel, Precision
from ._handles import _Family, _Handle
from ._library import _check, _lib
from ._results import Memory


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

    def describe(self):
        """What this context runs on and how (mpt_context_describe), as a dict: "version", "backend"
        ("cpu" or "cuda"), "device", "auto_fallback", the memory counters, then the backend's own
        members ("threads", ... on the CPU; "device_index", "switches", ... on CUDA)."""
        length = ctypes.c_size_t()
        # One lock around both calls: no call of this context's family can change the text between them.
        with self._family:
            _check(_lib().mpt_context_describe(self._get(), None, 0, ctypes.byref(length)))
            text = ctypes.create_string_buffer(length.value + 1)
            _check(_lib().mpt_context_describe(self._get(), text, len(text), ctypes.byref(length)))
        return json.loads(text.raw[:length.value].decode("utf-8"))
