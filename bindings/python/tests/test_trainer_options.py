"""Trainer.options (mpt_trainer_get_options and the mpt_trainer_options_get_* getters), Keras's get_config for a
trainer: a dict of Trainer's keyword arguments, every one. Options given read back as given (as the float32
values the library keeps), with the base rate as set since; left out, as the defaults the header documents
and the optimizer's own (AdamW's decay, Lion's betas); a trainer created from them trains bit for bit as the
original (weights, averaged weights, loss scale), where one with the default options trains otherwise. The
copies of a value the library keeps once (adam's and lion's betas, adam's and rmsprop's epsilon) must agree
as float32: a read-back edited in one copy is refused (INVALID_ARGUMENT) before a trainer is created, one
edited in every copy reads back the new values.

Trainer.options_from_checkpoint (mpt_trainer_options_create_from_checkpoint), the same dict for the trainer
that wrote a checkpoint: a run resumed from the file alone (model, options, checkpoint) ends bit for bit as
the run that went on; precision and loss scaling read back resolved, the micro-batch size 0; a model file, a
missing and a damaged file raise Error with their status."""
import ctypes
import inspect
import os

import pytest

import mptrain
from conftest import CLASSES, make_blobs, mlp, raises, truncate, weight_bytes

Loss, Optimizer, Precision = mptrain.Loss, mptrain.Optimizer, mptrain.Precision
LossScaling, LrSchedule, Status = mptrain.LossScaling, mptrain.LrSchedule, mptrain.Status

# Trainer's keyword arguments, in its signature's order.
KEYWORDS = [name for name in inspect.signature(mptrain.Trainer.__init__).parameters if name not in ("self", "model")]


def f32(value):
    """A float as the float32 the library keeps, read back as a Python float."""
    return ctypes.c_float(value).value


def as_held(value):
    """A value as given to Trainer, as the library holds it: its floats in float32."""
    if isinstance(value, float):
        return f32(value)
    if isinstance(value, (tuple, list)):
        return type(value)(as_held(part) for part in value)
    return value


def typed(value):
    """A value with the type of every part: equal only where the types are too (an enum member is not its
    int, True is not 1, 2000 is not 2000.0, a tuple is not a list)."""
    if isinstance(value, (tuple, list)):
        return type(value), [typed(part) for part in value]
    return type(value), value


def check_options(options, expected):
    """options has every keyword of Trainer, in order, each of the value and type expected."""
    assert list(options) == KEYWORDS
    for name in KEYWORDS:
        assert typed(options[name]) == typed(expected[name]), name


# The defaults mpt_trainer_options_create documents, written out here.
DEFAULTS = {
    "precision": Precision.AUTO, "loss": Loss.SPARSE_CATEGORICAL_CROSSENTROPY, "optimizer": Optimizer.SGD,
    "learning_rate": f32(0.01), "momentum": 0.0, "nesterov": False, "adam": (f32(0.9), f32(0.999), f32(1e-7)),
    "rmsprop": (f32(0.9), f32(1e-7)), "weight_decay": 0.0, "loss_scaling": LossScaling.DEFAULT,
    "initial_scale": 32768.0, "loss_scaler_dynamics": (2.0, 0.5, 2000, 1.0, 16777216.0),
    "lr_schedule": LrSchedule.CONSTANT, "warmup_steps": 0, "decay_steps": 0, "decay_factor": 1.0,
    "label_smoothing": 0.0, "class_weights": None, "global_clipnorm": 0.0, "ema_momentum": 0.0, "huber_delta": 1.0,
    "rmsprop_centered": False, "micro_batch_size": 0, "lion": (f32(0.9), f32(0.999)),
}

