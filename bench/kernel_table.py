"""Turns Nsight Compute's raw CSV (bench/kernel_profile.sh) into a table per kernel: launches, mean
µs, DRAM bytes and bandwidth, and DRAM and SM throughput as a share of the peak, ordered by the
time the kernel takes per step; then the last whole step's launches in the order they ran, which
tells apart launches of one kernel (cuBLASLt runs several GEMMs, and its separate epilogues, under
the same name). Each step has one loss-head launch: only the launches from the first one up to the
last one are counted, so every kernel of a step is in each of those whole steps exactly once.
Usage: kernel_table.py NCU.csv TITLE"""
import csv
import sys
from collections import defaultdict

TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
# The kernel of which a step launches exactly one.
STEP_MARKER = "loss_head_kernel"
DRAM_PCT, SM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def short_name(name):
    for prefix in ("void ", "mpt::", "(anonymous namespace)::"):
        name = name.replace(prefix, "")
    return name.split("(")[0][:44]  # without the parameter list


def main():
    path, title = sys.argv[1], sys.argv[2]
    with open(path, newline="") as f:
        # ncu prints its own lines (==PROF==) before the CSV: start at the header row.
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    rows = [r for r in rows if r.get("Kernel Name") and r.get(TIME, "").strip() not in ("", "ns", "nsecond")]
    rows.sort(key=lambda r: number(r.get("ID", "0")))
    heads = [i for i, r in enumerate(rows) if STEP_MARKER in r["Kernel Name"]]
    if len(heads) < 2:
        print(f"{title}: fewer than two loss-head launches in {len(rows)} kernels of {path}: no whole step")
        sys.exit(1)
    last_step = rows[heads[-2]:heads[-1]]
    rows = rows[heads[0]:heads[-1]]
    kernels = defaultdict(lambda: {"launches": 0, "ns": 0.0, "bytes": 0.0, "dram": 0.0, "sm": 0.0})
    for r in rows:
        k = kernels[short_name(r["Kernel Name"])]
        k["launches"] += 1
        k["ns"] += number(r[TIME])
        k["bytes"] += number(r.get(READ, "0")) + number(r.get(WRITE, "0"))
        k["dram"] += number(r.get(DRAM_PCT, "0"))
        k["sm"] += number(r.get(SM_PCT, "0"))
    steps = len(heads) - 1
    total_ns = sum(k["ns"] for k in kernels.values())
    print(f"\n{title}: {len(rows)} launches, {steps} steps, kernel time {total_ns / steps / 1000:.1f} us/step")
    print(f"{'kernel':<44} {'n/step':>6} {'us':>8} {'us/step':>8} {'MB':>8} {'GB/s':>7} {'dram%':>6} {'sm%':>5}")
    for name, k in sorted(kernels.items(), key=lambda item: -item[1]["ns"]):
        n = k["launches"]
        mean_ns = k["ns"] / n
        gbps = k["bytes"] / k["ns"] if k["ns"] else 0.0  # bytes per ns = GB/s
        print(f"{name:<44} {n / steps:>6.2f} {mean_ns / 1000:>8.1f} {k['ns'] / steps / 1000:>8.1f} "
              f"{k['bytes'] / n / 1e6:>8.2f} {gbps:>7.0f} {k['dram'] / n:>6.1f} {k['sm'] / n:>5.1f}")
    print(f"the last whole step's {len(last_step)} launches in order, from its loss head:")
    print(f"{'#':>3} {'kernel':<44} {'us':>8} {'MB':>8} {'GB/s':>7} {'dram%':>6} {'sm%':>5}")
    for position, r in enumerate(last_step):
        ns, moved = number(r[TIME]), number(r.get(READ, "0")) + number(r.get(WRITE, "0"))
        print(f"{position:>3} {short_name(r['Kernel Name']):<44} {ns / 1000:>8.1f} {moved / 1e6:>8.2f} "
              f"{moved / ns if ns else 0.0:>7.0f} {number(r.get(DRAM_PCT, '0')):>6.1f} {number(r.get(SM_PCT, '0')):>5.1f}")


if __name__ == "__main__":
    main()
