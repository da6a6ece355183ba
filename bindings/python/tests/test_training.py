"""Training through the bindings: fit, evaluate, predict, step, weights, options, callbacks."""
import array
import ctypes
import gc
import inspect
import math
import os
import signal
import threading
import weakref

import pytest

import mptrain
from mptrain import _library
from conftest import CLASSES, FEATURES, make_blobs, mlp, one_hot, values, weight_bytes


def flat(rows):
    return [value for row in rows for value in row]


def test_version_matches_the_header_macros():
    import os
    import re
    header = open(os.environ.get("MPTRAIN_HEADER") or os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "include", "mptrain", "mptrain.h")).read()
    parts = [re.search(r"#define MPT_VERSION_%s (\d+)" % p, header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert mptrain.version() == ".".join(parts)


def test_status_strings_name_the_status():
    assert mptrain.status_string(mptrain.Status.SHAPE_MISMATCH) == "MPT_STATUS_SHAPE_MISMATCH"
    assert mptrain.status_string(999) == "MPT_STATUS_UNKNOWN"


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


def schedule_factor(schedule, warmup_steps, decay_steps, factor, step):
    """The factor on the base rate at `step` as mptrain.h defines each schedule, in double precision."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decayed = step - warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        return factor ** (decayed // decay_steps)
    progress = min(1.0, decayed / decay_steps)
    remaining = 1 - progress if schedule == "linear" else (1 + math.cos(math.pi * progress)) / 2
    return factor + (1 - factor) * remaining


@pytest.mark.parametrize("schedule, warmup_steps, decay_steps, factor", [
    ("cosine", 3, 5, 0.25),  # warm-up, half a cosine, then the floor
    (mptrain.LrSchedule.CONSTANT, 4, 0, 1.0),  # a warm-up alone
    ("linear", 2, 4, 0.5),
    (mptrain.LrSchedule.STEP, 1, 3, 0.5),
], ids=["cosine", "constant", "linear", "step"])
def test_a_learning_rate_schedule_gives_each_step_the_rate_of_the_header_formula(
        ctx, blobs, schedule, warmup_steps, decay_steps, factor):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    model = mlp(ctx)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, lr_schedule=schedule,
                              warmup_steps=warmup_steps, decay_steps=decay_steps, decay_factor=factor)
    name = schedule if isinstance(schedule, str) else schedule.name.lower()
    for step in range(11):
        assert trainer.progress.steps == step
        expected = 0.01 * schedule_factor(name, warmup_steps, decay_steps, factor, step)
        assert trainer.scheduled_learning_rate == pytest.approx(expected, rel=1e-6, abs=0), "step %d" % step
        trainer.step(data, (step * 20) % 300, 20)
    assert trainer.learning_rate == pytest.approx(0.01, rel=1e-7)  # multiplied by the schedule, never changed


@pytest.mark.parametrize("schedule, decay_factor, factor", [
    ("cosine", None, 0.0),  # decays to rate 0 (Keras's CosineDecay, PyTorch's CosineAnnealingLR)
    ("linear", None, 0.0),  # decays to rate 0 (Hugging Face's linear schedule)
    ("step", None, 0.1),  # PyTorch StepLR's gamma
    ("cosine", 1.0, 1.0),  # a factor given, 1 included, is the caller's
    ("step", 1.0, 1.0),
], ids=["cosine", "linear", "step", "cosine-1", "step-1"])
def test_a_schedule_without_a_decay_factor_decays_to_0_or_by_a_tenth_per_step(
        ctx, blobs, schedule, decay_factor, factor):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    model = mlp(ctx)
    options = dict(lr_schedule=schedule, decay_steps=4)
    if decay_factor is not None:
        options["decay_factor"] = decay_factor
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, **options)
    rates = []
    for step in range(10):
        rates.append(trainer.scheduled_learning_rate)
        expected = 0.01 * schedule_factor(schedule, 0, 4, factor, step)
        assert rates[-1] == pytest.approx(expected, rel=1e-6, abs=0), "step %d" % step
        trainer.step(data, (step * 20) % 300, 20)
    if factor == 1.0:
        assert rates == [rates[0]] * 10
    elif schedule == "step":
        assert rates[4] == pytest.approx(0.001, rel=1e-6) and rates[8] == pytest.approx(0.0001, rel=1e-6)
    else:
        assert 0 < rates[2] < 0.01
        assert rates[4:] == [0.0] * 6  # from decay_steps on, exactly 0


def test_a_warm_up_alone_is_a_constant_schedule_and_invalid_schedules_are_refused(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, learning_rate=0.05, warmup_steps=2)
    assert trainer.scheduled_learning_rate == pytest.approx(0.025, rel=1e-7)
    trainer.step(data, 0, 20)
    trainer.step(data, 20, 20)
    assert trainer.scheduled_learning_rate == pytest.approx(0.05, rel=1e-7)
    plain = mptrain.Trainer(mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax"), learning_rate=0.05)
    assert plain.scheduled_learning_rate == plain.learning_rate  # no schedule asked for: none set

    refused = [
        dict(lr_schedule="cosine", warmup_steps=2, decay_steps=0, decay_factor=0.0),  # no decay length
        dict(lr_schedule="linear", decay_steps=10, decay_factor=1.5),  # above the base rate
        dict(lr_schedule=mptrain.LrSchedule.STEP, decay_steps=3, decay_factor=0.0),  # a step factor must be > 0
        dict(decay_steps=5),  # a constant schedule has no decay
        dict(lr_schedule="cosine", warmup_steps=-1, decay_steps=10, decay_factor=0.0),
        dict(lr_schedule=99, decay_steps=10, decay_factor=0.5),  # no such schedule: checked by C
        dict(lr_schedule="exponential", decay_steps=10, decay_factor=0.5),  # no such name: checked here
    ]
    for options in refused:
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, **options)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, options
        assert info.value.message, options
    with pytest.raises(TypeError):
        mptrain.Trainer(model, lr_schedule="cosine", warmup_steps=1.5, decay_steps=10, decay_factor=0.0)
    # A float is no step count, whether or not it equals the default 0.
    for wrong in (dict(warmup_steps=1.0), dict(warmup_steps=0.0), dict(lr_schedule="cosine", decay_steps=4.0),
                  dict(decay_steps=0.0)):
        with pytest.raises(TypeError, match="must be an integer"):
            mptrain.Trainer(model, **wrong)


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


def clipnorm_sgd(samples, labels, steps, momentum, global_clipnorm=0.0, by_fit=False):
    """fp32 SGD at rate 0.05 from seed 5 over `steps` batches of 10 rows: the weights' bytes after them,
    the L2 norm of the change of all weights and biases over the rate (for one plain SGD step, the norm
    of the gradient it applied), and the trainer's gradient_norm before the first step and after each
    (by_fit: the steps are one unshuffled fit's over all rows, the norms read from its progress callback)."""
    own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    own_model = mlp(own_ctx)
    trainer = mptrain.Trainer(own_model, precision="fp32", optimizer="sgd", learning_rate=0.05,
                              momentum=momentum, global_clipnorm=global_clipnorm)
    data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)

    def weights():
        return [v for layer in range(own_model.layer_count) for part in own_model.get_weights(layer)
                for v in values(part)]

    start = weights()
    norms = [trainer.gradient_norm]
    if by_fit:
        assert steps == len(labels) // 10
        trainer.set_callbacks(progress=lambda *report: norms.append(trainer.gradient_norm))
        trainer.fit(data, epochs=1, batch_size=10, shuffle=False)
    else:
        for step in range(steps):
            trainer.step(data, 10 * step, 10)
            norms.append(trainer.gradient_norm)
    change = math.sqrt(sum((after - before) ** 2 for after, before in zip(weights(), start))) / 0.05
    trained = weight_bytes(own_model)
    own_ctx.close()
    return trained, change, norms


def test_global_clipnorm_bounds_a_steps_gradient_norm_and_one_above_it_changes_nothing_bit_for_bit():
    samples, labels = make_blobs(rows=30, seed=71)

    def train(steps, momentum, global_clipnorm=0.0):
        return clipnorm_sgd(samples, labels, steps, momentum, global_clipnorm)[:2]

    # A bound far above the gradients' norm: momentum SGD steps as without clipping, bit for bit.
    plain, _ = train(3, momentum=0.9)
    assert plain != train(0, momentum=0.9)[0]  # the steps move the weights
    assert train(3, momentum=0.9, global_clipnorm=1e30)[0] == plain
    # A bound far below it: the first plain SGD step's gradient is scaled down to the bound's length.
    unclipped, gradient_norm = train(1, momentum=0.0)
    clipped, clipped_norm = train(1, momentum=0.0, global_clipnorm=1e-3)
    assert gradient_norm > 100 * 1e-3  # so that the bound clips
    assert clipped_norm == pytest.approx(1e-3, rel=1e-3)
    assert clipped != unclipped


def test_gradient_norm_is_the_last_steps_before_clipping_and_nan_where_none_was_taken():
    samples, labels = make_blobs(rows=30, seed=71)
    # The norm of the gradient one unclipped plain SGD step applied, from its weight change.
    _, gradient_norm, unclipped_norms = clipnorm_sgd(samples, labels, 1, momentum=0.0)
    _, _, norms = clipnorm_sgd(samples, labels, 1, momentum=0.0, global_clipnorm=1e-3)
    assert isinstance(norms[0], float) and math.isnan(norms[0])  # before the first step
    assert norms[1] == pytest.approx(gradient_norm, rel=1e-4)  # before clipping: the unclipped step's
    assert norms[1] > 1e-3  # so that step was clipped
    assert isinstance(unclipped_norms[1], float) and math.isnan(unclipped_norms[1])  # no clipping: none taken
    # From a progress callback of a clipping fit (one epoch of the same three batches, unshuffled): each
    # reported step's norm, finite and as step by step, with the same weights after it.
    stepped, _, step_norms = clipnorm_sgd(samples, labels, 3, momentum=0.0, global_clipnorm=1e-3)
    fitted, _, fit_norms = clipnorm_sgd(samples, labels, 3, momentum=0.0, global_clipnorm=1e-3, by_fit=True)
    assert fitted == stepped
    assert len(fit_norms) == 4 and all(math.isfinite(norm) and norm > 1e-3 for norm in fit_norms[1:]), fit_norms
    assert fit_norms[1:] == step_norms[1:]
    assert len(set(fit_norms[1:])) == 3  # three steps' own norms, not one read three times


def test_global_clipnorm_negative_nan_or_infinite_is_refused(model):
    for refused in (-1.0, -1e-30, float("nan"), float("inf")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, global_clipnorm=refused)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, refused
        assert "global_clipnorm" in info.value.message, refused
    with pytest.raises(TypeError):
        mptrain.Trainer(model, global_clipnorm=[1.0])
    mptrain.Trainer(model, global_clipnorm=0.0)  # 0 is no clipping: accepted


def ema_run(ema_momentum=0.5):
    """An fp32 plain-SGD trainer at rate 0.05 from seed 5 keeping a moving average with ema_momentum, its
    model, 30 rows of blobs and a function giving the model's weights and biases as floats."""
    ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    model = mlp(ctx)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="sgd", learning_rate=0.05, momentum=0.0,
                              ema_momentum=ema_momentum)
    data = mptrain.Dataset.from_f32(ctx, *make_blobs(rows=30, seed=73), CLASSES)

    def weights():
        return [v for layer in range(model.layer_count) for part in model.get_weights(layer) for v in values(part)]

    return trainer, model, data, weights


def test_swap_ema_weights_exchanges_the_weights_with_their_moving_average_and_back_bit_for_bit():
    trainer, model, data, weights = ema_run()
    # Before any step the averages are the weights: the exchange changes no value.
    initial = weight_bytes(model)
    assert trainer.swap_ema_weights() is True
    assert weight_bytes(model) == initial
    assert trainer.swap_ema_weights() is False
    # Keras's average after each step (the first copies the weights), rounded to float at each: with
    # momentum 0.5 each product is exact, and a double sum of two floats rounded to float is the float
    # sum, so these are the library's bits.
    expected = None
    for step in range(3):
        trainer.step(data, 10 * step, 10)
        now = weights()
        expected = now if expected is None else array.array("f", [0.5 * a + 0.5 * w
                                                                  for a, w in zip(expected, now)]).tolist()
    trained, trained_loss = weight_bytes(model), trainer.evaluate(data).loss
    assert trainer.swap_ema_weights() is True
    assert weight_bytes(model) != trained
    assert weights() == expected
    assert trainer.evaluate(data).loss != trained_loss  # evaluate sees the averages
    # Meanwhile training and checkpoints are refused, and change nothing.
    averaged = weight_bytes(model)
    for refused in (lambda: trainer.step(data, 0, 10), lambda: trainer.fit(data, epochs=1, batch_size=10),
                    lambda: trainer.save_checkpoint("/nonexistent-mptrain-dir/refused.safetensors")):
        with pytest.raises(mptrain.Error) as info:
            refused()
        assert info.value.status == mptrain.Status.INVALID_STATE, info.value
        assert "averaged weights" in info.value.message
    assert weight_bytes(model) == averaged
    assert trainer.swap_ema_weights() is False
    assert weight_bytes(model) == trained
    assert trainer.evaluate(data).loss == trained_loss
    trainer.step(data, 0, 10)  # trains again


def test_the_ema_weights_block_holds_the_averages_and_puts_the_weights_back_even_on_an_exception():
    trainer, model, data, weights = ema_run()
    for step in range(3):
        trainer.step(data, 10 * step, 10)
    trained = weight_bytes(model)
    assert trainer.swap_ema_weights() and not trainer.swap_ema_weights()
    with trainer.ema_weights() as inside:
        assert inside is trainer
        averaged = weight_bytes(model)
        assert averaged != trained
    assert weight_bytes(model) == trained
    with pytest.raises(KeyError):
        with trainer.ema_weights():
            assert weight_bytes(model) == averaged
            raise KeyError("raised in the block")
    assert weight_bytes(model) == trained
    trainer.step(data, 0, 10)  # the trained weights are in their places: training goes on
    # Entered with the averages already in the model: refused, and they stay there.
    assert trainer.swap_ema_weights()
    held = weight_bytes(model)
    with pytest.raises(mptrain.Error) as info:
        with trainer.ema_weights():
            pytest.fail("the block ran")
    assert info.value.status == mptrain.Status.INVALID_STATE
    assert weight_bytes(model) == held
    assert trainer.swap_ema_weights() is False


def test_swap_ema_weights_without_averages_and_an_ema_momentum_outside_0_1_are_refused(model):
    plain = mptrain.Trainer(model)
    initial = weight_bytes(model)
    with pytest.raises(mptrain.Error) as info:
        plain.swap_ema_weights()
    assert info.value.status == mptrain.Status.INVALID_STATE
    with pytest.raises(mptrain.Error) as info:
        with plain.ema_weights():
            pytest.fail("the block ran")
    assert info.value.status == mptrain.Status.INVALID_STATE
    assert weight_bytes(model) == initial
    for refused in (1.5, 1.0, -0.5, float("nan")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, ema_momentum=refused)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, refused
        assert "ema momentum" in info.value.message, refused
    with pytest.raises(TypeError):
        mptrain.Trainer(model, ema_momentum=[0.5])
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(model, ema_momentum=0.0).swap_ema_weights()  # 0 keeps none: accepted, nothing to swap
    assert info.value.status == mptrain.Status.INVALID_STATE


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_rmsprop_fit_lowers_the_loss(ctx, blobs, momentum):
    data = mptrain.Dataset.from_f32(ctx, *blobs, CLASSES)
    trainer = mptrain.Trainer(mlp(ctx), precision="fp32", optimizer="rmsprop", learning_rate=0.01, momentum=momentum,
                              rmsprop=(0.9, 1e-7))
    before = trainer.evaluate(data)
    trainer.fit(data, epochs=3, batch_size=32)
    after = trainer.evaluate(data)
    assert after.loss < 0.5 * before.loss
    assert after.accuracy >= 0.95


def test_rmsprop_rho_and_centered_change_the_steps_the_same_options_give_the_same_weights():
    samples, labels = make_blobs(rows=30, seed=73)

    def train(rho, centered=False):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)  # one seed: the same initial weights
        model = mlp(own_ctx)
        trainer = mptrain.Trainer(model, precision="fp32", optimizer=mptrain.Optimizer.RMSPROP, learning_rate=0.01,
                                  rmsprop=(rho, 1e-7), rmsprop_centered=centered)
        data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
        initial = weight_bytes(model)
        for step in range(3):
            trainer.step(data, 10 * step, 10)
        trained = weight_bytes(model)
        assert trained != initial  # the steps moved the weights
        own_ctx.close()
        return trained

    rho_08 = train(0.8)
    assert train(0.8) == rho_08
    assert train(0.5) != rho_08
    centered = train(0.8, centered=True)
    assert centered != rho_08
    assert train(0.8, centered=True) == centered


