"""Callbacks through the bindings: progress and epoch-end callbacks (every step, stopping, Ctrl-C, exceptions,
validation at an epoch's end, freeing), and the context's log callback."""
import ctypes
import gc
import os
import signal
import threading
import weakref

import pytest

import mptrain
from mptrain import _library
from conftest import CLASSES, FEATURES, make_blobs, mlp


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
                         lambda: ctx.resolve_precision("auto"), lambda: ctx.describe(), lambda: model.layer_count,
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
