"""Prints the closing table of a comparison from the JSON records of mptrain-bench and the peers:
µs per step per batch size, the fastest peer's time over mptrain's mixed-bf16 time (above 1: mptrain
is faster), and on a GPU the issue's targets for the H200 and the measured hardware floor. Peer
records that ran on another device than the backend summarised are left out (with a note); a peer
time whose steps did not train is marked "!" and left out of the best peer.
Usage: summary.py [--backend cuda|cpu] RECORDS.json...  (cuda: the device check; cpu: cpu_compare.sh)"""
import json
import re
import sys

from switch_table import EVIDENCE, SWITCHES, environment_setting

TARGETS_US = {32: 70, 256: 110, 4096: 480}  # mixed-bf16 on the H200 (issue 3)
# The peers' variants per backend, with their column titles.
PEERS = {
    "cuda": (("pytorch", "eager fp32", "pt fp32"), ("pytorch", "eager AMP fp16", "pt amp16"),
             ("pytorch", "CUDA-graph bf16", "pt graph"), ("jax", "jit bf16", "jax bf16")),
    "cpu": (("pytorch", "eager fp32", "pt fp32"), ("pytorch", "eager AMP fp16", "pt amp16"),
            ("pytorch", "eager AMP bf16", "pt bf16"), ("jax", "jit bf16", "jax bf16")),
}


def load(paths):
    """Every record of the files: a list of objects, or one object (one record); anything else is skipped."""
    records = []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            continue  # a stage that has not run (yet)
        except (OSError, ValueError) as error:
            print(f"summary: skipping {path}: {error}")
            continue
        items = data if isinstance(data, list) else [data]
        kept = [r for r in items if isinstance(r, dict)]
        if len(kept) < len(items):
            print(f"summary: {path}: skipping {len(items) - len(kept)} item(s) that are not records")
        records.extend(kept)
    return records


def device_of(r):
    """A peer record's device ("gpu", JAX's platform name for CUDA devices, reads as cuda); None if absent."""
    device = r.get("device")
    return "cuda" if device == "gpu" else device


def devices_of(records):
    """The devices the records' contexts name (mpt_context_describe's "device", e.g. "cuda:0 (NVIDIA
    H200, compute capability 9.0, 143771 MiB)"), in the order first seen; none for records without one."""
    devices = []
    for r in records:
        context = r.get("context")
        device = context.get("device") if isinstance(context, dict) else None
        if isinstance(device, str) and device not in devices:
            devices.append(device)
    return devices


def target_device_note(records):
    """A line saying the targets are an H200's when a record ran on another GPU (the device tool's first
    call gets an H100 unless it names nvidia-h200), None when every named device is an H200 or none is
    named."""
    others = [d for d in devices_of(records) if not re.search(r"\bH200\b", d)]  # (a GH200 is another chip)
    if not others:
        return None
    return (f"targets: issue 3's are an H200's; these steps ran on {', '.join(others)}: the met/MISS verdicts "
            "below compare with them all the same, and do not settle the issue")


def caveats(record):
    """What makes a record time something else than it says: a switch asked for that the backend had
    off (a device below its compute capability, or dependent launch turned off by a refused graph
    capture), the small-batch kernels run without their split of K, and steps that ran eagerly
    because their graph was refused. Empty for records without
    a context description (before the field existed, or the CPU's)."""
    context = record.get("context")
    if not isinstance(context, dict) or context.get("backend") != "cuda":
        return ""
    notes = []
    switches = context.get("switches", {})
    off = [name for name in SWITCHES if record.get(name) is True and switches.get(name) is False]
    if off:
        notes.append("asked for but off: " + ", ".join(off))
    # The small-batch kernels ran, each one block a tile: K was not split across a cluster (a device
    # below 9.0, a build without its code, or no cluster fit), which their time then says.
    ops = context.get("ops", {})
    if (ops.get("forward_small_batch") or ops.get("backward_data_small_batch")) and ops.get("small_batch_split") == 0:
        notes.append("small-batch kernels not split across clusters")
    # Default paths off (MPTRAIN_CUDA_STEP_FOLDS=0, a user's setting): the record is not the default step.
    if switches.get("step_folds") is False:
        notes.append("step folds off")
    graphs = context.get("graphs", {})
    if graphs.get("refusals"):
        notes.append(f"{graphs['refusals']} step graph(s) refused, last: {graphs.get('last_refusal', '?')}")
    return f"  [{'; '.join(notes)}]" if notes else ""