def test_a_centered_rmsprop_checkpoint_refuses_an_uncentered_trainer(tmp_path):
    samples, labels = make_blobs(rows=30, seed=74)
    own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
    centered = mptrain.Trainer(mlp(own_ctx), optimizer="rmsprop", momentum=0.5, rmsprop_centered=True)
    centered.step(data, 0, 10)
    path = str(tmp_path / "centered.safetensors")
    centered.save_checkpoint(path)
    mptrain.Trainer(mlp(own_ctx), optimizer="rmsprop", momentum=0.5, rmsprop_centered=True).load_checkpoint(path)
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(mlp(own_ctx), optimizer="rmsprop", momentum=0.5).load_checkpoint(path)
    assert info.value.status == mptrain.Status.INVALID_ARGUMENT
    assert "rmsprop_centered true (this trainer: false)" in info.value.message
    own_ctx.close()


def test_rmsprop_rho_outside_0_1_a_non_positive_epsilon_and_nesterov_are_refused(model):
    for rho, epsilon, named in ((1.5, 1e-7, "rho"), (1.0, 1e-7, "rho"), (-0.1, 1e-7, "rho"), (0.9, 0.0, "epsilon"),
                                (0.9, -1e-7, "epsilon"), (0.9, float("nan"), "epsilon")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, optimizer="RMSprop", rmsprop=(rho, epsilon))
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, (rho, epsilon)
        assert named in info.value.message, (rho, epsilon)
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(model, optimizer="rmsprop", momentum=0.9, nesterov=True)
    assert info.value.status == mptrain.Status.INVALID_ARGUMENT
    assert "Nesterov" in info.value.message
    mptrain.Trainer(model, optimizer="rmsprop", momentum=0.9, rmsprop=(0.0, 1e-3))  # plain momentum, rho 0: accepted


