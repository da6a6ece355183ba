"""mptrain.Error, the one exception type of the bindings, and the flavour of it that is also an
OverflowError (an integer its C parameter cannot hold)."""
from ._enums import Status


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
