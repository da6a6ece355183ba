"""Trains a small MLP on generated data (three blobs in 8 dimensions) and prints its accuracy.

    MPTRAIN_LIB_DIR=/path/to/build/lib PYTHONPATH=bindings/python python3 bindings/python/examples/train_mlp.py
"""
import random

import mptrain

FEATURES, CLASSES, ROWS = 8, 3, 900


def blobs(rows, rng):
    samples, labels = [], []
    for row in range(rows):
        label = row % CLASSES
        samples.append([(2.0 if f % CLASSES == label else 0.0) + rng.gauss(0.0, 0.7) for f in range(FEATURES)])
        labels.append(label)
    return samples, labels


def main():
    print("mptrain", mptrain.version())
    rng = random.Random(2024)
    train_x, train_y = blobs(ROWS, rng)
    test_x, test_y = blobs(300, rng)

    ctx = mptrain.Context(backend="cpu", seed=7)
    model = mptrain.Model(ctx, FEATURES).add_dense(32, "relu").add_dense(CLASSES, "softmax")
    train = mptrain.Dataset.from_f32(ctx, train_x, train_y, num_classes=CLASSES)
    test = mptrain.Dataset.from_f32(ctx, test_x, test_y, num_classes=CLASSES)
    trainer = mptrain.Trainer(model, optimizer="adam", learning_rate=0.01)
    trainer.set_callbacks(epoch_end=lambda epoch, loss, acc: print(f"epoch {epoch}: loss {loss:.4f} accuracy {acc:.3f}"))
    trainer.fit(train, epochs=5, batch_size=32)
    result = trainer.evaluate(test)
    print(f"test accuracy {result.accuracy:.3f} (loss {result.loss:.4f}), {model.parameter_count} parameters")
    try:
        trainer.predict([0.0] * (FEATURES + 1))
    except mptrain.Error as error:
        print("a wrong input length gives", error.status.name, "-", error.message)


if __name__ == "__main__":
    main()
