"""A model's per-layer settings through the bindings: dropout rates (set, refused, trained with, unused at
inference) and frozen layers."""
import ctypes
import math

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, mlp, weight_bytes


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
