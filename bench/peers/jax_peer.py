"""JAX peer for mptrain-bench: the seed MLP (3072-3000-1000-10, ReLU, softmax cross-entropy), plain
SGD lr 0.01, fp32 parameters computed in bf16 (mixed precision), the whole step (gather of the
batch from the uint8 data set on the device, x/255, forward, backward, update) in one jit with the
parameters donated. Microseconds per step: wall time of `steps` dispatched steps after warm-up,
ending in block_until_ready; the median of the repeats (a benchmark, never a test). --device cpu
runs it on the host, for comparison with mptrain's CPU backend."""
import os
import time

from common import LAYERS, LEARNING_RATE, parse_args, record, report, steps_for

ARGS = parse_args(__doc__)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if ARGS.device == "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"  # read when jax is imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def init_params(key):
    params = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        key, sub = jax.random.split(key)
        limit = (6.0 / (fan_in + fan_out)) ** 0.5
        params.append((jax.random.uniform(sub, (fan_in, fan_out), jnp.float32, -limit, limit),
                       jnp.zeros((fan_out,), jnp.float32)))
    return params


def loss_fn(params, x, y):
    h = x.astype(jnp.bfloat16)
    for i, (w, b) in enumerate(params):
        h = h @ w.astype(jnp.bfloat16) + b.astype(jnp.bfloat16)
        if i + 1 < len(params):
            h = jax.nn.relu(h)
    logits = h.astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def make_step(batch):
    def step(params, samples, labels, order, i):
        index = jax.lax.dynamic_slice_in_dim(order, i * batch, batch)
        x = jnp.take(samples, index, axis=0).astype(jnp.float32) / 255.0
        y = jnp.take(labels, index, axis=0)
        grads = jax.grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)

    return jax.jit(step, donate_argnums=(0,))


def main():
    args = ARGS
    records = []
    started = time.time()
    for batch in args.batches:
        steps = steps_for(args, batch)
        key = jax.random.PRNGKey(0)
        k1, k2, k3 = jax.random.split(key, 3)
        rows = batch * steps
        samples = jax.random.randint(k1, (rows, LAYERS[0]), 0, 256, jnp.int32).astype(jnp.uint8)
        labels = jax.random.randint(k2, (rows,), 0, LAYERS[-1], jnp.int32)
        order = jax.random.permutation(k3, rows).astype(jnp.int32)
        params = init_params(key)
        step = make_step(batch)
        for i in range(10):
            params = step(params, samples, labels, order, i % steps)
        jax.block_until_ready(params)
        results = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for i in range(steps):
                params = step(params, samples, labels, order, i)
            jax.block_until_ready(params)
            results.append((time.perf_counter() - start) * 1e6 / steps)
        records.append(record("jax", "jit bf16", batch, results))
    report(records, args.json)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}: {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
