"""Losses through the bindings: label smoothing and class weights (lists, tuples, arrays, numpy, Keras's dict)
against a cross-entropy in double, and the regression losses (mean absolute error, Huber and its delta)."""
import array
import math

import pytest

import mptrain
from conftest import CLASSES, make_blobs, mlp, one_hot, values, weight_bytes


def smoothed_cross_entropy(probabilities, labels, smoothing):
    """The mean over rows of (1 - s) (-log p_label) + s mean_c(-log p_c), in double from probabilities:
    the cross-entropy towards labels smoothed as mptrain.h defines it."""
    total = 0.0
    for row, label in enumerate(labels):
        p = probabilities[row * CLASSES:(row + 1) * CLASSES]
        towards_uniform = sum(-math.log(q) for q in p) / CLASSES
        total += (1 - smoothing) * -math.log(p[label]) + smoothing * towards_uniform
    return total / len(labels)


def test_label_smoothing_makes_the_loss_the_smoothed_cross_entropy_of_the_predictions(ctx, model):
    samples, labels = make_blobs(rows=90, seed=51)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    plain = mptrain.Trainer(model, precision="fp32")
    smoothed = mptrain.Trainer(model, precision="fp32", label_smoothing=0.1)
    probabilities = values(plain.predict(samples))
    towards_label = smoothed_cross_entropy(probabilities, labels, 0.0)
    expected = smoothed_cross_entropy(probabilities, labels, 0.1)
    assert abs(expected - towards_label) > 1e-3 * towards_label  # the two can be told apart
    without, with_smoothing = plain.evaluate(data), smoothed.evaluate(data)
    assert without.loss == pytest.approx(towards_label, rel=1e-5)
    assert with_smoothing.loss == pytest.approx(expected, rel=1e-5)
    assert with_smoothing.accuracy == without.accuracy  # the metric reads the given labels

    # Training follows the smoothed targets: a step's loss is its batch's smoothed one, and one step
    # from equal weights ends elsewhere than without smoothing.
    def step_from_start(smoothing):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=3)
        own_model = mlp(own_ctx)
        trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="adam", learning_rate=0.01,
                                  label_smoothing=smoothing)
        batch_expected = smoothed_cross_entropy(values(trainer.predict(samples[:30])), labels[:30], smoothing)
        loss = trainer.step(mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES), 0, 30)
        assert loss == pytest.approx(batch_expected, rel=1e-5)
        weights = [part.tobytes() for layer in range(own_model.layer_count) for part in own_model.get_weights(layer)]
        own_ctx.close()
        return weights

    assert step_from_start(0.1) != step_from_start(0.0)


def test_label_smoothing_outside_0_1_or_with_mean_squared_error_is_refused(ctx, model, blobs):
    for refused in (-0.01, 1.0, 1.5, float("nan"), float("inf")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, label_smoothing=refused)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, refused
        assert "label_smoothing" in info.value.message, refused
    with pytest.raises(TypeError):
        mptrain.Trainer(model, label_smoothing=[0.1])
    for loss in ("mean_squared_error", "mean_absolute_error", "huber"):
        mptrain.Trainer(model, loss=loss, label_smoothing=0.0)  # 0 is no smoothing: accepted
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, loss=loss, label_smoothing=0.1)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, loss
        assert loss + " has no labels" in info.value.message, loss


LINE_ROWS = 100


def line_with_outliers():
    """LINE_ROWS points x evenly in [-1, 1] on y = 2x + 1, every tenth target 20 above it."""
    xs = [-1.0 + 2.0 * row / (LINE_ROWS - 1) for row in range(LINE_ROWS)]
    return xs, [2.0 * x + 1.0 + (20.0 if row % 10 == 3 else 0.0) for row, x in enumerate(xs)]


