"""Dataset slices (Dataset.slice, dataset[a:b]; mpt_dataset_create_slice): a validation split of slices
trains and evaluates bit for bit as datasets copied from the same rows; Python's slice bounds; the
refusals; a slice outlives its source and its context. Subsets (Dataset.subset, dataset[indices];
mpt_dataset_create_subset): the rows listed, in order, from any sequence of ints; the refusals."""
import array
import gc
import weakref

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, mlp, new_run, weight_bytes

try:
    import numpy as np
except ImportError:
    np = None


@pytest.mark.parametrize("precision", ["fp32", "mixed_bf16"])
def test_a_validation_split_of_slices_trains_and_evaluates_as_copied_rows_bit_for_bit(precision):
    samples, labels = make_blobs(rows=150, seed=41)
    split = int(len(labels) * (1 - 0.2))  # Keras's validation_split=0.2: the last 30 rows held out

    def run(make_split):
        ctx, model, trainer = new_run(precision, seed=23)
        assert trainer.precision.name.lower() == precision  # as asked, not silently another
        training, validation = make_split(ctx)
        assert (len(training), len(validation)) == (120, 30)
        start = weight_bytes(model)
        during_fit = []  # validation from the epoch-end callback, as Keras's fit(validation_data=)
        trainer.set_callbacks(epoch_end=lambda epoch, loss, accuracy: during_fit.append(
            (loss, accuracy) + tuple(trainer.evaluate(validation))))
        trainer.fit(training, epochs=3, batch_size=16, shuffle=True)
        weights = weight_bytes(model)
        assert weights != start  # the run trained
        assert trainer.progress == (3 * (120 // 16), 3)
        return weights, during_fit, trainer.evaluate(training), trainer.evaluate(validation)

    def slices(ctx):
        data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
        return data[:split], data[split:]

    def copies(ctx):
        return (mptrain.Dataset.from_f32(ctx, samples[:split], labels[:split], CLASSES),
                mptrain.Dataset.from_f32(ctx, samples[split:], labels[split:], CLASSES))

    sliced, copied = run(slices), run(copies)
    # Floats from C compared as they came: the same bits.
    assert sliced[0] == copied[0]
    assert sliced[1] == copied[1] and len(sliced[1]) == 3
    assert sliced[2:] == copied[2:]
    assert sliced[3].accuracy > 0.8, sliced[3]


def test_python_slice_bounds_count_from_the_end_default_and_clip_as_python_does(ctx, model):
    samples, labels = make_blobs(rows=100, seed=42)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    rows = list(range(100))
    for key in (slice(-20, None), slice(None, -20), slice(None, None), slice(None, None, 1), slice(10, 35),
                slice(-1000, 5), slice(95, 1000), slice(-1, None), slice(7, 8), slice(-30, -10, None)):
        part = data[key]
        expected = rows[key]
        assert (len(part), part.rows, part.features) == (len(expected), len(expected), FEATURES), key
        # The rows themselves: a slice evaluates as a copy of rows[key] does, bit for bit.
        copy = mptrain.Dataset.from_f32(ctx, [samples[i] for i in expected], [labels[i] for i in expected],
                                        CLASSES)
        assert trainer.evaluate(part, batch_size=8) == trainer.evaluate(copy, batch_size=8), key
    assert len(data[-20:]) == 20
    assert len(data) == 100  # the source is unchanged


def test_empty_or_strided_python_slices_raise_value_error_and_integers_type_error(ctx, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    for key in (slice(5, 5), slice(6, 5), slice(300, None), slice(1000, 2000), slice(None, -300),
                slice(-1, -1)):
        with pytest.raises(ValueError, match="is empty"):
            data[key]
    for key in (slice(None, None, 2), slice(None, None, -1), slice(None, None, 0), slice(0, 10, 3)):
        with pytest.raises(ValueError, match="step must be 1"):
            data[key]
    for key in (0, 3, -1, "rows", (0, 1)):
        with pytest.raises(TypeError, match=r"dataset\[i:i \+ 1\]"):
            data[key]
    with pytest.raises(TypeError):
        data[0.5:2]
    with pytest.raises(TypeError):  # not a sequence of rows
        iter(data)
    assert len(data[3:4]) == 1  # one row


def test_slice_refuses_rows_outside_its_source_with_invalid_argument(ctx, model):
    samples, labels = make_blobs(rows=10, seed=43)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    for first, rows in ((-1, 1), (10, 1), (11, 1), (0, 0), (0, -1), (0, 11), (9, 2), (5, 6), (2 ** 62, 1)):
        with pytest.raises(mptrain.Error) as caught:
            data.slice(first, rows)
        assert caught.value.status == mptrain.Status.INVALID_ARGUMENT, (first, rows)
        assert caught.value.message, (first, rows)
    with pytest.raises(OverflowError):  # past int64_t: the binding's refusal, also an Error
        data.slice(2 ** 63, 1)
    with pytest.raises(TypeError):
        data.slice(1.0, 2)
    assert [len(data.slice(first, rows)) for first, rows in ((0, 10), (9, 1), (3, 7))] == [10, 1, 7]
    # A slice of a slice counts from its own first row, within its own rows.
    middle = data.slice(2, 6)
    inner = middle.slice(1, 3)
    trainer = mptrain.Trainer(model, precision="fp32")
    assert trainer.evaluate(inner) == trainer.evaluate(
        mptrain.Dataset.from_f32(ctx, samples[3:6], labels[3:6], CLASSES))
    assert trainer.evaluate(middle[-2:]) == trainer.evaluate(
        mptrain.Dataset.from_f32(ctx, samples[6:8], labels[6:8], CLASSES))
    with pytest.raises(mptrain.Error) as caught:
        middle.slice(0, 7)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    data.close()
    with pytest.raises(mptrain.Error) as caught:
        data.slice(0, 1)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    assert len(middle) == 6  # slices stay usable


def test_a_slice_keeps_working_after_its_source_and_context_are_deleted():
    samples, labels = make_blobs(rows=200, seed=44)
    messages = []
    ctx = mptrain.Context(backend="cpu", threads=1, seed=3, log=lambda level, text: messages.append(text),
                          log_level="debug")
    model = mlp(ctx)
    source = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    training, validation = source[:160], source.slice(160, 40)
    copy = mptrain.Dataset.from_f32(ctx, samples[160:], labels[160:], CLASSES)
    gone = weakref.ref(source), weakref.ref(ctx)
    del source
    ctx.close()
    del ctx
    gc.collect()
    assert [ref() for ref in gone] == [None, None]
    assert (len(training), len(validation)) == (160, 40)
    del messages[:]
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)  # logs at DEBUG
    trainer.fit(training, epochs=3, batch_size=16, shuffle=True)
    evaluation = trainer.evaluate(validation)
    assert evaluation == trainer.evaluate(copy)
    assert evaluation.accuracy > 0.8, evaluation
    assert messages  # the context's log callback is still alive, kept by its objects
    training.close()
    del training, trainer
    gc.collect()
    assert len(validation[:10]) == 10  # the last slice still holds the storage


def test_a_slice_alone_keeps_its_contexts_log_callback_alive():
    messages = []

    def log(level, text):
        messages.append(text)

    logger = weakref.ref(log)
    ctx = mptrain.Context(backend="cpu", threads=1, log=log, log_level="debug")
    del log
    samples, labels = make_blobs(rows=30, seed=45)
    source = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    part = source[5:]
    del source, ctx
    gc.collect()
    # The library may still call the context's log callback: the slice keeps it, as every object of
    # the context does.
    assert logger() is not None
    assert len(part) == 25 and len(part[:-5]) == 20
    del part
    gc.collect()
    assert logger() is None  # and nothing else held it


def test_a_subset_has_the_rows_listed_in_order_repeats_included_from_any_sequence_of_ints(ctx, model):
    samples, labels = make_blobs(rows=30, seed=46)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    part = data[10:22]  # indices count from the slice's own first row
    trainer = mptrain.Trainer(model, precision="fp32")
    forms = [[5, 0, 5, 2], (5, 0, 5, 2), range(11, 0, -4), array.array("q", [5, 0, 5, 2]),
             array.array("l", [3, 3])]
    if np is not None:
        forms += [np.array([5, 0, 5, 2]), np.array([7, 1], dtype=np.int32), np.array([4], dtype=np.uint8)]
    for rows in forms:
        listed = [10 + int(row) for row in rows]
        copy = mptrain.Dataset.from_f32(ctx, [samples[r] for r in listed], [labels[r] for r in listed], CLASSES)
        subsets = [part.subset(rows)] + ([] if isinstance(rows, tuple) else [part[rows]])
        for subset in subsets:
            assert len(subset) == len(listed), rows
            assert list(subset.labels) == [labels[r] for r in listed], rows
            assert trainer.predict_dataset(subset).tobytes() == trainer.predict_dataset(copy).tobytes(), rows


def test_a_subset_refuses_rows_outside_its_source_no_rows_and_non_integers(ctx):
    samples, labels = make_blobs(rows=30, seed=47)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    for source, rows in ((data, [0, 1, 30]), (data, []), (data[20:], [-1]), (data[20:], [3, 4, 10]),
                         (data, [2 ** 63]), (data, [[0, 1]])):
        with pytest.raises(mptrain.Error) as caught:
            source.subset(rows)
        expected = mptrain.Status.SHAPE_MISMATCH if rows == [[0, 1]] else mptrain.Status.INVALID_ARGUMENT
        assert caught.value.status == expected, rows
        assert caught.value.message, rows
    with pytest.raises(mptrain.Error, match="row 2 of the list is 30"):
        data[[0, 1, 30]]
    bad = [[0.0, 1.0], [True, False], "01", {0, 1}, None, 3]
    if np is not None:
        bad += [np.array([0.0, 1.0]), np.zeros(30, dtype=bool)]
    for rows in bad:
        with pytest.raises(TypeError):
            data.subset(rows)
    assert len(data.subset([29])) == 1
