"""Python arguments as the C API takes them: enum members from names, paths as bytes, integers checked
against their C type, numbers as floats, and objects checked to be the mptrain class a parameter wants."""
import ctypes
import os

from . import _native
from ._enums import Status
from ._errors import Error, _OutOfRange


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


def _real(value, what):
    """A number (an int, a float, a numpy scalar, a Fraction or a Decimal) as the C float parameter takes
    it. A str is refused as the integer parameters refuse it (float() would have parsed "1e-3"), and
    so is a bool (True would have been a rate of 1), each naming the parameter."""
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        raise TypeError("%s must be a number, not %s" % (what, type(value).__name__))
    return float(value)


def _require(value, kind, what):
    if not isinstance(value, kind):
        raise TypeError("%s must be a mptrain.%s, not %s" % (what, kind.__name__, type(value).__name__))
    return value
