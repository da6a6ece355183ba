"""Training through the bindings: fit, evaluate, predict and step on the usual data (float, u8 and target data
sets), weights set and read back, and micro-batches."""
import math

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, values


def flat(rows):
    return [value for row in rows for value in row]


def test_fit_learns_separable_blobs(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, num_classes=CLASSES)
    assert (data.rows, data.features, len(data)) == (300, FEATURES, 300)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    before = trainer.evaluate(data)
    trainer.fit(data, epochs=5, batch_size=32)
    after = trainer.evaluate(data)
    assert after.accuracy >= 0.95
    assert after.loss < before.loss
    assert trainer.progress == (5 * (300 // 32), 5)
    # AUTO on the CPU: bf16 where AMX multiplies it natively, else fp32.
    assert trainer.precision in (mptrain.Precision.FP32, mptrain.Precision.MIXED_BF16)
    planned, allocated = trainer.memory
    assert planned > 0 and allocated >= planned
    seconds, steps = trainer.last_epoch_time
    assert steps == 300 // 32 and seconds > 0


def test_predict_gives_probabilities_of_the_right_class(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, flat(samples), labels, num_classes=CLASSES, features=FEATURES)
    trainer = mptrain.Trainer(model, optimizer=mptrain.Optimizer.ADAM, learning_rate=0.01)
    trainer.fit(data, epochs=5, batch_size=32)
    points = [[2.5, 0, 0, 2.5], [0, 2.5, 0, 0], [0, 0, 2.5, 0]]
    for out in (trainer.predict(points), model.predict(points)):
        flat_out = values(out)
        rows = [flat_out[i * CLASSES:(i + 1) * CLASSES] for i in range(3)]
        for expected, row in enumerate(rows):
            assert math.isclose(sum(row), 1.0, rel_tol=1e-4)
            assert max(range(CLASSES), key=row.__getitem__) == expected


def test_weights_round_trip_and_drive_predict(ctx):
    model = mptrain.Model(ctx, 3).add_dense(2, "linear")
    weights = [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]
    model.set_weights(0, weights, [0.5, -0.5])
    got_w, got_b = model.get_weights(0)
    assert values(got_w) == flat(weights)
    assert values(got_b) == [0.5, -0.5]
    assert values(model.predict([1.0, 1.0, 1.0])) == [6.5, -1.0]  # by hand: W x + b
    assert model.parameter_count == 8 and model.layer_count == 1
    assert (model.input_features, model.output_features) == (3, 2)


def test_step_returns_the_batch_loss(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, learning_rate=0.1)
    losses = [trainer.step(data, 0, 60) for _ in range(20)]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    assert trainer.progress.steps == 20


def test_u8_and_target_datasets_train(ctx):
    samples, labels = make_blobs(rows=120)
    as_bytes = bytes(min(255, max(0, int(v * 40 + 60))) for row in samples for v in row)
    data = mptrain.Dataset.from_u8(ctx, as_bytes, labels, CLASSES, features=FEATURES)
    assert data.features == FEATURES
    one_hot = [[1.0 if c == label else 0.0 for c in range(CLASSES)] for label in labels]
    targets = mptrain.Dataset.from_targets(ctx, samples, one_hot)
    model = mptrain.Model(ctx, FEATURES).add_dense(8, "tanh").add_dense(CLASSES, "softmax")
    trainer = mptrain.Trainer(model, loss="categorical_crossentropy", optimizer="sgd", learning_rate=0.05,
                              momentum=0.9, nesterov=True)
    trainer.fit(targets, epochs=3, batch_size=16)
    assert trainer.evaluate(targets).accuracy > 0.8
    regression = mptrain.Model(ctx, FEATURES).add_dense(1, "linear")
    mse = mptrain.Trainer(regression, loss=mptrain.Loss.MEAN_SQUARED_ERROR, optimizer="adamw",
                          adam=(0.9, 0.999, 1e-7), weight_decay=0.01)
    mse.fit(mptrain.Dataset.from_targets(ctx, samples, [float(label) for label in labels], target_width=1),
            epochs=2, batch_size=16)


def test_micro_batches_train_the_whole_batchs_steps_in_less_memory():
    samples, labels = make_blobs(rows=120, seed=21)

    def train(micro_batch_size):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)  # one seed: the same initial weights
        model = mptrain.Model(own_ctx, FEATURES).add_dense(256, "relu").add_dense(CLASSES, "softmax")
        trainer = mptrain.Trainer(model, precision="fp32", optimizer="sgd", learning_rate=0.05, momentum=0.9,
                                  micro_batch_size=micro_batch_size)
        data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
        losses = [trainer.step(data, 40 * step, 40) for step in range(3)]
        weights = [value for layer in range(model.layer_count) for part in model.get_weights(layer)
                   for value in values(part)]
        planned = trainer.memory.planned
        own_ctx.close()
        return weights, losses, planned

    whole, whole_losses, whole_planned = train(0)
    parts, parts_losses, parts_planned = train(16)  # micro-batches of 16, 16 and 8 rows
    largest = max(abs(value) for value in whole)
    assert max(abs(a - b) for a, b in zip(parts, whole)) <= 1e-6 * largest
    assert parts_losses == pytest.approx(whole_losses, rel=1e-6)
    assert parts_planned < whole_planned
    assert train(40)[0] == whole  # a micro-batch as large as the batch: one pass, the same bits


def test_a_negative_or_non_integer_micro_batch_size_is_refused(model):
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(model, micro_batch_size=-1)
    assert info.value.status == mptrain.Status.INVALID_ARGUMENT
    assert "micro-batch" in info.value.message
    with pytest.raises(TypeError):
        mptrain.Trainer(model, micro_batch_size=8.0)
