#!/usr/bin/env bash
# The CUDA backend's device check (issue 3), for one H200 in about 6 minutes: builds for sm_90
# with CMake + Ninja, runs the GPU tests (ctest -R "cuda|context_description"), mptrain-bench
# --backend cuda (fp32, mixed-fp16, mixed-bf16 at batch 32, 256, 4096), the 50-epoch CIFAR-10
# seed run (mptrain-cifar10, batch 32, mixed-bf16; targets >= 55% test accuracy, < 5 s of GPU
# time) when the data set is there, the switched-off paths' stages and the candidate defaults (the
# switches those stages favour, bench/peers/best_switches.py: the table and the seed run again with
# them), and the PyTorch and JAX peers (bench/peers/), then the other features' benches as time
# allows, and prints a short table last. Logs go to a
# work folder; what the device tool should bring back (summary, test log, bench logs, seed-run log,
# kernel profile, merged JSON records: at most 8 files) is copied to $OUT after every stage, and
# every stage's timeout is capped by the time left before DEADLINE, so a call cut short still
# brings back all finished stages.
#
# The device machine has no Debian packages: carry doctest's and nlohmann-json's headers in the
# git-ignored .deps/. Once, on the development machine, in the repository root:
#   mkdir -p .deps/include && cp -r /usr/include/doctest /usr/include/nlohmann .deps/include/
# Then through the device tool, naming the H200 (issue 3's targets are an H200's; a first call that
# names no kind gets an H100, whose slower memory the summary then notes beside every verdict):
#   run(command="bash bench/device_check.sh", carry=[".deps"], timeout_s=540, kind="nvidia-h200")
# (DEADLINE=N in the command when timeout_s is not 540, e.g. when the device budget left is short.)
# The seed run needs the real CIFAR-10 set in /tmp/cifar10 (CIFAR_DIR overrides): three calls
# right before this one bring it (bench/stage_cifar10.sh, see its header); without it the stage
# is skipped.
# Device time: a session gets about 15 minutes, machine start (a minute or more) and every call
# included, and no machine starts with under 4 minutes left. So that a failed first try can be
# run again on the still-warm machine: two staging calls, then the third carrying
# [".cifar/part3"] with "bash bench/stage_cifar10.sh receive && DEADLINE=T bash
# bench/device_check.sh" and timeout_s=T+10, T = the budget left less about 200 s (at most 540);
# part3 holds .deps packed (stage_cifar10.sh pack), which receive unpacks for this script; a call
# on a machine that has gone cold carries [".deps"] itself.
# A second try: the same command with SKIP_CIFAR=1 SKIP_PEERS=1 and what is left. The machine keeps
# /tmp only while warm (about 30 s idle): make the three calls back to back, and if the second or
# third reply says warm: false, run this check at once with SKIP_CIFAR=1 rather than stage again.
# Exit status: the first failure's (4 build, 5 GPU tests or the candidate's case of its switches
# together, 6 bench, 7 seed run, 8 memcheck, 9 racecheck or synccheck hazards), 0 if none.
# Last, when time is left: Nsight Compute's per-kernel profile of a step (bench/kernel_profile.sh)
# and compute-sanitizer's memcheck over the op comparisons, then its racecheck and synccheck over
# the kernels with shared memory (the sanitizers first when a test failed).
# Environment: FULL_CTEST=1 builds and runs every other test too (else only the GPU tests' and the
# benches' targets are built); SKIP_PEERS=1 skips the peers; SKIP_CIFAR=1 skips the seed run;
# SKIP_FEATURES=1 skips the other features' benches.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mptrain-device-check}
CIFAR_DIR=${CIFAR_DIR:-/tmp/cifar10}
BUILD=${BUILD:-build-device}
WORK=$(mktemp -d /tmp/mptrain-check.XXXXXX)
mkdir -p "$OUT"
status=0
started=$SECONDS
candidate=""  # the switch set chosen from the switch stages (bench/peers/best_switches.py), once chosen
# The device call's timeout_s: the optional last stages start only when they can end before it
# (a call killed at its limit brings back only what is already in $OUT, and $OUT is filled last).
DEADLINE=${DEADLINE:-540}
stage() { echo; echo "=== $* ($((SECONDS - started)) s)"; }
fits() { [ $((DEADLINE - (SECONDS - started))) -gt $(($1 + 20)) ]; }  # $1 s and the summary
# Runs "$@" for at most $1 s, and never past DEADLINE less 30 s for the last publish; a stage that
# would get under 15 s is skipped (exit status 124, as timeout gives). A program that ignores the
# TERM (ncu, compute-sanitizer waiting on their target) is killed 10 s later.
limited() {
    local cap=$1 left
    shift
    left=$((DEADLINE - (SECONDS - started) - 30))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -lt 15 ]; then echo "skipped, no time left: $*"; return 124; fi
    timeout -k 10 "$cap" "$@"
}
# Whether an exit status is a timeout's (124: TERM, 137: KILL).
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }
# The first failure's exit status stays: a GPU test failing (5) is not hidden by a bench failing later.
failed() { [ "$status" = 0 ] && status=$1; return 0; }

