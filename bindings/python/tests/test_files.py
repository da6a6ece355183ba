"""Model files and training checkpoints: a loaded model predicts bit-identically, a run resumed from a
checkpoint ends with bit-identical weights, and bad files raise mptrain.Error with their status."""
import os

import pytest

import mptrain
from conftest import CLASSES, FEATURES, make_blobs, raises, truncate, weight_bytes

Status = mptrain.Status


def mlp(ctx):
    return mptrain.Model(ctx, FEATURES).add_dense(16, "relu").add_dense(8, "tanh").add_dense(CLASSES, "softmax")


def adam(model):
    return mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)


def data(ctx, rows, seed):
    samples, labels = make_blobs(rows=rows, seed=seed)
    return mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)


def saved_steps(directory):
    steps = []
    for name in os.listdir(directory):
        assert name.startswith("checkpoint-") and name.endswith(".safetensors"), name
        steps.append(int(name[len("checkpoint-"):-len(".safetensors")]))
    return sorted(steps)


def test_a_saved_model_loads_and_predicts_bit_identically(ctx, tmp_path):
    model = mlp(ctx)
    adam(model).fit(data(ctx, 120, 11), epochs=2, batch_size=16)
    path = tmp_path / "model.safetensors"
    model.save(path)              # os.PathLike
    model.save(str(path))         # str, overwriting
    other = mptrain.Context(backend="cpu", seed=99)
    loaded = mptrain.Model.load(other, path)
    assert (loaded.layer_count, loaded.input_features, loaded.output_features) == (3, FEATURES, CLASSES)
    assert loaded.parameter_count == model.parameter_count
    assert weight_bytes(loaded) == weight_bytes(model)
    assert loaded.get_weights(1)[0].tobytes() == model.get_weights(1)[0].tobytes()
    samples, _ = make_blobs(rows=30, seed=12)
    assert loaded.predict(samples).tobytes() == model.predict(samples).tobytes()
    adam(loaded).fit(data(other, 60, 13), epochs=1, batch_size=20)  # it trains like any other model
    assert mptrain.Model.load(other, str(path).encode()).layer_count == 3  # bytes paths work too


def test_every_hidden_activation_trains_and_reloads_by_its_name(ctx, tmp_path):
    names = ["linear", "relu", "sigmoid", "tanh", "leaky_relu", "elu", "selu", "softplus", "softsign"]
    model = mptrain.Model(ctx, FEATURES)
    for name in names:
        model.add_dense(6, name)
    model.add_dense(CLASSES, mptrain.Activation.SOFTMAX).set_layer_dtype(1, "bf16")
    adam(model).fit(data(ctx, 120, 14), epochs=1, batch_size=16)
    path = tmp_path / "activations.safetensors"
    model.save(path)
    samples, _ = make_blobs(rows=30, seed=15)
    loaded = mptrain.Model.load(ctx, path)
    assert loaded.predict(samples).tobytes() == model.predict(samples).tobytes()
    assert [loaded.get_layer_activation(layer).name.lower() for layer in range(len(names))] == names
    assert [loaded.get_layer_units(layer) for layer in range(len(names) + 1)] == [6] * len(names) + [CLASSES]
    assert loaded.get_layer_activation(len(names)) == mptrain.Activation.SOFTMAX
    assert [loaded.get_layer_dtype(layer) for layer in range(3)] == [mptrain.DType.DEFAULT, mptrain.DType.BF16,
                                                                      mptrain.DType.DEFAULT]
    for layer in (len(names) + 1, -1):
        for getter in (loaded.get_layer_units, loaded.get_layer_activation, loaded.get_layer_dtype):
            with raises(Status.INVALID_ARGUMENT):
                getter(layer)
    with raises(Status.INVALID_ARGUMENT):
        loaded.get_weights(-1)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Model(ctx, FEATURES).add_dense(6, "gelu")  # its derivative needs its input, not its output


