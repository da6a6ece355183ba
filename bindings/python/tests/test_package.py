"""The package's classes and functions are defined in its private modules (_trainer.py, ...) but read as
mptrain's: reprs, tracebacks, pickles and help() name mptrain.X, and mptrain.X is where each is found."""
import inspect
import pickle
import traceback

import pytest

import mptrain


def test_every_public_class_and_function_is_mptrains_and_found_there_by_its_name():
    public = {name: value for name, value in vars(mptrain).items()
              if not name.startswith("_") and (isinstance(value, type) or inspect.isfunction(value))}
    assert {"Context", "Dataset", "Error", "Evaluation", "Model", "Status", "Trainer", "version"} <= set(public)
    for name, value in public.items():
        assert (value.__module__, value.__qualname__) == ("mptrain", name), name
    # help() names the handles' base class as mptrain's, and it is there.
    assert mptrain.Trainer.__mro__[1] is mptrain._Handle and mptrain._Handle.__module__ == "mptrain"


def test_pickles_name_mptrain_and_load_back():
    for value in (mptrain.Status.CANCELLED, mptrain.Evaluation(0.5, 0.25), mptrain.LossScale(2.0, 1, 0)):
        pickled = pickle.dumps(value)
        assert b"mptrain\x94" in pickled and b"mptrain._" not in pickled, pickled
        assert pickle.loads(pickled) == value


def test_tracebacks_name_mptrains_errors():
    with pytest.raises(OverflowError) as caught:
        mptrain.Context(threads=1 << 40)  # refused before the library sees it
    assert traceback.format_exception_only(caught.type, caught.value)[0].startswith(
        "mptrain._OutOfRange: INVALID_ARGUMENT: threads is")
    error = mptrain.Error(mptrain.Status.IO_ERROR, "no file")
    assert traceback.format_exception_only(type(error), error) == ["mptrain.Error: IO_ERROR: no file\n"]