# A value other than the default for every keyword. Adam's, RMSprop's and Lion's betas and epsilon agree, as
# the library keeps one pair of betas and one epsilon.
GIVEN = {
    "precision": Precision.MIXED_BF16, "loss": Loss.CATEGORICAL_CROSSENTROPY, "optimizer": Optimizer.ADAM,
    "learning_rate": 0.03, "momentum": 0.75, "nesterov": True, "adam": (0.8, 0.95, 1e-5), "rmsprop": (0.7, 1e-5),
    "weight_decay": 0.01, "loss_scaling": LossScaling.DYNAMIC, "initial_scale": 64.0,
    "loss_scaler_dynamics": (4.0, 0.25, 3, 2.0, 1024.0), "lr_schedule": LrSchedule.COSINE, "warmup_steps": 3,
    "decay_steps": 40, "decay_factor": 0.25, "label_smoothing": 0.125, "class_weights": [0.5, 2.0, 1.25],
    "global_clipnorm": 0.9, "ema_momentum": 0.5, "huber_delta": 2.5, "rmsprop_centered": True,
    "micro_batch_size": 5, "lion": (0.8, 0.95),
}


def test_a_fresh_trainers_options_are_the_defaults_the_header_documents(model):
    check_options(mptrain.Trainer(model).options, DEFAULTS)
    check_options(mptrain.Trainer(model, **DEFAULTS).options, DEFAULTS)  # given, they read back alike


def test_options_given_read_back_as_given_and_the_learning_rate_as_set_since(model):
    trainer = mptrain.Trainer(model, **GIVEN)
    held = {name: as_held(value) for name, value in GIVEN.items()}
    check_options(trainer.options, held)

    trainer.learning_rate = 0.125
    options = trainer.options
    check_options(options, dict(held, learning_rate=0.125))
    options["learning_rate"] = 1.0  # a new dict each read, the trainer's own untouched
    assert trainer.options["learning_rate"] == 0.125 == trainer.learning_rate

    by_name = mptrain.Trainer(model, precision="mixed_bf16", loss="categorical_crossentropy", optimizer="adam",
                              lr_schedule="cosine", decay_steps=40, loss_scaling="dynamic").options
    for name in ("precision", "loss", "optimizer", "lr_schedule", "loss_scaling"):
        assert typed(by_name[name]) == typed(GIVEN[name]), name


def test_options_left_out_read_back_as_the_optimizers_and_schedules_defaults(model):
    assert mptrain.Trainer(model, optimizer="adamw").options["weight_decay"] == f32(0.004)
    assert mptrain.Trainer(model, optimizer="adamw", weight_decay=0.0).options["weight_decay"] == 0.0
    lion = mptrain.Trainer(model, optimizer="lion").options
    assert lion["lion"] == (f32(0.9), f32(0.99)) == lion["adam"][:2]
    assert mptrain.Trainer(model, lr_schedule="cosine", decay_steps=9).options["decay_factor"] == 0.0
    assert mptrain.Trainer(model, lr_schedule="step", decay_steps=9).options["decay_factor"] == f32(0.1)

    # The library keeps one pair of betas and one epsilon: given once, every copy reads it.
    shared = mptrain.Trainer(model, rmsprop=(0.7, 1e-6), lion=(0.85, 0.97)).options
    assert shared["adam"] == (f32(0.85), f32(0.97), f32(1e-6))
    assert shared["rmsprop"] == (f32(0.7), f32(1e-6))
    assert shared["lion"] == (f32(0.85), f32(0.97))

    # Keras's dict of class weights reads back as the list it stood for.
    assert mptrain.Trainer(model, class_weights={1: 2.0}).options["class_weights"] == [1.0, 2.0, 1.0]


