"""Shared fixtures: a small CPU context and generated, linearly separable data (three Gaussian blobs)."""
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
    return mptrain.Model(ctx, FEATURES).add_dense(16, "relu").add_dense(CLASSES, "softmax")
