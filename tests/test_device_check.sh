#!/usr/bin/env bash
# bench/device_check.sh end to end on a machine without a GPU, its programs replaced by stand-ins
# (tests/device_check/README.md). A GPU session gets one device check: a slip in the script's shell,
# in its choice of candidate defaults or in its diagnosis of failed GPU tests would cost that check.
# Four times: with the GPU tests passing (the candidate defaults chosen, timed, run for 50 epochs and
# tested together; the sanitizers and the profile's probe), with one failing (nothing chosen; the
# failed case run again with the folds off and the graphs off), short of time (switch stages left out
# for the candidate's), and with every switch on together failing (chosen, and not to be committed).
# Usage: test_device_check.sh REPOSITORY_ROOT   (exit 77: skipped, when doctest's header is missing,
# without which the script stops before its stages as it would on the device)
set -u
root=$1
standins=$root/tests/device_check
if [ ! -f /usr/include/doctest/doctest.h ] && [ ! -f "$root/.deps/include/doctest/doctest.h" ]; then
    echo "SKIPPED: no doctest header (scripts/setup.sh installs doctest-dev)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cifar10"
for name in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
    truncate -s 30730000 "$work/cifar10/$name"  # the sizes the script checks; sparse
done
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks: $2"; }
lacks() { ! grep -qF -- "$2" "$1" || fail "$(basename "$1") has: $2"; }
# has_record <records.json> <Python condition on a record r>: some record of the file meets it.
has_record() {
    python3 -c 'import json, sys; sys.exit(not any(eval("(" + sys.argv[2] + ")", {"r": r}) for r in json.load(open(sys.argv[1]))))' \
        "$1" "$2"
}
# stage_line <VAR> <batch> <"N us/step, R.RRx">: the summary's line for the stage of switch VAR alone at
# that batch (mixed-bf16), against the default step and without an idle note (its path counted).
stage_line() {
    local line="switched on ($1=1): mixed-bf16 batch $2: $3 the default step"
    has "$summary" "$line"
    lacks "$summary" "$line  [idle"
}
# stage_record <field> <batch> <Python condition that sets the stage's record apart> <op counter>: the
# stage's own record in the passing run's records.json, its path counted in its context.
stage_record() {
    has_record "$work/out_passing/records.json" \
        "r.get(\"batch\") == $2 and r.get(\"$1\") and $3 and r[\"context\"][\"ops\"][\"$4\"] > 0" \
        || fail "records.json lacks the $1 stage's record at batch $2 with its path counted"
}

# run_check <name> [VAR=value...]: the script over a fresh copy of the stand-in build folder (the
# settings given override DEADLINE's 300 s).
run_check() {
    local name=$1
    shift
    rm -rf "$work/build" && mkdir -p "$work/build" && cp -r "$standins/bin" "$work/build/"
    env SKIP_PEERS=1 DEADLINE=300 "$@" PATH="$standins:$PATH" OUT="$work/out_$name" BUILD="$work/build" \
        CIFAR_DIR="$work/cifar10" timeout 280 bash "$root/bench/device_check.sh" >"$work/$name.log" 2>&1
    echo $?
}