# Edits of a read-back that change one copy of a value the library keeps once: adam's betas (lion's left),
# adam's epsilon (rmsprop's left), and the other way round; with the inputs the refusal names.
ONE_COPY_EDITED = {
    "adam-betas": (lambda o: dict(o, adam=(0.5, 0.6, o["adam"][2])), "adam's beta1 0.5", "lion's beta1"),
    "adam-epsilon": (lambda o: dict(o, adam=o["adam"][:2] + (1e-3,)), "adam's epsilon 0.001", "rmsprop's epsilon"),
    "lion-beta2": (lambda o: dict(o, lion=(o["lion"][0], 0.6)), "adam's beta2", "lion's beta2 0.6"),
    "rmsprop-epsilon": (lambda o: dict(o, rmsprop=(o["rmsprop"][0], 1e-3)), "adam's epsilon",
                        "rmsprop's epsilon 0.001"),
}


@pytest.mark.parametrize("edit, first, second", ONE_COPY_EDITED.values(), ids=list(ONE_COPY_EDITED))
def test_a_read_back_with_one_copy_of_a_shared_value_edited_is_refused_before_a_trainer_is_created(
        ctx, edit, first, second):
    options = mptrain.Trainer(mlp(ctx), **GIVEN).options
    model = mlp(ctx)
    with raises(Status.INVALID_ARGUMENT) as caught:
        mptrain.Trainer(model, **edit(options))
    message = caught.value.message
    assert first in message and second in message and "one value in the library" in message, message
    model.set_layer_initializer(0, "he_normal")  # still unbuilt (else INVALID_STATE): no trainer created


def test_a_read_back_edited_in_every_copy_creates_a_trainer_that_reads_back_the_new_values(model):
    options = mptrain.Trainer(model, **GIVEN).options
    rho = options["rmsprop"][0]
    edited = dict(options, adam=(0.5, 0.6, 1e-3), lion=(0.5, 0.6), rmsprop=(rho, 1e-3))
    read = mptrain.Trainer(model, **edited).options
    check_options(read, dict(options, adam=as_held((0.5, 0.6, 1e-3)), lion=as_held((0.5, 0.6)),
                             rmsprop=(rho, f32(1e-3))))


def test_copies_of_a_shared_value_are_compared_as_the_float32_the_library_keeps(model):
    # Other Python floats, the same float32 (accepted), and the float32 values next to them (refused).
    near, near_epsilon = 0.9 + 1e-9, 1e-7 + 1e-17
    apart, apart_epsilon = 0.9 + 1e-7, 1e-7 + 1e-14
    assert f32(near) == f32(0.9) != f32(apart) and f32(near_epsilon) == f32(1e-7) != f32(apart_epsilon)
    options = mptrain.Trainer(model, adam=(0.9, 0.9, 1e-7), lion=(near, near), rmsprop=(0.9, near_epsilon)).options
    assert options["adam"] == (f32(0.9), f32(0.9), f32(1e-7)) == options["lion"] + options["rmsprop"][1:]
    for given in (dict(lion=(apart, 0.9)), dict(lion=(0.9, apart)), dict(rmsprop=(0.9, apart_epsilon))):
        with raises(Status.INVALID_ARGUMENT):
            mptrain.Trainer(model, adam=(0.9, 0.9, 1e-7), **given)
    # Given directly, not from a read-back: refused too.
    with raises(Status.INVALID_ARGUMENT) as caught:
        mptrain.Trainer(model, adam=(0.8, 0.95, 1e-5), rmsprop=(0.7, 1e-6), lion=(0.85, 0.97))
    assert "adam's beta1 0.8 and lion's beta1 0.85" in caught.value.message, caught.value.message


def test_options_read_from_fits_callback_hold_the_rate_set_there(ctx, model, blobs):
    trainer = mptrain.Trainer(model, optimizer="adam")
    rates = []

    def epoch_end(epoch, loss, accuracy):
        trainer.learning_rate = 0.5 / (epoch + 1)
        rates.append(trainer.options["learning_rate"])

    trainer.set_callbacks(epoch_end=epoch_end)
    trainer.fit(mptrain.Dataset.from_f32(ctx, *blobs, CLASSES), epochs=2, batch_size=50)
    assert rates == [0.5, 0.25]