def test_an_initializer_set_by_name_draws_the_weights_and_is_not_saved(ctx, tmp_path):
    def first_layer(initializer):
        model = mptrain.Model(mptrain.Context(backend="cpu", seed=4), FEATURES).add_dense(64, "selu")
        model.add_dense(CLASSES, "softmax")
        if initializer is not None:
            assert model.set_layer_initializer(0, initializer) is model  # chains
        return model

    default = first_layer(None)
    assert default.get_layer_initializer(0) == mptrain.Initializer.GLOROT_UNIFORM
    lecun = first_layer("lecun_normal")
    assert lecun.get_layer_initializer(0) == mptrain.Initializer.LECUN_NORMAL
    assert lecun.get_layer_initializer(1) == mptrain.Initializer.GLOROT_UNIFORM
    assert lecun.get_weights(0)[0].tobytes() == first_layer(mptrain.Initializer.LECUN_NORMAL).get_weights(0)[0].tobytes()
    assert lecun.get_weights(0)[0].tobytes() != default.get_weights(0)[0].tobytes()
    with raises(Status.INVALID_STATE):  # built by get_weights: the weights are drawn
        lecun.set_layer_initializer(0, "he_normal")
    with raises(Status.INVALID_ARGUMENT):
        first_layer("orthogonal")
    with raises(Status.INVALID_ARGUMENT):
        first_layer(6)  # past the enum: the library refuses it
    with raises(Status.INVALID_ARGUMENT):
        first_layer(None).set_layer_initializer(2, "he_normal")
    path = tmp_path / "lecun.safetensors"
    lecun.save(path)
    loaded = mptrain.Model.load(ctx, path)
    assert loaded.get_layer_initializer(0) == mptrain.Initializer.GLOROT_UNIFORM
    assert loaded.get_weights(0)[0].tobytes() == lecun.get_weights(0)[0].tobytes()


