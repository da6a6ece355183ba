"""ABI of the bindings against the C side. The C API has no public structs, so this checks what the
ctypes declarations depend on: every enum value against the header (the spec), the sizes of the C
types in the signatures against the C compiler (bindings/abi_probe.c), and that every function of the
header has a prototype here."""
import ctypes
import os
import re
import subprocess

import pytest

import mptrain
from mptrain import _native

HEADER = os.environ.get("MPTRAIN_HEADER") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "include", "mptrain", "mptrain.h")


def header_text():
    return open(HEADER).read()


def test_every_enum_value_matches_the_header():
    constants = dict((name, int(value)) for name, value in re.findall(r"\b(MPT_[A-Z0-9_]+)\s*=\s*(-?\d+)",
                                                                        header_text()))
    checked = set()
    for kind, prefix in mptrain.ENUM_PREFIXES.items():
        for member in kind:
            name = prefix + member.name
            assert constants.get(name) == int(member), name
            checked.add(name)
    # ...and nothing in the header is missing here (LOSS_ and LOSS_SCALING_ share a prefix).
    assert sorted(set(constants) - checked) == []


def test_every_header_function_has_a_prototype():
    declared = set(re.findall(r"MPT_API[^;]*?\b(mpt_[a-z0-9_]+)\s*\(", header_text(), re.S))
    assert declared and declared == set(_native.PROTOTYPES)


def test_c_type_sizes_match_the_ctypes_types():
    probe = os.environ.get("MPTRAIN_ABI_PROBE")
    if not probe:
        pytest.skip("MPTRAIN_ABI_PROBE is not set (ctest sets it)")
    sizes = dict(line.rsplit(" ", 1) for line in subprocess.check_output([probe], text=True).splitlines())
    sizes = {name: int(size) for name, size in sizes.items()}
    expected = {
        "int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
        "uint8_t": ctypes.c_uint8, "size_t": ctypes.c_size_t, "float": ctypes.c_float, "void*": ctypes.c_void_p,
        "mpt_log_fn": _native.mpt_log_fn, "mpt_progress_fn": _native.mpt_progress_fn,
        "mpt_epoch_end_fn": _native.mpt_epoch_end_fn,
    }
    for kind in mptrain.ENUM_PREFIXES:
        expected["mpt_" + re.sub(r"(?<!^)([A-Z])", r"_\1", kind.__name__).lower()] = _native.c_enum
    expected["mpt_dtype"] = expected.pop("mpt_d_type")
    for name, ctype in expected.items():
        assert sizes[name] == ctypes.sizeof(ctype), name
    assert set(sizes) == set(expected)
