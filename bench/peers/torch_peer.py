"""PyTorch peers for mptrain-bench on the same GPU: the seed MLP (3072-3000-1000-10, ReLU, softmax
cross-entropy), plain SGD lr 0.01, the uint8 data set on the device with gather + x/255 in every
step. Variants: eager fp32, eager AMP fp16 with GradScaler, and a bf16 (autocast) whole step
captured as one CUDA graph. Microseconds per step are timed with CUDA events over `steps` steps
after warm-up; the median of the repeats is reported (never a test, only a benchmark)."""
import time

import torch
import torch.nn.functional as F

from common import LAYERS, LEARNING_RATE, parse_args, record, report, steps_for


def make_model():
    torch.manual_seed(0)
    layers = []
    for i in range(len(LAYERS) - 1):
        layers.append(torch.nn.Linear(LAYERS[i], LAYERS[i + 1]))
        if i + 2 < len(LAYERS):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).cuda()
    for m in model:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    return model


def make_data(rows):
    generator = torch.Generator(device="cuda").manual_seed(1)
    samples = torch.randint(0, 256, (rows, LAYERS[0]), dtype=torch.uint8, device="cuda", generator=generator)
    labels = torch.randint(0, LAYERS[-1], (rows,), dtype=torch.int64, device="cuda", generator=generator)
    return samples, labels


def batch_of(samples, labels, order, step, batch):
    index = order[step * batch:(step + 1) * batch]
    return samples.index_select(0, index).float().div_(255.0), labels.index_select(0, index)


def time_steps(run_step, steps, repeats):
    """run_step(i) issues step i; returns microseconds per step of each repeat (CUDA events)."""
    for i in range(10):
        run_step(i)
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


def eager_fp32(batch, steps, repeats, data):
    samples, labels, order = data
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step(i):
        x, y = batch_of(samples, labels, order, i % steps, batch)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return time_steps(step, steps, repeats)


def eager_amp_fp16(batch, steps, repeats, data):
    samples, labels, order = data
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    scaler = torch.amp.GradScaler("cuda")

    def step(i):
        x, y = batch_of(samples, labels, order, i % steps, batch)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return time_steps(step, steps, repeats)


def graph_bf16(batch, steps, repeats, data):
    samples, labels, order = data
    model = make_model()
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

    return time_steps(step, steps, repeats)


def main():
    args = parse_args(__doc__)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in mptrain
    records = []
    variants = (("eager fp32", eager_fp32), ("eager AMP fp16", eager_amp_fp16), ("CUDA-graph bf16", graph_bf16))
    started = time.time()
    for batch in args.batches:
        steps = steps_for(args, batch)
        samples, labels = make_data(batch * steps)
        order = torch.randperm(batch * steps, device="cuda")
        for name, run in variants:
            try:
                records.append(record("pytorch", name, batch, run(batch, steps, args.repeats, (samples, labels, order))))
            except Exception as error:  # a peer failing must not hide the others
                print(f"pytorch {name} batch {batch}: failed: {error}", flush=True)
        del samples, labels, order
        torch.cuda.empty_cache()
    report(records, args.json)
    print(f"pytorch {torch.__version__} on {torch.cuda.get_device_name()}: {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
