"""Prints the device check's closing table from the JSON records of mptrain-bench and the peers:
µs per step per batch size, each peer's time over mptrain's mixed-bf16 time (above 1: mptrain is
faster), and the issue's targets for the H200."""
import json
import sys

TARGETS_US = {32: 70, 256: 110, 4096: 480}  # mixed-bf16 on the H200 (issue 3)
PEERS = (("pytorch", "eager fp32"), ("pytorch", "eager AMP fp16"), ("pytorch", "CUDA-graph bf16"), ("jax", "jit bf16"))


def load(paths):
    records = []
    for path in paths:
        try:
            with open(path) as f:
                records.extend(json.load(f))
        except (OSError, ValueError) as error:
            print(f"summary: skipping {path}: {error}")
    return records


def main():
    records = load(sys.argv[1:])
    cuda = [r for r in records if r.get("backend") == "cuda"]
    ours = {(r["precision"], r["batch"]): r["us_per_step"] for r in cuda if r.get("data", "resident") == "resident"}
    streamed = [r for r in cuda if r.get("data") == "streamed"]
    peers = {(r["framework"], r["variant"], r["batch"]): r["us_per_step"] for r in records if "framework" in r}
    floors = {r["batch"]: r for r in records if r.get("floor") == "gpu"}
    batches = sorted({b for (_, b) in ours} | {b for (_, _, b) in peers})

    def cell(value):
        return f"{value:>9.0f}" if value is not None else f"{'-':>9}"

    print()
    print("us/step, seed MLP 3072-3000-1000-10, SGD lr 0.01, data on device (median of repeats)")
    header = f"{'batch':>6} {'fp32':>9} {'fp16':>9} {'bf16':>9} |"
    header += "".join(f" {name[:9]:>9}" for name in ("pt fp32", "pt amp16", "pt graph", "jax bf16"))
    header += f" | {'best peer':>9} {'target':>7} {'mixed<fp32':>10}"
    print(f"{'':>6} {'--- mptrain (cuda) ---':>29} | {'--- peers ---':>39} |")
    print(header)
    for batch in batches:
        fp32, fp16, bf16 = (ours.get((p, batch)) for p in ("fp32", "mixed-fp16", "mixed-bf16"))
        peer_times = [peers.get((f, v, batch)) for f, v in PEERS]
        line = f"{batch:>6} {cell(fp32)} {cell(fp16)} {cell(bf16)} |" + "".join(f" {cell(t)}" for t in peer_times)
        known = [t for t in peer_times if t is not None]
        ratio = f"{min(known) / bf16:>8.2f}x" if known and bf16 else f"{'-':>9}"
        target = TARGETS_US.get(batch)
        verdict = "-"
        if bf16 and target:
            verdict = ("met " if bf16 <= target else "MISS") + f"{target:>3}"
        faster = "-"
        if fp32 and bf16 and fp16:
            faster = "yes" if max(bf16, fp16) < fp32 else "NO"
        line += f" | {ratio} {verdict:>7} {faster:>10}"
        print(line)
    print("best peer = fastest peer's us/step over mptrain mixed-bf16 (> 1: mptrain faster)")
    if floors:
        any_floor = next(iter(floors.values()))
        print(f"hardware floor (mptrain-gpu-floor, this run): copy {any_floor['copy_tb_per_s']:.2f} TB/s, "
              f"bf16 GEMM {any_floor['bf16_tflop_per_s']:.0f} TFLOP/s")
        for batch in sorted(floors):
            floor = floors[batch]["floor_us"]
            bf16 = ours.get(("mixed-bf16", batch))
            ratio = f"{bf16 / floor:.2f}x the floor" if bf16 else "no mptrain time"
            print(f"  batch {batch:>5}: floor {floor:7.1f} us (GEMMs {floors[batch]['gemm_us']:.1f} + update "
                  f"{floors[batch]['update_us']:.1f}); mptrain mixed-bf16 {ratio}")
    for r in streamed:
        resident = ours.get((r["precision"], r["batch"]))
        versus = f", {r['us_per_step'] / resident:.2f}x the resident data set" if resident else ""
        print(f"streamed from host memory: {r['precision']} batch {r['batch']}: {r['us_per_step']:.0f} us/step{versus}")


if __name__ == "__main__":
    main()
