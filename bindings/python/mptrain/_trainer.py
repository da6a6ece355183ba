"""Trainer: a model's training (fit, step), evaluation and predictions, with its options, callbacks,
checkpoints, learning rate, moving averages and counters."""
import collections.abc
import contextlib
import ctypes
import threading

from . import _interrupt, _native
from ._arguments import _enum, _integer, _path, _real, _require
from ._buffers import _floats, _output, _rows_of
from ._callbacks import _CallbackState, _nothing_at_epoch_end
from ._dataset import Dataset
from ._enums import Loss, LossScaling, LrSchedule, Optimizer, Precision, Status
from ._errors import Error
from ._handles import _Handle, _Locked
from ._library import _check, _failure, _lib
from ._model import Model
from ._results import EpochTime, Evaluation, LossScale, Progress, TrainerMemory, UnfinishedEpoch
from ._trainer_options import _class_weights_by_index, _keywords_of_new, _one_value


# decay_factor when none is given: a decay to rate 0 (Keras's CosineDecay alpha, PyTorch's
# CosineAnnealingLR eta_min, Hugging Face's linear schedule), PyTorch StepLR's gamma for STEP.
_DEFAULT_DECAY_FACTORS = {LrSchedule.CONSTANT: 1.0, LrSchedule.LINEAR: 0.0, LrSchedule.COSINE: 0.0,
                          LrSchedule.STEP: 0.1}