def idle_switches(record):
    """The switches the record had on whose paths did not run in its steps (grouped SGD's at batch 4096,
    where no fused SGD runs; the small-batch kernels past 64 rows): its time says nothing of them.
    None for a record whose context has no counters (from before them, or the CPU's)."""
    context = record.get("context")
    if not isinstance(context, dict) or "ops" not in context:
        return []
    return sorted(field for field, places in EVIDENCE.items() if record.get(field) is True
                  and not any(context.get(section, {}).get(key, 0) > 0 for section, key in places))


def host_note(record):
    """The host's part of the record's replayed steps (the CUDA backend's replay_host_time.h): the task's
    issuing up to its graph launch, and the launch (shortest: with room in the GPU's queue). Empty
    without it (records from before the fields existed, the CPU's, or steps that never replayed)."""
    context = record.get("context")
    graphs = context.get("graphs", {}) if isinstance(context, dict) else {}
    if not graphs.get("replays") or "replay_issue_ns_mean" not in graphs:
        return ""
    return (f"host per replayed step {graphs['replay_issue_ns_mean'] / 1000:.1f} us issuing + "
            f"{graphs['launch_ns_shortest'] / 1000:.1f} us launching (mean launch "
            f"{graphs['launch_ns_mean'] / 1000:.1f} us, with waits for a full queue)")


SEED_HIDDEN = [3000, 1000]


def model_name(record):
    return "MLP 3072-" + "-".join(str(width) for width in record.get("hidden", SEED_HIDDEN)) + "-10"


def against(record, what, baseline_us, baseline, where=""):
    """A step's line: what it does, its precision and batch, its us/step and its ratio to `baseline`
    (the step without it, `baseline_us` us/step, when measured), its caveats, and the switches it had
    on that did not run there."""
    ratio = f", {record['us_per_step'] / baseline_us:.2f}x {baseline}" if baseline_us else ""
    idle = idle_switches(record)
    return (f"{what}: {record['precision']} batch {record['batch']}{where}: "
            f"{record['us_per_step']:.0f} us/step{ratio}{caveats(record)}"
            + (f"  [idle here: {', '.join(idle)}]" if idle else ""))


