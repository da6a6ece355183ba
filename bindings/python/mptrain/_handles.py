"""What every object of the library has: its Context's family (the lock that serialises its calls and the
log callback), the fixed order in which calls lock several families, and the base class of handles."""
import threading

from ._enums import Status
from ._errors import Error
from ._library import _lib


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
