"""Inputs as numpy arrays (when installed), array.array, memoryview, bytes and lists; outputs as numpy
arrays or, without numpy, array.array."""
import array

import pytest

import mptrain
from mptrain import _buffers
from conftest import CLASSES, FEATURES, make_blobs, raises, values

try:
    import numpy as np
except ImportError:
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")


@needs_numpy
def test_numpy_arrays_in_and_out(ctx, model):
    samples, labels = make_blobs(rows=90)
    x = np.asarray(samples, dtype=np.float64)  # converted to float32
    y = np.asarray(labels, dtype=np.int64)     # converted to int32
    data = mptrain.Dataset.from_f32(ctx, x, y, CLASSES)
    assert data.features == FEATURES
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.02)
    trainer.fit(data, 4, 16)
    out = trainer.predict(x[:5])
    assert isinstance(out, np.ndarray) and out.shape == (5, CLASSES) and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    weights, bias = model.get_weights(0)
    assert weights.shape == (16, FEATURES) and bias.shape == (16,)
    non_contiguous = np.asfortranarray(x[:5])
    np.testing.assert_allclose(trainer.predict(non_contiguous), out, rtol=1e-6)
    u8 = np.clip(x * 40 + 60, 0, 255).astype(np.uint8)
    assert mptrain.Dataset.from_u8(ctx, u8, y, CLASSES).rows == 90
    with pytest.raises(TypeError):
        mptrain.Dataset.from_f32(ctx, x, y.astype(np.float32), CLASSES)
    with pytest.raises(TypeError):
        mptrain.Dataset.from_u8(ctx, x, y, CLASSES)
    with pytest.raises(TypeError, match="samples must hold real numbers, not complex64"):
        mptrain.Dataset.from_f32(ctx, x.astype(np.complex64), y, CLASSES)  # numpy would drop the imaginary part
    with pytest.raises(TypeError, match="inputs must hold real numbers"):
        trainer.predict(x[:2] + 1j)


@needs_numpy
def test_numpy_shape_errors(ctx, model):
    with pytest.raises(mptrain.Error) as caught:
        model.predict(np.zeros((2, FEATURES + 1), dtype=np.float32))
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH
    with pytest.raises(mptrain.Error) as caught:
        mptrain.Dataset.from_f32(ctx, np.zeros((3, FEATURES)), np.zeros(4, dtype=np.int32), CLASSES)
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH


def test_plain_buffers_without_numpy(ctx, model, monkeypatch):
    monkeypatch.setattr(_buffers, "_np", None)  # behave as if numpy were not installed
    samples, labels = make_blobs(rows=60)
    flat = array.array("f", [v for row in samples for v in row])
    data = mptrain.Dataset.from_f32(ctx, memoryview(flat), array.array("i", labels), CLASSES, features=FEATURES)
    trainer = mptrain.Trainer(model)
    trainer.fit(data, 1, 20)
    out = trainer.predict(flat[:2 * FEATURES])
    assert isinstance(out, array.array) and out.typecode == "f" and len(out) == 2 * CLASSES
    weights, bias = model.get_weights(1)
    assert len(weights) == CLASSES * 16 and len(bias) == CLASSES
    data_u8 = mptrain.Dataset.from_u8(ctx, bytes(60 * FEATURES), labels, CLASSES)
    assert data_u8.features == FEATURES
    as_doubles = array.array("d", [v for row in samples for v in row])  # converted to float32
    assert mptrain.Dataset.from_f32(ctx, as_doubles, labels, CLASSES).features == FEATURES
    with pytest.raises(mptrain.Error):
        mptrain.Dataset.from_u8(ctx, [300] * (60 * FEATURES), labels, CLASSES)  # > 255


def shaped(values, shape):
    """A float32 memoryview of `shape`: an array with a shape, without numpy."""
    return memoryview(array.array("f", values)).cast("B").cast("f", shape)


def test_set_weights_refuses_arrays_of_another_shape(ctx, model):
    """The library checks only the element count: a transposed [inputs, units] array would be taken as
    [units, inputs]. Shaped arrays must match the layer; flat sequences of the right length still do."""
    weights, bias = [float(i) for i in range(16 * FEATURES)], [0.5] * 16
    with pytest.raises(mptrain.Error, match=r"\(%d, 16\), not \(16, %d\)" % (FEATURES, FEATURES)) as caught:
        model.set_weights(0, shaped(weights, (FEATURES, 16)))
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH
    with pytest.raises(mptrain.Error, match=r"\(2, 8\), not \(16,\)"):
        model.set_weights(0, bias=shaped(bias, (2, 8)))
    with pytest.raises(mptrain.Error, match=r"\(%d, 16\), not \(16, %d\)" % (FEATURES, FEATURES)):
        model.set_weights(0, [weights[row::FEATURES] for row in range(FEATURES)])  # nested lists, transposed
    model.set_weights(0, shaped(weights, (16, FEATURES)), shaped(bias, (16,)))
    assert list(model.get_weights(0)[0].reshape(-1) if np is not None else model.get_weights(0)[0]) == weights
    model.set_weights(0, array.array("f", weights), bias)  # flat
    if np is not None:
        with pytest.raises(mptrain.Error, match="not \\(16, %d\\)" % FEATURES):
            model.set_weights(0, np.asarray(weights, dtype=np.float32).reshape(16, FEATURES).T)
        model.set_weights(0, np.asarray(weights).reshape(16, FEATURES), np.asarray(bias))