def main():
    arguments = sys.argv[1:]
    backend = "cuda"
    if arguments[:1] == ["--backend"]:
        backend, arguments = arguments[1], arguments[2:]
    peer_columns = PEERS[backend]
    records = load(arguments)
    mine = [r for r in records if r.get("backend") == backend]
    # Other models than the seed MLP (mptrain-bench --hidden): the device check's narrow MLP, whose
    # step is the latency of the step's kernels and the host's issuing, with little work in them.
    other_models = [r for r in mine if r.get("hidden", SEED_HIDDEN) != SEED_HIDDEN]
    mine = [r for r in mine if r not in other_models]
    # Runs under MPTRAIN_CUDA_SPLIT_K=0 alone, shown against the default plain step and kept out of the
    # rest (with other switches as well: among the switched-on lines below).
    unsplit = [r for r in mine if r.get("split_k") is False and not any(r.get(field) is True for field in SWITCHES)]
    mine = [r for r in mine if r not in unsplit]
    # Runs under MPTRAIN_CUDA_FUSED_EPILOGUES=0 (a control: the backend's own epilogue kernels after
    # plain GEMMs, against cuBLASLt's fused epilogues), likewise.
    unfused = [r for r in mine if r.get("fused_epilogues") is False]
    mine = [r for r in mine if r not in unfused]
    # Runs with any switch on but the GEMM autotuning (switches.json), or split-K off with any other
    # switch, likewise.
    switched = [r for r in mine if any(r.get(field) is True for field in SWITCHES if field != "gemm_autotune")
                or (r.get("split_k") is False and any(r.get(field) is True for field in SWITCHES))]
    mine = [r for r in mine if r not in switched]
    # Runs under MPTRAIN_CUDA_GEMM_AUTOTUNE=1, likewise.
    autotuned = [r for r in mine if r.get("gemm_autotune") is True]
    mine = [r for r in mine if r not in autotuned]
    clipped = [r for r in mine if r.get("global_clipnorm", 0) > 0]
    averaged = [r for r in mine if r.get("ema_momentum", 0) > 0 and r not in clipped]
    dropped = [r for r in mine if r.get("dropout", 0) > 0 and r not in clipped + averaged]
    accumulated = [r for r in mine if r.get("micro_batch", 0) > 0 and r not in clipped + averaged + dropped]
    frozen = [r for r in mine if r.get("frozen_layers", 0) > 0 and r not in clipped + averaged + dropped + accumulated]
    # Another optimizer than plain SGD (records from before the field existed trained with SGD).
    optimized = [r for r in mine if r.get("optimizer", "sgd") != "sgd" and
                 r not in clipped + averaged + dropped + accumulated + frozen]
    standardized = [r for r in mine if r.get("standardized") and
                    r not in clipped + averaged + dropped + accumulated + frozen + optimized]
    # Steps that do more (or less) than the plain one: each shown against it.
    optioned = clipped + averaged + dropped + accumulated + frozen + optimized + standardized
    constant = [r for r in mine if r.get("lr_schedule", "constant") == "constant" and r not in optioned]
    ours = {(r["precision"], r["batch"]): r["us_per_step"] for r in constant if r.get("data", "resident") == "resident"}
    streamed = [r for r in constant if r.get("data") == "streamed"]
    scheduled = [r for r in mine if r.get("lr_schedule", "constant") != "constant" and r not in optioned]
    peers, untrained = {}, set()
    for r in records:
        if "framework" not in r:
            continue
        if device_of(r) not in (None, backend):  # records without a device: as before, taken as this backend's
            print(f"summary: skipping {r['framework']} {r.get('variant')} batch {r.get('batch')}: ran on "
                  f"{r['device']}, not {backend}")
            continue
        key = (r["framework"], r["variant"], r["batch"])
        peers[key] = r["us_per_step"]
        if r.get("trains") is False:
            untrained.add(key)
    floors = {r["batch"]: r for r in records if r.get("floor") == "gpu"}
    batches = sorted({b for (_, b) in ours} | {b for (_, _, b) in peers})

    def cell(value, mark=""):
        return f"{value:>{9 - len(mark)}.0f}{mark}" if value is not None else f"{'-':>9}"

    mixed_names = (("bf16", "mixed-bf16"), ("fp16", "mixed-fp16"))
    print()
    where = "data on device" if backend == "cuda" else "on this CPU"
    print(f"us/step, seed MLP 3072-3000-1000-10, SGD lr 0.01, {where} (median of repeats)")
    if backend == "cuda":
        ran_here = [r for r in records if r.get("backend") == backend]
        for device in devices_of(ran_here):
            print(f"device: {device}")
        # The device's L2 as the backend reads it.
        l2 = next((r["context"]["l2"] for r in ran_here
                   if isinstance(r.get("context"), dict) and isinstance(r["context"].get("l2"), dict)), None)
        if l2 and l2.get("bytes"):
            print(f"L2: {l2['bytes'] / 2**20:.1f} MiB, persisting set-aside at most "
                  f"{l2.get('set_aside_max', 0) / 2**20:.1f} MiB")
        note = target_device_note(ran_here)
        if note:
            print(note)
    header = f"{'batch':>6} {'fp32':>9} {'fp16':>9} {'bf16':>9} |"
    header += "".join(f" {title[:9]:>9}" for _, _, title in peer_columns)
    header += f" | {'best peer':>9} {'target':>8} {'mixed<fp32':<18}"
    print(f"{'':>6} {f'--- mptrain ({backend}) ---':>29} | {'--- peers ---':>39} |")
    print(header.rstrip())
    for batch in batches:
        fp32, fp16, bf16 = (ours.get((p, batch)) for p in ("fp32", "mixed-fp16", "mixed-bf16"))
        keys = [(f, v, batch) for f, v, _ in peer_columns]
        line = f"{batch:>6} {cell(fp32)} {cell(fp16)} {cell(bf16)} |"
        line += "".join(f" {cell(peers.get(key), '!' if key in untrained else '')}" for key in keys)
        # The best peer among those that train (an untrained step is no valid time).
        known = [peers[key] for key in keys if key in peers and key not in untrained]
        ratio = f"{min(known) / bf16:>8.2f}x" if known and bf16 else f"{'-':>9}"
        target = TARGETS_US.get(batch) if backend == "cuda" else None
        verdict = "-"
        if bf16 and target:
            verdict = ("met " if bf16 <= target else "MISS ") + str(target)
        # Each mixed precision that was measured, against fp32 ("-": one of the two is missing).
        faster = ", ".join(f"{name} " + ("-" if not (fp32 and ours.get((p, batch))) else
                                          "yes" if ours[(p, batch)] < fp32 else "NO")
                           for name, p in mixed_names if ours.get((p, batch)) or fp32)
        line += f" | {ratio} {verdict:>8} {faster or '-':<18}"
        print(line.rstrip())
    if untrained:
        print("! = that peer's timed steps did not train (weights unchanged or the loss on a batch it trained on "
              "did not fall): not a valid peer time, left out of best peer")
    print("best peer = fastest peer's us/step over mptrain mixed-bf16 (> 1: mptrain faster)")
    for r in constant:
        if caveats(r):
            print(f"caveat: {r['precision']} batch {r['batch']}{caveats(r)}")
    if floors:
        any_floor = next(iter(floors.values()))
        print(f"hardware floor (mptrain-gpu-floor, this run): copy {any_floor['copy_tb_per_s']:.2f} TB/s "
              f"(cudaMemcpyAsync {any_floor.get('memcpy_tb_per_s', 0):.2f}, copy kernel "
              f"{any_floor.get('copy_kernel_tb_per_s', 0):.2f}), bf16 GEMM {any_floor['bf16_tflop_per_s']:.0f} TFLOP/s")
        for batch in sorted(floors):
            floor = floors[batch]["floor_us"]
            fused = floors[batch].get("fused_floor_us")
            bf16 = ours.get(("mixed-bf16", batch))
            ratio = f"{bf16 / floor:.2f}x the floor" if bf16 else "no mptrain time"
            if bf16 and fused:
                ratio += f", {bf16 / fused:.2f}x the fused floor ({fused:.1f} us: no weight gradient in memory)"
            print(f"  batch {batch:>5}: floor {floor:7.1f} us (GEMMs {floors[batch]['gemm_us']:.1f} + update "
                  f"{floors[batch]['update_us']:.1f}); mptrain mixed-bf16 {ratio}")
    # Memory of the mixed-bf16 runs: the library's accounting (arenas, resident data, the buffers
    # beside them) and, on a GPU, the device's used memory as the driver counts it.
    for r in sorted((r for r in constant if r.get("precision") == "mixed-bf16" and r.get("data", "resident") == "resident"),
                    key=lambda r: r["batch"]):
        device = r.get("device_bytes", -1)
        driver = f", device {device / 2**20:.0f} MiB (driver)" if device is not None and device >= 0 else ""
        print(f"memory, mixed-bf16 batch {r['batch']}: peak {r.get('peak_bytes', 0) / 2**20:.0f} MiB (library){driver}")
    for r in sorted((r for r in constant if r.get("precision") == "mixed-bf16" and r.get("data", "resident") == "resident"),
                    key=lambda r: r["batch"]):
        if host_note(r):
            print(f"mixed-bf16 batch {r['batch']}: {host_note(r)}")
    for r in other_models:
        note = host_note(r)
        print(against(r, f"{model_name(r)} (the step's latency, little work)", ours.get((r["precision"], r["batch"])),
                      "the seed MLP's step") + (f"; {note}" if note else ""))
    for r in streamed:
        print(against(r, "streamed from host memory", ours.get((r["precision"], r["batch"])), "the resident data set"))
    for r in scheduled:
        # Against the constant rate on the same data path (resident, or streamed).
        data = r.get("data", "resident")
        fixed = next((c["us_per_step"] for c in constant if c["precision"] == r["precision"] and
                      c["batch"] == r["batch"] and c.get("data", "resident") == data), None)
        print(against(r, f"{r['lr_schedule']} learning-rate schedule", fixed, "the constant rate",
                      " (streamed)" if data == "streamed" else ""))
    # The others against the plain step (constant rate, resident data) of the same precision and batch.
    for r in clipped:
        print(against(r, f"gradients clipped to global norm {r['global_clipnorm']:g}", ours.get((r["precision"], r["batch"])),
                      "without clipping"))
    for r in averaged:
        print(against(r, f"weights averaged (ema {r['ema_momentum']:g})", ours.get((r["precision"], r["batch"])),
                      "without averaging"))
    for r in dropped:
        print(against(r, f"hidden outputs dropped (rate {r['dropout']:g})", ours.get((r["precision"], r["batch"])),
                      "without dropout"))
    peaks = {(r["precision"], r["batch"]): r.get("peak_bytes") for r in constant if r.get("data", "resident") == "resident"}

    def memory(r):
        """The record's peak memory against the plain step's, when both were measured."""
        peak = peaks.get((r["precision"], r["batch"]))
        return (f"; peak {r['peak_bytes'] / 2**20:.0f} MiB against {peak / 2**20:.0f} MiB"
                if peak and r.get("peak_bytes") else "")

    for r in accumulated:
        print(against(r, f"in micro-batches of {r['micro_batch']}", ours.get((r["precision"], r["batch"])), "in one pass")
              + memory(r))
    for r in frozen:
        print(against(r, f"first {r['frozen_layers']} layers frozen", ours.get((r["precision"], r["batch"])),
                      "the whole model's step"))
    for r in optimized:
        print(against(r, f"optimizer {r['optimizer']}", ours.get((r["precision"], r["batch"])), "plain SGD's step")
              + memory(r))
    for r in standardized:
        print(against(r, "inputs standardized per feature", ours.get((r["precision"], r["batch"])), "x / 255 alone"))
    for r in unsplit:
        print(against(r, "K never split (MPTRAIN_CUDA_SPLIT_K=0)", ours.get((r["precision"], r["batch"])),
                      "split where cuBLASLt chose"))
    for r in unfused:
        print(against(r, "epilogues in the backend's kernels (MPTRAIN_CUDA_FUSED_EPILOGUES=0)",
                      ours.get((r["precision"], r["batch"])), "cuBLASLt's fused epilogues"))
    for r in switched:
        switches = [environment_setting(field) for field in SWITCHES if r.get(field)]
        switches += [environment_setting("split_k", False)] if r.get("split_k") is False else []
        print(against(r, "switched on (" + ", ".join(switches) + ")",
                      ours.get((r["precision"], r["batch"])), "the default step"))
    for r in autotuned:
        print(against(r, "GEMM algorithms timed (MPTRAIN_CUDA_GEMM_AUTOTUNE=1)", ours.get((r["precision"], r["batch"])),
                      "the heuristic's first"))

if __name__ == "__main__":
    main()
