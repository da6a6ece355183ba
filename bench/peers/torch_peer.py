"""PyTorch peers for mptrain-bench on the same GPU: the seed MLP (3072-3000-1000-10, ReLU, softmax
cross-entropy), plain SGD lr 0.01, the uint8 data set on the device with gather + x/255 in every
step. Variants: eager fp32, eager AMP fp16 with GradScaler, and a bf16 (autocast) whole step
captured as one CUDA graph. Microseconds per step are timed with CUDA events over `steps` steps
after warm-up; the median of the repeats is reported (never a test, only a benchmark).
With --device cpu the same recipe runs on the host (eager fp32, eager AMP fp16 and bf16; no graph),
timed by the clock, for comparison with mptrain's CPU backend.
Every record carries `trains`: the timed steps changed the first layer's weights and lowered the loss
on the first batch (seen in every repeat: with random labels only a batch already trained on gets
easier), a forward pass before any step and after timing."""
import contextlib
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from common import LAYERS, LEARNING_RATE, emit, parse_args, record, steps_for, write_json


def make_model(device):
    torch.manual_seed(0)
    layers = []
    for i in range(len(LAYERS) - 1):
        layers.append(torch.nn.Linear(LAYERS[i], LAYERS[i + 1]))
        if i + 2 < len(LAYERS):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(device)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    return model


def make_data(rows, device):
    generator = torch.Generator(device=device).manual_seed(1)
    samples = torch.randint(0, 256, (rows, LAYERS[0]), dtype=torch.uint8, device=device, generator=generator)
    labels = torch.randint(0, LAYERS[-1], (rows,), dtype=torch.int64, device=device, generator=generator)
    return samples, labels


def batch_of(samples, labels, order, step, batch):
    index = order[step * batch:(step + 1) * batch]
    return samples.index_select(0, index).float().div_(255.0), labels.index_select(0, index)


def time_steps(run_step, steps, repeats, device):
    """run_step(i) issues step i; returns microseconds per step of each repeat (CUDA events on a
    GPU, the clock on the host, where every step has finished when it returns)."""
    for i in range(10 if device == "cuda" else 2):
        run_step(i)
    if device != "cuda":
        results = []
        for _ in range(repeats):
            start = time.perf_counter()
            for i in range(steps):
                run_step(i)
            results.append((time.perf_counter() - start) * 1e6 / steps)
        return results
    torch.cuda.synchronize()
    results = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(steps):
            run_step(i)
        end.record()
        end.synchronize()
        results.append(start.elapsed_time(end) * 1000.0 / steps)
    return results


def measure(model, run_step, steps, repeats, device, check_loss):
    """Times run_step and judges whether the steps trained: check_loss() is the loss on the check
    batch (the first), taken before and after timing; the first layer's weight is cloned in between."""
    loss_before = check_loss()
    weight = model[0].weight
    weight_before = weight.detach().clone()
    results = time_steps(run_step, steps, repeats, device)
    loss_after = check_loss()
    changed = not torch.equal(weight_before, weight.detach())
    trains = bool(changed and loss_after < loss_before)
    return results, {"trains": trains, "weights_changed": changed,
                     "loss_before": round(loss_before, 5), "loss_after": round(loss_after, 5)}


def eager_check(model, samples, labels, order, batch, device, dtype):
    """The loss on the check batch, forward only, in the variant's precision (cheap: no backward)."""
    x, y = batch_of(samples, labels, order, 0, batch)

    def check_loss():
        with torch.no_grad(), (torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()):
            logits = model(x)
        return F.cross_entropy(logits.float(), y).item()

    return check_loss


def eager_fp32(batch, steps, repeats, data, device):
    samples, labels, order = data
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step(i):
        x, y = batch_of(samples, labels, order, i % steps, batch)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return measure(model, step, steps, repeats, device, eager_check(model, samples, labels, order, batch, device, None))


