"""Bad input through the bindings becomes mptrain.Error (library semantics) or TypeError (wrong Python
types): never a crash."""
import re

import pytest

import mptrain
from mptrain import _arguments
from conftest import CLASSES, FEATURES, raises

Status = mptrain.Status


def test_error_carries_status_and_library_message(ctx):
    with raises(Status.INVALID_ARGUMENT) as caught:
        mptrain.Dataset.from_f32(ctx, [0.0] * 8, [0, 5], num_classes=3)  # label 5 >= 3
    assert "label 5" in caught.value.message
    assert str(caught.value).startswith("INVALID_ARGUMENT: ")
    assert isinstance(caught.value, Exception)


def test_out_of_range_and_negative_labels(ctx):
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Dataset.from_f32(ctx, [0.0] * 8, [0, -1], num_classes=3)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Dataset.from_f32(ctx, [0.0] * 8, [0, 1], num_classes=0)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Dataset.from_f32(ctx, [0.0] * 8, [0, 2 ** 40], num_classes=3)  # does not fit int32
    with pytest.raises(TypeError):
        mptrain.Dataset.from_f32(ctx, [0.0] * 8, [0.5, 1.0], num_classes=3)


def test_wrong_lengths(ctx, model):
    with raises(Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_f32(ctx, [0.0] * 7, [0, 1], num_classes=3, features=4)
    with raises(Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_f32(ctx, [[0.0] * 4, [0.0] * 3], [0, 1], num_classes=3)
    with raises(Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_f32(ctx, [], [], num_classes=3)
    # Shaped samples whose rows are not one a label (or a target row): both counts are named.
    with raises(Status.SHAPE_MISMATCH) as caught:
        mptrain.Dataset.from_f32(ctx, [[0.0] * 4] * 3, [0, 1], num_classes=3)
    assert caught.value.message == "samples has 3 rows (shape (3, 4)), but there are 2 labels"
    with raises(Status.SHAPE_MISMATCH) as caught:
        mptrain.Dataset.from_targets(ctx, [[0.0] * 4] * 3, [[0.0, 1.0]] * 2)
    assert caught.value.message == "samples has 3 rows (shape (3, 4)), but the targets hold 2 rows"
    with raises(Status.SHAPE_MISMATCH):
        model.predict([0.0] * (FEATURES + 1))
    with raises(Status.SHAPE_MISMATCH) as caught:
        model.predict([])
    assert caught.value.message == "inputs has no rows: at least one is needed"
    with raises(Status.SHAPE_MISMATCH):
        model.set_weights(0, [0.0] * 3)
    with raises(Status.INVALID_ARGUMENT):
        model.get_weights(7)
    with raises(Status.SHAPE_MISMATCH):
        mptrain.Dataset.from_targets(ctx, [0.0] * 8, [0.0] * 5, target_width=2)


def test_non_finite_samples_are_refused_when_checked(ctx):
    with raises(Status.NON_FINITE):
        mptrain.Dataset.from_f32(ctx, [float("nan")] + [0.0] * 7, [0, 1], num_classes=3)
    mptrain.Dataset.from_f32(ctx, [float("nan")] + [0.0] * 7, [0, 1], num_classes=3, check_finite=False)


def test_closed_handles_raise_instead_of_crashing(ctx, model, blobs):
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model)
    data.close()
    data.close()  # idempotent
    with raises(Status.INVALID_ARGUMENT):
        trainer.fit(data, 1, 32)
    with raises(Status.INVALID_ARGUMENT):
        data.rows
    trainer.close()
    with raises(Status.INVALID_ARGUMENT):
        trainer.predict([0.0] * FEATURES)
    model.close()
    with raises(Status.INVALID_ARGUMENT):
        model.add_dense(3)
    ctx.close()
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Model(ctx, 3)


def test_none_and_wrong_types_are_type_errors(ctx, model):
    with pytest.raises(TypeError):
        mptrain.Model(None, 3)
    with pytest.raises(TypeError):
        mptrain.Trainer(None)
    with pytest.raises(TypeError):
        mptrain.Trainer(model).fit(None, 1, 32)
    with pytest.raises(TypeError):
        mptrain.Trainer(model).evaluate(model)
    with pytest.raises(TypeError):
        model.predict(None)
    with pytest.raises(TypeError):
        model.predict("abcd")
    with pytest.raises(TypeError):
        mptrain.Model(ctx, "3")
    with pytest.raises(TypeError):
        mptrain.Model(ctx, 3).add_dense(2, 1.5)
    with pytest.raises(TypeError):
        mptrain.Trainer(model).set_callbacks(progress=42)


def test_float_parameters_take_numbers_only(ctx, model):
    """A float parameter refuses a str and a bool as the integer ones do (float() would have read "1e-3"
    as a rate, and True as a rate of 1), naming the parameter; ints, numpy scalars, Fractions and
    Decimals are numbers."""
    import decimal
    import fractions
    for keywords, name in (({"learning_rate": "1e-3"}, "learning_rate"), ({"learning_rate": True}, "learning_rate"),
                           ({"optimizer": "sgd", "momentum": "0.9"}, "momentum"),
                           ({"optimizer": "adam", "adam": (0.9, "0.999", 1e-7)}, "beta2"),
                           ({"label_smoothing": None}, "label_smoothing"),
                           ({"class_weights": {0: "2"}}, "class_weights[0]"),
                           ({"loss_scaling": "dynamic", "initial_scale": "1024"}, "initial_scale"),
                           ({"loss_scaler_dynamics": (2.0, 0.5, 100, 1.0, [65536.0])}, "max_scale")):
        with pytest.raises(TypeError, match=r"^%s must be a number, not " % re.escape(name)):
            mptrain.Trainer(model, **keywords)
    trainer = mptrain.Trainer(model, learning_rate=1, momentum=fractions.Fraction(1, 2), optimizer="sgd")
    assert trainer.learning_rate == 1.0
    with pytest.raises(TypeError, match="^learning_rate must be a number, not str"):
        trainer.learning_rate = "0.5"
    trainer.learning_rate = decimal.Decimal("0.25")
    assert trainer.learning_rate == 0.25
    with pytest.raises(TypeError, match="^rate must be a number, not str"):
        mptrain.Model(ctx, 3).set_input_dropout("0.5")
    with pytest.raises(TypeError, match="^scale must be a number, not bool"):
        mptrain.Dataset.from_u8(ctx, bytes(6), [0, 1], 2, scale=True)
    try:
        import numpy as np
    except ImportError:
        return
    assert mptrain.Trainer(model, learning_rate=np.float32(0.5)).learning_rate == 0.5


def test_enum_names_are_the_members_or_keras_strings_and_class_names(ctx):
    model = mptrain.Model(ctx, 3)
    for name, activation in (("relu", mptrain.Activation.RELU), ("LeakyReLU", mptrain.Activation.LEAKY_RELU),
                             ("leaky_relu", mptrain.Activation.LEAKY_RELU), ("leaky-relu", mptrain.Activation.LEAKY_RELU),
                             ("ELU", mptrain.Activation.ELU), ("Softplus", mptrain.Activation.SOFTPLUS)):
        model.add_dense(2, name)
        assert model.get_layer_activation(model.layer_count - 1) == activation, name
    for name, initializer in (("HeNormal", mptrain.Initializer.HE_NORMAL), ("he_normal", mptrain.Initializer.HE_NORMAL),
                              ("GlorotUniform", mptrain.Initializer.GLOROT_UNIFORM),
                              ("LecunNormal", mptrain.Initializer.LECUN_NORMAL),
                              ("LeCunUniform", mptrain.Initializer.LECUN_UNIFORM)):
        model.set_layer_initializer(0, name)
        assert model.get_layer_initializer(0) == initializer, name
    model.add_dense(2, "softmax")
    for name, loss in (("mse", mptrain.Loss.MEAN_SQUARED_ERROR), ("MAE", mptrain.Loss.MEAN_ABSOLUTE_ERROR),
                       ("SparseCategoricalCrossentropy", mptrain.Loss.SPARSE_CATEGORICAL_CROSSENTROPY),
                       ("binary_crossentropy", mptrain.Loss.BINARY_CROSSENTROPY), ("Huber", mptrain.Loss.HUBER)):
        mptrain.Trainer(model, loss=name)  # accepted; the name's member is what the enum lookup gives
        assert _arguments._enum(mptrain.Loss, name, "loss") == loss, name
    for name, optimizer in (("AdamW", mptrain.Optimizer.ADAMW), ("RMSprop", mptrain.Optimizer.RMSPROP),
                            ("SGD", mptrain.Optimizer.SGD), ("Lion", mptrain.Optimizer.LION),
                            ("lion", mptrain.Optimizer.LION)):
        assert _arguments._enum(mptrain.Optimizer, name, "optimizer") == optimizer, name
    assert _arguments._enum(mptrain.Precision, "MixedBF16", "precision") == mptrain.Precision.MIXED_BF16
    for unknown in ("swish", "", "he normal x", "mse", "relu6"):
        kind = mptrain.Optimizer if unknown == "mse" else mptrain.Activation  # an alias only for its own kind
        with raises(Status.INVALID_ARGUMENT):
            _arguments._enum(kind, unknown, "name")


def test_invalid_values_come_back_from_the_library(ctx, model, blobs):
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Model(ctx, 3).add_dense(2, 99)  # unknown activation value, checked by C
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Model(ctx, 3).add_dense(2, "swish")  # unknown name, checked here
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Context(threads=-1)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Trainer(model, learning_rate=-1.0)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Trainer(model, momentum=1.5)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Trainer(model, loss_scaler_dynamics=(0.5, 0.5, 10, 1.0, 2.0))
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model)
    with raises(Status.INVALID_ARGUMENT):
        trainer.fit(data, epochs=1, batch_size=0)
    with raises(Status.INVALID_ARGUMENT):
        trainer.step(data, first=299, batch_size=10)
    with raises(Status.INVALID_STATE):
        model.add_dense(4)  # the model was built by the trainer
    with raises(Status.INVALID_STATE):
        mptrain.Trainer(mptrain.Model(ctx, 3))  # no layers
    with raises(Status.IO_ERROR):
        mptrain.Dataset.load_cifar10(ctx, "/nonexistent/cifar-10-batches-bin")


def test_a_model_of_one_width_rejects_data_of_another(ctx, model):
    data = mptrain.Dataset.from_f32(ctx, [0.0] * 10, [0, 1], num_classes=2)  # 5 features, model takes 4
    with raises(Status.SHAPE_MISMATCH):
        mptrain.Trainer(model).fit(data, 1, 2)


def test_the_library_stays_usable_after_errors(ctx, model, blobs):
    for _ in range(3):
        with pytest.raises(mptrain.Error):
            model.predict([0.0] * 3)
    samples, labels = blobs
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    trainer.fit(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES), 3, 32)
    assert trainer.evaluate(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)).accuracy > 0.9


