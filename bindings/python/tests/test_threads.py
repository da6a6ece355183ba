"""Threads: different contexts train in parallel; objects of one context shared between threads are
serialised by the bindings (the C API allows one thread at a time per context)."""
import threading

import mptrain
from conftest import CLASSES, FEATURES, make_blobs


def train_once(results, index):
    try:
        ctx = mptrain.Context(backend="cpu", threads=1, seed=index)
        samples, labels = make_blobs(rows=120, seed=index)
        model = mptrain.Model(ctx, FEATURES).add_dense(8, "relu").add_dense(CLASSES, "softmax")
        trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.02)
        data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
        trainer.fit(data, 3, 16)
        results[index] = trainer.evaluate(data).accuracy
    except Exception as error:  # reported by the assertion below
        results[index] = error


def test_contexts_train_in_parallel_threads():
    results = {}
    threads = [threading.Thread(target=train_once, args=(results, i)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(isinstance(value, float) and value > 0.8 for value in results.values()), results


def test_one_context_shared_by_threads_is_serialised(ctx, model):
    samples, labels = make_blobs(rows=120)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.02)
    errors = []

    def fit():
        try:
            for _ in range(3):
                trainer.fit(data, 1, 16)
        except Exception as error:
            errors.append(error)

    def read():
        try:
            for _ in range(50):
                model.predict([0.0] * FEATURES)
                model.get_weights(0)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=fit), threading.Thread(target=read), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert trainer.progress.epochs == 3


def test_a_second_thread_waits_for_a_trainer_busy_in_fit(ctx, model):
    """Another thread's call on a trainer whose fit is running (here: inside its callback) waits for the
    lock and then runs; only this trainer's own callbacks, on fit's thread, are refused."""
    samples, labels = make_blobs(rows=120)
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.02)
    results, seen = [], []

    def evaluate_elsewhere():
        try:
            results.append(trainer.evaluate(data))
        except Exception as error:
            results.append(error)

    other = threading.Thread(target=evaluate_elsewhere)

    def on_epoch_end(epoch, loss, accuracy):
        if epoch == 0:
            other.start()
            other.join(0.5)
            seen.append(other.is_alive())  # still waiting for the lock held by fit
        try:
            trainer.step(data, 0, 16)  # evaluate, from here, runs (test_callbacks)
        except mptrain.Error as error:
            seen.append(error)

    trainer.set_callbacks(epoch_end=on_epoch_end)
    trainer.fit(data, 2, 16)
    other.join()
    assert seen[0] is True, seen
    refused = seen[1:]
    assert len(refused) == 2 and all(error.status == mptrain.Status.INVALID_STATE and
                                     "cannot be called from this trainer's callbacks" in error.message
                                     for error in refused), refused
    assert len(results) == 1 and isinstance(results[0], mptrain.Evaluation), results
    assert trainer.progress.epochs == 2
