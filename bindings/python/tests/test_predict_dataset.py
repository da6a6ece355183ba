"""Predictions over a dataset (Trainer.predict_dataset; mpt_trainer_predict_dataset) and a dataset's labels
(Dataset.labels; mpt_dataset_get_labels): predict's outputs on the same float rows, bit for bit in one
batch and close in others, returned as predict returns them; slices, targets, row weights and u8
samples; a confusion matrix from labels and predictions gives evaluate's accuracy; the epoch-end
callback predicts as a call between one-epoch fits; the refusals."""
import array
import threading
import time

import pytest

import mptrain
from mptrain import _buffers, _library
from conftest import CLASSES, FEATURES, make_blobs, new_run, one_hot, values, weight_bytes

try:
    import numpy as np
except ImportError:
    np = None


def ints(out):
    return [int(v) for v in (out.tolist() if hasattr(out, "tolist") else out)]


# Outputs of other batch sizes: the CPU's GEMMs block a batch by its rows and take other kernels for a
# few rows, so sums of the same products may round differently (in fp32 some 1e-7 of a probability).
# Mixed precision rounds the hidden activations to 16 bits, where such a sum can round to the
# neighbouring value: the bound is then the compute dtype's epsilon (mixed-fp16 moved 2.5e-5 on an AMX
# CPU). Rows mixed up or misplaced move probabilities by tenths.
BATCHING_TOLERANCE = {"fp32": 1e-5, "mixed_fp16": 2.0 ** -10, "mixed_bf16": 2.0 ** -7}


def assert_close(got, expected, tolerance=BATCHING_TOLERANCE["fp32"]):
    got, expected = values(got), values(expected)
    assert len(got) == len(expected)
    worst = max(abs(a - b) for a, b in zip(got, expected))
    assert worst <= tolerance, worst


def assert_shaped_as_predict(out, predicted, rows):
    """predict_dataset returns what predict returns: the same type, shape and element type."""
    assert type(out) is type(predicted)
    if np is not None and isinstance(out, np.ndarray):
        assert out.shape == predicted.shape == (rows, CLASSES) and out.dtype == predicted.dtype == np.float32
    else:
        assert out.typecode == predicted.typecode == "f" and len(out) == len(predicted) == rows * CLASSES


@pytest.mark.parametrize("precision", ["fp32", "mixed_fp16", "mixed_bf16"])
def test_predictions_over_a_dataset_are_predicts_on_its_rows_bit_for_bit_in_one_batch(precision):
    samples, labels = make_blobs(rows=200, seed=51)  # up to 256 rows: predict runs them in one batch
    ctx, model, trainer = new_run(precision, seed=29)
    assert trainer.precision.name.lower() == precision
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer.fit(data, epochs=2, batch_size=16)
    expected = trainer.predict(samples)
    for batch_size in (200, 201, 256, 10 ** 6):
        out = trainer.predict_dataset(data, batch_size=batch_size)
        assert_shaped_as_predict(out, expected, 200)
        assert out.tobytes() == expected.tobytes(), batch_size
    for batch_size in (0, 1, 7, 16, 64, 199):
        out = trainer.predict_dataset(data, batch_size)
        assert_shaped_as_predict(out, expected, 200)
        assert_close(out, expected, BATCHING_TOLERANCE[precision])
    # Only the samples are read: targets of any width, row weights and labels play no part.
    one_batch = dict(batch_size=200)
    for other in (mptrain.Dataset.from_targets(ctx, samples, one_hot(labels)),
                  mptrain.Dataset.from_targets(ctx, samples, [float(label) for label in labels], target_width=1),
                  data.weighted([0.5 + (row % 4) for row in range(200)]),
                  mptrain.Dataset.from_f32(ctx, samples, [(label + 1) % CLASSES for label in labels], CLASSES)):
        assert trainer.predict_dataset(other, **one_batch).tobytes() == expected.tobytes()
    # Predicting changed nothing: the run goes on as it would have.
    assert trainer.predict(samples).tobytes() == expected.tobytes()


