"""Model: a sequential stack of Dense layers, its weights, input dropout and standardization, predict,
save and load."""
import ctypes

from . import _native
from ._arguments import _enum, _integer, _path, _real, _require
from ._buffers import _check_shape, _floats, _output, _rows_of
from ._context import Context
from ._enums import Activation, DType, Initializer, Status
from ._errors import Error
from ._handles import _Handle
from ._library import _check, _lib


class Model(_Handle):
    """A sequential stack of Dense layers taking `input_features` floats per sample."""

    _destroy_name = "mpt_model_destroy"

    def __init__(self, context, input_features):
        _require(context, Context, "context")
        input_features = _integer(input_features, "input_features", ctypes.c_int64)
        pointer = _native.ModelP()
        with context._family:
            _check(_lib().mpt_model_create(context._get(), input_features, ctypes.byref(pointer)))
        super().__init__(pointer, context._family)

    def add_dense(self, units, activation=Activation.LINEAR):
        """Appends a Dense layer; returns self, so calls chain."""
        units = _integer(units, "units", ctypes.c_int64)
        with self._family:
            _check(_lib().mpt_model_add_dense(self._get(), units, _enum(Activation, activation, "activation")))
        return self

    def set_layer_dtype(self, layer, dtype):
        with self._family:
            _check(_lib().mpt_model_set_layer_dtype(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                    _enum(DType, dtype, "dtype")))
        return self

    def get_layer_dtype(self, layer):
        """Layer `layer`'s dtype override (DType.DEFAULT: the policy's)."""
        return DType(self._query_layer("mpt_model_get_layer_dtype", layer, ctypes.c_int))

    def set_layer_dropout(self, layer, rate):
        """Dropout after hidden layer `layer`, as a Keras Dropout(rate) layer after it: while a trainer
        trains (fit, step), each of its outputs is dropped with probability `rate` in [0, 1) and the
        kept ones are scaled by 1 / (1 - rate); evaluate and predict use every output. 0 (the default)
        means none. Before the model is built; another rate or layer raises Error (INVALID_ARGUMENT).
        Building a model whose last layer has dropout (a Trainer, predict, weights) raises Error
        (INVALID_STATE). Saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_dropout(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                      _real(rate, "rate")))
        return self

    def set_input_dropout(self, rate):
        """Dropout on the inputs, as a Keras Dropout(rate) before the first Dense layer: while a trainer
        trains, each input value is dropped with probability `rate` in [0, 1) and the kept ones are
        scaled by 1 / (1 - rate); evaluate and predict use every input. Before the model is built;
        saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_input_dropout(self._get(), _real(rate, "rate")))
        return self

    def get_input_dropout(self):
        """The inputs' dropout rate (0.0: none)."""
        out = ctypes.c_float()
        with self._family:
            _check(_lib().mpt_model_get_input_dropout(self._get(), ctypes.byref(out)))
        return out.value

    def set_input_standardization(self, mean, stddev):
        """Standardizes the inputs inside the model, as a Keras Normalization layer before the first
        Dense layer: input feature f becomes (x - mean[f]) / max(stddev[f], 1e-7), each operation
        rounded in float32, in fit, step, evaluate and predict_dataset and in predict alike. Saved with
        the model, so a loaded model predicts from raw inputs as the trained one did. A training set's
        statistics are the values to give (Keras's adapt):

            mean, stddev = training.feature_statistics()
            model.set_input_standardization(mean, stddev)   # then fit on the raw training set

        `mean` and `stddev` are sequences of floats, one per input feature, as for
        Dataset.standardized: another count (or counts that differ), or an array of more than one
        dimension, raises Error with Status.SHAPE_MISMATCH; a non-finite mean or a negative or
        non-finite standard deviation Status.INVALID_ARGUMENT naming the first such; anything but
        numbers TypeError. They are copied and replace any the model had. A trainer refuses a
        standardized Dataset for such a model (Status.INVALID_ARGUMENT: that would standardize twice).
        At any time but while a trainer fits the model (Status.INVALID_STATE). Returns self, so calls
        chain."""
        mean_data = _floats(mean, "mean")
        stddev_data = _floats(stddev, "stddev")
        for data, what in ((mean_data, "mean"), (stddev_data, "stddev")):
            if data.shape is not None and len(data.shape) != 1:
                raise Error(Status.SHAPE_MISMATCH, "%s must be one-dimensional (one per input feature), not of "
                            "shape %s" % (what, data.shape))
        # One count reaches C: sequences of different lengths are the shape mismatch it reports for a
        # count other than the input features.
        if mean_data.count != stddev_data.count:
            raise Error(Status.SHAPE_MISMATCH, "standardization takes one mean and one stddev per input feature "
                        "(%d means and %d stddevs given)" % (mean_data.count, stddev_data.count))
        with self._family:
            _check(_lib().mpt_model_set_input_standardization(self._get(), mean_data.pointer, stddev_data.pointer,
                                                              mean_data.count))
        return self

    def clear_input_standardization(self):
        """Removes the model's input standardization, if any: it takes its inputs as given again.
        Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_input_standardization(self._get(), None, None, 0))
        return self

    def get_input_standardization(self):
        """(mean, stddev) the model standardizes its inputs by, as set (not floored), each a float32
        numpy array [input_features] when numpy is installed, else array.array("f"), as
        Dataset.feature_statistics gives them; None when the model takes its inputs as given."""
        standardizes = ctypes.c_int()
        with self._family:
            features = self.input_features
            mean, mean_ptr = _output(features, (features,))
            stddev, stddev_ptr = _output(features, (features,))
            _check(_lib().mpt_model_get_input_standardization(self._get(), mean_ptr, stddev_ptr, features,
                                                              ctypes.byref(standardizes)))
        return (mean, stddev) if standardizes.value else None

    def set_layer_initializer(self, layer, initializer):
        """How layer `layer`'s weights are drawn when the model is built: an Initializer or its Keras
        name ("he_normal", "lecun_normal", ...; default "glorot_uniform"), from the context's seed.
        Before the model is built (else Error INVALID_STATE); not saved with the model, whose file
        holds the weights. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_initializer(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                          _enum(Initializer, initializer, "initializer")))
        return self

    def get_layer_initializer(self, layer):
        """Layer `layer`'s Initializer (a loaded model's are the default: its file holds weights)."""
        return Initializer(self._query_layer("mpt_model_get_layer_initializer", layer, ctypes.c_int))

    def get_layer_dropout(self, layer):
        """Layer `layer`'s dropout rate (0.0: none)."""
        return self._query_layer("mpt_model_get_layer_dropout", layer, ctypes.c_float)

    def set_layer_trainable(self, layer, trainable):
        """Freezes layer `layer` (False) or lets it train (True, the default), as Keras's
        layer.trainable: trainers' steps leave a frozen layer's weights, bias and optimizer state
        exactly as they are (no gradient, no weight decay, no share of the clipped norm, no averaging:
        swapped in, the averages leave it as it is), while gradients still flow through it to the layers
        below. At any time: every trainer's next step reads it. Training with every layer frozen
        raises Error (INVALID_STATE). Saved with the model. Returns self, so calls chain."""
        with self._family:
            _check(_lib().mpt_model_set_layer_trainable(self._get(), _integer(layer, "layer", ctypes.c_int64),
                                                        1 if trainable else 0))
        return self

    def get_layer_trainable(self, layer):
        """Whether layer `layer` trains (False: frozen)."""
        return self._query_layer("mpt_model_get_layer_trainable", layer, ctypes.c_int) != 0

    def _query(self, name):
        out = ctypes.c_int64()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), ctypes.byref(out)))
        return out.value

    def _query_layer(self, name, layer, ctype):
        """What the per-layer getter `name` writes for `layer`, read as `ctype`."""
        out = ctype()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), _integer(layer, "layer", ctypes.c_int64), ctypes.byref(out)))
        return out.value

    @property
    def layer_count(self):
        return self._query("mpt_model_get_layer_count")

    @property
    def input_features(self):
        return self._query("mpt_model_get_input_features")

    @property
    def output_features(self):
        return self._query("mpt_model_get_output_features")

    @property
    def parameter_count(self):
        return self._query("mpt_model_get_parameter_count")

    def get_layer_units(self, layer):
        """Layer `layer`'s width, as added or as a loaded file holds it."""
        return self._query_layer("mpt_model_get_layer_units", layer, ctypes.c_int64)

    def get_layer_activation(self, layer):
        """Layer `layer`'s Activation, as added or as a loaded file holds it."""
        return Activation(self._query_layer("mpt_model_get_layer_activation", layer, ctypes.c_int))

    def _layer_shape(self, layer):
        layer = _integer(layer, "layer", ctypes.c_int64)
        units = self.get_layer_units(layer)  # raises for a layer out of range
        inputs = self.input_features if layer == 0 else self.get_layer_units(layer - 1)
        return layer, units, inputs

    def get_weights(self, layer):
        """(weights [units, inputs], bias [units]) of a layer: its fp32 master copy."""
        layer, units, inputs = self._layer_shape(layer)
        weights, weights_ptr = _output(units * inputs, (units, inputs))
        bias, bias_ptr = _output(units, (units,))
        with self._family:
            _check(_lib().mpt_model_get_weights(self._get(), layer, weights_ptr, units * inputs, bias_ptr, units))
        return weights, bias

    def set_weights(self, layer, weights=None, bias=None):
        """Sets a layer's weights ([units, inputs] row-major) and/or bias ([units]); None keeps one."""
        layer, units, inputs = self._layer_shape(layer)
        w = _floats(weights, "weights") if weights is not None else None
        b = _floats(bias, "bias") if bias is not None else None
        if w is not None:
            _check_shape(w, (units, inputs), "weights of layer %d" % layer)
        if b is not None:
            _check_shape(b, (units,), "bias of layer %d" % layer)
        with self._family:
            _check(_lib().mpt_model_set_weights(self._get(), layer, w.pointer if w else None, w.count if w else 0,
                                                b.pointer if b else None, b.count if b else 0))

    def predict(self, inputs):
        """fp32 forward pass: outputs [rows, output_features] for inputs of whole rows (flat, or shaped
        with rows of input_features values: SHAPE_MISMATCH otherwise)."""
        data = _floats(inputs, "inputs")
        rows = _rows_of(data, self.input_features, "inputs")
        width = self.output_features
        out, out_ptr = _output(rows * width, (rows, width))
        with self._family:
            _check(_lib().mpt_model_predict(self._get(), data.pointer, rows, out_ptr, rows * width))
        return out

    def save(self, path):
        """Saves the architecture and fp32 weights as a .safetensors file at `path` (str or
        os.PathLike), atomically: a crash leaves the old file or the new one. Builds the model."""
        encoded = _path(path, "path")
        with self._family:
            _check(_lib().mpt_model_save(self._get(), encoded))

    @classmethod
    def load(cls, context, path):
        """A model read from a file written by save (or from a training checkpoint). A missing file
        raises Error with Status.IO_ERROR, a truncated or damaged one Status.CORRUPT_DATA, one from
        another major version Status.UNSUPPORTED."""
        _require(context, Context, "context")
        encoded = _path(path, "path")
        pointer = _native.ModelP()
        with context._family:
            _check(_lib().mpt_model_load(context._get(), encoded, ctypes.byref(pointer)))
            model = cls.__new__(cls)
            _Handle.__init__(model, pointer, context._family)
        return model
