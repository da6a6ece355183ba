"""Prints the closing table of a comparison from the JSON records of mptrain-bench and the peers:
µs per step per batch size, the fastest peer's time over mptrain's mixed-bf16 time (above 1: mptrain
is faster), and on a GPU the issue's targets for the H200 and the measured hardware floor.
Usage: summary.py [--backend cuda|cpu] RECORDS.json...  (cuda: the device check; cpu: cpu_compare.sh)"""
import json
import sys

TARGETS_US = {32: 70, 256: 110, 4096: 480}  # mixed-bf16 on the H200 (issue 3)
# The peers' variants per backend, with their column titles.
PEERS = {
    "cuda": (("pytorch", "eager fp32", "pt fp32"), ("pytorch", "eager AMP fp16", "pt amp16"),
             ("pytorch", "CUDA-graph bf16", "pt graph"), ("jax", "jit bf16", "jax bf16")),
    "cpu": (("pytorch", "eager fp32", "pt fp32"), ("pytorch", "eager AMP fp16", "pt amp16"),
            ("pytorch", "eager AMP bf16", "pt bf16"), ("jax", "jit bf16", "jax bf16")),
}


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
    arguments = sys.argv[1:]
    backend = "cuda"
    if arguments[:1] == ["--backend"]:
        backend, arguments = arguments[1], arguments[2:]
    peer_columns = PEERS[backend]
    records = load(arguments)
    mine = [r for r in records if r.get("backend") == backend]
    ours = {(r["precision"], r["batch"]): r["us_per_step"] for r in mine if r.get("data", "resident") == "resident"}
    streamed = [r for r in mine if r.get("data") == "streamed"]
    peers = {(r["framework"], r["variant"], r["batch"]): r["us_per_step"] for r in records if "framework" in r}
    floors = {r["batch"]: r for r in records if r.get("floor") == "gpu"}
    batches = sorted({b for (_, b) in ours} | {b for (_, _, b) in peers})

    def cell(value):
        return f"{value:>9.0f}" if value is not None else f"{'-':>9}"

    print()
    where = "data on device" if backend == "cuda" else "on this CPU"
    print(f"us/step, seed MLP 3072-3000-1000-10, SGD lr 0.01, {where} (median of repeats)")
    header = f"{'batch':>6} {'fp32':>9} {'fp16':>9} {'bf16':>9} |"
    header += "".join(f" {title[:9]:>9}" for _, _, title in peer_columns)
    header += f" | {'best peer':>9} {'target':>7} {'mixed<fp32':>10}"
    print(f"{'':>6} {f'--- mptrain ({backend}) ---':>29} | {'--- peers ---':>39} |")
    print(header)
    for batch in batches:
        fp32, fp16, bf16 = (ours.get((p, batch)) for p in ("fp32", "mixed-fp16", "mixed-bf16"))
        peer_times = [peers.get((f, v, batch)) for f, v, _ in peer_columns]
        line = f"{batch:>6} {cell(fp32)} {cell(fp16)} {cell(bf16)} |" + "".join(f" {cell(t)}" for t in peer_times)
        known = [t for t in peer_times if t is not None]
        ratio = f"{min(known) / bf16:>8.2f}x" if known and bf16 else f"{'-':>9}"
        target = TARGETS_US.get(batch) if backend == "cuda" else None
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
