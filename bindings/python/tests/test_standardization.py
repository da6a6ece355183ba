"""Standardized datasets (Dataset.standardized and Dataset.feature_statistics, mpt_dataset_create_standardized
and mpt_dataset_get_feature_statistics): Keras's Normalization layer, for the data. The statistics against a
double reference; a dataset standardized by its own statistics has features of mean 0 and standard deviation 1
and trains; a mean or stddev of another count or shape is refused with SHAPE_MISMATCH, a negative stddev with
INVALID_ARGUMENT; a standardized dataset outlives its source.

Models that standardize their inputs (Model.set_input_standardization, clear_input_standardization and
get_input_standardization, mpt_model_set/get_input_standardization): Keras's Normalization layer inside the
model. Trained on the raw rows, it predicts from raw inputs bit for bit as a plain copy of it does from inputs
standardized here in float32; saved and loaded it keeps the statistics, cleared it has none; the refusals
(SHAPE_MISMATCH, INVALID_ARGUMENT, and a standardized dataset in fit)."""
import array
import math

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, mlp, values

ROWS = 90


def scaled_blobs(seed):
    """Blobs with feature f scaled by 3 (f + 1) and moved by 5 f - 4: far from mean 0, stddev 1."""
    samples, labels = make_blobs(rows=ROWS, seed=seed)
    return [[x * 3.0 * (f + 1) + 5.0 * f - 4.0 for f, x in enumerate(row)] for row in samples], labels


def test_a_dataset_standardized_by_its_own_statistics_has_mean_0_and_stddev_1_and_trains(ctx):
    samples, labels = scaled_blobs(81)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    floats = [values(array.array("f", row)) for row in samples]  # the float32 values the dataset holds
    mean, stddev = data.feature_statistics()
    assert len(mean) == len(stddev) == FEATURES
    for f in range(FEATURES):  # the population's, in double
        column = [row[f] for row in floats]
        expected_mean = math.fsum(column) / ROWS
        expected_stddev = math.sqrt(math.fsum((v - expected_mean) ** 2 for v in column) / ROWS)
        assert mean[f] == pytest.approx(expected_mean, rel=1e-6), f
        assert stddev[f] == pytest.approx(expected_stddev, rel=1e-6), f
        assert abs(stddev[f] - 1.0) > 0.5, f  # not standardized to begin with

    standardized = data.standardized(mean, stddev)
    assert len(standardized) == ROWS
    assert list(standardized.labels) == labels
    after_mean, after_stddev = standardized.feature_statistics()
    for f in range(FEATURES):
        assert abs(after_mean[f]) < 1e-5, (f, after_mean[f])
        assert abs(after_stddev[f] - 1.0) < 1e-5, (f, after_stddev[f])

    trainer = mptrain.Trainer(mlp(ctx), optimizer="adam", learning_rate=0.01)
    trainer.fit(standardized, epochs=3, batch_size=16)
    assert trainer.progress.epochs == 3
    assert math.isfinite(trainer.evaluate(standardized).loss)


def test_statistics_of_every_accepted_sequence_type_standardize_alike(ctx):
    samples, labels = scaled_blobs(82)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    mean, stddev = data.feature_statistics()
    mean, stddev = values(mean), values(stddev)
    expected = [values(s) for s in data.standardized(mean, stddev).feature_statistics()]
    for kind in (tuple, lambda v: array.array("f", v)):
        got = data.standardized(kind(mean), kind(stddev)).feature_statistics()
        assert [values(s) for s in got] == expected


def check_wrong_counts_refused(standardize):
    """standardize(mean, stddev) with means and standard deviations of each wrong count (either, or both,
    one short or one over, or none), or a row of means, is refused with SHAPE_MISMATCH and a message."""
    for means, stddevs in ((FEATURES - 1, FEATURES - 1), (FEATURES + 1, FEATURES + 1), (FEATURES + 1, FEATURES),
                           (FEATURES, FEATURES - 1), (0, 0)):
        with pytest.raises(mptrain.Error) as caught:
            standardize([0.0] * means, [1.0] * stddevs)
        assert caught.value.status == mptrain.Status.SHAPE_MISMATCH, (means, stddevs)
        assert caught.value.message, (means, stddevs)
    with pytest.raises(mptrain.Error) as caught:  # a row of FEATURES means: not one-dimensional
        standardize([[0.0] * FEATURES], [1.0] * FEATURES)
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH


def test_a_mean_or_stddev_of_the_wrong_count_is_refused_with_shape_mismatch(ctx):
    samples, labels = make_blobs(rows=30, seed=83)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    check_wrong_counts_refused(data.standardized)
    stddev = [1.0] * FEATURES
    stddev[2] = -1.0
    with pytest.raises(mptrain.Error) as caught:
        data.standardized([0.0] * FEATURES, stddev)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    for wrong_type in (None, 2.0, "0000", ["0.0"] * FEATURES):
        with pytest.raises(TypeError):
            data.standardized(wrong_type, [1.0] * FEATURES)