# Copies everything measured so far to $OUT, with the summary as it stands: called after every
# stage, so a call killed at its limit still brings back all finished stages (at most 8 files).
publish() {
    local record_file stage_records=()
    # The candidate stages' records are the report's below (best_switches.py), not a switch's line.
    for record_file in "$WORK"/mptrain_*.json; do
        [[ $record_file == */mptrain_candidate* ]] || stage_records+=("$record_file")
    done
    {
        python3 bench/peers/summary.py "${stage_records[@]}" "$WORK"/floor.json "$WORK"/torch.json "$WORK"/jax.json \
            2>/dev/null
        [ -f "$WORK/ctest_cuda.log" ] &&
            echo "GPU tests: $(grep -E 'tests passed|tests failed' "$WORK/ctest_cuda.log" | tail -1)"
        grep -hoE "fp32: [0-9]+ fused plans refused.*" "$WORK/ctest_cuda.log" 2>/dev/null | head -1 \
            | sed 's/^/cuBLASLt epilogues, /'
        [ -f "$WORK/best_switches.txt" ] && sed '$d; s/^/switch choice: /' "$WORK/best_switches.txt"
        [ -n "$candidate" ] && (cd bench/peers && python3 best_switches.py report "$candidate" "$WORK"/mptrain_*.json)
        cat "$WORK/switches_skipped_line.txt" "$WORK/candidate_together_line.txt" "$WORK/cifar10_line.txt" \
            "$WORK/cifar10_experiments_line.txt" \
            "$WORK/memcheck_line.txt" "$WORK/racecheck_line.txt" "$WORK/synccheck_line.txt" 2>/dev/null
        grep -hE "^mixed-bf16, batch|^kernel profile|no table" "$WORK/kernels.txt" 2>/dev/null | sed 's/^mixed/ncu: mixed/'
        echo "after $((SECONDS - started)) s, exit status so far $status"
    } >"$WORK/summary.txt"
    python3 - "$WORK" "$OUT/records.json" <<'PY'
import glob, json, os, sys
records = []
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        data = json.load(open(path))
    except ValueError:
        continue
    # mptrain-cifar10 writes one object; the benches write lists of records.
    records.extend(data if isinstance(data, list)
                   else [dict(data, bench="mptrain-cifar10 seed run", file=os.path.basename(path))])
json.dump(records, open(sys.argv[2] + ".partial", "w"), indent=1)
os.replace(sys.argv[2] + ".partial", sys.argv[2])
PY
    cat "$WORK"/bench_*.log >"$OUT/bench.log" 2>/dev/null
    cat "$WORK"/torch.log "$WORK"/jax.log >"$OUT/peers.log" 2>/dev/null
    cat "$WORK"/cifar10.log "$WORK"/cifar10_experiments.log >"$OUT/cifar10.log" 2>/dev/null
    cp "$WORK"/summary.txt "$WORK"/ctest_cuda.log "$WORK"/kernels.txt "$WORK"/ctest_all.log "$OUT/" 2>/dev/null
    return 0
}

# CMake finds nvcc on PATH (or through CUDACXX).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

stage "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
nvcc --version | tail -1 || true

# (bench/stage_cifar10.sh receive keeps a .deps an earlier call carried in /tmp/mptrain-deps.)
if [ ! -f .deps/include/doctest/doctest.h ] && [ -f /tmp/mptrain-deps/include/doctest/doctest.h ]; then
    cp -r /tmp/mptrain-deps .deps
fi
if [ ! -f .deps/include/doctest/doctest.h ] && [ ! -f /usr/include/doctest/doctest.h ]; then
    echo "doctest headers missing: carry .deps (see the header of this script)"; exit 2
fi

stage "configure and build (sm_90)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPTRAIN_CUDA=ON -DMPTRAIN_CUDA_ARCHITECTURES=90 \
    -DMPTRAIN_BUILD_SAMPLES=ON -DMPTRAIN_BUILD_BENCH=ON >"$WORK/configure.log" 2>&1 \
    || { tail -30 "$WORK/configure.log"; cp "$WORK/configure.log" "$OUT/"; exit 3; }
grep -E "mptrain:" "$WORK/configure.log" || true
# Only what the stages below run, unless every test is to run: the other test programs, fuzz
# replays and bindings' programs took about 60% of the build's CPU time here.
targets=(test_cuda_ops test_cuda_pipeline test_cuda_fast_paths test_cuda_switches_together test_cuda_api
    test_context_description mptrain-bench mptrain-gpu-floor mptrain-cifar10)
[ "${FULL_CTEST:-0}" = 1 ] && targets=()
# -k 0: a target that fails to compile (another host compiler there) costs only the stages that
# need it; the others still run.
if ! limited 240 ninja -C "$BUILD" -k 0 -j "$(nproc)" "${targets[@]}" >"$WORK/build.log" 2>&1; then
    grep -E "error|FAILED" "$WORK/build.log" | head -40; tail -20 "$WORK/build.log"; cp "$WORK/build.log" "$OUT/"
    failed 4
    [ -x "$BUILD/bin/mptrain-bench" ] || [ -x "$BUILD/bin/test_cuda_ops" ] || exit 4
    echo "built in part: the stages whose programs exist run"
else
    echo "built"
fi

stage "GPU tests"
# MPTRAIN_REQUIRE_GPU=1: a case that finds no usable device (a driver older than the toolkit, no
# cuBLASLt) fails with the reason instead of passing as a skip. -V keeps the cases' messages (the
# fp32 epilogue report) in the log.
# -j 3: the five programs side by side (each process its own counters and arenas; the GPU and 16
# cores have room), so that the tests added since the last GPU run, whose time there is unknown,
# cannot push the stage past its limit; --timeout 120: a hung program still leaves the others
# theirs inside the stage's 180 s.
# (context_description: mpt_context_describe's CUDA members, graph and op counts.)
# (A build folder kept from an earlier call may hold that call's list of failed tests.)
rm -f "$BUILD/Testing/Temporary/LastTestsFailed.log"
gpu_tests_failed=0
# -E emulated: the GPU programs linked to the emulated backend (tests/cuda_emulation/) are CPU tests,
# not built here (not in targets): ctest would count each as a failure ("Not Run").
limited 180 env MPTRAIN_REQUIRE_GPU=1 ctest --test-dir "$BUILD" -R "cuda|context_description" -E emulated -V -j 3 \
    --timeout 120 \
    >"$WORK/ctest_cuda.log" 2>&1 || { failed 5; gpu_tests_failed=1; }
# The list of the GPU tests that failed, before another ctest run (FULL_CTEST) overwrites it.
cp "$BUILD/Testing/Temporary/LastTestsFailed.log" "$WORK/gpu_tests_failed.log" 2>/dev/null
grep -E "tests passed|tests failed|\*\*\*|ERROR|MESSAGE|FAILED|failed:|skipped, no time" "$WORK/ctest_cuda.log" | head -60
publish
if [ "${FULL_CTEST:-0}" = 1 ]; then
    stage "all other tests"
    limited 240 ctest --test-dir "$BUILD" -E "cuda|context_description" -j 8 --output-on-failure --timeout 200 2>&1 | tee "$WORK/ctest_all.log" \
        || failed 5
    publish