def eager_amp(dtype):
    """Eager autocast in `dtype`: fp16 with a GradScaler (its range needs one), bf16 without."""

    def run(batch, steps, repeats, data, device):
        samples, labels, order = data
        model = make_model(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)

        def step(i):
            x, y = batch_of(samples, labels, order, i % steps, batch)
            with torch.autocast(device, dtype=dtype):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        check = eager_check(model, samples, labels, order, batch, device, dtype)
        return measure(model, step, steps, repeats, device, check)

    return run


def graph_bf16(batch, steps, repeats, data, device):
    """The whole step (gather, x/255, bf16 autocast forward, loss, backward, SGD) as one CUDA graph,
    following the whole-network capture recipe of PyTorch's CUDA-graphs notes: warm-up on a side
    stream, grads set to None before capture (backward then refills the graph's own .grad tensors on
    every replay), one static input (the batch's row indices) refilled in place before each replay,
    autocast without its weight cache (the cache's casts would be made once, at capture)."""
    samples, labels, order = data
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    static_index = order[:batch].clone()
    # The check batch's loss before any step, forward only, as the eager variants take it: the warm-up
    # below trains three times on that batch, and a loss taken after it (as a replay took it until
    # 2026-12-05) was lower than after the timed steps' many other batches at batch 32, which read as
    # "did not train" in every device check.
    eager_loss = eager_check(model, samples, labels, order, batch, device, torch.bfloat16)
    first_loss = [eager_loss()]

    def body():
        x = samples.index_select(0, static_index).float().div_(255.0)
        y = labels.index_select(0, static_index)
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        return loss

    # Warm up on a side stream (as the CUDA-graphs documentation prescribes), then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()

    def step(i):
        # The batch's row indices are the graph's only changing input (a 4-byte-per-row copy).
        start = (i % steps) * batch
        static_index.copy_(order[start:start + batch], non_blocking=True)
        graph.replay()

    def check_loss():
        # Before timing: the loss before the warm-up; after: the check batch's loss now (forward only).
        return first_loss.pop() if first_loss else eager_loss()

    return measure(model, step, steps, repeats, device, check_loss)


def main():
    args = parse_args(__doc__)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"pytorch {torch.__version__}: --device cuda but no CUDA device is available "
                 f"(torch.version.cuda {torch.version.cuda}); not timing the CPU instead")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in mptrain
    where = torch.cuda.get_device_name() if device == "cuda" else f"the CPU ({torch.get_num_threads()} threads)"
    print(f"pytorch {torch.__version__} on {where}", flush=True)
    records = []
    write_json(records, args.json)  # an empty list until the first record: never an older run's
    variants = (("eager fp32", eager_fp32), ("eager AMP fp16", eager_amp(torch.float16)))
    variants += ((("CUDA-graph bf16", graph_bf16),) if device == "cuda" else
                 (("eager AMP bf16", eager_amp(torch.bfloat16)),))
    started = time.time()
    for batch in args.batches:
        steps = steps_for(args, batch)
        try:
            samples, labels = make_data(batch * steps, device)
            order = torch.randperm(batch * steps, device=device)
        except Exception as error:  # e.g. out of memory: the next batch size may still fit
            print(f"pytorch batch {batch}: no data set: {error}\n{traceback.format_exc()}", flush=True)
            continue
        for name, run in variants:
            try:
                results, extra = run(batch, steps, args.repeats, (samples, labels, order), device)
                emit(records, record("pytorch", name, batch, results, device, **extra), args.json)
            except Exception as error:  # a peer failing must not hide the others
                # The whole traceback: a failed capture's __exit__ raises a second error that hides the first.
                print(f"pytorch {name} batch {batch}: failed: {error}\n{traceback.format_exc()}", flush=True)
        del samples, labels, order
        if device == "cuda":
            torch.cuda.empty_cache()
    print(f"pytorch {torch.__version__} on {where}: {len(records)} records, {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