def test_lion_fit_lowers_the_loss_and_is_the_last_keyword(ctx, blobs):
    # Added last, so the arguments before it keep their positions.
    assert list(inspect.signature(mptrain.Trainer).parameters)[-1] == "lion"
    data = mptrain.Dataset.from_f32(ctx, *blobs, CLASSES)
    trainer = mptrain.Trainer(mlp(ctx), precision="fp32", optimizer="lion", learning_rate=0.003, lion=(0.9, 0.99))
    before = trainer.evaluate(data)
    trainer.fit(data, epochs=3, batch_size=32)
    after = trainer.evaluate(data)
    assert math.isfinite(after.loss)
    assert after.loss < before.loss


def test_lion_unset_betas_are_kerass_0_9_and_0_99():
    samples, labels = make_blobs(rows=30, seed=73)

    def train(betas):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)  # one seed: the same initial weights
        model = mlp(own_ctx)
        trainer = mptrain.Trainer(model, precision="fp32", optimizer=mptrain.Optimizer.LION, learning_rate=0.001,
                                  lion=betas)
        data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
        initial = weight_bytes(model)
        for step in range(3):
            assert math.isfinite(trainer.step(data, 10 * step, 10))
        trained = weight_bytes(model)
        assert trained != initial
        own_ctx.close()
        return trained

    defaults = train(None)
    assert train((0.9, 0.99)) == defaults
    assert train((0.9, 0.999)) != defaults  # Adam's beta2 is not Lion's default


