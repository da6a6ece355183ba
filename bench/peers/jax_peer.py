"""JAX peer for mptrain-bench: the seed MLP (3072-3000-1000-10, ReLU, softmax cross-entropy), plain
SGD lr 0.01, fp32 parameters computed in bf16 (mixed precision), the whole step (gather of the
batch from the uint8 data set on the device, x/255, forward, backward, update) in one jit with the
parameters donated. Microseconds per step: wall time of `steps` dispatched steps after warm-up,
ending in block_until_ready; the median of the repeats (a benchmark, never a test). --device cpu
runs it on the host, for comparison with mptrain's CPU backend. --device cuda makes JAX use its CUDA
backend only (JAX_PLATFORMS=cuda), so a CUDA plugin that does not load fails here instead of timing
the CPU; every record names the platform it actually ran on. Each record carries `trains`: the timed
steps changed the first layer's weights and lowered the loss on the first batch (seen in every repeat).
Each batch size is measured on its own: one failing (out of memory, say) leaves the others."""
import os
import sys
import time
import traceback

from common import LAYERS, LEARNING_RATE, emit, parse_args, record, steps_for, write_json

ARGS = parse_args(__doc__)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# Read when jax is imported: only the asked-for backend, never a silent fallback to the CPU.
os.environ["JAX_PLATFORMS"] = ARGS.device

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


def platform():
    """The device the records run on: "cuda" for JAX's CUDA GPUs (platform "gpu"), else the platform."""
    try:
        device = jax.devices()[0]
    except Exception as error:  # RuntimeError, or (jax 0.10, no CUDA plugin) a bare AssertionError
        traceback.print_exc()
        sys.exit(f"jax {jax.__version__}: --device {ARGS.device}: JAX has no such backend here "
                 f"(JAX_PLATFORMS={ARGS.device}; is the CUDA plugin installed?): {error!r}")
    name = device.platform
    if name == "gpu":
        version = getattr(device.client, "platform_version", "").lower()
        name = "rocm" if "rocm" in version else "cuda"
    if name != ARGS.device:
        sys.exit(f"jax {jax.__version__}: --device {ARGS.device} but JAX runs on {device.platform}")
    return name, device.device_kind


def measure(batch, steps, repeats):
    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    rows = batch * steps
    samples = jax.random.randint(k1, (rows, LAYERS[0]), 0, 256, jnp.int32).astype(jnp.uint8)
    labels = jax.random.randint(k2, (rows,), 0, LAYERS[-1], jnp.int32)
    order = jax.random.permutation(k3, rows).astype(jnp.int32)
    params = init_params(key)
    step = make_step(batch)
    # The check batch: the first, which every repeat trains on.
    check_x = jnp.take(samples, order[:batch], axis=0).astype(jnp.float32) / 255.0
    check_y = jnp.take(labels, order[:batch], axis=0)
    check_loss = jax.jit(loss_fn)
    loss_before = float(check_loss(params, check_x, check_y))
    for i in range(10):
        params = step(params, samples, labels, order, i % steps)
    jax.block_until_ready(params)
    weight_before = jnp.array(params[0][0], copy=True)  # params are donated to each step
    results = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(steps):
            params = step(params, samples, labels, order, i)
        jax.block_until_ready(params)
        results.append((time.perf_counter() - start) * 1e6 / steps)
    loss_after = float(check_loss(params, check_x, check_y))
    changed = not bool(jnp.array_equal(weight_before, params[0][0]))
    return results, {"trains": bool(changed and loss_after < loss_before), "weights_changed": changed,
                     "loss_before": round(loss_before, 5), "loss_after": round(loss_after, 5)}


def main():
    args = ARGS
    device, kind = platform()
    print(f"jax {jax.__version__} on {device} ({kind})", flush=True)
    records = []
    write_json(records, args.json)  # an empty list until the first record: never an older run's
    started = time.time()
    for batch in args.batches:
        try:
            results, extra = measure(batch, steps_for(args, batch), args.repeats)
            emit(records, record("jax", "jit bf16", batch, results, device, platform=jax.devices()[0].platform,
                                 **extra), args.json)
        except Exception as error:  # one batch size failing (out of memory, say) must not hide the others
            print(f"jax jit bf16 batch {batch}: failed: {error}\n{traceback.format_exc()}", flush=True)
    print(f"jax {jax.__version__} on {kind}: {len(records)} records, {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