fi

stage "hardware floor (mptrain-gpu-floor)"
# The two ceilings (copy bandwidth, bf16 GEMM rate) and the step's bare-GEMM + update floor per
# batch, measured in this run: the summary reads mptrain's times as ratios to it.
if [ -x "$BUILD/bin/mptrain-gpu-floor" ]; then
    limited 60 "$BUILD/bin/mptrain-gpu-floor" --batch 32,256,4096 --json "$WORK/floor.json" 2>&1 \
        | tee "$WORK/bench_floor.log" || echo "the floor measurement failed"
    publish
fi

stage "mptrain-bench --backend cuda"
bench="$BUILD/bin/mptrain-bench"
# A bench run that timed out means a step hangs: the later step runs (bench, seed run) would hang
# as well, so they are skipped and the time goes to the peers.
steps_hang=0
bench_run() {  # bench_run <cap> <name> <bench args...>
    local cap=$1 name=$2 run_status run_start=$SECONDS
    shift 2
    if [ "$steps_hang" = 1 ]; then echo "skipped: a step hung in an earlier run" | tee "$WORK/bench_$name.log"; return; fi
    limited "$cap" "$bench" --backend cuda "$@" --json "$WORK/mptrain_$name.json" 2>&1 | tee "$WORK/bench_$name.log"
    run_status=${PIPESTATUS[0]}
    # (limited's own "no time left" also says 124, at once: a run left out for time is no failure.)
    [ "$run_status" = 0 ] || grep -q "^skipped, no time left" "$WORK/bench_$name.log" || failed 6
    if timed_out "$run_status" && [ $((SECONDS - run_start)) -ge 15 ]; then
        steps_hang=1
        echo "bench timed out after its cap: the later step runs are skipped" | tee -a "$WORK/bench_$name.log"
    fi
    publish
}
if [ -x "$bench" ]; then
    # 200 steps per timed epoch at small batches; 50 at 4096 keeps the generated data set small.
    bench_run 120 small --precision fp32,mixed-fp16,mixed-bf16 --batch 32,256
    bench_run 120 large --precision fp32,mixed-fp16,mixed-bf16 --batch 4096 --steps 50
    # A narrow MLP (3072-64-64-10), the seed MLP's kernels with little work in them: its step is the
    # latency of the step's kernels and what separates them, and shows whether the host's issuing
    # (the records' replay_issue_ns_mean + launch_ns_shortest) could bound a step near 64 us.
    bench_run 40 narrow --precision mixed-bf16 --batch 32,256 --hidden 64,64
else
    echo "no $bench (MPTRAIN_BUILD_BENCH off or bench/ missing)"
fi

# The issue's end-to-end target: 50 epochs of the full set, timed by CUDA events around each epoch
# (train_device_seconds) and by the clock (fit's train_seconds; the whole process here).
cifar10_staged() {
    local name
    for name in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
        [ "$(stat -c %s "$CIFAR_DIR/$name" 2>/dev/null)" = 30730000 ] || return 1
    done
}
cifar="$BUILD/bin/mptrain-cifar10"
# run_cifar <name> <title> [VAR=value...]: the 50 epochs under those settings; its line goes to
# $WORK/<name>_line.txt, which the summary prints.
run_cifar() {
    local name=$1 title=$2 cifar_status cifar_start_ns cifar_wall_ms
    shift 2
    stage "CIFAR-10 seed run (50 epochs, batch 32, mixed-bf16)${1:+, $*}"
    cifar_start_ns=$(date +%s%N)
    limited 120 env "$@" "$cifar" --data "$CIFAR_DIR" --epochs 50 --batch 32 --lr 0.01 --precision mixed-bf16 \
        --backend cuda --json "$WORK/$name.json" 2>&1 | tee "$WORK/$name.log"
    cifar_status=${PIPESTATUS[0]}
    cifar_wall_ms=$((($(date +%s%N) - cifar_start_ns) / 1000000))
    [ "$cifar_status" = 0 ] || failed 7
    python3 - "$WORK/$name.json" "$cifar_status" "$cifar_wall_ms" "$title" >"$WORK/${name}_line.txt" <<'PY'
import json, sys
path, exit_status, wall, title = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) / 1000, sys.argv[4]
try:
    run = json.load(open(path))
except (OSError, ValueError):
    why = f"timed out after {wall:.0f} s" if exit_status in (124, 137) else f"exit status {exit_status}"
    print(f"{title}: FAILED ({why}, no JSON; see the log); process {wall:.1f} s")
    sys.exit()
def context_note(context):
    # What the run had on (mpt_context_describe): the switches beyond the defaults, and refused graphs.
    if not isinstance(context, dict) or context.get("backend") != "cuda":
        return ""
    defaults = ("graphs", "fused_epilogues", "split_k", "step_folds")
    switches = context.get("switches", {})
    on = [name for name, value in switches.items() if value and name not in defaults]
    off = [name for name in defaults if switches.get(name) is False]
    graphs = context.get("graphs", {})
    note = " [switched on: " + (", ".join(on) or "none")
    note += "".join(f"; {name} off" for name in off)
    if graphs.get("refusals"):
        note += f"; {graphs['refusals']} step graph(s) refused, last: {graphs.get('last_refusal', '?')}"
    return note + "]"
accuracy, device = run["test_accuracy"], run.get("train_device_seconds", -1.0)
verdict = lambda ok: "met" if ok else "MISSED"
print(f"{title}: test accuracy {accuracy:.4f} (>= 0.55 {verdict(accuracy >= 0.55)}), "
      f"GPU training {device:.3f} s ({run.get('device_us_per_step', 0):.1f} us/step; < 5 s {verdict(0 <= device < 5)}), "
      f"wall: fit {run['train_seconds']:.2f} s, process {wall:.1f} s [{run['epochs']} epochs x "
      f"{run['steps'] // max(1, run['epochs'])} steps, batch {run['batch']}, {run['precision']}, {run['backend']}, "
      f"{run['data']}]" + ("" if exit_status == 0 else f" exit status {exit_status}")
      + ("" if run["data"] == "cifar10" else " NOT THE REAL CIFAR-10")
      + context_note(run.get("context")))
