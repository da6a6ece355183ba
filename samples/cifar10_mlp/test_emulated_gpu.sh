#!/usr/bin/env bash
# The sample on the CUDA backend emulated on the CPU (mptrain-cifar10-emulated): two epochs of 4 steps
# on the generated data set, as the seed's RTX 2060 (compute capability 7.5) and as an H200 (9.0), with
# --precision auto. Each must pick its GPU's precision (mixed-fp16 with dynamic loss scaling below 8.0,
# mixed-bf16 from it), skip no step, replay the steady-state step as a CUDA graph, and learn.
# Usage: test_emulated_gpu.sh path/to/mptrain-cifar10-emulated
source "$(dirname "$0")/cli_test_common.sh"

context_value() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$work/$1.json"; }  # run, field of "context"

for run in 75:mixed-fp16 90:mixed-bf16; do
    capability=${run%%:*} precision=${run#*:}
    MPTRAIN_EMULATED_COMPUTE_CAPABILITY=$capability "$program" --backend cuda --precision auto --epochs 2 \
        --limit 128 --data "$work/no-cifar10" --json "$work/$capability.json" >"$work/out" 2>"$work/err"
    status=$?
    if [ "$status" -ne 0 ]; then
        fail "as compute capability $capability the run exited $status: $(tail -2 "$work/err")"
        continue
    fi
    grep -q "backend cuda | precision $precision" "$work/out" || fail "as $capability: $(grep '^mptrain' "$work/out")"
    [ "$(json_value "$capability" precision)" = "\"$precision\"" ] || fail "as $capability the JSON's precision is $(json_value "$capability" precision)"
    [ "$(context_value "$capability" compute_capability)" = "\"${capability:0:1}.${capability:1}\"" ] ||
        fail "as $capability the context reports compute capability $(context_value "$capability" compute_capability)"
    [ "$(json_value "$capability" skipped_steps)" = 0 ] || fail "as $capability $(json_value "$capability" skipped_steps) steps were skipped"
    replays=$(context_value "$capability" replays)
    [ "${replays:-0}" -gt 0 ] || fail "as $capability no step was replayed as a graph (replays: '$replays')"
    # From ln 10 = 2.30 at chance; 8 steps of the generated set's separated classes take it below.
    awk -v loss="$(json_value "$capability" train_loss)" 'BEGIN { exit !(loss < 2.3) }' ||
        fail "as $capability the last epoch's loss is $(json_value "$capability" train_loss), not below chance's 2.3"
    if [ "$precision" = mixed-fp16 ]; then
        grep -q "loss scale 32768, 0 skipped steps" "$work/out" ||
            fail "as $capability the dynamic loss scale is not reported: $(grep '^time' "$work/out")"
    fi
done
finish_checks "test_emulated_gpu.sh"