def test_integers_outside_their_c_type_are_refused_not_truncated(ctx, model, blobs):
    """ctypes keeps only the low bits of an integer too large for the C parameter (2**64 + 4 becomes 4,
    -1 as a size_t becomes SIZE_MAX): each is refused, naming the argument."""
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model)
    calls = {
        "input_features": lambda: mptrain.Model(ctx, 2 ** 64 + 4),
        "units": lambda: mptrain.Model(ctx, 4).add_dense(2 ** 64 + 3),
        "activation": lambda: mptrain.Model(ctx, 4).add_dense(3, 2 ** 32 + 4),
        "dtype": lambda: mptrain.Model(ctx, 4).add_dense(3).set_layer_dtype(0, -2 ** 32 + 1),
        "layer": lambda: mptrain.Model(ctx, 4).add_dense(3).set_layer_dropout(2 ** 64, 0.5),
        "threads": lambda: mptrain.Context(backend="cpu", threads=2 ** 40),
        "memory_budget": lambda: mptrain.Context(backend="cpu", memory_budget=-1),
        "dataset_device_budget": lambda: mptrain.Context(backend="cpu", dataset_device_budget=2 ** 64),
        "seed": lambda: mptrain.Context(backend="cpu", seed=-1),
        "num_classes": lambda: mptrain.Dataset.from_f32(ctx, samples, labels, num_classes=2 ** 40),
        "limit": lambda: mptrain.Dataset.load_cifar10(ctx, "/nonexistent", limit=2 ** 63),
        "epochs": lambda: trainer.fit(data, epochs=2 ** 64 + 1, batch_size=4),
        "batch_size": lambda: trainer.evaluate(data, batch_size=-2 ** 63 - 1),
        "first": lambda: trainer.step(data, first=2 ** 64, batch_size=4),
        "keep_last": lambda: trainer.set_checkpointing("/tmp", every_steps=1, keep_last=2 ** 64 + 1),
    }
    for name, call in calls.items():
        with pytest.raises(OverflowError, match="^INVALID_ARGUMENT: %s is " % name) as caught:
            call()
        assert isinstance(caught.value, mptrain.Error) and caught.value.status == Status.INVALID_ARGUMENT
    assert trainer.progress == (0, 0)
    with pytest.raises(mptrain.Error, match="seed"):
        mptrain.Context(backend="cpu", seed=2 ** 70)
    # The ends of each range stay the library's to judge.
    mptrain.Context(backend="cpu", seed=2 ** 64 - 1, dataset_device_budget=2 ** 64 - 1, memory_budget=2 ** 64 - 1)
    with raises(Status.INVALID_ARGUMENT) as caught:
        trainer.fit(data, epochs=2 ** 63 - 1, batch_size=-2 ** 63)
    assert "batch_size is" not in caught.value.message


def test_the_cifar10_directory_is_a_path_like_any_other(ctx):
    with raises(Status.IO_ERROR) as caught:
        mptrain.Dataset.load_cifar10(ctx, b"/nonexistent/cifar")
    assert "/nonexistent/cifar/data_batch_1.bin" in caught.value.message and "b'" not in caught.value.message
    with raises(Status.INVALID_ARGUMENT) as caught:
        mptrain.Dataset.load_cifar10(ctx, "/nonexistent/cifar\0/tail")  # C would stop at the NUL
    assert "directory contains NUL" in caught.value.message