def regression_term(loss, difference, delta):
    """One output's loss as mptrain.h defines it, in double: (y - t)^2, |y - t|, or Huber's
    (y - t)^2 / 2 up to |y - t| = delta, then delta (|y - t| - delta / 2)."""
    size = abs(difference)
    if loss == mptrain.Loss.MEAN_SQUARED_ERROR:
        return difference * difference
    if loss == mptrain.Loss.MEAN_ABSOLUTE_ERROR:
        return size
    return 0.5 * difference * difference if size <= delta else delta * (size - 0.5 * delta)


def fit_line(loss, huber_delta=None, epochs=200):
    """One input, one linear output fitted by fp32 Adam (rate 0.05, seed 5) to line_with_outliers under
    `loss`: (slope, intercept, evaluate's loss, the mean loss of the predictions in double)."""
    own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    model = mptrain.Model(own_ctx, 1).add_dense(1, "linear")
    xs, targets = line_with_outliers()
    data = mptrain.Dataset.from_targets(own_ctx, [[x] for x in xs], targets, target_width=1)
    trainer = mptrain.Trainer(model, precision="fp32", loss=loss, optimizer="adam", learning_rate=0.05,
                              huber_delta=huber_delta)
    trainer.fit(data, epochs=epochs, batch_size=20)
    weights, bias = model.get_weights(0)
    predictions = values(model.predict([[x] for x in xs]))
    delta = 1.0 if huber_delta is None else huber_delta
    kind = loss if isinstance(loss, mptrain.Loss) else mptrain.Loss[loss.upper()]
    expected = math.fsum(regression_term(kind, y - t, delta)
                         for y, t in zip(predictions, targets)) / LINE_ROWS
    evaluated = trainer.evaluate(data).loss
    own_ctx.close()
    return float(weights[0]), float(bias[0]), evaluated, expected


def test_mean_absolute_error_and_huber_fit_the_line_where_mean_squared_error_is_pulled_to_the_outliers():
    fits = {loss: fit_line(loss) for loss in (mptrain.Loss.MEAN_SQUARED_ERROR, "mean_absolute_error", "huber")}
    for loss, (slope, intercept, evaluated, expected) in fits.items():
        assert evaluated == pytest.approx(expected, rel=1e-5), loss  # the loss each name stands for
    squared = fits[mptrain.Loss.MEAN_SQUARED_ERROR]
    # The least-squares intercept is 1 + 20 / 10 (the outliers' mean pull); the median's is 1, and
    # Huber's (delta 1) 1 + 10 / 90 (each outlier pulls with delta against 90 points on the line).
    assert squared[1] > 2.5
    for loss in ("mean_absolute_error", "huber"):
        slope, intercept = fits[loss][:2]
        assert abs(intercept - 1.0) < 0.25, (loss, intercept)
        assert abs(slope - 2.0) < 0.1, (loss, slope)
        assert abs(intercept - 1.0) < abs(squared[1] - 1.0), loss


def test_the_huber_delta_changes_what_huber_trains_and_defaults_to_1():
    xs, targets = line_with_outliers()

    def train(delta):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)  # one seed: the same initial weights
        model = mptrain.Model(own_ctx, 1).add_dense(1, "linear")
        data = mptrain.Dataset.from_targets(own_ctx, [[x] for x in xs], targets, target_width=1)
        trainer = mptrain.Trainer(model, precision="fp32", loss=mptrain.Loss.HUBER, optimizer="sgd",
                                  learning_rate=0.1, huber_delta=delta)
        initial = weight_bytes(model)
        for step in range(3):
            trainer.step(data, 20 * step, 20)
        trained = weight_bytes(model)
        assert trained != initial  # the steps moved the weights
        own_ctx.close()
        return trained

    delta_1 = train(1.0)
    assert train(None) == delta_1  # the library's default
    assert train(0.25) != delta_1
    # A delta above every residual leaves Huber quadratic: pulled to the outliers as mean squared error.
    assert fit_line("huber", huber_delta=100.0)[1] > 2.5


