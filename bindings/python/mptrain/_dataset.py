"""Dataset: training data copied into the library, and the slices, subsets, weighted and standardized
datasets taken from one."""
import array
import ctypes
import operator

from . import _buffers, _native
from ._arguments import _integer, _path, _real, _require
from ._buffers import _bytes, _floats, _int32s, _int64s, _output, _row_width
from ._context import Context
from ._enums import Status
from ._errors import Error
from ._handles import _Handle
from ._library import _check, _lib


class Dataset(_Handle):
    """Training data, copied into the library: build one with from_f32, from_u8, from_targets or
    load_cifar10, or take rows of one without a copy with slice(first, rows) or dataset[a:b], or with
    a weight per row (Keras's sample_weight) with weighted(weights), or standardized feature by
    feature (Keras's Normalization) with standardized(mean, stddev) from feature_statistics()."""

    _destroy_name = "mpt_dataset_destroy"

    @staticmethod
    def _shape(buffer, rows, features, what, rows_from):
        # A shaped array's rows are its first dimension ([rows, features], or [rows, 32, 32, 3] images):
        # one whose count is rows * features by another split (a transposed array, images of another
        # size) is refused, not cut into rows it does not hold. `rows_from` says where `rows` came from
        # ("there are %d labels"), for the message when the two disagree.
        shaped_width = _row_width(buffer)
        if shaped_width is not None and buffer.shape[0] != rows:
            raise Error(Status.SHAPE_MISMATCH, "%s has %d rows (shape %s), but %s" % (
                what, buffer.shape[0], tuple(buffer.shape), rows_from % rows))
        if features is None:
            if shaped_width is not None:
                features = shaped_width
            elif rows:
                features = buffer.count // rows
            else:
                features = 0
        features = _integer(features, "features", ctypes.c_int64)
        if shaped_width is not None and shaped_width != features:
            raise Error(Status.SHAPE_MISMATCH, "%s has shape %s, not rows of %d values for %d rows" % (
                what, tuple(buffer.shape), features, rows))
        if rows == 0 or features <= 0 or buffer.count != rows * features:
            raise Error(Status.SHAPE_MISMATCH, "%s holds %d values; %d rows of %d features need %d" % (
                what, buffer.count, rows, features, rows * features))
        return features

    @staticmethod
    def _labels(labels):
        """Class indices, one a row: a [rows] or [rows, 1] array, or a sequence. One-hot rows (Keras's
        to_categorical) are refused here with what to use instead; counted as labels they would have
        made as many times the rows as there are classes."""
        label_data = _int32s(labels, "labels")
        if label_data.shape is not None and len(label_data.shape) > 1 and (
                len(label_data.shape) > 2 or label_data.shape[1] != 1):
            raise Error(Status.SHAPE_MISMATCH, "labels have shape %s: one class index a row is a [rows] or "
                        "[rows, 1] array (one-hot or soft targets: Dataset.from_targets)"
                        % (tuple(label_data.shape),))
        return label_data

    @classmethod
    def _create(cls, context, function, *args):
        _require(context, Context, "context")
        pointer = _native.DatasetP()
        with context._family:
            _check(getattr(_lib(), function)(context._get(), *args, ctypes.byref(pointer)))
        return cls(pointer, context._family)

    @classmethod
    def from_f32(cls, context, samples, labels, num_classes, features=None, check_finite=True):
        """float32 samples ([rows, features]) with int labels in [0, num_classes)."""
        label_data = cls._labels(labels)
        sample_data = _floats(samples, "samples")
        features = cls._shape(sample_data, label_data.count, features, "samples", "there are %d labels")
        num_classes = _integer(num_classes, "num_classes", ctypes.c_int32)
        return cls._create(context, "mpt_dataset_create_f32", sample_data.pointer, label_data.count, features,
                           label_data.pointer, num_classes, 1 if check_finite else 0)

    @classmethod
    def from_u8(cls, context, samples, labels, num_classes, features=None, scale=1.0 / 255.0, offset=0.0):
        """uint8 samples, normalised as x * scale + offset when batched (CIFAR: 1/255, 0)."""
        label_data = cls._labels(labels)
        sample_data = _bytes(samples, "samples")
        features = cls._shape(sample_data, label_data.count, features, "samples", "there are %d labels")
        num_classes = _integer(num_classes, "num_classes", ctypes.c_int32)
        return cls._create(context, "mpt_dataset_create_u8", sample_data.pointer, label_data.count, features,
                           label_data.pointer, num_classes, _real(scale, "scale"), _real(offset, "offset"))

    @classmethod
    def from_targets(cls, context, samples, targets, features=None, target_width=None, check_finite=True):
        """float32 samples with float32 targets ([rows, target_width]) for one-hot, binary or MSE losses."""
        sample_data = _floats(samples, "samples")
        target_data = _floats(targets, "targets")
        shaped_width = _row_width(target_data)
        if target_width is None:
            target_width = shaped_width if shaped_width is not None else 1
        target_width = _integer(target_width, "target_width", ctypes.c_int64)
        if shaped_width is not None and shaped_width != target_width:
            raise Error(Status.SHAPE_MISMATCH, "targets have shape %s: rows of %d values, not of %d" % (
                tuple(target_data.shape), shaped_width, target_width))
        if target_width <= 0 or target_data.count % target_width:
            raise Error(Status.SHAPE_MISMATCH, "targets hold %d values, not whole rows of %d" % (
                target_data.count, target_width))
        rows = target_data.count // target_width
        features = cls._shape(sample_data, rows, features, "samples", "the targets hold %d rows")
        return cls._create(context, "mpt_dataset_create_f32_targets", sample_data.pointer, rows, features,
                           target_data.pointer, target_width, 1 if check_finite else 0)

    @classmethod
    def load_cifar10(cls, context, directory, train=True, limit=0):
        """CIFAR-10 from the binary release's directory (data_batch_*.bin or test_batch.bin)."""
        path = _path(directory, "directory")
        limit = _integer(limit, "limit", ctypes.c_int64)
        return cls._create(context, "mpt_dataset_load_cifar10", path, 1 if train else 0, limit)

    def _query(self, name):
        out = ctypes.c_int64()
        with self._family:
            _check(getattr(_lib(), name)(self._get(), ctypes.byref(out)))
        return out.value

    @property
    def rows(self):
        return self._query("mpt_dataset_get_rows")

    @property
    def features(self):
        return self._query("mpt_dataset_get_features")

    @property
    def labels(self):
        """A copy of the integer labels, one per row (a slice's own rows'; a weighted dataset's are its
        source's): an int32 numpy array [rows] when numpy is installed, else array.array("i"). With
        Trainer.predict_dataset, a confusion matrix or per-class accuracy of a loaded data set:

            predicted = trainer.predict_dataset(test).argmax(axis=1)     # numpy
            matrix = numpy.zeros((classes, classes), dtype=int)
            numpy.add.at(matrix, (test.labels, predicted), 1)            # rows: true class

        A dataset of float targets (from_targets) has none: Error with Status.INVALID_ARGUMENT."""
        with self._family:
            rows = self.rows
            out, out_ptr = _output(rows, (rows,), ctypes.c_int32, "i", "int32")
            _check(_lib().mpt_dataset_get_labels(self._get(), out_ptr, rows))
        return out

    def __len__(self):
        return self.rows

    def slice(self, first, rows):
        """A Dataset of rows [first, first + rows) of this one that shares its storage: nothing is
        copied, and on a GPU one device copy serves this dataset and all its slices. Labels or targets,
        classes and normalisation are this dataset's; a slice of a slice counts from that slice's
        first row. For a held-out validation set or a first or last fold; dataset[a:b] (see
        __getitem__) takes the same rows with Python's slice bounds.

        The slice keeps the storage (and its context) alive: it stays usable when this Dataset, its
        Context or both are closed or collected. `first` outside [0, rows) or `rows` outside
        [1, rows - first] raises Error with Status.INVALID_ARGUMENT."""
        first = _integer(first, "first", ctypes.c_int64)
        rows = _integer(rows, "rows", ctypes.c_int64)
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_slice(self._get(), first, rows, ctypes.byref(pointer)))
        # The source's family: the slice shares its context's lock and keeps its log callback alive.
        return type(self)(pointer, self._family)

    def subset(self, rows):
        """A Dataset of copies of this one's rows rows[0], rows[1], ... in that order: any rows, where a
        slice is one range. For k-fold cross-validation (a fold's training rows are all the others), a
        stratified or shuffled split, or a bootstrap sample (a row may be listed more than once):

            for train_index, test_index in KFold(5).split(x):      # scikit-learn's indices
                training, validation = data[train_index], data[test_index]

        Each row brings its label or targets and its weight (of a weighted dataset); classes and
        normalisation are this dataset's. Unlike a slice the rows are copied, into a storage of the
        subset's own (on a GPU placed on the device apart from this dataset's); dataset[indices] (see
        __getitem__) is the same subset.

        `rows` is a sequence of ints counted from this dataset's first row (a slice's own): a list, a
        tuple, a range, an array.array or a 1-D numpy array of an integer type. No rows, or an index
        outside [0, rows) (negative ones too), raises Error with Status.INVALID_ARGUMENT naming the
        first such; an array of more than one dimension Status.SHAPE_MISMATCH; floats or bools (a
        boolean mask is not a list of rows) TypeError.

        The subset keeps its context alive: it stays usable when this Dataset, its Context or both are
        closed or collected."""
        if isinstance(rows, (list, tuple)) and any(isinstance(row, bool) for row in rows):
            raise TypeError("rows must hold integers, not bools (a boolean mask is not a list of rows)")
        data = _int64s(rows, "rows")
        if data.shape is not None and len(data.shape) != 1:
            raise Error(Status.SHAPE_MISMATCH, "rows must be one-dimensional (a list of row indices), not of "
                        "shape %s" % (data.shape,))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_subset(self._get(), data.pointer, data.count, ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def weighted(self, weights):
        """A Dataset of this one's rows with a weight per row: Keras's sample_weight, for fit and evaluate
        alike. The rows are shared, not copied, as by a slice; the weights are copied.

            model.fit(x, y, sample_weight=w)          # Keras
            trainer.fit(data.weighted(w), ...)        # mptrain

        and Keras's model.evaluate(x, y, sample_weight=w) is trainer.evaluate(data.weighted(w)). In fit,
        step and evaluate each row's loss (and in training its gradient) is multiplied by its weight, and
        in training by its class weight too where the Trainer has class_weights (evaluate weighs by the
        rows' weights only), then averaged over the rows as before: the weights are not normalised
        (Keras's sum_over_batch_size), so the losses reported are the weighted ones. Accuracy counts
        every row once. Every loss takes row weights.

        `weights` is a sequence of floats, one per row: a list, a tuple, an array.array or a 1-D numpy
        array. A count other than this dataset's rows, or an array of more than one dimension, raises
        Error with Status.SHAPE_MISMATCH; a negative, NaN or infinite weight Status.INVALID_ARGUMENT;
        anything but numbers TypeError. Weights replace any this dataset had; a slice of a weighted
        dataset keeps its rows' weights. On a GPU the weights are placed beside the rows (4 bytes a row).

        The weighted dataset keeps the storage (and its context) alive: it stays usable when this
        Dataset, its Context or both are closed or collected."""
        data = _floats(weights, "weights")
        if data.shape is not None and len(data.shape) != 1:
            raise Error(Status.SHAPE_MISMATCH, "weights must be one-dimensional (one per row), not of shape %s"
                        % (data.shape,))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_weighted(self._get(), data.pointer, data.count,
                                                      ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def standardized(self, mean, stddev):
        """A Dataset of this one's rows standardized feature by feature, as Keras's Normalization layer
        does: feature f of every batch holds (x - mean[f]) / max(stddev[f], 1e-7), where x is what this
        dataset gives (a uint8 sample after its scale and offset), each operation rounded in float32.
        For fit, step, evaluate and predict_dataset alike; predict takes its inputs as given, so
        standardize those yourself, or have the model standardize them (Model.set_input_standardization,
        saved with it) instead. Use the training set's statistics for the others too:

            layer = keras.layers.Normalization(); layer.adapt(x_train)       # Keras
            mean, stddev = training.feature_statistics()                     # mptrain
            training, validation = training.standardized(mean, stddev), validation.standardized(mean, stddev)

        The rows are shared, not copied, as by a slice (a uint8 dataset stays 1 byte a value); the
        statistics are copied and replace any standardization this dataset had, and slices, weighted
        datasets and subsets of the result keep them.

        `mean` and `stddev` are sequences of floats, one per feature: lists, tuples, array.arrays or
        1-D numpy arrays. Another count (or counts that differ), or an array of more than one
        dimension, raises Error with Status.SHAPE_MISMATCH; a non-finite mean or a negative or
        non-finite standard deviation Status.INVALID_ARGUMENT naming the first such; anything but
        numbers TypeError.

        The standardized dataset keeps the storage (and its context) alive: it stays usable when this
        Dataset, its Context or both are closed or collected."""
        mean_data = _floats(mean, "mean")
        stddev_data = _floats(stddev, "stddev")
        for data, what in ((mean_data, "mean"), (stddev_data, "stddev")):
            if data.shape is not None and len(data.shape) != 1:
                raise Error(Status.SHAPE_MISMATCH, "%s must be one-dimensional (one per feature), not of shape %s"
                            % (what, data.shape))
        # One count reaches C: sequences of different lengths are the shape mismatch it reports for a
        # count other than the features.
        if mean_data.count != stddev_data.count:
            raise Error(Status.SHAPE_MISMATCH, "standardization takes one mean and one stddev per feature (%d "
                        "means and %d stddevs given)" % (mean_data.count, stddev_data.count))
        pointer = _native.DatasetP()
        with self._family:
            _check(_lib().mpt_dataset_create_standardized(self._get(), mean_data.pointer, stddev_data.pointer,
                                                          mean_data.count, ctypes.byref(pointer)))
        # The source's family, as for a slice: the same context's lock and log callback.
        return type(self)(pointer, self._family)

    def feature_statistics(self):
        """(mean, stddev): each feature's mean and standard deviation over this dataset's rows (a slice's
        own), of the values its batches hold (standardized ones, for a standardized dataset): the
        population's, divided by the rows, as Keras's Normalization.adapt, summed in double. Each a
        float32 numpy array [features] when numpy is installed, else array.array("f").
        standardized(mean, stddev) with them gives features of mean 0 and standard deviation 1."""
        with self._family:
            features = self.features
            mean, mean_ptr = _output(features, (features,))
            stddev, stddev_ptr = _output(features, (features,))
            _check(_lib().mpt_dataset_get_feature_statistics(self._get(), mean_ptr, stddev_ptr, features))
        return mean, stddev

    def __getitem__(self, key):
        """dataset[a:b]: rows a to b as a slice (see slice), bounds as Python's: negative ones count
        from the end, omitted ones are the start and the end, and out-of-range ones are clipped. The
        step must be omitted or 1; an empty range raises ValueError (a Dataset has at least one row),
        an integer index TypeError (one row is dataset[i:i + 1]).

        dataset[indices], indices a list, a range, an array.array or a numpy array of ints: those rows
        copied, in that order, as subset(indices) (indices from 0, negative or out-of-range ones
        refused, not counted from the end or clipped). A tuple is not a list of rows (TypeError).

        Keras's validation_split holds out the last rows, taken before any shuffling (fit shuffles
        each slice's own rows only), so validation_split=0.2 is:

            split = int(len(data) * (1 - 0.2))
            training, validation = data[:split], data[split:]"""
        numpy = _buffers._np  # read at each call, not imported: _buffers._np = None acts as no numpy (tests)
        if isinstance(key, (list, range, array.array)) or (
                numpy is not None and isinstance(key, numpy.ndarray) and key.ndim >= 1):
            return self.subset(key)
        if not isinstance(key, slice):  # the builtin: methods do not see the class's own slice
            raise TypeError("Dataset indices must be slices or lists of rows, not %s (one row is "
                            "dataset[i:i + 1])" % type(key).__name__)
        step = 1 if key.step is None else operator.index(key.step)
        if step != 1:
            raise ValueError("a Dataset slice takes consecutive rows: its step must be 1 or omitted, not %d"
                             % step)
        rows = len(self)
        start, stop, _ = key.indices(rows)
        if stop <= start:
            raise ValueError("dataset[%s:%s] of a Dataset of %d rows is empty (a Dataset has at least one row)"
                             % ("" if key.start is None else key.start, "" if key.stop is None else key.stop,
                                rows))
        return self.slice(start, stop - start)

    __iter__ = None  # not a sequence of rows: without this, iter() would call __getitem__(0)