def test_a_run_resumed_from_a_checkpoint_ends_bit_identical(ctx, tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    dataset = data(ctx, 200, 21)  # 6 steps of 32 per epoch
    model = mlp(ctx)
    trainer = adam(model)
    trainer.fit(dataset, epochs=1, batch_size=32)
    trainer.save_checkpoint(path)
    trainer.fit(dataset, epochs=2, batch_size=32)
    uninterrupted = weight_bytes(model)

    resumed_model = mlp(ctx)  # fresh initial weights: only the checkpoint can make them equal
    assert weight_bytes(resumed_model) != uninterrupted
    resumed = adam(resumed_model)
    resumed.load_checkpoint(str(path))
    assert resumed.progress == (6, 1)
    resumed.fit(dataset, epochs=2, batch_size=32)
    assert weight_bytes(resumed_model) == uninterrupted
    assert resumed.progress == trainer.progress
    assert resumed.loss_scale == trainer.loss_scale

    from_checkpoint = mptrain.Model.load(ctx, path)  # a checkpoint holds the model too
    assert weight_bytes(from_checkpoint) == weight_bytes(mptrain.Model.load(ctx, path))
    assert from_checkpoint.layer_count == 3


def test_a_learning_rate_schedule_changes_training_and_the_checkpoint_restores_the_rate(ctx, tmp_path):
    dataset = data(ctx, 200, 41)
    model = mlp(ctx)
    trainer = adam(model)
    assert trainer.learning_rate == pytest.approx(0.01)

    def decay(epoch, loss, accuracy):  # a step schedule from the epoch-end callback
        trainer.learning_rate = trainer.learning_rate / 2

    trainer.set_callbacks(epoch_end=decay)
    trainer.fit(dataset, epochs=2, batch_size=32)
    assert trainer.learning_rate == pytest.approx(0.0025)
    path = tmp_path / "decayed.safetensors"
    trainer.save_checkpoint(path)
    trainer.set_callbacks()
    trainer.fit(dataset, epochs=1, batch_size=32)

    resumed_model = mlp(ctx)
    resumed = adam(resumed_model)
    resumed.learning_rate = 0.5
    resumed.load_checkpoint(path)
    assert resumed.learning_rate == pytest.approx(0.0025)  # the checkpoint's, not the trainer's
    resumed.fit(dataset, epochs=1, batch_size=32)
    assert weight_bytes(resumed_model) == weight_bytes(model)

    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with raises(Status.INVALID_ARGUMENT):
            trainer.learning_rate = bad
    assert trainer.learning_rate == pytest.approx(0.0025)


def test_a_model_saved_with_dropout_and_a_checkpoints_model_load_with_the_same_rates(ctx, tmp_path):
    model = mlp(ctx).set_layer_dropout(0, 0.25).set_layer_dropout(1, 0.5).set_input_dropout(0.125)
    assert model.get_input_dropout() == 0.125
    with raises(Status.INVALID_ARGUMENT):
        mlp(ctx).set_input_dropout(1.0)
    trainer = adam(model)
    trainer.fit(data(ctx, 60, 11), epochs=1, batch_size=16)
    path, checkpoint = tmp_path / "dropout.safetensors", tmp_path / "checkpoint.safetensors"
    model.save(path)
    trainer.save_checkpoint(checkpoint)
    other = mptrain.Context(backend="cpu", seed=99)
    for file in (path, checkpoint):
        loaded = mptrain.Model.load(other, file)
        assert [loaded.get_layer_dropout(layer) for layer in range(3)] == [0.25, 0.5, 0.0], file
        assert loaded.get_input_dropout() == 0.125, file
        assert weight_bytes(loaded) == weight_bytes(model), file
        with raises(Status.INVALID_STATE):
            loaded.set_layer_dropout(0, 0.0)  # a loaded model is built
        with raises(Status.INVALID_STATE):
            loaded.set_input_dropout(0.0)
    mlp(ctx).save(path)  # overwritten without dropout: the rates are the file's
    assert [mptrain.Model.load(other, path).get_layer_dropout(layer) for layer in range(3)] == [0.0, 0.0, 0.0]
    assert mptrain.Model.load(other, path).get_input_dropout() == 0.0


def test_frozen_layers_are_saved_with_the_model_and_a_checkpoint_loads_whatever_they_are_now(ctx, tmp_path):
    model = mlp(ctx).set_layer_trainable(1, False)
    trainer = adam(model)
    trainer.fit(data(ctx, 60, 11), epochs=1, batch_size=16)
    path, checkpoint = tmp_path / "frozen.safetensors", tmp_path / "checkpoint.safetensors"
    model.save(path)
    trainer.save_checkpoint(checkpoint)
    for file in (path, checkpoint):
        loaded = mptrain.Model.load(mptrain.Context(backend="cpu"), file)
        assert [loaded.get_layer_trainable(layer) for layer in range(3)] == [True, False, True], file
    model.set_layer_trainable(1, True)
    trainer.load_checkpoint(checkpoint)
    assert model.get_layer_trainable(1)


def test_a_checkpoint_written_with_label_smoothing_is_refused_by_a_trainer_without_it(ctx, tmp_path):
    dataset = data(ctx, 60, 43)
    model = mlp(ctx)
    smoothed = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, label_smoothing=0.1)
    smoothed.step(dataset, 0, 20)
    path = tmp_path / "smoothed.safetensors"
    smoothed.save_checkpoint(path)
    with raises(Status.INVALID_ARGUMENT) as info:
        adam(model).load_checkpoint(path)
    assert "label_smoothing 0.1 (this trainer: 0)" in info.value.message
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, label_smoothing=0.2).load_checkpoint(path)
    mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, label_smoothing=0.1).load_checkpoint(path)


def test_a_checkpoint_written_with_class_weights_is_refused_by_a_trainer_without_them(ctx, tmp_path):
    dataset = data(ctx, 60, 44)
    model = mlp(ctx)
    weighted = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, class_weights=[1.0, 2.0, 3.0])
    weighted.step(dataset, 0, 20)
    path = tmp_path / "weighted.safetensors"
    weighted.save_checkpoint(path)
    with raises(Status.INVALID_ARGUMENT) as info:
        adam(model).load_checkpoint(path)
    assert "class_weights [1, 2, 3] (this trainer: none)" in info.value.message
    with raises(Status.INVALID_ARGUMENT) as info:
        mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, class_weights=[1.0, 2.0, 4.0]).load_checkpoint(path)
    assert "class_weights [1, 2, 3] (this trainer: [1, 2, 4])" in info.value.message
    mptrain.Trainer(model, optimizer="adam", learning_rate=0.01, class_weights=(1, 2, 3)).load_checkpoint(path)


