"""The optimizer's options through the bindings: learning-rate schedules against the header's formulas,
global_clipnorm and gradient_norm, the weights' moving average (EMA), RMSprop and Lion, each with its refusals."""
import array
import inspect
import math

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, mlp, values, weight_bytes


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
