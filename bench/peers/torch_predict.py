"""PyTorch's prediction latency on the CPU for the seed MLP (3072-3000-1000-10, ReLU, softmax), the
peer of `mptrain-bench --predict`: eager fp32 and eager bf16 autocast under torch.inference_mode(),
random inputs, one call per prediction. Prints the same table as mptrain-bench --predict (median and
best microseconds per call over the repeats; each repeat the mean of `--calls` calls after warm-up).
A benchmark, not a test."""
import argparse
import statistics
import time

import torch

from common import LAYERS
from torch_peer import make_model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="1,2,4,8", help="comma-separated row counts")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    parser.add_argument("--calls", type=int, default=20, help="predictions per repeat")
    args = parser.parse_args()
    model = make_model("cpu").eval()
    print(f"torch {torch.__version__} predict, cpu, {torch.get_num_threads()} threads, seed MLP "
          f"{'-'.join(str(n) for n in LAYERS)}")
    print(f"{'backend':<7} {'precision':<11} {'runs as':<11} {'rows':>6} {'us/predict':>14} {'best us':>14}")
    for rows in [int(r) for r in args.rows.split(",") if r]:
        inputs = torch.rand(rows, LAYERS[0])
        for name, autocast in (("fp32", False), ("bf16", True)):
            def predict():
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    return torch.softmax(model(inputs).float(), dim=1)
            for _ in range(3):
                predict()
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                for _ in range(args.calls):
                    predict()
                times.append((time.perf_counter() - start) * 1e6 / args.calls)
            print(f"{'torch':<7} {name:<11} {name:<11} {rows:>6} {statistics.median(times):>14.1f} {min(times):>14.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