def test_numpy_statistics_come_back_as_float32_arrays_and_standardize(ctx):
    np = pytest.importorskip("numpy")
    samples, labels = scaled_blobs(84)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    mean, stddev = data.feature_statistics()
    assert isinstance(mean, np.ndarray) and mean.dtype == np.float32 and mean.shape == (FEATURES,)
    assert isinstance(stddev, np.ndarray) and stddev.dtype == np.float32 and stddev.shape == (FEATURES,)
    after_mean, after_stddev = data.standardized(mean, stddev.astype(np.float64)).feature_statistics()
    assert np.all(np.abs(after_mean) < 1e-5) and np.all(np.abs(after_stddev - 1.0) < 1e-5)
    with pytest.raises(mptrain.Error) as caught:
        data.standardized(mean.reshape(2, 2), stddev.reshape(2, 2))
    assert caught.value.status == mptrain.Status.SHAPE_MISMATCH


def test_a_standardized_dataset_outlives_its_source(ctx):
    samples, labels = make_blobs(rows=30, seed=85)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    standardized = data.standardized([0.0] * FEATURES, [1.0] * FEATURES)
    data.close()
    assert len(standardized[10:15]) == 5
    assert list(standardized.labels) == labels


def float32(value):
    return array.array("f", [value])[0]


def test_a_model_standardizing_by_a_datasets_statistics_trains_on_raw_rows_and_predicts_as_a_plain_copy(ctx):
    samples, labels = scaled_blobs(86)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    mean, stddev = data.feature_statistics()
    model = mlp(ctx)
    assert model.get_input_standardization() is None
    assert model.set_input_standardization(mean, stddev) is model
    read_mean, read_stddev = model.get_input_standardization()
    assert values(read_mean) == values(mean) and values(read_stddev) == values(stddev)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    trainer.fit(data, epochs=5, batch_size=16)
    assert trainer.evaluate(data).accuracy > 0.9

    # The header's (x - mean) / stddev, each operation rounded to float32 (exact in double first).
    floats = [values(array.array("f", row)) for row in samples]
    means, stddevs = values(mean), values(stddev)
    standardized = [[float32(float32(x - m) / s) for x, m, s in zip(row, means, stddevs)] for row in floats]
    plain = mlp(ctx)
    for layer in range(model.layer_count):
        plain.set_weights(layer, *model.get_weights(layer))
    predicted = values(model.predict(samples))
    assert predicted == values(plain.predict(standardized))
    assert predicted != values(plain.predict(samples))


def test_a_models_input_standardization_is_saved_with_it_and_cleared_is_none(ctx, tmp_path):
    model = mlp(ctx)
    mean, stddev = [0.5, -1.25, 3.0, 0.0], [2.0, 0.75, 1.5, 0.0]
    model.set_input_standardization(mean, stddev)
    inputs, _ = make_blobs(rows=12, seed=87)
    predicted = values(model.predict(inputs))
    path = tmp_path / "standardizing.safetensors"
    model.save(path)
    loaded = mptrain.Model.load(ctx, path)
    kept_mean, kept_stddev = loaded.get_input_standardization()
    assert values(kept_mean) == mean and values(kept_stddev) == stddev  # as set: the 0 not floored
    assert values(loaded.predict(inputs)) == predicted
    assert model.clear_input_standardization() is model
    assert model.get_input_standardization() is None
    assert values(model.predict(inputs)) != predicted
    model.clear_input_standardization()  # none to remove: still none
    assert model.get_input_standardization() is None
    model.save(path)
    assert mptrain.Model.load(ctx, path).get_input_standardization() is None


def test_a_models_input_standardization_of_the_wrong_count_or_value_is_refused_and_leaves_it(ctx):
    model = mlp(ctx)
    model.set_input_standardization([0.0] * FEATURES, [1.0] * FEATURES)
    check_wrong_counts_refused(model.set_input_standardization)
    nan_mean = [0.0] * FEATURES
    nan_mean[1] = math.nan
    negative = [1.0] * FEATURES
    negative[2] = -1.0
    for mean, stddev in ((nan_mean, [1.0] * FEATURES), ([0.0] * FEATURES, negative)):
        with pytest.raises(mptrain.Error) as caught:
            model.set_input_standardization(mean, stddev)
        assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
        assert caught.value.message
    for wrong_type in (None, 2.0, "0000", ["0.0"] * FEATURES):
        with pytest.raises(TypeError):
            model.set_input_standardization(wrong_type, [1.0] * FEATURES)
    kept_mean, kept_stddev = model.get_input_standardization()
    assert values(kept_mean) == [0.0] * FEATURES and values(kept_stddev) == [1.0] * FEATURES


def test_fitting_a_model_that_standardizes_on_a_standardized_dataset_is_refused(ctx):
    samples, labels = make_blobs(rows=30, seed=88)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    mean, stddev = data.feature_statistics()
    model = mlp(ctx).set_input_standardization(mean, stddev)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    with pytest.raises(mptrain.Error) as caught:
        trainer.fit(data.standardized(mean, stddev), epochs=1, batch_size=16)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    assert trainer.progress.epochs == 0
    trainer.fit(data, epochs=1, batch_size=16)  # the raw rows train
    assert trainer.progress.epochs == 1