def test_lion_betas_outside_0_1_are_refused_and_a_checkpoint_must_match_them(model, tmp_path):
    for beta1, beta2, named in ((1.0, 0.99, "beta1"), (float("nan"), 0.99, "beta1"), (-0.1, 0.99, "beta1"),
                                (0.9, 1.0, "beta2"), (0.9, float("nan"), "beta2")):
        with pytest.raises(mptrain.Error) as info:
            mptrain.Trainer(model, optimizer="lion", lion=(beta1, beta2))
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, (beta1, beta2)
        assert named in info.value.message, (beta1, beta2)
    mptrain.Trainer(model, optimizer="lion", lion=(0.0, 0.0))  # 0 is in range

    samples, labels = make_blobs(rows=20, seed=74)
    own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
    saved = mptrain.Trainer(mlp(own_ctx), optimizer="lion", learning_rate=0.001, lion=(0.8, 0.95))
    saved.step(data, 0, 20)
    path = str(tmp_path / "lion.safetensors")
    saved.save_checkpoint(path)
    resumed = mptrain.Trainer(mlp(own_ctx), optimizer="lion", learning_rate=0.001, lion=(0.8, 0.95))
    resumed.load_checkpoint(path)
    assert math.isfinite(resumed.step(data, 0, 20))
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(mlp(own_ctx), optimizer="lion", learning_rate=0.001, lion=(0.8, 0.98)).load_checkpoint(path)
    assert info.value.status == mptrain.Status.INVALID_ARGUMENT
    assert "beta2 0.95 (this trainer: 0.98)" in info.value.message
    own_ctx.close()


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


