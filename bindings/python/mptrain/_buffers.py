"""Buffers in and out: caller data (numpy arrays, buffers, nested lists) as C pointers with their shape,
and the arrays the library writes its outputs into."""
import array
import ctypes

# Imported before numpy, for what it does on import: it loads libmptrain first (see there).
from . import _library  # noqa: F401
from ._enums import Status
from ._errors import Error

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised where numpy is absent
    _np = None


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
        if data.size and _np.issubdtype(data.dtype, _np.complexfloating):  # (numpy would drop the imaginary part)
            raise TypeError("%s must hold real numbers, not %s" % (what, data.dtype))
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


def _row_width(buffer):
    """The values in a row of a shaped array of two or more dimensions (the product of all but the first:
    a [rows, 3072] array's, or [rows, 32, 32, 3] images'), else None (a flat sequence, cut into rows)."""
    if buffer.shape is None or len(buffer.shape) < 2:
        return None
    width = 1
    for extent in buffer.shape[1:]:
        width *= extent
    return width


def _rows_of(buffer, width, what):
    """The rows of `width` values in `buffer`. The library sees only the count, so a shaped array whose
    rows hold another number of values (a transposed [width, rows] array, rows of 5 values for a model
    of 4 inputs) is refused here though its count is whole rows of `width`."""
    shaped_width = _row_width(buffer)
    if shaped_width is not None and shaped_width != width:
        raise Error(Status.SHAPE_MISMATCH, "%s has shape %s: rows of %d values, not of %d" % (
            what, tuple(buffer.shape), shaped_width, width))
    if buffer.count == 0 and width > 0:
        # (The library refuses zero rows too; said here in the caller's terms, not as a count.)
        raise Error(Status.SHAPE_MISMATCH, "%s has no rows: at least one is needed" % what)
    if buffer.count == 0 or width <= 0 or buffer.count % width:
        raise Error(Status.SHAPE_MISMATCH, "%s holds %d values, not whole rows of %d" % (what, buffer.count, width))
    return buffer.count // width