def test_shaped_rows_must_hold_the_models_width(ctx, model):
    """The library sees only a count: 24 values are 6 rows of 4 inputs whatever shape they came in. A
    shaped array's rows are its first dimension, so one whose rows hold another number of values (a
    transposed [4, 6] batch, nested lists of 6) is refused, in predict and in a data set, where it would
    have been cut into rows it does not hold. Flat sequences and images as [rows, height, width]
    (a row: every dimension but the first) are taken."""
    assert FEATURES == 4
    flat = [float(i % 7) / 7.0 for i in range(6 * FEATURES)]
    transposed = [flat[i * 6:(i + 1) * 6] for i in range(FEATURES)]  # 4 rows of 6
    labels = [i % CLASSES for i in range(6)]
    trainer = mptrain.Trainer(model)
    for predictor in (model, trainer):
        with raises(mptrain.Status.SHAPE_MISMATCH) as caught:
            predictor.predict(shaped(flat, (FEATURES, 6)))
        assert "(4, 6): rows of 6 values, not of 4" in caught.value.message
        with raises(mptrain.Status.SHAPE_MISMATCH):
            predictor.predict(transposed)
        expected = values(predictor.predict(array.array("f", flat)))
        assert len(expected) == 6 * CLASSES
        assert values(predictor.predict(shaped(flat, (6, 2, 2)))) == expected
        assert values(predictor.predict(shaped(flat, (6, FEATURES)))) == expected
    with raises(mptrain.Status.SHAPE_MISMATCH) as caught:
        mptrain.Dataset.from_f32(ctx, shaped(flat, (FEATURES, 6)), labels, CLASSES)
    assert "(4, 6)" in caught.value.message
    with raises(mptrain.Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_f32(ctx, shaped(flat, (FEATURES, 6)), labels, CLASSES, features=FEATURES)
    with raises(mptrain.Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_u8(ctx, memoryview(bytes(6 * FEATURES)).cast("B", (FEATURES, 6)), labels, CLASSES)
    assert mptrain.Dataset.from_f32(ctx, shaped(flat, (6, 2, 2)), labels, CLASSES).features == FEATURES
    assert mptrain.Dataset.from_f32(ctx, array.array("f", flat), labels, CLASSES).features == FEATURES
    one_hot_targets = [1.0 if c == label else 0.0 for label in labels for c in range(CLASSES)]
    with raises(mptrain.Status.SHAPE_MISMATCH) as caught:
        mptrain.Dataset.from_targets(ctx, shaped(flat, (6, FEATURES)), shaped(one_hot_targets, (CLASSES, 6)),
                                     target_width=CLASSES)
    assert "(3, 6): rows of 6 values, not of 3" in caught.value.message
    data = mptrain.Dataset.from_targets(ctx, shaped(flat, (6, FEATURES)), shaped(one_hot_targets, (6, CLASSES)))
    assert (data.rows, data.features) == (6, FEATURES)


def test_labels_are_one_class_index_a_row(ctx):
    """Labels as [rows] or [rows, 1] (Keras's y either way) are taken; one-hot rows are refused, naming
    from_targets, where they would have been counted as CLASSES times the rows."""
    samples, labels = make_blobs(rows=6)
    flat = [v for row in samples for v in row]
    column = [[label] for label in labels]
    one_hot = [[1 if c == label else 0 for c in range(CLASSES)] for label in labels]
    assert values(mptrain.Dataset.from_f32(ctx, flat, column, CLASSES).labels) == labels
    assert mptrain.Dataset.from_u8(ctx, bytes(6 * FEATURES), column, CLASSES).rows == 6
    for make in (lambda y: mptrain.Dataset.from_f32(ctx, flat, y, CLASSES),
                 lambda y: mptrain.Dataset.from_u8(ctx, bytes(6 * FEATURES), y, CLASSES)):
        with raises(mptrain.Status.SHAPE_MISMATCH) as caught:
            make(one_hot)
        assert "(6, 3)" in caught.value.message and "from_targets" in caught.value.message
    # Two classes one-hot: 12 labels and 24 values had made 12 rows of 2 features, with no error.
    with raises(mptrain.Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_f32(ctx, flat, [[label % 2, 1 - label % 2] for label in labels], 2)
    if np is not None:
        with raises(mptrain.Status.SHAPE_MISMATCH):
            mptrain.Dataset.from_f32(ctx, np.asarray(samples), np.asarray(column).reshape(6, 1, 1), CLASSES)
        y = np.asarray(labels, dtype=np.int64).reshape(6, 1)
        assert mptrain.Dataset.from_f32(ctx, np.asarray(samples), y, CLASSES).rows == 6


def test_outputs_too_large_to_allocate_are_errors_not_memory_errors(ctx):
    """An output past the library's MAX_HOST_ELEMENTS is refused before allocating; one the host cannot
    allocate is OUT_OF_MEMORY, like the library's own failures (not Python's MemoryError)."""
    huge = mptrain.Model(ctx, 1 << 20)
    huge.add_dense(1 << 21)  # 2**41 weights: layers are allocated only when first used
    with pytest.raises(mptrain.Error) as caught:
        huge.get_weights(0)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    # A 2 TiB output the host refuses; a kernel that grants any allocation (vm.overcommit_memory=1)
    # would grant it, and the library would then build 2**39 weights.
    try:
        with open("/proc/sys/vm/overcommit_memory") as policy:
            always_granted = policy.read().strip() == "1"
    except OSError:
        always_granted = True
    if always_granted:
        return
    large = mptrain.Model(ctx, 1 << 20)
    large.add_dense(1 << 19)  # 2**39 weights (2 TiB): more than this host's memory
    with pytest.raises(mptrain.Error) as caught:
        large.get_weights(0)
    assert caught.value.status == mptrain.Status.OUT_OF_MEMORY