def test_a_dropout_rate_set_reads_back_on_its_layer_alone_and_minus_0_as_0(model):
    assert [model.get_layer_dropout(layer) for layer in range(2)] == [0.0, 0.0]  # none by default
    assert model.set_layer_dropout(0, 0.25) is model  # chains, as add_dense
    assert [model.get_layer_dropout(layer) for layer in range(2)] == [0.25, 0.0]
    model.set_layer_dropout(0, -0.0)
    assert math.copysign(1.0, model.get_layer_dropout(0)) == 1.0  # +0, not -0
    largest = ctypes.c_float(1.0 - 2 ** -24).value  # the largest float below 1 is in range
    model.set_layer_dropout(0, largest)
    assert model.get_layer_dropout(0) == largest


def test_a_dropout_rate_outside_0_1_or_a_layer_out_of_range_is_refused_the_rate_unchanged(model):
    model.set_layer_dropout(0, 0.5)
    for rate in (1.0, -0.1, float("nan"), 1.5, float("inf")):
        with pytest.raises(mptrain.Error) as info:
            model.set_layer_dropout(0, rate)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, rate
        assert info.value.message, rate
        assert model.get_layer_dropout(0) == 0.5, rate
    for layer in (-1, 2, 2 ** 63 - 1):
        for call in (lambda: model.set_layer_dropout(layer, 0.25), lambda: model.get_layer_dropout(layer)):
            with pytest.raises(mptrain.Error) as info:
                call()
            assert info.value.status == mptrain.Status.INVALID_ARGUMENT, layer
    mptrain.Trainer(model)  # the refusals left a model that builds


def test_dropout_on_the_last_layer_makes_building_fail_with_invalid_state_and_a_built_models_rates_are_fixed(model):
    model.set_layer_dropout(1, 0.5)  # accepted: only building refuses it
    assert model.get_layer_dropout(1) == 0.5
    with pytest.raises(mptrain.Error) as info:
        mptrain.Trainer(model, optimizer="adam")
    assert info.value.status == mptrain.Status.INVALID_STATE
    assert "last layer" in info.value.message
    with pytest.raises(mptrain.Error) as info:
        model.predict([1.0] * FEATURES)
    assert info.value.status == mptrain.Status.INVALID_STATE
    model.set_layer_dropout(1, 0.0)  # the refused builds left the model unbuilt
    mptrain.Trainer(model, optimizer="adam")
    with pytest.raises(mptrain.Error) as info:
        model.set_layer_dropout(0, 0.25)
    assert info.value.status == mptrain.Status.INVALID_STATE
    assert model.get_layer_dropout(0) == 0.0