def test_automatic_checkpoints_keep_the_newest_and_can_be_turned_off(ctx, tmp_path):
    dataset = data(ctx, 200, 31)
    trainer = adam(mlp(ctx))
    trainer.set_checkpointing(tmp_path, every_steps=5, keep_last=2)
    trainer.fit(dataset, epochs=3, batch_size=32)  # 18 steps: checkpoints at 5, 10, 15
    assert saved_steps(tmp_path) == [10, 15]
    other = adam(mlp(ctx))
    other.load_checkpoint(tmp_path / max(os.listdir(tmp_path)))
    assert other.progress.steps == 15

    trainer.set_checkpointing(None)
    trainer.fit(dataset, epochs=1, batch_size=32)
    assert saved_steps(tmp_path) == [10, 15]
    trainer.set_checkpointing(str(tmp_path), every_epochs=1, keep_last=5)
    trainer.fit(dataset, epochs=1, batch_size=32)
    assert saved_steps(tmp_path) == [10, 15, 30]
    trainer.set_checkpointing(tmp_path)  # every epoch, keeping the newest
    trainer.fit(dataset, epochs=1, batch_size=32)
    assert saved_steps(tmp_path) == [36]


def test_missing_damaged_and_mismatched_files_raise_with_their_status(ctx, tmp_path):
    model = mlp(ctx)
    trainer = adam(model)
    missing = tmp_path / "missing.safetensors"
    with raises(Status.IO_ERROR):
        mptrain.Model.load(ctx, missing)
    with raises(Status.IO_ERROR):
        trainer.load_checkpoint(missing)

    model_file, checkpoint = tmp_path / "model.safetensors", tmp_path / "checkpoint.safetensors"
    model.save(model_file)
    trainer.save_checkpoint(checkpoint)
    truncated = tmp_path / "truncated.safetensors"
    truncate(model_file, truncated)
    with raises(Status.CORRUPT_DATA):
        mptrain.Model.load(ctx, truncated)
    truncate(checkpoint, truncated)
    with raises(Status.CORRUPT_DATA):
        trainer.load_checkpoint(truncated)
    with raises(Status.CORRUPT_DATA):
        mptrain.Model.load(ctx, truncated)

    narrow = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    with raises(Status.SHAPE_MISMATCH):
        adam(narrow).load_checkpoint(checkpoint)
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Trainer(model, optimizer="sgd").load_checkpoint(checkpoint)

    with raises(Status.IO_ERROR):
        model.save(tmp_path / "no-such-directory" / "model.safetensors")
    with raises(Status.INVALID_ARGUMENT):
        model.save("bad\0path")
    with raises(Status.INVALID_ARGUMENT):
        mptrain.Model.load(ctx, "bad\0path")
    with pytest.raises(TypeError):
        model.save(42)
    with pytest.raises(TypeError):
        mptrain.Model.load(ctx, None)
    with raises(Status.INVALID_ARGUMENT):
        trainer.set_checkpointing(tmp_path, every_steps=1, keep_last=0)
    with raises(Status.INVALID_ARGUMENT):
        trainer.set_checkpointing(tmp_path, every_steps=0, every_epochs=0)  # neither trigger

    dataset = data(ctx, 64, 41)
    with raises(Status.IO_ERROR):  # refused when set, not at the first checkpoint
        trainer.set_checkpointing(tmp_path / "no-such-directory", every_steps=1)
    going = tmp_path / "going-away"
    going.mkdir()
    trainer.set_checkpointing(going, every_steps=1)
    going.rmdir()
    with raises(Status.IO_ERROR):
        trainer.fit(dataset, epochs=1, batch_size=32)
    # ...and everything still works afterwards.
    trainer.set_checkpointing(None)
    trainer.fit(dataset, epochs=1, batch_size=32)
    trainer.load_checkpoint(checkpoint)
    mptrain.Model.load(ctx, model_file)
