"""Shared by the peer benchmarks: the seed MLP's shape and recipe, argument parsing, the timing
summary and the JSON record format that bench/peers/summary.py reads. Each record is printed and the
JSON file rewritten (atomically) as soon as it is measured, so a timeout kill keeps what was done."""
import argparse
import json
import os
import statistics

LAYERS = (3072, 3000, 1000, 10)  # CIFAR-10 flattened -> 3000 relu -> 1000 relu -> 10 softmax
LEARNING_RATE = 0.01
BATCHES = (32, 256, 4096)


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", default=",".join(str(b) for b in BATCHES), help="comma-separated batch sizes")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per repeat (0: chosen per batch size)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    parser.add_argument("--json", default="", help="write the records to this file")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: the same recipe on the host, to compare with mptrain's CPU backend")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batch.split(",") if b]
    return args


def steps_for(args, batch):
    if args.steps > 0:
        return args.steps
    return 200 if batch <= 256 else 40


def record(framework, variant, batch, per_step_us, device, **extra):
    """One measurement: the median of the repeats' microseconds per step, on `device` ("cuda" or
    "cpu": where it actually ran), with extra fields such as `trains` (the step changed the weights
    and lowered the loss on a batch it saw)."""
    result = {
        "framework": framework,
        "variant": variant,
        "batch": batch,
        "device": device,
        "us_per_step": round(statistics.median(per_step_us), 1),
        "min_us_per_step": round(min(per_step_us), 1),
        "repeats": len(per_step_us),
    }
    result.update(extra)
    return result


def write_json(records, path):
    """Writes to a temporary file and renames it over `path`: a kill never leaves a truncated file."""
    if not path:
        return
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    os.replace(temporary, path)


def emit(records, r, path):
    """Adds one record: prints it at once and rewrites the JSON file with every record so far."""
    records.append(r)
    trains = ""
    if "trains" in r:
        trains = "  trains" if r["trains"] else "  DOES NOT TRAIN"
        if r.get("loss_before") is not None and r.get("loss_after") is not None:
            trains += f" (loss {r['loss_before']:.4f} -> {r['loss_after']:.4f})"
    print(f"{r['framework']:<8} {r['variant']:<22} batch {r['batch']:>5}  {r['us_per_step']:>10.1f} us/step "
          f"(min {r['min_us_per_step']:.1f}) on {r['device']}{trains}", flush=True)
    write_json(records, path)