def test_a_frozen_layer_keeps_its_weights_while_the_others_train_and_thawed_it_trains(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, num_classes=CLASSES)
    assert [model.get_layer_trainable(layer) for layer in range(2)] == [True, True]  # the default
    assert model.set_layer_trainable(0, False) is model  # chains
    assert [model.get_layer_trainable(layer) for layer in range(2)] == [False, True]
    trainer = mptrain.Trainer(model, optimizer="adamw", learning_rate=0.01)
    before = weight_bytes(model)
    trainer.fit(data, epochs=1, batch_size=32)
    after = weight_bytes(model)
    assert after[:2] == before[:2]  # layer 0's weights and bias, bit for bit
    assert after[2:] != before[2:]
    model.set_layer_trainable(0, True)  # between fits
    trainer.fit(data, epochs=1, batch_size=32)
    assert weight_bytes(model)[:2] != before[:2]
    for layer in (-1, 2):
        with pytest.raises(mptrain.Error) as info:
            model.set_layer_trainable(layer, False)
        assert info.value.status == mptrain.Status.INVALID_ARGUMENT, layer
    model.set_layer_trainable(0, False).set_layer_trainable(1, False)
    with pytest.raises(mptrain.Error) as info:
        trainer.fit(data, epochs=1, batch_size=32)
    assert info.value.status == mptrain.Status.INVALID_STATE
    assert "frozen" in info.value.message


def test_a_fit_with_dropout_on_a_hidden_layer_learns_and_trains_otherwise_and_inference_uses_every_output():
    samples, labels = make_blobs(rows=240, seed=81)
    points, _ = make_blobs(rows=30, seed=83)

    def run(dropout):
        own_ctx = mptrain.Context(backend="cpu", threads=1, seed=5)  # one seed: the same initial weights
        model = mlp(own_ctx).set_layer_dropout(0, dropout)
        trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
        initial = weight_bytes(model)
        data = mptrain.Dataset.from_f32(own_ctx, samples, labels, CLASSES)
        trainer.fit(data, epochs=5, batch_size=16)
        return model, trainer, data, initial

    model, trainer, data, initial = run(0.5)
    plain, _, _, plain_initial = run(0.0)
    assert initial == plain_initial
    assert weight_bytes(model) != weight_bytes(plain)  # the dropped outputs changed the steps
    evaluation = trainer.evaluate(data, batch_size=16)
    assert evaluation.accuracy >= 0.9

    # The trained weights in a model without dropout: every evaluation and prediction the same, bit for
    # bit. The same batches: a trainer that never fitted evaluates in batches of 256 by default, whose
    # sums OpenBLAS may round otherwise (its Haswell kernels do).
    copy_ctx = mptrain.Context(backend="cpu", threads=1, seed=9)
    copy = mlp(copy_ctx)
    for layer in range(model.layer_count):
        copy.set_weights(layer, *model.get_weights(layer))
    copy_trainer = mptrain.Trainer(copy, precision="fp32", optimizer="adam", learning_rate=0.01)
    assert copy_trainer.evaluate(mptrain.Dataset.from_f32(copy_ctx, samples, labels, CLASSES), 16) == evaluation
    assert model.predict(points).tobytes() == copy.predict(points).tobytes()
    assert trainer.predict(points).tobytes() == copy_trainer.predict(points).tobytes()
    assert model.predict(points).tobytes() == model.predict(points).tobytes()  # no mask at inference


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