def test_a_huber_delta_of_0_negative_nan_or_infinite_is_refused(model):
    for refused in (0.0, -0.0, -1.0, float("nan"), float("inf"), float("-inf")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, loss="huber", huber_delta=refused)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, refused
        assert "Huber delta" in info.value.message, refused
    with pytest.raises(TypeError):
        mptrain.Trainer(model, loss="huber", huber_delta=[1.0])
    mptrain.Trainer(model, loss="huber", huber_delta=1e-3)  # any finite delta above 0: accepted


def weighted_cross_entropy(probabilities, targets, weights=None):
    """The mean over rows of -sum_c t_c log p_c, each row's times weights[c], c its first largest target
    (every weight 1 without weights), in double from probabilities: class weights as mptrain.h defines
    them. targets: rows of floats."""
    total = 0.0
    for row, t in enumerate(targets):
        p = probabilities[row * CLASSES:(row + 1) * CLASSES]
        loss = sum(-t_c * math.log(p_c) for t_c, p_c in zip(t, p) if t_c != 0)
        total += (1.0 if weights is None else weights[t.index(max(t))]) * loss
    return total / len(targets)


def test_class_weights_of_2_train_one_sgd_step_as_twice_the_learning_rate_bit_for_bit():
    samples, labels = make_blobs(rows=30, seed=61)

    def one_step(learning_rate, class_weights=None):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
        own_model = mlp(own_ctx)
        trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="sgd", learning_rate=learning_rate,
                                  momentum=0.0, class_weights=class_weights)
        start = weight_bytes(own_model)
        loss = trainer.step(mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES), 0, 30)
        weights = weight_bytes(own_model)
        assert weights != start  # the step moves the weights
        own_ctx.close()
        return loss, weights

    # Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
    unweighted_loss, unweighted = one_step(0.05)
    doubled_rate_loss, doubled_rate = one_step(0.1)
    assert doubled_rate_loss == unweighted_loss  # the loss is that of the weights before the step
    for weights in ([2.0, 2.0, 2.0], (2, 2, 2), array.array("f", [2.0] * CLASSES)):
        weighted_loss, weighted = one_step(0.05, weights)
        assert weighted == doubled_rate, weights
        assert weighted != unweighted
        assert weighted_loss == 2 * unweighted_loss, weights


def test_class_weights_weight_steps_loss_by_each_rows_class_and_leave_evaluates_unweighted(ctx, model):
    weights = [0.5, 2.0, 1.25]
    samples, labels = make_blobs(rows=30, seed=62)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    plain = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
    weighted = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01,
                               class_weights=weights)
    probabilities = values(weighted.predict(samples))
    unweighted_loss = weighted_cross_entropy(probabilities, one_hot(labels))
    expected = weighted_cross_entropy(probabilities, one_hot(labels), weights)
    assert abs(expected - unweighted_loss) > 1e-3 * unweighted_loss  # the two can be told apart
    evaluation = weighted.evaluate(data)
    assert evaluation.loss == pytest.approx(unweighted_loss, rel=1e-5)  # evaluate: unweighted
    assert evaluation.loss == plain.evaluate(data).loss
    assert weighted.step(data, 0, 30) == pytest.approx(expected, rel=1e-5)

    # Float targets weigh a row by its first largest target: row 0 ties classes 1 and 2 (weight 2).
    own_ctx = mptrain.Context(backend="cpu", threads=1, seed=9)
    own_model = mlp(own_ctx)
    targets = one_hot(labels)
    targets[0], targets[1] = [0.0, 0.5, 0.5], [0.2, 0.3, 0.5]
    categorical = mptrain.Trainer(own_model, precision="fp32", loss="categorical_crossentropy", optimizer="adam",
                                  learning_rate=0.01, class_weights=tuple(weights))
    probabilities = values(categorical.predict(samples))
    expected = weighted_cross_entropy(probabilities, targets, weights)
    tie_to_the_last = [list(row) for row in targets]  # row 0 weighed as class 2 (1.25) instead
    tie_to_the_last[0][2] = 0.5000001
    assert abs(weighted_cross_entropy(probabilities, tie_to_the_last, weights) - expected) > 1e-4 * expected
    loss = categorical.step(mptrain.Dataset.from_targets(own_ctx, samples, targets), 0, 30)
    assert loss == pytest.approx(expected, rel=1e-5)
    own_ctx.close()


