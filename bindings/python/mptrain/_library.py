"""The loaded libmptrain, one per process (loaded on import where it can be), a failed call's status as
an Error, and what the library tells of itself: version, CUDA devices, status strings."""
import threading

from . import _native
from ._arguments import _integer
from ._errors import Error


# libmptrain loads before numpy where it can: both may use the system's OpenBLAS, which chooses its
# kernels once, when the first of them loads it, and mptrain names the kernels the CPU allows
# (OpenBLAS 0.3.21 takes CPUs it does not know for an SSE3-only Prescott, 3-4x slower).
try:
    _preloaded_lib = _native.load_library()
except OSError:  # raised again, naming what was tried, on first use
    _preloaded_lib = None

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
