"""Shared fixtures: a small CPU context and generated, linearly separable data (three Gaussian blobs); and
the helpers the tests share: the usual model and trainer, one-hot targets, outputs' floats and weights'
bytes, the expected Error and a damaged file."""
import contextlib
import random

import pytest

import mptrain

FEATURES = 4
CLASSES = 3


def make_blobs(rows=300, seed=1):
    """rows samples of FEATURES floats (as a list of rows) and labels 0..CLASSES-1."""
    rng = random.Random(seed)
    samples, labels = [], []
    for row in range(rows):
        label = row % CLASSES
        samples.append([(2.5 if f % CLASSES == label else 0.0) + rng.gauss(0.0, 0.6) for f in range(FEATURES)])
        labels.append(label)
    return samples, labels


def mlp(ctx):
    """FEATURES inputs, 16 ReLU units, a softmax over CLASSES."""
    return mptrain.Model(ctx, FEATURES).add_dense(16, "relu").add_dense(CLASSES, "softmax")


def new_run(precision, seed):
    """A context, model and trainer; one seed, so the same initial weights and shuffles every time."""
    ctx = mptrain.Context(backend="cpu", threads=1, seed=seed)
    model = mlp(ctx)
    return ctx, model, mptrain.Trainer(model, precision=precision, optimizer="adam", learning_rate=0.01)


def one_hot(labels):
    return [[1.0 if c == label else 0.0 for c in range(CLASSES)] for label in labels]


def values(out):
    """The floats of an output (a numpy array or an array.array), flattened."""
    return [float(v) for v in (out.ravel().tolist() if hasattr(out, "ravel") else out)]


def weight_bytes(model):
    """Every layer's weights and bias as raw bytes: equal only when bit-identical."""
    return [part.tobytes() for layer in range(model.layer_count) for part in model.get_weights(layer)]


@contextlib.contextmanager
def raises(status):
    """Expects mptrain.Error with this status and a non-empty message."""
    with pytest.raises(mptrain.Error) as info:
        yield info
    assert info.value.status == status, str(info.value)
    assert info.value.message


def truncate(source, target):
    """Writes the first two thirds of the file `source` to `target`: a damaged file."""
    with open(source, "rb") as file:
        content = file.read()
    with open(target, "wb") as file:
        file.write(content[:len(content) * 2 // 3])


@pytest.fixture
def ctx():
    context = mptrain.Context(backend="cpu", threads=1, seed=7)
    yield context
    context.close()


@pytest.fixture
def blobs():
    return make_blobs()


@pytest.fixture
def model(ctx):
    return mlp(ctx)