def test_batch_size_0_is_the_last_training_batch_size_or_256(ctx, model):
    # Batches of up to 8 rows, of 9 and of more run different CPU kernels here, whose outputs differ in
    # the last bits: the batch size a prediction ran in shows in its bits.
    samples, labels = make_blobs(rows=300, seed=52)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
    sizes = (1, 5, 9, 16, 256, 300)
    before = {size: trainer.predict_dataset(data, size).tobytes() for size in sizes}
    assert trainer.predict_dataset(data).tobytes() == trainer.predict_dataset(data, 0).tobytes() == before[256]
    for batch_size in (5, 16):
        trainer.fit(data, epochs=1, batch_size=batch_size)
        after = {size: trainer.predict_dataset(data, size).tobytes() for size in sizes}
        assert trainer.predict_dataset(data).tobytes() == after[batch_size], batch_size
    trainer.step(data, 0, 9)  # a step's batch size is a training batch size too
    assert trainer.predict_dataset(data).tobytes() == trainer.predict_dataset(data, 9).tobytes()


def test_without_numpy_predictions_are_a_flat_float_array_and_labels_an_int_array(ctx, model, monkeypatch):
    monkeypatch.setattr(_buffers, "_np", None)  # behave as if numpy were not installed
    samples, labels = make_blobs(rows=40, seed=53)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    out = trainer.predict_dataset(data, 40)
    assert isinstance(out, array.array) and out.typecode == "f" and len(out) == 40 * CLASSES
    assert out.tobytes() == trainer.predict(samples).tobytes()
    got = data.labels
    assert isinstance(got, array.array) and got.typecode == "i" and got.itemsize == 4
    assert list(got) == labels
    assert list(data[10:13].labels) == labels[10:13]