def test_class_weights_take_numpy_arrays(ctx, model):
    np = pytest.importorskip("numpy")
    samples, labels = make_blobs(rows=30, seed=64)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    as_list = mptrain.Trainer(model, precision="fp32", class_weights=[0.5, 2.0, 1.25])
    expected = weighted_cross_entropy(values(as_list.predict(samples)), one_hot(labels), [0.5, 2.0, 1.25])
    loss = as_list.step(data, 0, 30)
    assert loss == pytest.approx(expected, rel=1e-5)
    for array_of_weights in (np.array([0.5, 2.0, 1.25]), np.array([0.5, 2.0, 1.25], dtype=np.float32)):
        fresh_ctx = mptrain.Context(backend="cpu", threads=1, seed=7)
        fresh = mlp(fresh_ctx)
        trainer = mptrain.Trainer(fresh, precision="fp32", class_weights=array_of_weights)
        assert trainer.step(mptrain.Dataset.from_f32(fresh_ctx, samples, labels, CLASSES), 0, 30) == loss  # bitwise
        fresh_ctx.close()
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(model, class_weights=np.ones((1, CLASSES)))
    assert info.value.status == mptrain.Status.SHAPE_MISMATCH


def test_class_weights_refused_by_value_count_or_loss(ctx, model):
    refusals = ([1.0, -0.5, 1.0], [1.0, float("nan"), 1.0], [float("inf"), 1.0, 1.0], [0.0, 0.0, 0.0])
    for refused in refusals:
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, class_weights=refused)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, refused
        assert "class weights" in info.value.message, refused
    for count in (2, 4):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, class_weights=[1.0] * count)
        assert info.value.status == mptrain.Status.SHAPE_MISMATCH, count
    for wrong_type in (2.0, "123", {0.0: 1.0}, {"0": 1.0}):
        with pytest.raises(TypeError):
            mptrain.Trainer(model, class_weights=wrong_type)
    mptrain.Trainer(model, class_weights=[])  # empty: none
    mptrain.Trainer(model, class_weights=[0.0, 1.0, 0.0])  # some zeros are fine
    for loss in ("binary_crossentropy", "mean_squared_error"):
        mptrain.Trainer(model, loss=loss)  # accepted without class weights
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, loss=loss, class_weights=[1.0, 2.0, 3.0])
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, loss


def test_class_weights_as_keras_dict_train_as_the_list_it_stands_for_missing_classes_weighing_1():
    samples, labels = make_blobs(rows=30, seed=66)

    def one_step(class_weights):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
        own_model = mlp(own_ctx)
        trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="sgd", learning_rate=0.05,
                                  class_weights=class_weights)
        loss = trainer.step(mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES), 0, 30)
        weights = weight_bytes(own_model)
        own_ctx.close()
        return loss, weights

    as_list = one_step([0.5, 1.0, 3.0])
    assert one_step({0: 0.5, 2: 3.0}) == as_list  # class 1 left out: weight 1, as in Keras
    assert one_step({2: 3, 0: 0.5, 1: 1}) == as_list  # any order, integer weights
    assert one_step({}) == one_step(None) != as_list  # an empty dict is no weights
    np = pytest.importorskip("numpy")
    assert one_step({np.int64(0): np.float32(0.5), np.int32(2): 3.0}) == as_list


def test_class_weights_dict_keys_outside_the_models_classes_are_refused(ctx, model):
    for key in (CLASSES, -1, 2 ** 70):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, class_weights={0: 1.0, key: 2.0})
        assert info.value.status == mptrain.Status.SHAPE_MISMATCH, key
        assert "class %d" % key in info.value.message, key
    with pytest.raises(mptrain.Error) as info:  # values are checked by the library, as in a list
        mptrain.Trainer(model, class_weights={1: -2.0})
    assert info.value.status == mptrain.Status.INVALID_ARGUMENT