PY
    cat "$WORK/${name}_line.txt"
    publish
}
cifar_ready=0
if [ "${SKIP_CIFAR:-0}" = 1 ]; then
    echo "CIFAR-10 seed run: skipped (SKIP_CIFAR=1)" >"$WORK/cifar10_line.txt"
elif ! cifar10_staged; then
    echo "CIFAR-10 seed run: skipped ($CIFAR_DIR lacks the 6 files: bench/stage_cifar10.sh)" >"$WORK/cifar10_line.txt"
elif [ "$steps_hang" = 1 ]; then
    echo "CIFAR-10 seed run: skipped (a bench step hung)" >"$WORK/cifar10_line.txt"
elif [ ! -x "$cifar" ]; then
    echo "CIFAR-10 seed run: skipped (no $cifar: MPTRAIN_BUILD_SAMPLES off?)" >"$WORK/cifar10_line.txt"
else
    cifar_ready=1
    run_cifar cifar10 "CIFAR-10 seed run"
fi

# The switched-off paths, each against the default step above, then the candidate defaults.
# The candidate's stages decide what the session can commit, so the switch stages run while their
# time stays free: the combined sets first (what the choice most likely takes), then each switch
# alone (what the choice drops a switch by), then the rest; those left out are named in the summary.
# The candidate's table starts with over 110 s left (fits 90) and takes about 35 s; its GPU case of
# the switches together then needs over 65 s left (fits 45) and takes about 30 s; its seed run then
# needs over 80 s left (fits 60): 145 s, and 15 s for the publishes and a slower table. A switch
# stage takes about 15 s (its cap is for a hang).
candidate_reserve=$((cifar_ready == 1 ? 160 : 120))
switch_stages_skipped=()
room_for_switch_stage() {  # room_for_switch_stage <name>: a switch stage of about 15 s still leaves the candidate its time
    fits $((candidate_reserve - 5)) && return 0  # over reserve + 15 s left (fits N: over N + 20 s)
    echo "switch stage $1 skipped: it would take the candidate's time"
    switch_stages_skipped+=("$1")
    echo "switch stages skipped to keep the candidate's time: ${switch_stages_skipped[*]}" >"$WORK/switches_skipped_line.txt"
    return 1
}
if [ -x "$bench" ]; then
    stage "switched-off paths (mptrain-bench --backend cuda under each switch)"
    # Batch 32's combined set: both small-batch kernels, fused SGD grouped, at 3 blocks an SM,
    # compiled for 32 rows and by bulk copies, dependent launch, the last layer in its head's launch
    # (the small-batch kernels then run the hidden layers alone). (With the bulk copies on, the two
    # compilations of the CUDA-core kernel act only on the layers the bulk-copy kernel does not take:
    # none of the seed MLP's, whose 10 logits run as 16. Their counters then stay 0, so this set's
    # time is credited to the bulk copies, not to them.)
    MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 \
        MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 \
        MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 MPTRAIN_CUDA_BULK_COPY_SGD=1 MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 \
        bench_run 60 all_switches --precision mixed-bf16 --batch 32
    # Past batch 32's kernels: every switch that acts at batch 256 or 4096 at once (not the GEMM
    # autotuning, timed last), so that the candidate choice has a combined set to weigh there too.
    # K kept whole by the small-outputs rule rather than everywhere: the large GEMMs the same, the
    # small ones split as the default splits them, which is what a default could keep at batch 32.
    room_for_switch_stage all_switches_large &&
        MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 \
            MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 \
            bench_run 60 all_switches_large --precision mixed-bf16 --batch 256,4096 --steps 50
    # cuBLASLt never splitting K: where it did, the bias/ReLU epilogue ran as a separate pass (two
    # of 40 us each at batch 4096 on an H200, 2026-12-04) and split-K's reduction as another.
    room_for_switch_stage unsplit && MPTRAIN_CUDA_SPLIT_K=0 bench_run 90 unsplit --precision mixed-bf16 --batch 32,256,4096 --steps 50
    # A control, not a switch: cuBLASLt's epilogues off (plain GEMMs, then the backend's own bias,
    # ReLU, mask and bias-gradient kernels) past fused SGD's batches. At batch 4096 two of cuBLASLt's
    # epilogue kernels of their own took 80 us a step on an H200 (2026-12-05): whether the backend's
    # kernels do those passes faster says which way to take them next.
    room_for_switch_stage unfused &&
        MPTRAIN_CUDA_FUSED_EPILOGUES=0 bench_run 60 unfused --precision mixed-bf16 --batch 256,4096 --steps 50
    # The hidden ReLU layers' forward GEMMs with cuBLASLt's RELU_BIAS epilogue but no ReLU bit-mask
    # output, their backward-data GEMMs with no epilogue, then ReLU's derivative applied in place from
    # the stored outputs by the backend's kernel: the mask output is the suspect behind the two
    # separate epilogue::globalKernel passes of 40 us each at batch 4096 (H200, 2026-12-05). Read it
    # against the unfused control above, which moves every epilogue (the mask's too) into the
    # backend's kernels: this stage keeps cuBLASLt's forward epilogue and drops only the mask.
    room_for_switch_stage relu_from_output && MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 \
        bench_run 90 relu_from_output --precision mixed-bf16 --batch 32,256,4096 --steps 50
    # Plain SGD's weight updates past fused SGD's 64 rows as one cuBLASLt GEMM straight into the fp32
    # masters (it runs only above 64 rows, so batch 256 and 4096). By default there the weight-gradient
    # GEMM writes the fp32 gradient and update_kernel reads it back, 18 bytes a weight (update_kernel
    # took 3 x 16.2 us at batch 4096 on an H200); the switch moves 14 (the GEMM reads and writes the
    # masters, a finish kernel reads them to write the bf16 copies), plus one small start kernel a
    # layer. Predicted, unmeasured: -10 to -25 us a step at batch 4096, -5 to -13 at 256.
    room_for_switch_stage gradient_into_masters && MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 \
        bench_run 60 gradient_into_masters --precision mixed-bf16 --batch 256,4096 --steps 50
    # Programmatic dependent launch (each kernel's launch overlapping the kernel before it), on the
    # default kernels at batch 32 and 256.
    room_for_switch_stage dependent_launch &&
        MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 bench_run 60 dependent_launch --precision mixed-bf16 --batch 32,256
    # The layers' fused SGD updates as one launch (batch 32, CUDA cores).
    room_for_switch_stage grouped_sgd && MPTRAIN_CUDA_GROUPED_SGD=1 bench_run 60 grouped_sgd --precision mixed-bf16 --batch 32
    # The fused SGD kernel compiled for 3 blocks an SM instead of 2 (the same numbers; it runs only at
    # batches of at most 64 rows, so batch 32 alone). By default, ncu on an H200 at batch 32: the
    # kernel 3 x 20.5 us at 1.0 TB/s, 128 registers and 2 blocks an SM, 4 warps a scheduler with 1.36
    # eligible, an instruction issued in 64% of cycles.
    room_for_switch_stage fused_sgd_three_blocks && MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 \
        bench_run 60 fused_sgd_three_blocks --precision mixed-bf16 --batch 32
    # The fused SGD kernel also compiled for batches of exactly 32 rows (the same numbers; it acts only
    # at batch 32): the row loops unrolled whole, shared memory for 32 rows (24 KiB instead of 48),
    # whole tiles without edge checks, about 30% fewer instructions a whole tile in the sm_90 code
    # (about 870 against 1,260). The default kernel at batch 32 on an H200 took 3 x 20.5 us, issuing
    # in 64% of cycles (above). Predicted, unmeasured: -5 to -12 us a step at batch 32. With the
    # 3-blocks switch it spills nothing for a layer, 16 bytes for a group (80 registers; the kernel
    # for any rows spills 60 to 256 bytes there), which
    # batch 32's combined set above times.
    room_for_switch_stage fused_sgd_32_rows && MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 \
        bench_run 60 fused_sgd_32_rows --precision mixed-bf16 --batch 32
    # Fused SGD by bulk copies (compute capability 9.0, bf16 and fp16; batches of at most 256 rows, so
    # batch 32 and 256): each block's masters streamed into shared memory by cp.async.bulk three tiles
    # ahead, the weight gradient on tensor cores, in place of the CUDA-core kernel up to 64 rows and of
    # the weight-gradient GEMM and the update kernel (or the GEMM into the masters) from 65 to 256, for
    # the layers whose shapes it takes (the same update within rounding: the gradient's sums in
    # another order). The default kernel at batch 32 on an H200 took 3 x 20.5 us at 1.0 TB/s (above),
    # a third of the copy bandwidth. Unmeasured. While it is on, the 3-blocks and 32-rows compilations
    # reach only the layers it does not take.
    room_for_switch_stage bulk_copy_sgd && MPTRAIN_CUDA_BULK_COPY_SGD=1 \
        bench_run 60 bulk_copy_sgd --precision mixed-bf16 --batch 32,256
    # The last layer's forward, loss head and input gradient as one launch at batch 32, K split across
    # a cluster of 8 blocks (1000 inputs, 128 a block), in place of cuBLASLt's split-K forward with its
    # reduction and bias kernels, the head's one block (9.0 us on an H200, 2026-12-05) and the DRELU
    # GEMM. A fusion of the three into one block of warps took the step to 161 us against 109 (one SM
    # for 1 M products); this one spreads them over 8. Predicted, unmeasured: -8 to -15 us a step.
    room_for_switch_stage head_layer_cluster && MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 \
        bench_run 60 head_layer_cluster --precision mixed-bf16 --batch 32
    # Batch 32's forward layers as one tensor-core kernel each instead of cuBLASLt's (split-K) GEMMs
    # (the input gradients' kernel has no stage alone: it runs beside the forward's, below). Rebuilt
    # (2026-12-06) with K split across the blocks of a thread-block cluster on compute capability 9.0:
    # the first version, one block per 32 output features (94, 32 and 1 blocks for the seed MLP's
    # layers on 132 SMs), took the step to 115 us against the default's 109 on an H200. Unmeasured.
    room_for_switch_stage small_batch_forward &&
        MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 bench_run 60 small_batch_forward --precision mixed-bf16 --batch 32
    # Only the GEMMs whose outputs have a tile per multiprocessor or more kept whole (batch 4096's
    # large ones; at batch 32 every GEMM may split as by default, so the stage leaves it out). Last
    # of the switches alone: all_switches_large has it, and the choice needs it alone only to drop it.
    room_for_switch_stage split_k_small_outputs && MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 \
        bench_run 60 split_k_small_outputs --precision mixed-bf16 --batch 256,4096 --steps 50
    # Then both small-batch kernels together.
    room_for_switch_stage small_batch &&
        MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 \
            bench_run 60 small_batch --precision mixed-bf16 --batch 32
    # cuBLASLt's candidate algorithms timed when each GEMM is planned, against the heuristic's first.
    room_for_switch_stage autotuned &&
        MPTRAIN_CUDA_GEMM_AUTOTUNE=1 bench_run 90 autotuned --precision mixed-bf16 --batch 32,256,4096 --steps 50
    # The candidate defaults: the switches the stages above favour (bench/peers/best_switches.py: the
    # fastest set at each batch if 2% faster than the default step, less any switch whose GPU tests
    # failed or that alone was slower somewhere), timed at every precision and batch, so that the
    # session can commit them as the defaults on this call's evidence (a GPU session gets one check).
    # (About 30 s, and the candidate seed run after it; the default seed run has had its turn.)
    if fits 90; then
        stage "candidate defaults (the switches the stages favour)"
        candidate=$(cd bench/peers && python3 best_switches.py choose "$WORK/ctest_cuda.log" "$WORK"/mptrain_*.json \
            2>&1 | tee "$WORK/best_switches.txt" | tail -1)
        cat "$WORK/best_switches.txt"
        # (Only VAR=value words of the script's own table reach the eval.)
        if ! [[ $candidate =~ ^(MPTRAIN_CUDA_[A-Z0-9_]+=[01]( |$))+$ ]]; then
            [ -n "$candidate" ] && echo "unexpected choice, ignored: $candidate"
            candidate=""
        fi
        if [ -n "$candidate" ]; then
            # The default stages' caps; a candidate run that hangs says so in its log and the summary,
            # but does not cancel the later stages as a hang of the default step would.
            default_steps_hang=$steps_hang
            eval "$candidate bench_run 120 candidate --precision fp32,mixed-fp16,mixed-bf16 --batch 32,256"
            eval "$candidate bench_run 120 candidate_large --precision fp32,mixed-fp16,mixed-bf16 --batch 4096 --steps 50"
            steps_hang=$default_steps_hang
        fi
    else
        # (Two lines: the summary prints all but the last, which holds the settings.)
        printf '%s\n\n' "candidate defaults: skipped (no time left)" | tee "$WORK/best_switches.txt"
    fi
    publish