def test_callbacks_see_every_step_and_can_stop(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    steps, epochs = [], []
    trainer.set_callbacks(progress=lambda e, s, n, loss, acc: steps.append((e, s, n)),
                          epoch_end=lambda e, loss, acc: epochs.append((e, loss, acc)))
    trainer.fit(data, epochs=2, batch_size=100)
    assert steps == [(0, 1, 3), (0, 2, 3), (0, 3, 3), (1, 1, 3), (1, 2, 3), (1, 3, 3)]
    assert [e for e, _, _ in epochs] == [0, 1]
    assert trainer.unfinished_epoch == (0, 0, 0)
    trainer.set_callbacks(progress=lambda e, s, n, loss, acc: s == 2)  # True stops
    with pytest.raises(mptrain.Error) as caught:
        trainer.fit(data, epochs=3, batch_size=100)
    assert caught.value.status == mptrain.Status.CANCELLED
    assert trainer.unfinished_epoch == mptrain.UnfinishedEpoch(steps=2, rows=300, batch_size=100)
    trainer.set_callbacks()  # none
    trainer.fit(data, epochs=1, batch_size=100)  # finishes that epoch
    assert trainer.progress == (9, 3)
    assert trainer.unfinished_epoch == (0, 0, 0)


def fit_until_ctrl_c(trainer, data, epochs):
    """fit in batches of 100, which must raise KeyboardInterrupt for a SIGINT sent 0.3 s in, and leave
    SIGINT's handler as it found it. Python's own handler is put in place first: a test run as a
    script's background job starts with SIGINT ignored, which fit leaves so."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.fit(data, epochs=epochs, batch_size=100)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        interrupt.cancel()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_fit_at_an_epochs_end_and_raises_keyboard_interrupt(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    epochs = 100_000  # 300,000 steps: seconds, so that a fit deaf to Ctrl-C still ends, and fails below
    fit_until_ctrl_c(trainer, data, epochs)
    steps, done = trainer.progress
    assert 0 < done < epochs
    assert steps == 3 * done  # at an epoch's end: no user callback, so no step's
    trainer.fit(data, epochs=1, batch_size=100)  # the trainer stays usable
    assert trainer.progress == (steps + 3, done + 1)

    # With a progress callback, after a step: the step whose callback saw it reports no more (or, seen
    # in the epoch-end call, every step had reported), and an epoch stopped inside is left unfinished.
    before, reported = trainer.progress[0], []
    trainer.set_callbacks(progress=lambda *report: reported.append(report))
    fit_until_ctrl_c(trainer, data, epochs)
    steps, done = trainer.progress
    assert 0 < len(reported) < 3 * epochs
    assert steps - before in (len(reported), len(reported) + 1)
    assert trainer.unfinished_epoch.steps == steps - 3 * done


def test_a_trainer_with_callbacks_is_freed_when_its_last_reference_goes(ctx, model, blobs):
    # No reference cycle through its callbacks: without the garbage collector, del frees it (and
    # its memory, which a budget or a GPU would miss until a collection).
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    gc.disable()
    try:
        trainer = mptrain.Trainer(model)
        trainer.set_callbacks(progress=lambda *report: None, epoch_end=lambda *report: None)
        trainer.fit(data, epochs=1, batch_size=100)
        freed = weakref.ref(trainer)
        del trainer
        assert freed() is None
    finally:
        gc.enable()


def test_an_exception_in_a_callback_stops_fit_and_is_raised(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model)
    calls = []

    def explode(*args):
        calls.append(args)
        raise KeyError("from the callback")

    trainer.set_callbacks(progress=explode)
    with pytest.raises(KeyError, match="from the callback"):
        trainer.fit(data, epochs=2, batch_size=30)
    assert len(calls) == 1
    trainer.set_callbacks(epoch_end=lambda e, loss, acc: trainer.fit(data, 1, 30))  # re-entry is refused
    with pytest.raises(mptrain.Error) as caught:
        trainer.fit(data, epochs=1, batch_size=30)
    assert caught.value.status == mptrain.Status.INVALID_STATE


def test_the_epoch_end_callback_may_evaluate_a_validation_set_as_between_one_epoch_fits():
    train, held_out = make_blobs(rows=160, seed=31), make_blobs(rows=70, seed=32)

    def run():  # one seed: the same initial weights and shuffles
        ctx = mptrain.Context(backend="cpu", threads=1, seed=17)
        model = mlp(ctx)
        return (mptrain.Trainer(model, optimizer="adam", learning_rate=0.01),
                mptrain.Dataset.from_f32(ctx, *train, CLASSES), mptrain.Dataset.from_f32(ctx, *held_out, CLASSES))

    trainer, training, validation = run()
    stranger = mptrain.Dataset.from_f32(mptrain.Context(backend="cpu", threads=1), *held_out, CLASSES)
    during_fit, refused = [], {}

    def on_progress(epoch, step, steps, loss, accuracy):
        if step == 2 and "progress" not in refused:
            with pytest.raises(mptrain.Error) as caught:
                trainer.evaluate(validation)
            refused["progress"] = caught.value

    def on_epoch_end(epoch, loss, accuracy):
        during_fit.append(trainer.evaluate(validation))
        if "stranger" not in refused:
            with pytest.raises(mptrain.Error) as caught:
                trainer.evaluate(stranger)
            refused["stranger"] = caught.value

    trainer.set_callbacks(progress=on_progress, epoch_end=on_epoch_end)
    trainer.fit(training, epochs=3, batch_size=16)
    assert (trainer.progress.steps, trainer.progress.epochs) == (30, 3)
    # Mid-epoch steps are in flight: the library's refusal (not the binding's).
    assert refused["progress"].status == mptrain.Status.INVALID_STATE, refused
    assert "cannot be called from this trainer's callbacks" not in refused["progress"].message
    assert refused["stranger"].status == mptrain.Status.INVALID_ARGUMENT, refused
    assert len(during_fit) == 3

    between, training, validation = run()
    for epoch in range(3):
        between.fit(training, epochs=1, batch_size=16)
        evaluation = between.evaluate(validation)
        # Bit for bit on the CPU (floats from C, compared as they came).
        assert (evaluation.loss, evaluation.accuracy) == (during_fit[epoch].loss, during_fit[epoch].accuracy), \
            (epoch, evaluation, during_fit[epoch])
    assert during_fit[2].loss < during_fit[0].loss, during_fit


def test_callbacks_may_read_the_model_during_fit(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, learning_rate=0.05)
    seen = []
    trainer.set_callbacks(epoch_end=lambda e, loss, acc: seen.append(model.get_weights(1)[1]))
    trainer.fit(data, epochs=2, batch_size=50)
    assert len(seen) == 2


def test_log_callback_receives_messages_or_nothing_but_never_breaks(blobs):
    messages = []
    ctx = mptrain.Context(backend="cpu", threads=1, log=lambda level, text: messages.append((level, text)),
                          log_level="debug")
    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    samples, labels = blobs
    mptrain.Trainer(model).fit(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES), 1, 50)
    assert all(isinstance(level, (mptrain.LogLevel, int)) and isinstance(text, str) for level, text in messages)

    def failing(level, text):
        raise RuntimeError("a failing logger must not break training")

    ctx2 = mptrain.Context(backend="cpu", threads=1, log=failing, log_level=mptrain.LogLevel.DEBUG)
    model2 = mptrain.Model(ctx2, FEATURES).add_dense(CLASSES, "softmax")
    mptrain.Trainer(model2).fit(mptrain.Dataset.from_f32(ctx2, samples, labels, CLASSES), 1, 50)


def test_the_log_callback_cannot_call_back_into_its_own_context(blobs, monkeypatch):
    # The header forbids it: the library may log halfway through a call, holding its own locks (a data
    # set streamed from host memory on a GPU logs with its upload mutex held).
    samples, labels = blobs
    other_ctx = mptrain.Context(backend="cpu", threads=1)  # other contexts are fair game
    other_data = mptrain.Dataset.from_f32(other_ctx, samples, labels, CLASSES)
    real = _library._lib()
    address = lambda pointer: ctypes.cast(pointer, ctypes.c_void_p).value
    in_callback = []
    destroys = []  # (pointer, made inside the log callback)

    class Recording:  # the library, noting when a data set is destroyed
        def __getattr__(self, name):
            function = getattr(real, name)
            if name != "mpt_dataset_destroy":
                return function
            return lambda pointer: (destroys.append((address(pointer), bool(in_callback))), function(pointer))[1]

    monkeypatch.setattr(_library, "_lib_instance", Recording())
    armed, answers = [], []

    def log(level, text):
        if not armed:
            return
        in_callback.append(True)
        try:
            ctx, model, data, trainer, doomed = armed.pop()
            own = []
            for call in (lambda: data.rows, lambda: len(data), lambda: ctx.backend, lambda: ctx.memory,
                         lambda: ctx.resolve_precision("auto"), lambda: model.layer_count,
                         lambda: model.get_weights(0), lambda: model.add_dense(2),
                         lambda: mptrain.Model(ctx, FEATURES), lambda: mptrain.Trainer(model),
                         lambda: mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES),
                         lambda: trainer.precision, lambda: trainer.progress, lambda: trainer.evaluate(data),
                         lambda: trainer.predict(samples[:2]), lambda: trainer.step(data, 0, 10),
                         lambda: trainer.fit(data, 1, 50)):
                try:
                    call()
                    own.append("allowed")
                except mptrain.Error as error:
                    own.append((error.status, "log callback" in error.message))
            answers.append((own, other_data.rows, mptrain.Model(other_ctx, FEATURES).input_features))
            doomed.close()  # cannot fail: the C object is destroyed once the logging call returns
            assert doomed.closed
        finally:
            in_callback.pop()

    ctx = mptrain.Context(backend="cpu", threads=1, log=log, log_level="debug")
    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    doomed = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    doomed_pointer = address(doomed._ptr)
    trainer = mptrain.Trainer(model)
    armed.append((ctx, model, data, trainer, doomed))
    second = mptrain.Trainer(model)  # logs its precision (DEBUG)
    assert not armed, "creating a trainer no longer logs at DEBUG"
    own, other_rows, other_features = answers[0]
    assert own == [(mptrain.Status.INVALID_STATE, True)] * len(own)
    assert (other_rows, other_features) == (len(samples), FEATURES)
    # Destroyed once, after the call that logged, not inside it.
    assert [inside for pointer, inside in destroys if pointer == doomed_pointer] == [False]
    # Outside the callback everything is usable again.
    assert model.layer_count == 1
    second.fit(data, 1, 50)
    assert trainer.evaluate(data).accuracy >= 0.0


def test_context_reports_backend_precision_and_memory(ctx, model, blobs):
    assert ctx.backend == mptrain.Backend.CPU
    # bf16 where the CPU multiplies it natively (AMX), else fp32; the trainer runs what auto resolved to.
    assert ctx.resolve_precision("auto") in (mptrain.Precision.FP32, mptrain.Precision.MIXED_BF16)
    assert mptrain.Trainer(model).precision == ctx.resolve_precision("auto")
    samples, labels = blobs
    mptrain.Trainer(model).fit(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES), 1, 32)
    used, peak = ctx.memory
    assert peak >= used > 0
    assert mptrain.cuda_device_count() >= 0


def test_children_outlive_a_closed_context(blobs):
    ctx = mptrain.Context(backend="cpu", threads=1)
    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    ctx.close()
    del ctx
    trainer = mptrain.Trainer(model)
    model.close()  # the trainer keeps the C model alive
    trainer.fit(data, 1, 32)
    assert trainer.evaluate(data).accuracy > 0.3
    with mptrain.Context(backend="cpu") as scoped:
        assert not scoped.closed
    assert scoped.closed


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
