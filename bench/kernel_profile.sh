#!/usr/bin/env bash
# What one steady-state training step is made of, kernel by kernel, on a GPU: Nsight Compute's
# counters over a few steps of mptrain-bench (mixed-bf16), replayed from their step graphs as the
# bench runs them (ncu profiles a graph's kernel nodes one by one), so that the folds and the grouped
# update, which act in recorded steps only, are what it shows.
# ncu runs with --clock-control none (the clocks are left as they are found) and --cache-control none
# (no cache flush before each kernel, as in a real step). Kernel times under ncu exclude the gaps
# between launches, which the bench's µs/step includes.
# Usage: bash bench/kernel_profile.sh BUILD_DIR OUT_FILE [BATCHES]   (BATCHES default 32,256)
# PROFILE_SECONDS=N bounds the whole run: each ncu call's timeout is cut to what is left, and a call
# that would get under 15 s is skipped (a timeout around this script would not stop them: each
# inner timeout runs its ncu in a process group of its own).
# PROFILE_SETTINGS="VAR=value ..." profiles the batches' steps under those settings (the device check
# passes the candidate defaults it chose: the step a session would commit); the tables' titles say so.
# Then the small-batch kernels' durations and warp states at batch 32; last, the fused SGD kernel's
# warp states at batch 32 (issue rate, occupancy), the bulk-copy fused SGD kernel's
# (MPTRAIN_CUDA_BULK_COPY_SGD=1) durations, DRAM throughput and warp states (and at batch 256 its
# durations and DRAM bytes) and stall reasons, then the CUDA-core kernel's stall reasons and pipes, by
# default, compiled for 3 blocks an SM, for exactly 32 rows, and both; last, the loss head's and the
# max pass's stall reasons at batch 32.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=$1
OUT_FILE=$2
BATCHES=${3:-32,256}
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
if [ -z "$ncu" ]; then
    echo "kernel profile: skipped (no ncu)" | tee "$OUT_FILE"; exit 0
fi
WORK=$(mktemp -d /tmp/mptrain-ncu.XXXXXX)
END=$((SECONDS + ${PROFILE_SECONDS:-100000}))
# capped <seconds> <command...>: the command under timeout, its cap cut to the time left.
capped() {
    local cap=$1 left=$((END - SECONDS))
    shift
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -lt 15 ]; then echo "skipped, no time left" >&2; return 124; fi
    timeout -k 5 "$cap" "$@"
}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
: >"$OUT_FILE"
# Some machines' runtimes do not let the profiler attach ("Failed to initialize the profiler:
# LibraryNotLoaded"): one kernel first, so that such a machine costs seconds, not two timeouts.
MPTRAIN_CUDA_GRAPHS=0 capped 40 "$ncu" --launch-count 1 --metrics gpu__time_duration.sum --csv --page raw \
    "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 2 --repeats 1 \
    >"$WORK/ncu_probe.csv" 2>"$WORK/ncu_probe.log"
probe_status=$?
if [ "$probe_status" != 0 ] || ! grep -q gpu__time_duration "$WORK/ncu_probe.csv"; then
    echo "kernel profile: ncu unusable on this machine, or the bench failed under it (probe exit $probe_status:" \
        "$(cat "$WORK/ncu_probe.log" "$WORK/ncu_probe.csv" | grep -m1 -iE 'error|fail' | cut -c1-160))" | tee "$OUT_FILE"
    exit 0
fi
settings=${PROFILE_SETTINGS:-}
if [ -n "$settings" ] && ! [[ $settings =~ ^(MPTRAIN_CUDA_[A-Z0-9_]+=[01]( |$))+$ ]]; then
    echo "kernel profile: PROFILE_SETTINGS ignored (only MPTRAIN_CUDA_X=0/1 words): $settings" | tee -a "$OUT_FILE"
    settings=""