def test_options_of_a_closed_trainer_raise_error(model):
    trainer = mptrain.Trainer(model)
    trainer.close()
    with pytest.raises(mptrain.Error) as caught:
        trainer.options
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    assert "Trainer is closed" in caught.value.message  # the binding's refusal, before any C call


BLOBS = make_blobs(rows=90, seed=4)


def new_run(options, dropout=0.0):
    """A context, model (with `dropout` after its hidden layer) and trainer with `options`; one seed, so the
    same initial weights every time."""
    ctx = mptrain.Context(backend="cpu", threads=1, seed=5)
    model = mlp(ctx).set_layer_dropout(0, dropout)
    return ctx, model, mptrain.Trainer(model, **options)


def fitted(run, averaged=True):
    """The run fitted 3 epochs in batches of 15 (18 steps: the warm-up and part of the decay); its weights,
    its loss scale and (averaged) its moving averages: equal only when bit-identical."""
    ctx, model, trainer = run
    trainer.fit(mptrain.Dataset.from_f32(ctx, *BLOBS, CLASSES), epochs=3, batch_size=15)
    averages = None
    if averaged:
        with trainer.ema_weights():
            averages = weight_bytes(model)
    return weight_bytes(model), trainer.loss_scale, averages


@pytest.mark.parametrize("optimizer", [Optimizer.ADAMW, Optimizer.LION, Optimizer.RMSPROP, Optimizer.SGD],
                         ids=lambda optimizer: optimizer.name.lower())
def test_a_trainer_created_from_the_options_read_back_trains_bit_for_bit_as_the_original(optimizer):
    # GIVEN for labels, in fp16 so that the loss scaler's options count; RMSprop refuses Nesterov's momentum.
    given = dict(GIVEN, optimizer=optimizer, loss=Loss.SPARSE_CATEGORICAL_CROSSENTROPY,
                 precision=Precision.MIXED_FP16, nesterov=optimizer == Optimizer.SGD)
    original = new_run(given)
    original[2].learning_rate = 0.02  # a base rate other than the one given
    recreated = new_run(original[2].options)
    assert weight_bytes(recreated[1]) == weight_bytes(original[1])

    expected = fitted(original)
    assert fitted(recreated) == expected
    assert fitted(new_run({}), averaged=False)[0] != expected[0]  # the options matter


def resolved_scaling(loss_scaling, precision):
    """The loss scaling a trainer of `precision` (resolved) runs: DEFAULT is dynamic for fp16, else off."""
    if loss_scaling != LossScaling.DEFAULT:
        return loss_scaling
    return LossScaling.DYNAMIC if precision == Precision.MIXED_FP16 else LossScaling.OFF


def as_checkpointed(trainer):
    """The options a checkpoint of `trainer` holds: its own, but for the precision and loss scaling it runs
    and the micro-batch size, which no checkpoint records."""
    options = trainer.options
    return dict(options, precision=trainer.precision, micro_batch_size=0,
                loss_scaling=resolved_scaling(options["loss_scaling"], trainer.precision))


# Runs to resume, each with averages (fitted compares them).
RESUMED = {
    # fp16 with the default (dynamic) scaling starting at 2^24, so that steps overflow and the scale moves; a
    # schedule, label smoothing, class weights and clipping.
    "fp16-adam": dict(precision="mixed_fp16", optimizer="adam", learning_rate=0.03, loss_scaling="default",
                      initial_scale=2.0 ** 24, lr_schedule="cosine", warmup_steps=3, decay_steps=40,
                      label_smoothing=0.1, class_weights=[0.5, 2.0, 1.25], global_clipnorm=0.5, ema_momentum=0.9),
    "fp32-nesterov-sgd": dict(precision="fp32", optimizer="sgd", momentum=0.8, nesterov=True, weight_decay=0.01,
                              lr_schedule="step", warmup_steps=2, decay_steps=5, decay_factor=0.5, ema_momentum=0.5),
    "bf16-centered-rmsprop": dict(precision="mixed_bf16", optimizer="rmsprop", rmsprop=(0.8, 1e-6),
                                  rmsprop_centered=True, momentum=0.5, loss_scaling="static", initial_scale=128.0,
                                  loss_scaler_dynamics=(4.0, 0.25, 7, 2.0, 4096.0), ema_momentum=0.75),
}