fi

# The other features' costs (bench/NOTES.md has their sections), against the small stage's plain
# step: last, after the issue's own stages (seed runs, peers, profile), as far as time allows.
feature_benches() {
    [ -x "$bench" ] && [ "${SKIP_FEATURES:-0}" != 1 ] || return 0
    stage "feature benches (as time allows)"
    # The same step with the data set left in host memory: batches staged through pinned buffers.
    bench_run 60 streamed --precision mixed-bf16 --batch 32,256 --streamed
    # A per-step cosine schedule: its rate is computed on the device, so the steps keep their graphs.
    bench_run 60 scheduled --precision mixed-bf16 --batch 32,256 --lr-schedule cosine
    # Gradient clipping by global norm: every layer's gradient kept, summed, then the updates.
    bench_run 60 clipped --precision mixed-bf16 --batch 32,256 --clipnorm 1
    # Weight averaging: one more pass over the fp32 masters after every step.
    bench_run 60 averaged --precision mixed-bf16 --batch 32,256 --ema 0.999
    # Dropout on both hidden layers: a mask drawn from their outputs into the next layer's input, and in place on their gradients.
    bench_run 60 dropped --precision mixed-bf16 --batch 32,256 --dropout 0.5
    # Gradient accumulation: batch 4096 as 8 micro-batches of 512 (each gradient GEMM adding into
    # the fp32 sums), against the one-pass step of the large stage, time and memory.
    bench_run 60 accumulated --precision mixed-bf16 --batch 4096 --steps 50 --micro-batch 512
    # Fine-tuning the head: the first two layers frozen (no weight gradient, no input gradient below
    # the last layer), against the whole model's step.
    bench_run 60 frozen --precision mixed-bf16 --batch 32,256 --frozen 2
    # Other optimizers than the plain SGD step: Adam's two state arrays against Lion's one (at small
    # batches the update's bytes are the step's floor).
    bench_run 60 adam --precision mixed-bf16 --batch 32,256 --optimizer adam
    bench_run 60 lion --precision mixed-bf16 --batch 32,256 --optimizer lion
    # Standardized inputs: a subtraction and a division a value more in the gather kernel.
    bench_run 60 standardized --precision mixed-bf16 --batch 32,256 --standardize
}

