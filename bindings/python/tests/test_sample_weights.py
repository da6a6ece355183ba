"""Row weights (Dataset.weighted, mpt_dataset_create_weighted): Keras's sample_weight. Weights 2 train as
twice the learning rate bit for bit, from every kind of sequence the binding takes; step's and evaluate's
losses are the weighted mean recomputed from predictions, accuracy unweighted; slices keep their rows'
weights and weighting again replaces them; the refusals; a weighted dataset outlives its source."""
import array
import gc
import math
import weakref

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, mlp, values, weight_bytes


def weighted_cross_entropy(probabilities, labels, weights=None):
    """The mean over rows of -log p(label) times the row's weight (1 without weights), in double, from
    the probabilities of predict: sample weights as mptrain.h defines them (not normalised)."""
    total = 0.0
    for row, label in enumerate(labels):
        total += (1.0 if weights is None else weights[row]) * -math.log(probabilities[row * CLASSES + label])
    return total / len(labels)


def row_weights(rows):
    """Distinct weights, a 0 among them: a row that counts for nothing."""
    return [0.25 + 0.5 * (row % 5) if row % 7 else 0.0 for row in range(rows)]


def test_weights_of_2_train_one_sgd_step_as_twice_the_learning_rate_bit_for_bit():
    samples, labels = make_blobs(rows=30, seed=71)

    def one_step(learning_rate, weights=None):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
        own_model = mlp(own_ctx)
        trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="sgd", learning_rate=learning_rate,
                                  momentum=0.0)
        data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
        if weights is not None:
            data = data.weighted(weights)
        assert len(data) == 30
        start = weight_bytes(own_model)
        loss = trainer.step(data, 0, 30)
        weights_after = weight_bytes(own_model)
        assert weights_after != start  # the step moves the weights
        own_ctx.close()
        return loss, weights_after

    # Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
    unweighted_loss, unweighted = one_step(0.05)
    doubled_rate_loss, doubled_rate = one_step(0.1)
    assert doubled_rate_loss == unweighted_loss  # the loss is that of the weights before the step
    assert one_step(0.05, [1.0] * 30) == (unweighted_loss, unweighted)  # weights 1: as none
    kinds = [[2.0] * 30, (2,) * 30, array.array("f", [2.0] * 30), array.array("d", [2.0] * 30)]
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        kinds += [np.full(30, 2.0, dtype=np.float32), np.full(30, 2.0, dtype=np.float64)]
    for weights in kinds:
        weighted_loss, weighted = one_step(0.05, weights)
        assert weighted == doubled_rate, type(weights)
        assert weighted != unweighted
        assert weighted_loss == 2 * unweighted_loss, type(weights)


def test_numpy_weights_of_either_float_width_train_as_a_list():
    np = pytest.importorskip("numpy")
    samples, labels = make_blobs(rows=40, seed=72)
    weights = row_weights(40)

    def one_step(weights):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=6)
        own_model = mlp(own_ctx)
        trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="sgd", learning_rate=0.1)
        loss = trainer.step(mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES).weighted(weights), 0, 40)
        result = loss, weight_bytes(own_model)
        own_ctx.close()
        return result

    as_list = one_step(weights)
    assert as_list != one_step([1.0] * 40)
    for converted in (np.array(weights, dtype=np.float32), np.array(weights, dtype=np.float64),
                      np.repeat(np.array(weights, dtype=np.float64), 2)[::2]):  # strided: copied contiguous
        assert one_step(converted) == as_list, converted.dtype


def test_a_weighted_step_and_evaluate_report_the_weighted_mean_loss_and_unweighted_accuracy(ctx, model):
    samples, labels = make_blobs(rows=48, seed=73)
    weights = row_weights(48)
    plain = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    data = plain.weighted(weights)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.05)
    trainer.fit(plain, epochs=1, batch_size=16)  # some rows right, some wrong: accuracy in (0, 1)

    probabilities = values(trainer.predict(samples))
    expected = weighted_cross_entropy(probabilities, labels, weights)
    unweighted_loss = weighted_cross_entropy(probabilities, labels)
    assert abs(expected - unweighted_loss) > 1e-3 * unweighted_loss  # the two can be told apart
    evaluation = trainer.evaluate(data, batch_size=16)
    assert evaluation.loss == pytest.approx(expected, rel=1e-5)  # evaluate weighs, as Keras's does
    unweighted = trainer.evaluate(plain, batch_size=16)
    assert unweighted.loss == pytest.approx(unweighted_loss, rel=1e-5)
    assert evaluation.accuracy == unweighted.accuracy  # every row counts once
    assert 0 < unweighted.accuracy < 1  # a weighted accuracy would differ
    assert trainer.evaluate(plain) == unweighted  # the source stays unweighted

    # A step on rows [8, 40): the mean over those rows, their weights not normalised.
    loss = trainer.step(data, 8, 32)
    assert loss == pytest.approx(weighted_cross_entropy(probabilities[8 * CLASSES:40 * CLASSES], labels[8:40],
                                                         weights[8:40]), rel=1e-5)