fi
for batch in ${BATCHES//,/ }; do
    # The set-up and the first 260 launches of the warm-up epoch are skipped: its first steps run
    # eagerly and the next are captured (a capture launches nothing), and a replayed step is 13 to 16
    # kernels at batch 32 (the default step's 16 on an H200, 2026-12-05; 13 with grouped SGD). 80
    # launches then hold at least 4 whole steps, all before the epoch's end (whose order kernels would join a step):
    # 80 steps an epoch at batches up to 256, 40 at larger ones, whose steps have 12 kernels or more
    # (cuBLASLt's GEMMs, no fused SGD: 40 steps hold the window) and whose data set would be large.
    steps=$((batch <= 256 ? 80 : 40))
    (
        # shellcheck disable=SC2086,SC2163  # one VAR=value word per setting, exported as it is
        [ -z "$settings" ] || export $settings
        capped 75 "$ncu" --clock-control none --cache-control none \
            --launch-skip 260 --launch-count 80 \
            --metrics "$metrics" --csv --page raw --print-units base \
            "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch "$batch" --steps "$steps" --repeats 1 \
            >"$WORK/ncu_$batch.csv" 2>"$WORK/ncu_$batch.log"
    )
    echo "ncu exit status $? (batch $batch)" >>"$WORK/ncu_$batch.log"
    python3 bench/kernel_table.py "$WORK/ncu_$batch.csv" "mixed-bf16, batch $batch${settings:+, $settings}" >>"$OUT_FILE" \
        || { echo "batch $batch: no table; ncu said:"; tail -15 "$WORK/ncu_$batch.log"; } >>"$OUT_FILE"
done
# The small-batch kernels (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1, _BACKWARD=1) at batch 32, one step's
# three forward and two backward-data launches. The first version (one block per 32 output features)
# took 13.2 + 11.7 + 6.1 us for the forward on an H200 (2026-12-05), about cuBLASLt's 30; this one,
# K split across the blocks of a thread-block cluster, is unmeasured: its per-launch times test the
# predictions in bench/NOTES.md, so it comes before the fused SGD kernel's sections, which go first
# when time runs short.
MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 MPTRAIN_CUDA_GRAPHS=0 \
    capped 60 "$ncu" --clock-control none --cache-control none \
    --kernel-name regex:small_batch_ --launch-skip 50 --launch-count 5 \
    --metrics "$metrics" --section WarpStateStats --section Occupancy \
    "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
    >"$WORK/ncu_small_batch.txt" 2>&1
small_batch_status=$?
{ echo; echo "small-batch kernels at batch 32 (ncu exit status $small_batch_status):"
  grep -vE '^(mptrain|device|backend|cpu|cuda) ' "$WORK/ncu_small_batch.txt" | grep -E '^ |small_batch' | head -120; } >>"$OUT_FILE"
# The last layer around its loss head in one launch (MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1) at batch 32,
# a cluster of 8 blocks: unmeasured. Its duration against the three launches it replaces (cuBLASLt's
# forward kernels for 1000 -> 16, the head's 9.0 us, the DRELU GEMM: the default tables above), and
# what its warps wait for: the head's chain (long_scoreboard, math), the cluster's barriers
# (barrier, membar), or cold code (no_instruction).
MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 MPTRAIN_CUDA_GRAPHS=0 capped 40 "$ncu" --clock-control none --cache-control none \
    --kernel-name regex:head_layer_kernel --launch-skip 10 --launch-count 2 \
    --metrics "$metrics,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    --section WarpStateStats --section LaunchStats \
    "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
    >"$WORK/ncu_head_layer.txt" 2>&1
head_layer_status=$?
{ echo; echo "head layer in a cluster at batch 32, MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 (ncu exit status $head_layer_status):"
  grep -vE '^(mptrain|device|backend|cpu|cuda) ' "$WORK/ncu_head_layer.txt" | grep -E '^ |head_layer|ERROR' |
      sed -E 's/smsp__average_warps_issue_stalled_(.*)_per_issue_active\.ratio/stalled: \1/' | head -90; } >>"$OUT_FILE"
# Why the fused SGD kernel (batch 32) runs at a third of the copy bandwidth: its warps' stall
# reasons, issue rate and occupancy for one step's three launches, as Nsight Compute prints them.
MPTRAIN_CUDA_GRAPHS=0 capped 60 "$ncu" --clock-control none --cache-control none \
    --kernel-name regex:fused_sgd_kernel --launch-skip 40 --launch-count 3 \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
    >"$WORK/ncu_fused_sgd.txt" 2>&1
fused_status=$?
{ echo; echo "fused SGD at batch 32, warp states (ncu exit status $fused_status):"
  grep -vE '^(mptrain|device|backend|cpu|cuda) ' "$WORK/ncu_fused_sgd.txt" | grep -E '^ |fused_sgd' | head -150; } >>"$OUT_FILE"
# The sections above give the issue rate, not why the warps wait (ncu's stall breakdown is a chart);
# here each stall reason's cycles per issued instruction (all reasons ncu knows, by a regex), and
# what the kernel's pipes did: its FMA pipe's share of the cycles, its instructions, shared memory's
# wavefronts and bank conflicts, and its DRAM bytes. The first layer's launch of the default kernel,
# then of its other compilations: for 3 blocks an SM (MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1), for
# exactly 32 rows (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1), and both (each call capped, the last first to
# go when time runs short).
# (ncu gives up a call on a metric name it does not know: a call that fails is made again with the
# stall reasons alone, whose regex matches whatever names this ncu has.)
stall_reasons='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
stall_metrics=$stall_reasons,smsp__issue_active.avg.per_cycle_active,smsp__inst_executed.sum
stall_metrics+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
stall_metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
stall_metrics+=,gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
# profile_stalls <three blocks 0|1> <32 rows 0|1> <metrics>: ncu's output appended to ncu_stalls_<3 blocks><32 rows>.txt
# (The bulk copies off: on, they would take the layers these compilations are profiled on.)
profile_stalls() {
    MPTRAIN_CUDA_GRAPHS=0 MPTRAIN_CUDA_BULK_COPY_SGD=0 MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=$1 \
        MPTRAIN_CUDA_FUSED_SGD_32_ROWS=$2 capped 45 "$ncu" \
        --clock-control none --cache-control none --kernel-name regex:fused_sgd --launch-skip 39 --launch-count 1 \
        --metrics "$3" \
        "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
        >>"$WORK/ncu_stalls_$1$2.txt" 2>&1
}
# Fused SGD by bulk copies (MPTRAIN_CUDA_BULK_COPY_SGD=1), unmeasured: each block's masters streamed
# into shared memory by cp.async.bulk three tiles ahead, the weight gradient on tensor cores. One
# step's three launches at batch 32 (the seed MLP's three layers: its 10 logits run as 16, a multiple
# of 8, so the bulk copies take the last layer too; 39 skipped reach the 14th step, as below),
# their durations and DRAM throughput against the default kernel's 3 x 20.5 us at 1.0 TB/s on an H200,
# warp states and occupancy; then the first layer's stall reasons and pipes (its tensor pipe too), as
# for the CUDA-core kernel's compilations below, which go first when time runs short.
# profile_bulk_copy_step <seconds> <batch> <title> <lines> <ncu options...>: one step's three launches
# of the bulk-copy kernel at that batch, under a cap of that many seconds; the first lines of ncu's
# report appended to the profile under the title.
profile_bulk_copy_step() {
    local cap=$1 batch=$2 title=$3 lines=$4 status
    shift 4
    MPTRAIN_CUDA_BULK_COPY_SGD=1 MPTRAIN_CUDA_GRAPHS=0 capped "$cap" "$ncu" --clock-control none \
        --cache-control none --kernel-name regex:fused_sgd_bulk_copy --launch-skip 39 --launch-count 3 "$@" \
        "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch "$batch" --steps 12 --repeats 1 \
        >"$WORK/ncu_bulk_copy_$batch.txt" 2>&1
    status=$?
    { echo; echo "fused SGD by bulk copies at batch $batch, MPTRAIN_CUDA_BULK_COPY_SGD=1, $title (ncu exit status $status):"
      grep -vE '^(mptrain|device|backend|cpu|cuda) ' "$WORK/ncu_bulk_copy_$batch.txt" | grep -E '^ |fused_sgd' |
          head -"$lines"; } >>"$OUT_FILE"
}
profile_bulk_copy_step 60 32 "durations and warp states" 150 --metrics "$metrics" --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats
# The same kernel at batch 256 (its 256-row compilation, one block an SM), where it takes the place of
# the weight-gradient GEMMs and the update kernel (about 70 us a step by default): durations and DRAM
# bytes only.
profile_bulk_copy_step 45 256 "durations and DRAM bytes" 40 --metrics "$metrics"
# profile_bulk_copy_stalls <metrics>: ncu's output appended to ncu_stalls_bulk_copy.txt
profile_bulk_copy_stalls() {
    MPTRAIN_CUDA_GRAPHS=0 MPTRAIN_CUDA_BULK_COPY_SGD=1 capped 45 "$ncu" \
        --clock-control none --cache-control none --kernel-name regex:fused_sgd_bulk_copy --launch-skip 39 \
        --launch-count 1 --metrics "$1" \
        "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
        >>"$WORK/ncu_stalls_bulk_copy.txt" 2>&1
}
profile_bulk_copy_stalls "$stall_metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
stalls_status=$?
if [ "$stalls_status" != 0 ] && [ "$stalls_status" != 124 ] && [ "$stalls_status" != 137 ]; then
    profile_bulk_copy_stalls "$stall_reasons"
    stalls_status="$? (the stall reasons alone, after exit status $stalls_status with the pipes' metrics)"
fi
{ echo; echo "fused SGD by bulk copies at batch 32, MPTRAIN_CUDA_BULK_COPY_SGD=1, stall reasons" \
      "(cycles a warp waits for each, per instruction issued; ncu exit status $stalls_status):"
  grep -E 'fused_sgd|smsp__|sm__|l1tex__|gpu__|dram__|ERROR' "$WORK/ncu_stalls_bulk_copy.txt" |
      sed -E 's/smsp__average_warps_issue_stalled_(.*)_per_issue_active\.ratio/stalled: \1/' | head -40; } >>"$OUT_FILE"
for compilation in "0 0" "1 0" "0 1" "1 1"; do
    read -r three_blocks exact_rows <<<"$compilation"
    profile_stalls "$three_blocks" "$exact_rows" "$stall_metrics"
    stalls_status=$?
    # (124, or 137 after the kill: out of time, so no second call)
    if [ "$stalls_status" != 0 ] && [ "$stalls_status" != 124 ] && [ "$stalls_status" != 137 ]; then
        profile_stalls "$three_blocks" "$exact_rows" "$stall_reasons"
        stalls_status="$? (the stall reasons alone, after exit status $stalls_status with the pipes' metrics)"
    fi
    { echo; echo "fused SGD at batch 32, MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=$three_blocks" \
          "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=$exact_rows, stall reasons" \
          "(cycles a warp waits for each, per instruction issued; ncu exit status $stalls_status):"
      grep -E 'fused_sgd|smsp__|sm__|l1tex__|gpu__|dram__|ERROR' "$WORK/ncu_stalls_$three_blocks$exact_rows.txt" |
          sed -E 's/smsp__average_warps_issue_stalled_(.*)_per_issue_active\.ratio/stalled: \1/' | head -40; } >>"$OUT_FILE"
done
# The loss head and the max pass at batch 32: a few KB each and 9.0 and 7.9 us on an H200
# (2026-12-05), one dependent chain in a block or two. Their stall reasons say what the chain waits
# for: no_instruction (cold instruction fetch: the head held every case's code until 2026-12-06),
# long_scoreboard (L2 round trips), membar and barrier (the last block's fences and tickets).
MPTRAIN_CUDA_GRAPHS=0 capped 40 "$ncu" --clock-control none --cache-control none \
    --kernel-name 'regex:loss_head|max_abs' --launch-skip 20 --launch-count 2 --metrics "$stall_metrics" \
    "$BUILD/bin/mptrain-bench" --backend cuda --precision mixed-bf16 --batch 32 --steps 12 --repeats 1 \
    >"$WORK/ncu_stalls_head.txt" 2>&1
head_status=$?
{ echo; echo "loss head and max pass at batch 32, stall reasons" \
      "(cycles a warp waits for each, per instruction issued; ncu exit status $head_status):"
  grep -E 'loss_head|max_abs|smsp__|sm__|gpu__|dram__|ERROR' "$WORK/ncu_stalls_head.txt" |
      sed -E 's/smsp__average_warps_issue_stalled_(.*)_per_issue_active\.ratio/stalled: \1/' | head -60; } >>"$OUT_FILE"
cat "$OUT_FILE"