# The candidate's switches on together in one GPU case, under its settings
# (tests/test_cuda_switches_together.cpp: the seed MLP at batch 32, 128 and 512, overflowing fp16
# steps and fp32, against every switch off). Each switch's own cases ran mostly with it alone, and
# the GPU test stage ran this case with every switch on; a candidate that fails it is not to be
# committed, whatever its times. Before the candidate's seed run, which it leaves 80 s.
together_line="$WORK/candidate_together_line.txt"
if [ -n "$candidate" ] && [ -x "$BUILD/bin/test_cuda_switches_together" ] && fits 45; then
    stage "the candidate's switches together (test_cuda_switches_together)"
    # shellcheck disable=SC2086  # one VAR=value word per switch
    limited 75 env MPTRAIN_REQUIRE_GPU=1 $candidate "$BUILD/bin/test_cuda_switches_together" \
        --test-case='the CUDA switches set on together*' >"$WORK/candidate_together.log" 2>&1
    together_status=$?
    cat "$WORK/candidate_together.log"
    together_set=$(grep -ohE "switches on together \(.*" "$WORK/candidate_together.log" | head -1)
    # (doctest exits 0 when its filter matches no case: a pass needs the case to have run.)
    together_ran=$(grep -cE "test cases: *[1-9][0-9]* \| *[1-9]" "$WORK/candidate_together.log")
    # The failed checks, with the run each was in (doctest's "logged:" lines after its ERROR).
    together_errors=$(grep -hE " ERROR: |logged: " "$WORK/candidate_together.log" | head -6 | sed 's/^ *//' | paste -sd';' -)
    [ -n "$together_errors" ] || together_errors=$(tail -3 "$WORK/candidate_together.log" | paste -sd';' -)
    if [ "$together_status" = 0 ] && [ -n "$together_set" ] && [ "$together_ran" != 0 ]; then
        echo "candidate's switches together (test_cuda_switches_together): passed [$together_set]"
    elif [ "$together_status" = 0 ]; then
        failed 5
        echo "candidate's switches together (test_cuda_switches_together): NOT RUN (no case matched the filter)," \
            "not shown safe to commit"
    elif timed_out "$together_status"; then
        failed 5
        echo "candidate's switches together (test_cuda_switches_together): TIMED OUT, not shown safe to commit"
    else
        failed 5
        echo "candidate's switches together (test_cuda_switches_together): FAILED (exit status $together_status), do" \
            "not commit the candidate: $together_errors"
    fi >"$together_line"
    cat "$together_line"
    { echo; echo "=== the candidate's switches together"; cat "$WORK/candidate_together.log"; } >>"$WORK/ctest_cuda.log"
    publish