def test_a_slice_of_a_weighted_dataset_is_the_slice_weighted_and_weighting_again_replaces(ctx, model):
    samples, labels = make_blobs(rows=60, seed=74)
    weights = row_weights(60)
    plain = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    data = plain.weighted(weights)
    trainer = mptrain.Trainer(model, precision="fp32")
    for first, rows in ((0, 60), (10, 30), (45, 15), (59, 1), (3, 4)):
        kept = data.slice(first, rows)
        reweighted = plain.slice(first, rows).weighted(weights[first:first + rows])
        assert trainer.evaluate(kept, batch_size=8) == trainer.evaluate(reweighted, batch_size=8), (first, rows)
    assert trainer.evaluate(data[-20:]) == trainer.evaluate(plain[-20:].weighted(weights[-20:]))
    assert trainer.evaluate(data[12:20][2:5]) == trainer.evaluate(plain[14:17].weighted(weights[14:17]))
    # ...and the weights do count in a slice.
    assert trainer.evaluate(data[10:40]).loss != trainer.evaluate(plain[10:40]).loss

    # Weighting again replaces the weights (does not multiply them); a slice's weighting is its own.
    others = [1.0 + row % 3 for row in range(60)]
    assert trainer.evaluate(data.weighted(others)) == trainer.evaluate(plain.weighted(others))
    assert trainer.evaluate(data.weighted([1.0] * 60)) == trainer.evaluate(plain)
    assert trainer.evaluate(data[10:40].weighted(others[:30])) == trainer.evaluate(
        plain[10:40].weighted(others[:30]))
    assert trainer.evaluate(data) == trainer.evaluate(plain.weighted(weights))  # unchanged by its reweightings


def test_weights_are_refused_by_count_value_shape_or_type(ctx):
    samples, labels = make_blobs(rows=10, seed=75)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    for count in (0, 1, 9, 11, 20):
        with pytest.raises(mptrain.Error) as caught:
            data.weighted([1.0] * count)
        assert caught.value.status == mptrain.Status.SHAPE_MISMATCH, count
        assert caught.value.message, count
    with pytest.raises(mptrain.Error) as caught:  # a slice has its own rows
        data[2:].weighted([1.0] * 10)
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH
    for bad in (-0.5, -1e-30, float("nan"), float("inf"), -float("inf")):
        for row in (0, 4, 9):
            weights = [1.0] * 10
            weights[row] = bad
            with pytest.raises(mptrain.Error) as caught:
                data.weighted(weights)
            assert caught.value.status == mptrain.Status.INVALID_ARGUMENT, (bad, row)
            assert caught.value.message, (bad, row)
    with pytest.raises(mptrain.Error) as caught:  # finite as a double, infinite as the float the library takes
        data.weighted([1e300] + [1.0] * 9)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    with pytest.raises(mptrain.Error) as caught:  # rows of one weight: not one-dimensional
        data.weighted([[1.0]] * 10)
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH
    for wrong_type in (None, 2.0, "1111111111", ["1.0"] * 10, [None] * 10, {0: 1.0}, object()):
        with pytest.raises(TypeError):
            data.weighted(wrong_type)
    assert len(data.weighted([0.0] * 10)) == 10  # every weight 0 is allowed (unlike class weights)
    assert len(data.weighted(range(10))) == 10  # any sequence of numbers
    data.close()
    with pytest.raises(mptrain.Error) as caught:
        data.weighted([1.0] * 10)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT


def test_a_two_dimensional_numpy_array_of_weights_is_refused(ctx):
    np = pytest.importorskip("numpy")
    samples, labels = make_blobs(rows=10, seed=76)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    for shape in ((10, 1), (1, 10), (2, 5)):  # as many values as rows, but not one per row
        with pytest.raises(mptrain.Error) as caught:
            data.weighted(np.ones(shape, dtype=np.float32))
        assert caught.value.status == mptrain.Status.SHAPE_MISMATCH, shape
    with pytest.raises(mptrain.Error) as caught:
        data.weighted(np.array([1.0] * 9 + [np.nan]))
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    assert len(data.weighted(np.ones((10, 1)).ravel())) == 10


def test_a_weighted_dataset_keeps_working_after_its_source_and_context_are_deleted():
    samples, labels = make_blobs(rows=120, seed=77)
    messages = []

    def log(level, text):
        messages.append(text)

    logger = weakref.ref(log)
    ctx = mptrain.Context(backend="cpu", threads=1, seed=3, log=log, log_level="debug")
    del log
    model = mlp(ctx)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
    source = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    weights = array.array("f", row_weights(120))
    data = source.weighted(weights)
    expected = trainer.evaluate(data)
    assert expected != trainer.evaluate(source)
    gone = weakref.ref(source), weakref.ref(ctx)
    del source
    ctx.close()
    del ctx
    weights[:] = array.array("f", [5.0] * 120)  # the weights were copied: the caller's array is its own
    gc.collect()
    assert [ref() for ref in gone] == [None, None]
    assert len(data) == 120 and data.features == FEATURES
    assert trainer.evaluate(data) == expected
    part = data[60:]
    del messages[:]
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)  # logs at DEBUG
    assert messages  # the context's log callback is still alive
    trainer.fit(data, epochs=3, batch_size=16, shuffle=True)
    after = trainer.evaluate(data)
    assert after.loss < expected.loss and after.accuracy > 0.8, after
    assert trainer.evaluate(part).loss != trainer.evaluate(data).loss
    data.close()
    del data, trainer, model
    gc.collect()
    assert logger() is not None  # the slice of the weighted dataset still holds the context
    assert len(part) == 60 and len(part[:-10]) == 50
    del part
    gc.collect()
    assert logger() is None  # and nothing else held it