@pytest.mark.skipif(np is None, reason="numpy is not installed")
def test_with_numpy_predictions_are_a_float32_matrix_and_labels_an_int32_vector(ctx, model):
    samples, labels = make_blobs(rows=40, seed=54)
    data = mptrain.Dataset.from_f32(ctx, np.asarray(samples), np.asarray(labels), CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    out = trainer.predict_dataset(data)
    assert isinstance(out, np.ndarray) and out.shape == (40, CLASSES) and out.dtype == np.float32
    np.testing.assert_array_equal(out, trainer.predict(np.asarray(samples)))
    got = data.labels
    assert isinstance(got, np.ndarray) and got.shape == (40,) and got.dtype == np.int32
    np.testing.assert_array_equal(got, labels)


def test_a_slices_predictions_and_labels_are_its_rows(ctx, model):
    samples, labels = make_blobs(rows=150, seed=55)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
    trainer.fit(data, epochs=2, batch_size=16)
    whole = values(trainer.predict_dataset(data, 150))
    for first, rows in ((0, 150), (0, 1), (149, 1), (37, 80), (120, 30), (5, 6)):
        part = data.slice(first, rows)
        rows_of_it = samples[first:first + rows]
        assert trainer.predict_dataset(part, rows).tobytes() == trainer.predict(rows_of_it).tobytes(), (first, rows)
        assert_close(trainer.predict_dataset(part, rows), whole[first * CLASSES:(first + rows) * CLASSES])
        assert_close(trainer.predict_dataset(part, 4), trainer.predict(rows_of_it))
        assert ints(part.labels) == labels[first:first + rows], (first, rows)
    # A slice of a slice counts from its own first row; Python's bounds; a weighted view keeps the labels.
    inner = data[100:][-30:-10]
    assert ints(inner.labels) == labels[120:140]
    assert trainer.predict_dataset(inner, 20).tobytes() == trainer.predict(samples[120:140]).tobytes()
    weights = [1.0 + row for row in range(150)]
    assert ints(data.weighted(weights).labels) == labels
    assert ints(data.weighted(weights)[40:50].labels) == labels[40:50]
    assert ints(data.labels) == labels  # the source is unchanged


def test_labels_are_those_given_for_u8_and_float_samples_and_none_for_targets(ctx):
    samples, labels = make_blobs(rows=60, seed=56)
    labels = [(row * 7) % 5 for row in range(60)]  # not the blobs' repeating 0, 1, 2
    as_bytes = bytes(min(255, max(0, int(v * 40 + 60))) for row in samples for v in row)
    for data in (mptrain.Dataset.from_f32(ctx, samples, labels, 5),
                 mptrain.Dataset.from_u8(ctx, as_bytes, labels, 5, features=FEATURES),
                 mptrain.Dataset.from_f32(ctx, samples, array.array("i", labels), 5)):
        assert ints(data.labels) == labels
        assert len(data.labels) == data.rows == 60
    for targets in (mptrain.Dataset.from_targets(ctx, samples, one_hot([label % CLASSES for label in labels])),
                    mptrain.Dataset.from_targets(ctx, samples, [0.5] * 60, target_width=1)):
        for dataset in (targets, targets[10:20], targets.weighted([1.0] * 60)):
            with pytest.raises(mptrain.Error) as caught:
                dataset.labels
            assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
            assert "targets" in caught.value.message
    closed = mptrain.Dataset.from_f32(ctx, samples, labels, 5)
    closed.close()
    with pytest.raises(mptrain.Error) as caught:
        closed.labels
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT


def test_u8_samples_are_predicted_from_their_normalised_values(ctx, model):
    samples, labels = make_blobs(rows=90, seed=57)
    raw = [[min(255, max(0, int(v * 40 + 60))) for v in row] for row in samples]
    data = mptrain.Dataset.from_u8(ctx, bytes(v for row in raw for v in row), labels, CLASSES, features=FEATURES)
    trainer = mptrain.Trainer(model, precision="fp32", optimizer="adam", learning_rate=0.01)
    trainer.fit(data, epochs=2, batch_size=16)
    scale = array.array("f", [1.0 / 255.0])[0]  # the float32 scale the library holds
    # x * scale is exact in double and rounds once to float32, as the library's float product does.
    normalised = [array.array("f", [v * scale for v in row]).tolist() for row in raw]
    assert trainer.predict_dataset(data, 90).tobytes() == trainer.predict(normalised).tobytes()
    assert_close(trainer.predict_dataset(data, 8), trainer.predict(normalised))


def confusion_matrix(labels, predictions, classes):
    """matrix[true][predicted], the prediction the largest output (the first of equal ones)."""
    flat = values(predictions)
    matrix = [[0] * classes for _ in range(classes)]
    for row, label in enumerate(labels):
        outputs = flat[row * classes:(row + 1) * classes]
        matrix[label][max(range(classes), key=outputs.__getitem__)] += 1
    return matrix


@pytest.mark.parametrize("precision", ["fp32", "mixed_bf16"])
def test_a_confusion_matrix_of_labels_and_predictions_gives_evaluates_accuracy(precision):
    samples, labels = make_blobs(rows=240, seed=58)
    ctx, model, trainer = new_run(precision, seed=29)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    validation = data[160:]
    accuracies = []
    for epochs in (0, 1, 3):  # untrained (near chance), partly and well trained
        if epochs:
            trainer.fit(data[:160], epochs=epochs, batch_size=16)
        for dataset in (data, validation, validation[-25:]):
            matrix = confusion_matrix(dataset.labels, trainer.predict_dataset(dataset), CLASSES)
            rows = len(dataset)
            assert sum(map(sum, matrix)) == rows
            assert [sum(row) for row in matrix] == [ints(dataset.labels).count(c) for c in range(CLASSES)]
            correct = sum(matrix[c][c] for c in range(CLASSES))
            accuracy = trainer.evaluate(dataset).accuracy
            assert abs(accuracy - correct / rows) <= 1e-6, (epochs, matrix, accuracy)
            # Per-class accuracy, the reason for the API: each class's share of its rows.
            per_class = [matrix[c][c] / sum(matrix[c]) for c in range(CLASSES)]
            assert abs(sum(p * sum(matrix[c]) for c, p in enumerate(per_class)) / rows - accuracy) <= 1e-6
            accuracies.append(accuracy)
    assert min(accuracies) < 0.9 and max(accuracies) > 0.9, accuracies  # matrices of both kinds were checked


def test_predictions_from_the_epoch_end_callback_are_those_of_a_call_between_one_epoch_fits():
    train, held_out = make_blobs(rows=160, seed=59), make_blobs(rows=70, seed=60)

    def run():
        ctx, model, trainer = new_run("fp32", seed=31)
        return (trainer, model, mptrain.Dataset.from_f32(ctx, *train, CLASSES),
                mptrain.Dataset.from_f32(ctx, *held_out, CLASSES))

    trainer, model, training, validation = run()
    stranger = mptrain.Dataset.from_f32(mptrain.Context(backend="cpu", threads=1), *held_out, CLASSES)
    during_fit, refused = [], {}

    def on_progress(epoch, step, steps, loss, accuracy):
        if step == 2 and "progress" not in refused:
            with pytest.raises(mptrain.Error) as caught:
                trainer.predict_dataset(validation)
            refused["progress"] = caught.value

    def on_epoch_end(epoch, loss, accuracy):
        during_fit.append((trainer.predict_dataset(validation).tobytes(),
                           trainer.predict_dataset(validation, batch_size=7).tobytes(),
                           trainer.predict_dataset(validation[10:30], batch_size=100).tobytes(),
                           ints(validation.labels)))
        if "stranger" not in refused:
            with pytest.raises(mptrain.Error) as caught:
                trainer.predict_dataset(stranger)
            refused["stranger"] = caught.value

    trainer.set_callbacks(progress=on_progress, epoch_end=on_epoch_end)
    trainer.fit(training, epochs=3, batch_size=16)
    assert trainer.progress == (30, 3)
    assert len(during_fit) == 3
    # Mid-epoch steps are in flight: the library's refusal (not the binding's, which is for predict).
    assert refused["progress"].status == mptrain.Status.INVALID_STATE, refused
    assert "cannot be called from this trainer's callbacks" not in refused["progress"].message
    assert refused["stranger"].status == mptrain.Status.INVALID_ARGUMENT, refused
    after_fit = weight_bytes(model)

    between, model, training, validation = run()
    for epoch in range(3):
        between.fit(training, epochs=1, batch_size=16)
        expected = (between.predict_dataset(validation).tobytes(),
                    between.predict_dataset(validation, batch_size=7).tobytes(),
                    between.predict_dataset(validation[10:30], batch_size=100).tobytes(), held_out[1])
        assert during_fit[epoch] == expected, epoch
    assert during_fit[0][0] != during_fit[2][0]  # the predictions followed the training
    assert weight_bytes(model) == after_fit  # predicting left fit's run as it was


def test_a_dataset_of_another_context_is_refused_in_the_callback_without_taking_its_lock():
    """fit holds its context's lock: taking another's from the epoch-end callback could deadlock with a
    thread that holds that one and waits for ours, so the binding refuses such a data set first (as
    evaluate does), without waiting for its lock."""
    samples, labels = make_blobs(rows=64, seed=61)
    ctx, model, trainer = new_run("fp32", seed=29)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    stranger = mptrain.Dataset.from_f32(mptrain.Context(backend="cpu", threads=1), samples, labels, CLASSES)
    held, answered, outcome = threading.Event(), threading.Event(), {}

    def hold_the_strangers_lock():
        with stranger._family:
            held.set()
            outcome["released_on_answer"] = answered.wait(10.0)

    holder = threading.Thread(target=hold_the_strangers_lock)
    holder.start()
    held.wait(10.0)

    def on_epoch_end(epoch, loss, accuracy):
        started = time.monotonic()
        try:
            trainer.predict_dataset(stranger)
        except mptrain.Error as error:
            outcome["error"] = error
        outcome["seconds"] = time.monotonic() - started
        answered.set()

    trainer.set_callbacks(epoch_end=on_epoch_end)
    trainer.fit(data, epochs=1, batch_size=16)
    holder.join()
    assert outcome["error"].status == mptrain.Status.INVALID_ARGUMENT, outcome
    assert outcome["released_on_answer"] and outcome["seconds"] < 5.0, outcome


def test_refusals_other_contexts_widths_batch_sizes_and_types(ctx, model):
    samples, labels = make_blobs(rows=50, seed=62)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    other_ctx = mptrain.Context(backend="cpu", threads=1)
    foreign = mptrain.Dataset.from_f32(other_ctx, samples, labels, CLASSES)
    wider = mptrain.Dataset.from_f32(ctx, [row + [0.5] for row in samples], labels, CLASSES)
    narrower = mptrain.Dataset.from_targets(ctx, [row[:-1] for row in samples], one_hot(labels))
    for dataset, batch_size, status in ((foreign, 0, mptrain.Status.INVALID_ARGUMENT),
                                        (foreign, 50, mptrain.Status.INVALID_ARGUMENT),
                                        (wider, 0, mptrain.Status.SHAPE_MISMATCH),
                                        (narrower, 50, mptrain.Status.SHAPE_MISMATCH),
                                        (data, -1, mptrain.Status.INVALID_ARGUMENT),
                                        (data, -(2 ** 63), mptrain.Status.INVALID_ARGUMENT)):
        with pytest.raises(mptrain.Error) as caught:
            trainer.predict_dataset(dataset, batch_size)
        assert caught.value.status == status, (dataset.features, batch_size)
        assert caught.value.message
    with pytest.raises(OverflowError):  # past int64_t: the binding's refusal, also an Error
        trainer.predict_dataset(data, 2 ** 63)
    with pytest.raises(TypeError):
        trainer.predict_dataset(data, 1.0)
    for not_a_dataset in (samples, None, "data", 3):
        with pytest.raises(TypeError):
            trainer.predict_dataset(not_a_dataset)
    with pytest.raises(TypeError, match="predict_dataset"):  # predict takes float rows
        trainer.predict(data)
    closed = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    closed.close()
    with pytest.raises(mptrain.Error) as caught:
        trainer.predict_dataset(closed)
    assert caught.value.status == mptrain.Status.INVALID_ARGUMENT
    # The trainer predicts on after the refusals; a model of the wider width takes the wider data.
    assert trainer.predict_dataset(data, 50).tobytes() == trainer.predict(samples).tobytes()
    wide_model = mptrain.Model(ctx, FEATURES + 1).add_dense(CLASSES, "softmax")
    assert len(values(mptrain.Trainer(wide_model).predict_dataset(wider))) == 50 * CLASSES


def test_the_c_calls_hold_the_contexts_lock(ctx, model, monkeypatch):
    """Calls on objects of one context are serialised (the C library allows one thread at a time per
    context): while the library predicts or copies labels, another thread cannot take the lock."""
    samples, labels = make_blobs(rows=20, seed=64)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    real, seen = _library._lib(), []

    def free_elsewhere():
        """Whether another thread could take the context's lock now."""
        got = []

        def try_lock():
            got.append(data._family.lock.acquire(blocking=False))
            if got[0]:
                data._family.lock.release()  # by its owner: an RLock

        thread = threading.Thread(target=try_lock)
        thread.start()
        thread.join()
        return got[0]

    class Recording:  # the library, noting whether the lock is held in the calls under test
        def __getattr__(self, name):
            function = getattr(real, name)
            if name not in ("mpt_trainer_predict_dataset", "mpt_dataset_get_labels"):
                return function
            return lambda *args: (seen.append((name, free_elsewhere())), function(*args))[1]

    monkeypatch.setattr(_library, "_lib_instance", Recording())
    assert free_elsewhere()
    assert len(values(trainer.predict_dataset(data[5:]))) == 15 * CLASSES
    assert ints(data.labels) == labels
    assert seen == [("mpt_trainer_predict_dataset", False), ("mpt_dataset_get_labels", False)]


def test_the_log_callback_cannot_predict_over_or_read_the_labels_of_its_own_contexts_data():
    samples, labels = make_blobs(rows=30, seed=63)
    armed, answers = [], []

    def log(level, text):
        if not armed:
            return
        trainer, data = armed.pop()
        for call in (lambda: trainer.predict_dataset(data), lambda: data.labels):
            try:
                call()
                answers.append("allowed")
            except mptrain.Error as error:
                answers.append((error.status, "log callback" in error.message))

    ctx = mptrain.Context(backend="cpu", threads=1, log=log, log_level="debug")
    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, precision="fp32")
    armed.append((trainer, data))
    mptrain.Trainer(model)  # logs its precision (DEBUG)
    assert not armed, "creating a trainer no longer logs at DEBUG"
    assert answers == [(mptrain.Status.INVALID_STATE, True)] * 2
    assert ints(data.labels) == labels and len(values(trainer.predict_dataset(data))) == 30 * CLASSES