elif [ -n "$candidate" ]; then
    echo "candidate's switches together (test_cuda_switches_together): not run (no time left, or not built)" \
        >"$together_line"
fi

# The same 50 epochs with the candidate defaults (chosen above): what the seed run would take with
# them as the defaults. Before the peers: the 50-epoch target hangs on the switches, and the peers
# were timed in earlier checks. None chosen (the default step fastest, or GPU tests failed): none.
if [ "$cifar_ready" = 1 ] && [ -n "$candidate" ] && fits 60; then
    # shellcheck disable=SC2086  # one VAR=value word per switch
    run_cifar cifar10_experiments "CIFAR-10 seed run, candidate defaults" $candidate
elif [ "$cifar_ready" = 1 ] && [ -n "$candidate" ]; then
    echo "CIFAR-10 seed run, candidate defaults: skipped (no time left)" | tee "$WORK/cifar10_experiments_line.txt"
fi

if [ "${SKIP_PEERS:-0}" != 1 ]; then
    stage "PyTorch peers"
    (cd bench/peers && PYTHONUNBUFFERED=1 limited 150 python3 torch_peer.py --json "$WORK/torch.json") 2>&1 \
        | tee "$WORK/torch.log" || echo "pytorch peers failed or timed out"
    publish
    stage "JAX peer"
    (cd bench/peers && PYTHONUNBUFFERED=1 limited 90 python3 jax_peer.py --json "$WORK/jax.json") 2>&1 \
        | tee "$WORK/jax.log" || echo "jax peer failed or timed out"
    publish
fi


# Out-of-bounds and misaligned accesses in the kernels that the op comparisons would not see (a
# wrong index that happens to read plausible bytes): compute-sanitizer's memcheck over the op
# comparisons only (the training cases would take minutes under it), if time is left. Doctest
# matches a filter against the whole case name: '*CUDA*' takes every "CUDA ..." and "the CUDA ..."
# case (the loss head among them), 'misaligned*' the alignment errors.
run_memcheck() {
    local sanitizer memcheck_status probe_status
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    if [ -z "$sanitizer" ]; then
        echo "memcheck: skipped (no compute-sanitizer)" >"$WORK/memcheck_line.txt"; return
    elif ! fits 60; then  # (about 5 s on an H200, 2026-12-04; its two timeouts allow 110)
        echo "memcheck: skipped (no time left)" >"$WORK/memcheck_line.txt"; return
    fi
    stage "compute-sanitizer memcheck (the op comparisons)"
    # Some machines' runtimes do not let the sanitizer attach ("Device not supported", then error
    # 999): a short case first tells that apart from a test failing under it.
    # MPTRAIN_REQUIRE_GPU=1: a case that finds no device fails rather than skips (a clean memcheck
    # of skipped cases would say nothing).
    limited 40 env MPTRAIN_REQUIRE_GPU=1 "$sanitizer" --tool memcheck "$BUILD/bin/test_cuda_ops" \
        --test-case='the CUDA backend describes*' >"$WORK/memcheck_probe.log" 2>&1
    probe_status=$?
    if timed_out "$probe_status"; then
        echo "memcheck: skipped (its probe, one short case, took over 40 s)" >"$WORK/memcheck_line.txt"
        return
    elif [ "$probe_status" != 0 ]; then
        echo "memcheck: unusable on this machine, or the probe case failed (probe exit $probe_status: $(grep -h -m1 \
            -iE 'error|not supported|fail' "$WORK/memcheck_probe.log" | cut -c1-120))" >"$WORK/memcheck_line.txt"
        { echo; echo "=== compute-sanitizer probe"; cat "$WORK/memcheck_probe.log"; } >>"$WORK/ctest_cuda.log"
        return
    fi
    limited 70 env MPTRAIN_REQUIRE_GPU=1 "$sanitizer" --tool memcheck --error-exitcode 9 "$BUILD/bin/test_cuda_ops" \
        --test-case='*CUDA*,misaligned*' >"$WORK/memcheck.log" 2>&1
    memcheck_status=$?
    tail -25 "$WORK/memcheck.log"
    case $memcheck_status in
        0) echo "memcheck: clean" ;;
        9) echo "memcheck: ERRORS ($(grep -c '^========= Invalid' "$WORK/memcheck.log") reported; see ctest_cuda.log)"; failed 8 ;;
        124|137) echo "memcheck: timed out after 70 s" ;;
        *) echo "memcheck: the tests failed under it (exit $memcheck_status; see ctest_cuda.log)" ;;
    esac >"$WORK/memcheck_line.txt"
    { echo; echo "=== compute-sanitizer memcheck"; cat "$WORK/memcheck.log"; } >>"$WORK/ctest_cuda.log"
}