class Trainer(_Handle):
    """Trains a model: fit, step, evaluate, predict (float rows), predict_dataset. Options as keywords
    (None = the library default): precision, loss, optimizer ("sgd", "adam", "adamw", "rmsprop", "lion" or
    an Optimizer), learning_rate, momentum (+ nesterov), adam=(beta1, beta2, epsilon), rmsprop=(rho, epsilon),
    weight_decay, lr_schedule (+ warmup_steps, decay_steps, decay_factor),
    loss_scaling (+ initial_scale), loss_scaler_dynamics=(growth_factor, backoff_factor, growth_interval,
    min_scale, max_scale), label_smoothing, class_weights, global_clipnorm, ema_momentum, huber_delta,
    rmsprop_centered, micro_batch_size, lion=(beta1, beta2). The options property gives them back as
    these keywords, to create another trainer like this one; options_from_checkpoint(path) gives those of
    the trainer that wrote a checkpoint, to resume its run from the file alone.

    loss is a Loss or its name: "sparse_categorical_crossentropy", "categorical_crossentropy",
    "binary_crossentropy", or a regression loss averaged over the outputs as Keras's, on float targets
    (Dataset.from_targets): "mean_squared_error" (y - t)^2, "mean_absolute_error" |y - t|, or "huber",
    (y - t)^2 / 2 where |y - t| <= huber_delta, else huber_delta * (|y - t| - huber_delta / 2), so that
    outlying targets pull no harder than huber_delta. huber_delta (None: the library's 1, Keras's) must
    be finite and above 0, else Error with Status.INVALID_ARGUMENT; only Huber reads it, and
    checkpoints of a Huber trainer must match it.

    rmsprop=(rho, epsilon) sets RMSprop's (optimizer "rmsprop"), as Keras computes it:
    v = rho * v + (1 - rho) * g^2, w -= learning_rate * g / sqrt(v + epsilon); rho in [0, 1), epsilon
    finite and > 0 (defaults 0.9 and 1e-7), else Error with Status.INVALID_ARGUMENT. RMSprop takes
    momentum too (u = momentum * u + learning_rate * g / sqrt(v + epsilon), w -= u), but not
    nesterov=True (Error with Status.INVALID_ARGUMENT). Adam and RMSprop share one epsilon: given
    both, adam's and rmsprop's must be equal as float32 values, else Error with
    Status.INVALID_ARGUMENT. rmsprop_centered=True is Keras's centered=True: the gradients' average a
    is kept too and v - a^2 (held at >= 0) replaces v under the root. Checkpoints of an RMSprop
    trainer must match its rho and centered.

    lion=(beta1, beta2) sets Lion's (optimizer "lion"), as Keras computes it:
    w -= learning_rate * sign(beta1 * m + (1 - beta1) * g), then m = beta2 * m + (1 - beta2) * g; each
    in [0, 1) (defaults 0.9 and 0.99, Keras's), else Error with Status.INVALID_ARGUMENT. Every weight
    moves by the rate or not at all, so Lion wants a rate 3-10 times smaller than AdamW's. Lion ignores
    momentum. Adam and Lion share the betas: given both, adam's and lion's must be equal as float32
    values, else Error with Status.INVALID_ARGUMENT. Checkpoints of a Lion trainer must match its betas.

    label_smoothing s in [0, 1) (default 0: none) makes the cross-entropy losses train towards
    t (1 - s) + s / n instead of each target t (n: the model's outputs, 2 for binary cross-entropy), as
    Keras's label_smoothing and PyTorch's CrossEntropyLoss(label_smoothing=) do; fit, step and evaluate
    report the smoothed loss, accuracy compares with the given labels. Another value, or a non-zero one
    with a regression loss, raises Error with Status.INVALID_ARGUMENT. Checkpoints must match it.

    class_weights (a sequence of floats: a list, a tuple, an array.array or a 1-D numpy array; None or
    empty: none) are Keras's fit(class_weight=) for the categorical cross-entropy losses, one weight per
    model output: in training (fit, step) each row's loss and gradient are multiplied by the weight of
    its class (its label, or for float targets the first largest target), still averaged over the
    batch's rows, so fit's and step's losses are the weighted ones; evaluate reports the unweighted
    loss. A negative, NaN or infinite weight, or all weights 0, raises Error with
    Status.INVALID_ARGUMENT, as do class weights with binary cross-entropy or a regression loss; a
    count other than the model's outputs raises it with Status.SHAPE_MISMATCH. Keras's dict form
    {class index: weight} is taken too: a class it leaves out weighs 1, as in Keras, and a key that is
    not a class index of the model's outputs raises Error with Status.SHAPE_MISMATCH. Checkpoints must
    match them.

    global_clipnorm (default 0: none) clips the gradients by their global norm, as Keras's
    global_clipnorm and PyTorch's clip_grad_norm_(max_norm) do: every step, the gradients of all weights
    and biases together are scaled by global_clipnorm / max(norm, global_clipnorm), norm their L2 norm
    (with loss scaling, that of the unscaled gradients), so a step keeps its direction and its length is
    bounded; weight decay is not clipped. A negative, NaN or infinite bound raises Error with
    Status.INVALID_ARGUMENT. Checkpoints must match it.

    ema_momentum (default 0: none) keeps an exponential moving average of the weights, as Keras's
    use_ema with ema_momentum (PyTorch's AveragedModel with get_ema_multi_avg_fn): after every applied
    step each weight's and bias's average becomes ema_momentum * average + (1 - ema_momentum) * weight,
    the first applied step copying the weights and a skipped step leaving them. swap_ema_weights (or the
    with-block ema_weights) puts them in the model, to evaluate, predict or save them. A value outside
    (0, 1) other than 0 raises Error with Status.INVALID_ARGUMENT. Checkpoints must match it (and then
    hold the averages).

    micro_batch_size (default 0: none) is gradient accumulation: a step over a batch of more rows runs
    forward and backward on micro-batches of micro_batch_size rows (the last may have fewer), adds up
    their gradients and makes the whole batch's one update, the same step as in one pass but for
    rounding (its loss, clipping, loss-scale skip, schedule step and dropout masks are the whole
    batch's), with the step memory of a micro-batch plus the sums, 4 bytes a parameter (the memory
    property). After such a step it is evaluate's and predict_dataset's default batch size. A
    negative size raises Error with Status.INVALID_ARGUMENT. It is not recorded in checkpoints.

    lr_schedule (an LrSchedule or its name) is a learning-rate schedule the library evaluates at every
    step, the steps counted from 0 over the trainer's life: the base rate (learning_rate) times a factor,
    (s + 1) / warmup_steps over the first warmup_steps steps (0: no warm-up), then, d steps later,
    CONSTANT 1 (decay_steps 0, decay_factor 1), LINEAR and COSINE from 1 down to decay_factor (in [0, 1])
    over decay_steps (>= 1) along a straight line or half a cosine period, and decay_factor after it,
    STEP decay_factor (in (0, 1]) ** (d // decay_steps). decay_factor None (the default) is 1 for
    CONSTANT, 0 for LINEAR and COSINE (a decay to rate 0, as Keras's CosineDecay, PyTorch's
    CosineAnnealingLR and Hugging Face's linear schedule) and 0.1 for STEP (PyTorch's StepLR); a value
    given is passed on as it is. warmup_steps alone gives CONSTANT with a warm-up. The rate of the next
    step is scheduled_learning_rate."""

    _destroy_name = "mpt_trainer_destroy"

    def __init__(self, model, precision=None, loss=None, optimizer=None, learning_rate=None, momentum=None,
                 nesterov=False, adam=None, rmsprop=None, weight_decay=None, loss_scaling=None, initial_scale=32768.0,
                 loss_scaler_dynamics=None, lr_schedule=None, warmup_steps=0, decay_steps=0, decay_factor=None,
                 label_smoothing=0.0, class_weights=None, global_clipnorm=0.0,
                 ema_momentum=0.0, huber_delta=None, rmsprop_centered=False, micro_batch_size=0, lion=None):
        _require(model, Model, "model")
        lib = _lib()
        options = _native.TrainerOptionsP()
        _check(lib.mpt_trainer_options_create(ctypes.byref(options)))
        try:
            if precision is not None:
                _check(lib.mpt_trainer_options_set_precision(options, _enum(Precision, precision, "precision")))
            if loss is not None:
                _check(lib.mpt_trainer_options_set_loss(options, _enum(Loss, loss, "loss")))
            if huber_delta is not None:
                _check(lib.mpt_trainer_options_set_huber_delta(options, _real(huber_delta, "huber_delta")))
            _check(lib.mpt_trainer_options_set_label_smoothing(options, _real(label_smoothing, "label_smoothing")))
            if isinstance(class_weights, collections.abc.Mapping):
                class_weights = _class_weights_by_index(class_weights, model.output_features)
            if class_weights is not None:
                weights = _floats(class_weights, "class_weights")
                if weights.shape is not None and len(weights.shape) != 1:
                    raise Error(Status.SHAPE_MISMATCH, "class_weights must be one-dimensional, not of shape %s"
                                % (weights.shape,))
                _check(lib.mpt_trainer_options_set_class_weights(options, weights.pointer, weights.count))
            if optimizer is not None:
                _check(lib.mpt_trainer_options_set_optimizer(options, _enum(Optimizer, optimizer, "optimizer")))
            if learning_rate is not None:
                _check(lib.mpt_trainer_options_set_learning_rate(options, _real(learning_rate, "learning_rate")))
            if momentum is not None:
                _check(lib.mpt_trainer_options_set_momentum(options, _real(momentum, "momentum"), 1 if nesterov else 0))
            if adam is not None:
                beta1, beta2, epsilon = adam
                adam = _real(beta1, "beta1"), _real(beta2, "beta2"), _real(epsilon, "epsilon")
                _check(lib.mpt_trainer_options_set_adam(options, *adam))
            if rmsprop is not None:
                rho, epsilon = rmsprop
                rmsprop = _real(rho, "rho"), _real(epsilon, "epsilon")
                _check(lib.mpt_trainer_options_set_rmsprop(options, *rmsprop))
            _check(lib.mpt_trainer_options_set_rmsprop_centered(options, 1 if rmsprop_centered else 0))
            if lion is not None:
                beta1, beta2 = lion
                lion = _real(beta1, "beta1"), _real(beta2, "beta2")
                _check(lib.mpt_trainer_options_set_lion(options, *lion))
            # After the setters, which refuse values out of range (NaN among them) with their own message.
            if adam is not None and lion is not None:
                _one_value("adam's beta1", adam[0], "lion's beta1", lion[0])
                _one_value("adam's beta2", adam[1], "lion's beta2", lion[1])
            if adam is not None and rmsprop is not None:
                _one_value("adam's epsilon", adam[2], "rmsprop's epsilon", rmsprop[1])
            if weight_decay is not None:
                _check(lib.mpt_trainer_options_set_weight_decay(options, _real(weight_decay, "weight_decay")))
            _check(lib.mpt_trainer_options_set_global_clipnorm(options, _real(global_clipnorm, "global_clipnorm")))
            _check(lib.mpt_trainer_options_set_ema(options, _real(ema_momentum, "ema_momentum")))
            _check(lib.mpt_trainer_options_set_micro_batch_size(
                options, _integer(micro_batch_size, "micro_batch_size", ctypes.c_int64)))
            # Checked before the comparison with 0, so that warmup_steps=0.0 is refused as 1.0 is.
            warmup_steps = _integer(warmup_steps, "warmup_steps", ctypes.c_int64)
            decay_steps = _integer(decay_steps, "decay_steps", ctypes.c_int64)
            if lr_schedule is not None or warmup_steps != 0 or decay_steps != 0 or decay_factor is not None:
                schedule = _enum(LrSchedule, LrSchedule.CONSTANT if lr_schedule is None else lr_schedule,
                                 "lr_schedule")
                if decay_factor is None:
                    decay_factor = _DEFAULT_DECAY_FACTORS.get(schedule, 1.0)  # an unknown value: C refuses it
                _check(lib.mpt_trainer_options_set_lr_schedule(
                    options, schedule, warmup_steps, decay_steps, _real(decay_factor, "decay_factor")))
            if loss_scaling is not None:
                _check(lib.mpt_trainer_options_set_loss_scaling(
                    options, _enum(LossScaling, loss_scaling, "loss_scaling"),
                    _real(initial_scale, "initial_scale")))
            if loss_scaler_dynamics is not None:
                growth, backoff, interval, low, high = loss_scaler_dynamics
                _check(lib.mpt_trainer_options_set_loss_scaler_dynamics(
                    options, _real(growth, "growth_factor"), _real(backoff, "backoff_factor"),
                    _integer(interval, "growth_interval", ctypes.c_int64), _real(low, "min_scale"),
                    _real(high, "max_scale")))
            pointer = _native.TrainerP()
            with model._family:
                _check(lib.mpt_trainer_create(model._get(), options, ctypes.byref(pointer)))
        finally:
            lib.mpt_trainer_options_destroy(options)
        super().__init__(pointer, model._family)
        self._input_features = model.input_features
        self._output_features = model.output_features
        self._callback_state = _CallbackState()
        self._callback_functions = (None, None)  # the caller's (progress, epoch_end)
        self._callbacks = None  # (progress, epoch_end) ctypes objects, kept alive while C holds them
        self._fitting_thread = None  # the thread running fit, whose callbacks must not re-enter this trainer

    def set_callbacks(self, progress=None, epoch_end=None):
        """progress(epoch, step, steps_per_epoch, loss, accuracy) after each step of fit, and
        epoch_end(epoch, loss, accuracy) after each epoch (running means). Return True to stop training
        (fit then raises Error with Status.CANCELLED); an exception raised by a callback stops training
        and is re-raised by fit.

        Ctrl-C (or a notebook's interrupt) while fit runs on the main thread stops it at the end of the
        epoch under way, or after the step under way when a progress callback is set, and then runs the
        SIGINT handler that was in place: fit raises KeyboardInterrupt by default. The trainer stays
        usable, and a fit on the same data finishes a stopped epoch. (Python sees the signal only when it
        runs Python code: fit gives it a call at each epoch's end, which does nothing when no epoch_end
        is set; see _interrupt.py.) A fit on another thread leaves SIGINT to Python, which raises
        KeyboardInterrupt on the main thread as usual.

        From these callbacks, this trainer's evaluate and predict_dataset run in epoch_end: validation
        each epoch (the numbers of a call between one-epoch fits, and fit's run goes on unchanged), on a
        data set of this trainer's context (one of another is refused with Status.INVALID_ARGUMENT). The
        library refuses them in progress, and fit, step and predict (rows) in either, with
        Status.INVALID_STATE. The learning rate may be read and set in both, and a checkpoint saved; the
        gradient_norm read in progress is the reported step's."""
        for name, function in (("progress", progress), ("epoch_end", epoch_end)):
            if function is not None and not callable(function):
                raise TypeError("%s must be callable or None" % name)

        with self._family:
            self._install_callbacks(progress, epoch_end)
            self._callback_functions = (progress, epoch_end)

    def _install_callbacks(self, progress, epoch_end):
        state = self._callback_state
        progress_c = _native.mpt_progress_fn(state.guarded(progress)) if progress else _native.mpt_progress_fn()
        epoch_end_c = _native.mpt_epoch_end_fn(state.guarded(epoch_end)) if epoch_end else _native.mpt_epoch_end_fn()
        _check(_lib().mpt_trainer_set_callbacks(self._get(), progress_c, epoch_end_c, None))
        self._callbacks = (progress_c, epoch_end_c)

    def _refuse_reentry(self):
        """Refuses fit, step and predict from this trainer's own callbacks, which run on the thread of
        fit (the library refuses them too, but a nested fit would first clobber the state of the running
        one). Another thread is not refused: it waits for the lock, as the module promises. evaluate and
        predict_dataset are left to the library, which runs them from the epoch-end callback (see
        set_callbacks)."""
        if self._in_own_callback():
            raise Error(Status.INVALID_STATE,
                        "fit, step and predict cannot be called from this trainer's callbacks")

    def _in_own_callback(self):
        return self._fitting_thread == threading.get_ident()

    @staticmethod
    def _dataset(dataset):
        return _require(dataset, Dataset, "dataset")._get()

    def fit(self, dataset, epochs=1, batch_size=32, shuffle=True):
        """Trains for `epochs` epochs in batches of `batch_size`."""
        self._refuse_reentry()
        pointer = self._dataset(dataset)
        epochs = _integer(epochs, "epochs", ctypes.c_int64)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        state = self._callback_state
        with _Locked(self._family, dataset._family):
            state.error = None  # under the lock: another thread's fit may be running its callbacks
            self._fitting_thread = threading.get_ident()
            progress, epoch_end = self._callback_functions
            with _interrupt.NotedInterrupt() as interrupt:
                state.interrupt = interrupt
                # Where a Ctrl-C is noted, fit must run Python code now and then for Python to note it:
                # an epoch-end call for the duration of this fit, when the caller set none.
                adds_epoch_end = interrupt.active and epoch_end is None
                try:
                    if adds_epoch_end:
                        self._install_callbacks(progress, _nothing_at_epoch_end)
                    failure = _failure(
                        _lib().mpt_trainer_fit(self._get(), pointer, epochs, batch_size, 1 if shuffle else 0))
                finally:
                    self._fitting_thread = None
                    state.interrupt = None
                    if adds_epoch_end:  # the caller's, as they are now (a callback may have set others)
                        self._install_callbacks(*self._callback_functions)
            # Leaving the interrupt's context ran the SIGINT handler it put off: KeyboardInterrupt by
            # default. A handler that returns leaves fit to report what it stopped with: CANCELLED.
            error, state.error = state.error, None
            if error is not None:
                raise error
            if failure is not None:
                raise failure

    def step(self, dataset, first, batch_size):
        """One training step on rows [first, first + batch_size); returns the batch's mean loss."""
        self._refuse_reentry()
        pointer = self._dataset(dataset)
        first = _integer(first, "first", ctypes.c_int64)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        loss = ctypes.c_float()
        with _Locked(self._family, dataset._family):
            _check(_lib().mpt_trainer_step(self._get(), pointer, first, batch_size, ctypes.byref(loss)))
        return loss.value

    def evaluate(self, dataset, batch_size=0):
        """Mean loss and accuracy over the dataset, in the trainer's precision (batch_size 0: the last
        training batch size, or 256); the loss weighted by the rows' weights of a Dataset.weighted, as
        Keras's evaluate(sample_weight=). Also from fit's epoch-end callback (see set_callbacks)."""
        pointer = self._dataset(dataset)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        if self._in_own_callback() and dataset._family is not self._family:
            # fit holds its context's lock: taking another's here, out of _Locked's order, could
            # deadlock with a thread that holds that one and waits for ours. The library refuses such
            # a data set anyway.
            raise Error(Status.INVALID_ARGUMENT, "the dataset was created on another context than the trainer")
        loss, accuracy = ctypes.c_float(), ctypes.c_float()
        with _Locked(self._family, dataset._family):
            _check(_lib().mpt_trainer_evaluate(self._get(), pointer, batch_size, ctypes.byref(loss),
                                               ctypes.byref(accuracy)))
        return Evaluation(loss.value, accuracy.value)

    def predict(self, inputs):
        """Outputs [rows, output_features] of the last layer, in the trainer's precision, for float rows
        (predictions over a Dataset: predict_dataset): flat, or shaped with rows of input_features
        values (SHAPE_MISMATCH otherwise)."""
        self._refuse_reentry()
        if isinstance(inputs, Dataset):
            raise TypeError("inputs must be float rows, not a mptrain.Dataset: predictions over a dataset are "
                            "predict_dataset(dataset, batch_size=0)")
        data = _floats(inputs, "inputs")
        rows = _rows_of(data, self._input_features, "inputs")
        out, out_ptr = _output(rows * self._output_features, (rows, self._output_features))
        with self._family:
            _check(_lib().mpt_trainer_predict(self._get(), data.pointer, rows, out_ptr,
                                              rows * self._output_features))
        return out

    def predict_dataset(self, dataset, batch_size=0):
        """The outputs predict gives, for every row of `dataset` in order: Keras's model.predict on a
        dataset (a test set from Dataset.load_cifar10, a slice), returned as predict returns them ([rows,
        output_features] float32: a numpy array when numpy is installed, else a flat array.array), in the
        trainer's precision, in batches of `batch_size` rows (0: the last training batch size, or 256,
        as evaluate). Only the samples are read (u8 ones normalised as in training): labels, targets
        and row weights play no part. Predicted in one batch (batch_size >= rows), the outputs are those
        of predict on the same float rows; other batch sizes may differ from them in the last bits.

        With Dataset.labels: a confusion matrix or per-class accuracy (see Dataset.labels). Like
        evaluate, it also runs from fit's epoch-end callback (the predictions of a call between
        one-epoch fits), not from its progress callback (see set_callbacks). A dataset of another
        context raises Error with Status.INVALID_ARGUMENT, one of another feature count
        Status.SHAPE_MISMATCH, a negative batch_size Status.INVALID_ARGUMENT."""
        pointer = self._dataset(dataset)
        batch_size = _integer(batch_size, "batch_size", ctypes.c_int64)
        if self._in_own_callback() and dataset._family is not self._family:
            # As evaluate: fit holds its context's lock, and taking another's here, out of _Locked's
            # order, could deadlock. The library refuses such a data set anyway.
            raise Error(Status.INVALID_ARGUMENT, "the dataset was created on another context than the trainer")
        width = self._output_features
        with _Locked(self._family, dataset._family):
            rows = dataset.rows
            out, out_ptr = _output(rows * width, (rows, width))
            _check(_lib().mpt_trainer_predict_dataset(self._get(), pointer, batch_size, out_ptr, rows * width))
        return out

    @property
    def precision(self):
        out = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_trainer_get_precision(self._get(), ctypes.byref(out)))
        return Precision(out.value)

    @property
    def learning_rate(self):
        """The base rate: the options' until set, or restored by load_checkpoint; without an
        lr_schedule, the rate of the next step. Setting it (finite, > 0) applies from the next step
        on, also from fit's callbacks: a schedule of one's own (an lr_schedule multiplies it). The
        rate is part of the run, so checkpoints save and restore it; an automatic checkpoint at an
        epoch's end is written after that epoch's epoch-end callback, so it holds the rate set there."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_learning_rate(self._get(), ctypes.byref(out)))
        return out.value

    @learning_rate.setter
    def learning_rate(self, value):
        with self._family:
            _check(_lib().mpt_trainer_set_learning_rate(self._get(), _real(value, "learning_rate")))

    @property
    def options(self):
        """The options this trainer was created with, as a dict of Trainer's keyword arguments, every
        one of them: Trainer(model, **trainer.options) creates a trainer that trains as this one would
        (Keras's get_config), given the same model weights and context seed. Each read is a new dict;
        changing it changes nothing here.

        The values are those the library holds, not the ones given: floats as the float32 values it
        keeps (learning_rate=0.03 reads 0.029999999329447746), enums as Precision, Loss, Optimizer,
        LrSchedule and LossScaling members, nesterov and rmsprop_centered as bools, class_weights as a
        list of floats (a dict given reads as the list it stood for), or None when there are none.
        Options left out read as the defaults the trainer uses: the optimizer's own (AdamW's
        weight_decay 0.004, Lion's betas (0.9, 0.99)), decay_factor the one the schedule took
        (0 for a cosine schedule given none), and precision AUTO stays AUTO (the precision property
        is the one it runs in). learning_rate is the base rate now: the learning_rate setter and
        load_checkpoint change it. adam's and lion's betas are one pair, and adam's and rmsprop's
        epsilon one value, as the library keeps them: each copy reads the same, and Trainer refuses
        copies that differ (Error with Status.INVALID_ARGUMENT), so an edit changes every copy, e.g.
        dict(options, adam=(0.5, 0.6, 1e-3), lion=(0.5, 0.6), rmsprop=(options["rmsprop"][0], 1e-3)).
        Also from fit's callbacks."""
        options = _native.TrainerOptionsP()
        with self._family:
            _check(_lib().mpt_trainer_get_options(self._get(), ctypes.byref(options)))
        return _keywords_of_new(options)

    @staticmethod
    def options_from_checkpoint(path):
        """The options of the trainer that wrote the training checkpoint at `path` (str, bytes or
        os.PathLike; see save_checkpoint), as the dict of Trainer's keyword arguments the options
        property gives, so that a run resumes from the file alone, as Keras's load_model restores the
        optimizer. The checkpoint holds the model too:

            model = mptrain.Model.load(context, path)
            trainer = mptrain.Trainer(model, **mptrain.Trainer.options_from_checkpoint(path))
            trainer.load_checkpoint(path)
            trainer.fit(dataset, epochs=...)

        continues the run (bit for bit on the CPU backend, whatever the context's seed). precision and
        loss_scaling are the ones the trainer ran, AUTO and DEFAULT resolved (e.g. Precision.MIXED_BF16
        and LossScaling.OFF); learning_rate is the base rate of its next step (the rate set last, not
        the one it was created with); every other option is its own value. A checkpoint records no
        micro_batch_size: it reads 0 (give it again for a run that used one:
        Trainer(model, **dict(options, micro_batch_size=8))). Options that the trainer's loss or
        optimizer does not read (huber_delta without the Huber loss, rmsprop without RMSprop) are not
        recorded and read as their defaults. A model file (not a checkpoint) raises Error with
        Status.INVALID_ARGUMENT, a missing file Status.IO_ERROR, a truncated or damaged one
        Status.CORRUPT_DATA, one from another major version Status.UNSUPPORTED."""
        encoded = _path(path, "path")
        options = _native.TrainerOptionsP()
        # The library reads the file alone, thread-safely: no context, so no family's lock to take.
        _check(_lib().mpt_trainer_options_create_from_checkpoint(encoded, ctypes.byref(options)))
        return _keywords_of_new(options)

    @property
    def scheduled_learning_rate(self):
        """The rate the next step trains with: learning_rate times the lr_schedule's factor at the
        step count (progress.steps; on a GPU, reading it waits for the steps issued)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_scheduled_learning_rate(self._get(), ctypes.byref(out)))
        return out.value

    @property
    def loss_scale(self):
        scale, tracker, skipped = ctypes.c_float(), ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_loss_scale(self._get(), ctypes.byref(scale), ctypes.byref(tracker),
                                                     ctypes.byref(skipped)))
        return LossScale(scale.value, tracker.value, skipped.value)

    @property
    def gradient_norm(self):
        """The global L2 norm of the last step's gradients (all weights and biases, the loss scale
        divided out) before clipping: what global_clipnorm compared with its bound (PyTorch's
        clip_grad_norm_ returns the same number). From a progress callback, the reported step's. Only a
        clipping trainer computes it: NaN (a float) without global_clipnorm, before the first step,
        after load_checkpoint, and for a skipped step (its gradients not finite)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_trainer_get_gradient_norm(self._get(), ctypes.byref(out)))
        return out.value

    def swap_ema_weights(self):
        """Exchanges the model's weights with this trainer's moving averages (ema_momentum; a trainer
        without them raises Error with Status.INVALID_STATE) and returns True when the model now holds
        the averages, False when its own weights are back (bit for bit). Meanwhile evaluate, predict,
        predict_dataset and the Model's calls (get_weights, predict, save) see the averages, and fit and
        step (of any trainer of the model), save_checkpoint and load_checkpoint raise Error with
        Status.INVALID_STATE. Before the first applied step the averages are the weights. Allowed from
        fit's epoch_end callback (exchange back before it returns, or fit's next epoch is refused), not
        from its progress callback. A trainer closed while the model holds its averages leaves them
        there (Keras's way of finishing). The with-block ema_weights exchanges back for you."""
        holds = ctypes.c_int()
        with self._family:
            _check(_lib().mpt_trainer_swap_ema_weights(self._get(), ctypes.byref(holds)))
        return holds.value != 0

    @contextlib.contextmanager
    def ema_weights(self):
        """`with trainer.ema_weights():` runs its block with the moving averages in the model (see
        swap_ema_weights) and puts the trained weights back when the block ends, also when it raises.
        Yields the trainer. Entered while the model already holds the averages (swap_ema_weights called
        before), it raises Error with Status.INVALID_STATE and leaves them there; a trainer closed
        inside the block leaves the averages in the model, as swap_ema_weights says."""
        if not self.swap_ema_weights():
            self.swap_ema_weights()  # the averages back where they were
            raise Error(Status.INVALID_STATE, "the model already holds this trainer's averaged weights: "
                                              "ema_weights cannot put them in again")
        try:
            yield self
        finally:
            if not self.closed:
                self.swap_ema_weights()

    @property
    def progress(self):
        steps, epochs = ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_progress(self._get(), ctypes.byref(steps), ctypes.byref(epochs)))
        return Progress(steps.value, epochs.value)

    @property
    def batch_size(self):
        """The rows of the last training step (fit's batch_size, or the data set's rows when fewer; step's
        rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can fit on in the
        saved run's batches (mpt_trainer_get_batch_size: the exception of an unfinished epoch)."""
        rows = ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_batch_size(self._get(), ctypes.byref(rows)))
        return rows.value

    @property
    def unfinished_epoch(self):
        """The epoch fit left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint that
        load_checkpoint restored), as UnfinishedEpoch(steps that ran, rows of its data set, batch_size):
        the next fit finishes it on the same data in that batch size and abandons it otherwise; all 0
        when there is none (mpt_trainer_get_unfinished_epoch)."""
        steps, rows, batch_size = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_unfinished_epoch(self._get(), ctypes.byref(steps), ctypes.byref(rows),
                                                           ctypes.byref(batch_size)))
        return UnfinishedEpoch(steps.value, rows.value, batch_size.value)

    def save_checkpoint(self, path):
        """Writes a training checkpoint to `path` (str or os.PathLike), atomically: fp32 master weights,
        optimizer and loss-scaler state, the learning rate, step and epoch counters, the position inside
        the epoch and the shuffle state. Loading it into a trainer of the same architecture and options and calling fit
        continues the run bit-exactly on the CPU backend."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_trainer_save_checkpoint(self._get(), encoded))

    def load_checkpoint(self, path):
        """Restores a checkpoint; the whole file is validated first, so a failure changes nothing.
        The learning rate becomes the checkpoint's. Error statuses: another architecture
        SHAPE_MISMATCH, other trainer options (all but the learning rate) or a model file
        INVALID_ARGUMENT, a missing file IO_ERROR, a damaged one CORRUPT_DATA, another major version
        UNSUPPORTED."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_trainer_load_checkpoint(self._get(), encoded))

    def set_checkpointing(self, directory, every_steps=0, every_epochs=None, keep_last=1):
        """Checkpoints automatically during fit into `directory` (which must exist) as
        checkpoint-<step>.safetensors, every `every_steps` optimizer steps and/or every
        `every_epochs`-th epoch (0 = not on that trigger; None: every epoch unless every_steps is
        given), keeping the newest `keep_last`. None turns
        checkpointing off. A failed write stops fit with Status.IO_ERROR."""
        encoded = None if directory is None else _path(directory, "directory")
        if every_epochs is None:
            every_epochs = 1 if every_steps == 0 else 0
        with self._family:
            _check(_lib().mpt_trainer_set_checkpointing(
                self._get(), encoded, _integer(every_steps, "every_steps", ctypes.c_int64),
                _integer(every_epochs, "every_epochs", ctypes.c_int64),
                _integer(keep_last, "keep_last", ctypes.c_int64)))

    @property
    def memory(self):
        planned, allocated = ctypes.c_size_t(), ctypes.c_size_t()
        with self._family:
            _check(_lib().mpt_trainer_get_memory(self._get(), ctypes.byref(planned), ctypes.byref(allocated)))
        return TrainerMemory(planned.value, allocated.value)

    @property
    def last_epoch_time(self):
        """EpochTime(seconds, steps) of the last epoch fit completed: device time between CUDA events on
        a GPU, host time on the CPU; (0.0, 0) before the first."""
        seconds, steps = ctypes.c_double(), ctypes.c_int64()
        with self._family:
            _check(_lib().mpt_trainer_get_last_epoch_time(self._get(), ctypes.byref(seconds), ctypes.byref(steps)))
        return EpochTime(seconds.value, steps.value)
