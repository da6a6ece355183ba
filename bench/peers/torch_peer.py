"""PyTorch peers for mptrain-bench on the same GPU: the seed MLP (3072-3000-1000-10, ReLU, softmax
cross-entropy), plain SGD lr 0.01, the uint8 data set on the device with gather + x/255 in every
step. Variants: eager fp32, eager AMP fp16 with GradScaler, and a bf16 (autocast) whole step
captured as one CUDA graph. Microseconds per step are timed with CUDA events over `steps` steps
after warm-up; the median of the repeats is reported (never a test, only a benchmark).
With --device cpu the same recipe runs on the host (eager fp32, eager AMP fp16 and bf16; no graph),
timed by the clock, for comparison with mptrain's CPU backend."""
import time

import torch
import torch.nn.functional as F

from common import LAYERS, LEARNING_RATE, parse_args, record, report, steps_for


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

    return time_steps(step, steps, repeats, device)


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

        return time_steps(step, steps, repeats, device)

    return run


def graph_bf16(batch, steps, repeats, data, device):
    samples, labels, order = data
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    static_index = order[:batch].clone()

    def body():
        x = samples.index_select(0, static_index).float().div_(255.0)
        y = labels.index_select(0, static_index)
        with torch.autocast("cuda", dtype=torch.bfloat16):
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

    return time_steps(step, steps, repeats, device)


def main():
    args = parse_args(__doc__)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in mptrain
    records = []
    device = args.device
    variants = (("eager fp32", eager_fp32), ("eager AMP fp16", eager_amp(torch.float16)))
    variants += ((("CUDA-graph bf16", graph_bf16),) if device == "cuda" else
                 (("eager AMP bf16", eager_amp(torch.bfloat16)),))
    started = time.time()
    for batch in args.batches:
        steps = steps_for(args, batch)
        samples, labels = make_data(batch * steps, device)
        order = torch.randperm(batch * steps, device=device)
        for name, run in variants:
            try:
                data = (samples, labels, order)
                records.append(record("pytorch", name, batch, run(batch, steps, args.repeats, data, device)))
            except Exception as error:  # a peer failing must not hide the others
                print(f"pytorch {name} batch {batch}: failed: {error}", flush=True)
        del samples, labels, order
        if device == "cuda":
            torch.cuda.empty_cache()
    report(records, args.json)
    where = torch.cuda.get_device_name() if device == "cuda" else f"the CPU ({torch.get_num_threads()} threads)"
    print(f"pytorch {torch.__version__} on {where}: {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