# Shared-memory races and barrier misuse in the kernels that stage tiles or partial sums in shared
# memory (fused SGD, one layer and grouped, for 32 rows, and by bulk copies on small layers; the
# small-batch kernels; the bias-gradient, loss head and max kernels, the ReLU backward's that takes
# the maxima, and the last layer around its head in a cluster), which the op comparisons may pass by luck: the switched-off ones are the
# candidate defaults. compute-sanitizer's racecheck and synccheck over their op comparisons, after memcheck
# (whose probe said whether the sanitizer attaches here; a memcheck cut at its 70 s, which the op
# cases added since the last GPU run may need, still says so), if time is left.
run_shared_memory_checks() {
    local sanitizer tool check_status
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    for tool in racecheck synccheck; do
        # After memcheck ran here, to its end or to its time limit (the sanitizer attaches: its probe
        # passed), not after a probe that failed or took too long.
        if [ -z "$sanitizer" ] || ! grep -qE "^memcheck: (clean|ERRORS|timed out)" "$WORK/memcheck_line.txt" 2>/dev/null; then
            echo "$tool: skipped (memcheck did not run here)" >"$WORK/${tool}_line.txt"; continue
        elif ! fits 60; then
            echo "$tool: skipped (no time left)" >"$WORK/${tool}_line.txt"; continue
        fi
        stage "compute-sanitizer $tool (the kernels with shared memory)"
        # (Doctest's filter: commas separate patterns, so the names are matched by words without one.)
        # cuBLASLt's own kernels run unchecked: on an H200 (2026-12-05) racecheck reported hazards
        # inside an nvjet GEMM kernel (NVIDIA's shared memory, none of ours), and checking cuBLASLt's
        # kernels used up the stage's 60 s before the op cases ended. (The regex matches the whole
        # name, mangled or not, whether the sanitizer searches it or requires a full match: the form
        # has never run on a GPU.)
        limited 60 env MPTRAIN_REQUIRE_GPU=1 "$sanitizer" --tool "$tool" --error-exitcode 9 \
            --kernel-name-exclude 'regex=.*(nvjet|cublas|globalKernel).*' "$BUILD/bin/test_cuda_ops" \
            --test-case='*small-batch kernel*,*several layers*,*every optimizer*,*loss head*,*max_abs*,*bulk copies on small layers*,*for 32 rows*,*derivative in place takes*,*head layer in a cluster*' \
            >"$WORK/$tool.log" 2>&1
        check_status=$?
        tail -12 "$WORK/$tool.log"
        case $check_status in
            0) echo "$tool: clean" ;;
            9) echo "$tool: HAZARDS ($(grep -ciE '^========= (error|warning|barrier|invalid|race)' "$WORK/$tool.log") reported; see ctest_cuda.log)"
               failed 9 ;;
            124|137) echo "$tool: timed out after 60 s" ;;
            *) echo "$tool: the tests failed under it (exit $check_status; see ctest_cuda.log)" ;;
        esac >"$WORK/${tool}_line.txt"
        { echo; echo "=== compute-sanitizer $tool"; cat "$WORK/$tool.log"; } >>"$WORK/ctest_cuda.log"
    done
}

# A step kernel by kernel (Nsight Compute), for the next round of tuning, if time is left.
run_kernel_profile() {
    # About 35 s for two batches on an H200 (2026-12-04): a 40 s probe, then up to 75 s per batch,
    # cut at the deadline. Batch 256 last (its target is the furthest off, 155 us against 110, and
    # no profile of it has been taken), then the fused SGD kernel's compilations at batch 32.
    if ! fits 60; then
        echo "kernel profile: skipped (no time left)" >"$WORK/kernels.txt"; return
    fi
    stage "kernel profile (ncu, mixed-bf16, batch 32, 4096 and 256${candidate:+, candidate defaults})"
    # Its ncu calls bound by what is left (PROFILE_SECONDS), 10 s inside the script's own cap. The
    # steps profiled are the candidate's when one was chosen: what the session would commit.
    local seconds=$((DEADLINE - (SECONDS - started) - 40))
    [ "$seconds" -gt 190 ] && seconds=190
    PROFILE_SETTINGS=$candidate PROFILE_SECONDS=$seconds limited 200 \
        bash bench/kernel_profile.sh "$BUILD" "$WORK/kernels.txt" 32,4096,256 \
        || echo "kernel profile: failed or timed out" | tee -a "$WORK/kernels.txt"
}

# A GPU test program that failed, run again with the step's folds off and then with the step graphs
# off: the failing cases of each run, beside the default's, say whether a fold (begin_step into the
# loss head, the decision into the max pass: on by default, unmeasured until then), the recorded-task
# paths as a whole, or neither is at fault. Cases that assert a fold took place, or a graph replayed,
# fail under those settings by design; read the lists side by side.
diagnose_failed_gpu_tests() {
    local failed_list="$WORK/gpu_tests_failed.log" name program setting cases filter
    [ "$gpu_tests_failed" = 1 ] && [ -f "$failed_list" ] || return 0
    stage "failed GPU tests again, with the step folds off and with the graphs off"
    {
        for name in $(cut -d: -f2 "$failed_list"); do
            program="$BUILD/bin/test_$name"
            [ -x "$program" ] || continue
            # The default's failing cases (MPTRAIN_CUDA_GRAPHS=1 is the default), then only those
            # under the other two settings (doctest's -tc, commas in the names escaped).
            cases=$(limited 60 env MPTRAIN_REQUIRE_GPU=1 MPTRAIN_CUDA_GRAPHS=1 "$program" 2>&1 | failing_cases)
            echo "--- test_$name, default: failing cases"
            printf '%s\n' "$cases" | sed 's/^/    /'
            [ -n "$cases" ] || continue
            filter=$(printf '%s\n' "$cases" | sed 's/,/\\,/g' | paste -sd, -)
            for setting in MPTRAIN_CUDA_STEP_FOLDS=0 MPTRAIN_CUDA_GRAPHS=0; do
                echo "--- test_$name, $setting: of those, failing"
                limited 60 env MPTRAIN_REQUIRE_GPU=1 "$setting" "$program" "--test-case=$filter" 2>&1 \
                    | failing_cases | sed 's/^/    /'
            done
        done
    } | tee "$WORK/diagnosis.log"
    { echo; echo "=== failed GPU tests again"; cat "$WORK/diagnosis.log"; } >>"$WORK/ctest_cuda.log"
}
# The names of the cases that failed in a doctest program's output (bench/peers/gpu_test_log.py, the
# parser the candidate choice reads ctest's log with); a program cut short by `limited` says so.
failing_cases() { python3 bench/peers/gpu_test_log.py; }

# With the GPU tests passing the profile comes first; with a failure, the memory checker.
if [ "$status" = 0 ]; then
    run_kernel_profile; publish; run_memcheck; publish; run_shared_memory_checks
else
    diagnose_failed_gpu_tests; publish; run_memcheck; publish; run_shared_memory_checks; publish; run_kernel_profile
fi

feature_benches

stage "summary"
publish
cat "$WORK/summary.txt"
echo "exit status $status after $((SECONDS - started)) s"
exit $status