status=$(run_check passing)
summary=$work/out_passing/summary.txt
[ "$status" = 0 ] || fail "passing GPU tests: exit status $status, not 0"
has "$summary" "GPU tests: 100% tests passed"
# The stand-in GPU is no H200: the table and the candidate's lines say the targets are an H200's.
has "$summary" "device: cuda:0 (stand-in GPU, compute capability 9.0, 143771 MiB)"
has "$summary" "L2: 50.0 MiB, persisting set-aside at most 37.5 MiB"
[ "$(grep -c "targets: issue 3's are an H200's; these steps ran on cuda:0 (stand-in GPU" "$summary")" = 2 ] ||
    fail "summary.txt lacks the note that the targets are an H200's, in the table and the candidate's lines"
# (Batch 256's one winner is the updates into the masters alone: the combined set there has dependent
# launch, 1.05x at 256; best_switches' own test covers "no set 2% faster".)
# (At batch 256 the bulk copies, where they run, take the updates from the GEMM into the masters.)
has "$summary" "switch choice: batch 256: fastest bulk_copy_sgd: 150 us/step, 0.85x the default 177"
# The control of cuBLASLt's epilogues off, shown against the default and kept out of the choice.
has "$summary" "epilogues in the backend's kernels (MPTRAIN_CUDA_FUSED_EPILOGUES=0): mixed-bf16 batch 4096: 634 us/step, 1.10x cuBLASLt's fused epilogues"
has "$summary" "switch choice: batch 4096: fastest dependent_launch, gradient_into_masters, grouped_sgd, relu_from_output, split_k_small_outputs: 453 us/step, 0.79x the default 576"
has "$summary" "switch choice: dependent_launch: dropped, alone it took 1.05x"
# (The stand-in's op counters: at batch 4096 no fused SGD ran.)
has "$summary" "no credit to grouped_sgd, whose paths did not run there"
has "$summary" "batch 4096: 453 us/step, 0.79x the default step  [idle here: grouped_sgd]"
# (The bulk copies take every fused SGD update of batch 32's combined set, so the 3-blocks and 32-rows
# compilations ran nowhere there: no credit, and neither is chosen, as faster sets are.)
has "$summary" "candidate defaults (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 MPTRAIN_CUDA_BULK_COPY_SGD=1 MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1):"
has "$summary" "switch choice: batch 32: fastest bulk_copy_sgd, dependent_launch, fused_sgd_32_rows, fused_sgd_three_blocks, grouped_sgd, head_layer_cluster, small_batch_backward, small_batch_forward: 109 us/step, 0.85x the default 129; no credit to fused_sgd_32_rows, fused_sgd_three_blocks, whose paths did not run there"
# (The bulk copies take no fp32 update: the candidate's fp32 step at batch 32 is without them.)
has "$summary" "batch 32: fp32 172 (0.95x default), mixed-fp16 109 (0.85x default), mixed-bf16 109 (0.85x default) us/step; target 70 MISSED"
has "$summary" "batch 256: fp32 235 (0.95x default), mixed-fp16 150 (0.85x default), mixed-bf16 150 (0.85x default) us/step"
has "$summary" "batch 4096: fp32 641 (0.80x default)"
has "$summary" "CIFAR-10 seed run: test accuracy 0.5534 (>= 0.55 met), GPU training 10.200 s"
has "$summary" "CIFAR-10 seed run, candidate defaults: test accuracy 0.5534 (>= 0.55 met), GPU training 8.000 s"
has "$summary" "memcheck: clean"
has "$summary" "racecheck: clean"
has "$summary" "synccheck: clean"
has "$summary" "kernel profile: ncu unusable on this machine"
# The candidate's switches on together in one GPU case, under its settings.
has "$summary" "candidate's switches together (test_cuda_switches_together): passed [switches on together (the environment's): MPTRAIN_CUDA_BULK_COPY_SGD=1 MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1]"
# The candidate's records reach the records the device tool brings back; the switch lines leave them out.
has_record "$work/out_passing/records.json" \
    'r.get("precision") == "fp32" and r.get("batch") == 4096 and r.get("grouped_sgd") and r.get("split_k_small_outputs")
        and r.get("relu_from_output") and r.get("gradient_into_masters") and r.get("small_batch_forward")
        and r.get("small_batch_backward") and r.get("bulk_copy_sgd")
        and not r.get("fused_sgd_three_blocks") and not r.get("fused_sgd_32_rows")' \
    || fail "records.json lacks the candidate's fp32 record at batch 4096"
# (No switch stage times fp32: a switched-on line for fp32 would be a candidate record.)
lacks "$summary" "MPTRAIN_CUDA_BULK_COPY_SGD=1): fp32"
# ReLU's derivative from the stored output: its stage ran at every batch, shown against the default
# step, its path counted (no idle note), and its own records reached records.json.
stage_line MPTRAIN_CUDA_RELU_FROM_OUTPUT 4096 "536 us/step, 0.93x"
has "$summary" "switched on (MPTRAIN_CUDA_RELU_FROM_OUTPUT=1): mixed-bf16 batch 32: 129 us/step, 1.00x the default step"
stage_record relu_from_output 4096 'not r.get("split_k_small_outputs")' backward_data_relu_from_output
# The fused SGD kernel at 3 blocks an SM: its stage ran at batch 32 alone (where fused SGD runs), its
# path counted there (no idle note), its own record in records.json; it is in batch 32's combined set
# and not in the larger batches' (no fused SGD past 64 rows).
stage_line MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS 32 "124 us/step, 0.96x"
lacks "$summary" "switched on (MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1): mixed-bf16 batch 256"
has "$summary" "switched on (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1, MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1, MPTRAIN_CUDA_DEPENDENT_LAUNCH=1, MPTRAIN_CUDA_GROUPED_SGD=1, MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1, MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1, MPTRAIN_CUDA_BULK_COPY_SGD=1, MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1): mixed-bf16 batch 32: 109 us/step, 0.85x the default step"
lacks "$summary" "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1): mixed-bf16 batch 4096"
stage_record fused_sgd_three_blocks 32 'not r.get("grouped_sgd")' fused_sgd_three_blocks
# Plain SGD's updates into the masters: its stage ran at batch 256 and 4096 alone (it runs only past
# fused SGD's 64 rows), its path counted there (no idle note), its own record in records.json; it is
# in the larger batches' combined set and not in batch 32's.
stage_line MPTRAIN_CUDA_GRADIENT_INTO_MASTERS 4096 "547 us/step, 0.95x"
has "$summary" "switched on (MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1): mixed-bf16 batch 256: 168 us/step, 0.95x the default step"
lacks "$summary" "MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1): mixed-bf16 batch 32"
has "$summary" "switched on (MPTRAIN_CUDA_DEPENDENT_LAUNCH=1, MPTRAIN_CUDA_GROUPED_SGD=1, MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1, MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1): mixed-bf16 batch 4096: 453 us/step, 0.79x the default step"
stage_record gradient_into_masters 4096 'not r.get("relu_from_output")' gradient_into_masters
# The fused SGD kernel compiled for 32 rows: its stage ran at batch 32 alone (the one batch it acts
# at), its path counted there (no idle note), its own record in records.json; it is in batch 32's
# combined set (the line above, with the 3-blocks kernel) and not in the larger batches'.
stage_line MPTRAIN_CUDA_FUSED_SGD_32_ROWS 32 "121 us/step, 0.94x"
lacks "$summary" "switched on (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1): mixed-bf16 batch 256"
lacks "$summary" "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1): mixed-bf16 batch 4096"
stage_record fused_sgd_32_rows 32 'not r.get("grouped_sgd") and not r.get("fused_sgd_three_blocks")' fused_sgd_32_rows
# Fused SGD by bulk copies: its stage ran at batch 32 alone (where fused SGD runs), its path counted
# there (no idle note), its own record in records.json; it is in batch 32's combined set (the line
# above, with the 3-blocks kernel) and not in the larger batches'.
stage_line MPTRAIN_CUDA_BULK_COPY_SGD 32 "119 us/step, 0.92x"
stage_line MPTRAIN_CUDA_BULK_COPY_SGD 256 "150 us/step, 0.85x"
stage_record bulk_copy_sgd 256 'not r.get("gradient_into_masters")' fused_sgd_bulk_copy
lacks "$summary" "MPTRAIN_CUDA_BULK_COPY_SGD=1): mixed-bf16 batch 4096"
stage_record bulk_copy_sgd 32 'not r.get("grouped_sgd") and not r.get("fused_sgd_32_rows")' fused_sgd_bulk_copy
# The last layer in its head's launch: its stage ran at batch 32, its path counted there, its own
# record; it is in batch 32's combined set (above).
stage_line MPTRAIN_CUDA_HEAD_LAYER_CLUSTER 32 "125 us/step, 0.97x"
stage_record head_layer_cluster 32 'not r.get("grouped_sgd") and not r.get("bulk_copy_sgd")' head_layers_in_cluster
# The small-batch kernels: the forward's stage alone and both together ran at batch 32 alone (they run
# only up to 64 rows), their paths counted there (no idle note), their own records in records.json;
# both are in batch 32's combined set (its line checked with the 3-blocks kernel's) and in no
# switched-on line past batch 32.
stage_line MPTRAIN_CUDA_SMALL_BATCH_FORWARD 32 "129 us/step, 1.00x"
both_small_batch="switched on (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1, MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1): mixed-bf16 batch 32: 129 us/step, 1.00x the default step"
has "$summary" "$both_small_batch"
lacks "$summary" "$both_small_batch  [idle"
! grep -qE '^switched on \([^)]*SMALL_BATCH[^)]*\): mixed-bf16 batch (256|4096)' "$summary" ||
    fail "summary.txt has a switched-on line past batch 32 with a small-batch kernel"
stage_record small_batch_forward 32 'not r.get("small_batch_backward")' forward_small_batch
lacks "$summary" "small-batch kernels not split across clusters"  # the stand-in's kernels split, as an H200's
stage_record small_batch_backward 32 'not r.get("grouped_sgd")' backward_data_small_batch

status=$(run_check failing MPTRAIN_STANDIN_GPU_TESTS=fail)
summary=$work/out_failing/summary.txt
tests_log=$work/out_failing/ctest_cuda.log
[ "$status" = 5 ] || fail "a failing GPU test: exit status $status, not 5"
has "$summary" "GPU tests: 50% tests passed, 1 tests failed out of 2"
has "$summary" "switch choice: 1 GPU test case(s) of the default paths failed, nothing chosen: a recorded begin_step is folded"
lacks "$summary" "candidate defaults ("
lacks "$summary" "CIFAR-10 seed run, candidate defaults"
has "$summary" "CIFAR-10 seed run: test accuracy 0.5534"
# The diagnosis: the case fails by default and with the graphs off, passes with the folds off.
python3 - "$tests_log" <<'PY' || fail "ctest_cuda.log: the diagnosis does not list the case as failing by default and with the graphs off only"
import sys
text = open(sys.argv[1]).read()
case = "    a recorded begin_step is folded into its loss head, which leaves found_inf as the memset would\n"
default = "--- test_cuda_ops, default: failing cases\n" + case
folds_off = "--- test_cuda_ops, MPTRAIN_CUDA_STEP_FOLDS=0: of those, failing\n--- test_cuda_ops, MPTRAIN_CUDA_GRAPHS=0"
graphs_off = "--- test_cuda_ops, MPTRAIN_CUDA_GRAPHS=0: of those, failing\n" + case
sys.exit(not (default in text and folds_off in text and graphs_off in text))
PY

# Short of time (each bench run 3 s, 200 s in all): the switch stages stop where the candidate's
# stages (160 s: its table, its case of the switches together and its seed run) would no longer fit,
# the combined sets first; the candidate is chosen from what ran, timed, tested and run for 50 epochs.
status=$(run_check short DEADLINE=200 MPTRAIN_STANDIN_BENCH_SECONDS=3 SKIP_FEATURES=1)
summary=$work/out_short/summary.txt
[ "$status" = 0 ] || fail "short of time: exit status $status, not 0"
has "$summary" "switch stages skipped to keep the candidate's time:"
has "$summary" "autotuned"
has "$summary" "candidate defaults (MPTRAIN_CUDA_"
has "$summary" "CIFAR-10 seed run, candidate defaults: test accuracy"
has "$summary" "candidate's switches together (test_cuda_switches_together): passed"
has_record "$work/out_short/records.json" 'r.get("batch") == 32 and r.get("small_batch_forward") and
    r.get("small_batch_backward") and r.get("dependent_launch") and r.get("grouped_sgd")
    and r.get("fused_sgd_three_blocks") and r.get("fused_sgd_32_rows") and r.get("bulk_copy_sgd")' \
    || fail "short of time: no record of the combined stage at batch 32"
# (The first of the switch stages that keep the candidate's time ran, the last did not.)
has "$summary" "switched on (MPTRAIN_CUDA_DEPENDENT_LAUNCH=1, MPTRAIN_CUDA_GROUPED_SGD=1, MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1, MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1): mixed-bf16 batch 4096"
lacks "$work/out_short/records.json" '"gemm_autotune": true'

# The GPU tests passing, and the switches-together case failing under the candidate's settings: the
# check says not to commit it, and fails (5) for that alone.
status=$(run_check together_failing MPTRAIN_STANDIN_SWITCHES_TOGETHER=candidate SKIP_FEATURES=1)
summary=$work/out_together_failing/summary.txt
tests_log=$work/out_together_failing/ctest_cuda.log
[ "$status" = 5 ] || fail "the candidate's switches together failing: exit status $status, not 5"
has "$summary" "GPU tests: 100% tests passed"
has "$summary" "candidate defaults (MPTRAIN_CUDA_"
has "$summary" "candidate's switches together (test_cuda_switches_together): FAILED (exit status 1), do not commit the candidate: tests/test_cuda_switches_together.cpp:240: ERROR: CHECK( result.loss == Approx( reference.loss ) ) is NOT correct!;logged: name := seed MLP, mixed-bf16, batch 32"
has "$tests_log" "=== the candidate's switches together"
# The case alone, required to find a GPU, under the candidate's settings.
has "$tests_log" "stand-in arguments: --test-case=the CUDA switches set on together* (MPTRAIN_REQUIRE_GPU=1)"
has "$tests_log" "switches on together (the environment's): MPTRAIN_CUDA_BULK_COPY_SGD=1 MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 MPTRAIN_CUDA_GROUPED_SGD=1"

if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed; the logs:"
    tail -n 40 "$work/passing.log" "$work/failing.log" "$work/short.log" "$work/together_failing.log"
    exit 1
fi
echo "device check with stand-ins: all four runs as expected"