@pytest.mark.parametrize("recipe", sorted(RESUMED))
def test_a_run_resumed_from_its_checkpoint_alone_ends_bit_for_bit_as_the_run_that_went_on(recipe, tmp_path):
    path = tmp_path / "run.safetensors"
    original = new_run(RESUMED[recipe], dropout=0.25)
    fitted(original)
    # The run's base rate, no longer its options' (nor the default 0.01): the file's must be the run's.
    original[2].learning_rate *= 0.5
    original[2].save_checkpoint(path)

    # Another seed: what the resumed run has, it has from the file.
    ctx = mptrain.Context(backend="cpu", threads=1, seed=99)
    model = mptrain.Model.load(ctx, path)
    options = mptrain.Trainer.options_from_checkpoint(path)
    check_options(options, as_checkpointed(original[2]))
    resumed = ctx, model, mptrain.Trainer(model, **options)
    assert resumed[2].batch_size == 0  # before any training batch
    resumed[2].load_checkpoint(path)
    assert resumed[2].batch_size == original[2].batch_size == 15  # the saved run's, restored

    assert fitted(resumed) == fitted(original)
    assert resumed[2].progress == original[2].progress


@pytest.mark.parametrize("precision, loss_scaling", [
    (Precision.MIXED_FP16, LossScaling.DEFAULT), (Precision.MIXED_BF16, LossScaling.DEFAULT),
    (Precision.FP32, LossScaling.DEFAULT), (Precision.FP32, LossScaling.STATIC), (Precision.AUTO, LossScaling.DEFAULT),
    (Precision.AUTO, LossScaling.OFF)], ids=lambda value: value.name.lower())
def test_options_from_a_checkpoint_are_the_ones_the_trainer_ran_auto_and_default_resolved(model, tmp_path, precision,
                                                                                         loss_scaling):
    trainer = mptrain.Trainer(model, precision=precision, loss_scaling=loss_scaling, optimizer="adamw",
                              micro_batch_size=4)
    path = tmp_path / "run.safetensors"
    trainer.save_checkpoint(path)
    options = mptrain.Trainer.options_from_checkpoint(str(path))
    assert options["precision"] == trainer.precision != Precision.AUTO
    assert options["loss_scaling"] == resolved_scaling(loss_scaling, trainer.precision) != LossScaling.DEFAULT
    assert options["micro_batch_size"] == 0
    check_options(options, as_checkpointed(trainer))
    assert mptrain.Trainer.options_from_checkpoint(os.fsencode(path)) == options  # a path as bytes too


def test_options_from_checkpoint_of_a_model_file_a_missing_or_a_damaged_file_raise_error_with_their_status(
        model, tmp_path):
    trainer = mptrain.Trainer(model, optimizer="adam")
    model_file, checkpoint, damaged = (tmp_path / name for name in ("model.safetensors", "run.safetensors",
                                                                    "damaged.safetensors"))
    model.save(model_file)
    trainer.save_checkpoint(checkpoint)
    truncate(checkpoint, damaged)
    for path, status in ((model_file, Status.INVALID_ARGUMENT), (tmp_path / "missing.safetensors", Status.IO_ERROR),
                         (damaged, Status.CORRUPT_DATA), ("bad\0path", Status.INVALID_ARGUMENT)):
        with raises(status):
            mptrain.Trainer.options_from_checkpoint(path)
    with pytest.raises(TypeError):
        mptrain.Trainer.options_from_checkpoint(None)
    assert mptrain.Trainer.options_from_checkpoint(checkpoint)["optimizer"] == Optimizer.ADAM  # the file is fine
