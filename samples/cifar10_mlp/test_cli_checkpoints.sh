#!/usr/bin/env bash
# The sample's checkpoints, signals and JSON file as a user meets them: --save-checkpoint and
# --resume (bit for bit against a straight run), refused resumptions, Ctrl-C and SIGTERM inside an
# epoch, and when and where --json is written. Short runs on the generated data set.
# Usage: test_cli_checkpoints.sh path/to/mptrain-cifar10
source "$(dirname "$0")/cli_test_common.sh"

# --save-checkpoint and --resume: 2 epochs saved, then 1 more from the file alone (the model and
# its options from the checkpoint, the per-epoch --lr-decay, which no checkpoint records, given
# again) end as 3 epochs straight, bit for bit: the same losses, printed to 9 digits.
recipe=(--optimizer adam --lr 0.002 --lr-decay 0.5 --label-smoothing 0.1 --clipnorm 2 --ema 0.9 --dropout 0.2
    --standardize)
resumable() {  # name, then flags
    local name=$1
    shift
    "$program" --data "$work/no-such-directory" --limit 256 --threads 2 --json "$work/$name.json" "$@" \
        >"$work/$name.out" 2>&1 || fail "run '$name' ($*) exited $?: $(tail -3 "$work/$name.out")"
}
resumable straight --epochs 3 "${recipe[@]}"
resumable first --epochs 2 "${recipe[@]}" --save-checkpoint "$work/run.safetensors"
resumable resumed --epochs 1 --lr-decay 0.5 --resume "$work/run.safetensors"
grep -q "^checkpoint: $work/run.safetensors" "$work/first.out" || fail "the first run did not say it saved its checkpoint"
grep -q "^resumed from $work/run.safetensors after 2 epochs (16 steps)" "$work/resumed.out" ||
    fail "the resumed run's header: $(grep -A1 '^data' "$work/resumed.out")"
grep -q "^Epoch 1/1 - 8 steps" "$work/resumed.out" || fail "the resumed epoch's line: $(grep '^Epoch' "$work/resumed.out")"
resumable decayed_first --epochs 1 --lr-schedule cosine --save-checkpoint "$work/decayed.safetensors"
resumable decayed_resumed --epochs 1 --resume "$work/decayed.safetensors"
grep -q "warning: the cosine learning-rate schedule of .* ended at step 8" "$work/decayed_resumed.out" ||
    fail "resumed past its schedule's end without a warning: $(grep -i warn "$work/decayed_resumed.out")"
grep -q "warning: the .* schedule" "$work/resumed.out" && fail "a constant rate's run was warned of a schedule's end"
grep -q "| adam | lr 0.0005 (x0.5 after each epoch) | label smoothing 0.1 | clipnorm 2 | ema 0.9 | dropout 0.2" \
    "$work/resumed.out" || fail "the resumed run's header shows other options: $(grep '^data' "$work/resumed.out")"
for field in train_loss test_loss test_accuracy ema_test_loss; do
    [ -n "$(json_value straight $field)" ] && [ "$(json_value resumed $field)" = "$(json_value straight $field)" ] ||
        fail "resumed $field $(json_value resumed $field), straight $(json_value straight $field)"
done
[ "$(json_value resumed steps)" = 8 ] || fail "the resumed run took $(json_value resumed steps) steps, not 8"
[ "$(json_value resumed epochs_before)" = 2 ] || fail "the resumed run's epochs_before: $(json_value resumed epochs_before)"
[ "$(json_value resumed optimizer)" = '"adam"' ] || fail "the resumed run's optimizer: $(json_value resumed optimizer)"
[ "$(json_value resumed standardize)" = true ] || fail "the resumed run does not standardize"
[ "$(json_value first train_loss)" != "$(json_value straight train_loss)" ] || fail "2 epochs trained as 3"
# The saved run's batch size is the resumed run's unless --batch names another, which is warned of.
resumable batch16 --epochs 1 --batch 16 --save-checkpoint "$work/batch16.safetensors"
resumable batch16_resumed --epochs 1 --resume "$work/batch16.safetensors"
[ "$(json_value batch16_resumed batch)" = 16 ] && grep -q "^Epoch 1/1 - 16 steps" "$work/batch16_resumed.out" ||
    fail "resumed without --batch: batch $(json_value batch16_resumed batch), $(grep '^Epoch' "$work/batch16_resumed.out")"
grep -q "warning: the run saved in" "$work/batch16_resumed.out" && fail "resumed in the saved batch size, yet warned"
resumable batch16_as_32 --epochs 1 --batch 32 --resume "$work/batch16.safetensors"
[ "$(json_value batch16_as_32 batch)" = 32 ] ||
    fail "resumed with --batch 32 trained in batches of $(json_value batch16_as_32 batch)"
grep -q "warning: the run saved in $work/batch16.safetensors trained in batches of 16; this one trains in batches of 32" \
    "$work/batch16_as_32.out" || fail "another --batch on resume was not warned of: $(grep -i warn "$work/batch16_as_32.out")"
# A --batch larger than the training set trains in batches of its rows, saved so: given again, no warning.
resumable batch512 --epochs 1 --batch 512 --save-checkpoint "$work/batch512.safetensors"
resumable batch512_again --epochs 1 --batch 512 --resume "$work/batch512.safetensors"
grep -q "warning: the run saved in" "$work/batch512_again.out" && fail "the same --batch on resume was warned of"
refused --resume "$work/run.safetensors" --lr 0.1 "--resume takes the model and its training options from"
refused --resume "$work/run.safetensors" --standardize "--standardize cannot be given with it"
refused --resume "" "--resume needs a file name"
refused --compare --save-checkpoint "$work/x" "--compare trains two runs"
# A checkpoint that could not be saved is refused before training, not after it: a missing
# directory, a directory, and (root writes anywhere, so for other users only) a read-only directory.
unsaveable=("$work/no-such-directory/run.safetensors" "$work")
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$work/read-only" && chmod a-w "$work/read-only"
    unsaveable+=("$work/read-only/run.safetensors")
fi
for destination in "${unsaveable[@]}"; do
    "$program" --data "$work/no-such-directory" --limit 256 --save-checkpoint "$destination" >"$work/out" 2>"$work/err"
    status=$?
    [ "$status" -eq 1 ] && grep -q -- "--save-checkpoint $destination: " "$work/err" ||
        fail "--save-checkpoint $destination: exited $status: $(head -2 "$work/err")"
    grep -q "^Epoch" "$work/out" && fail "--save-checkpoint $destination: trained before refusing"
done
"$program" --data "$work/no-such-directory" --limit 256 --resume "$work/missing.safetensors" >"$work/out" 2>"$work/err"
[ $? -eq 1 ] && grep -q "missing.safetensors" "$work/err" || fail "a missing checkpoint: $(head -2 "$work/err")"

# Ctrl-C (SIGINT) stops fit after the step under way and saves --save-checkpoint, inside the epoch;
# the program then ends by the signal (130, as a shell reports it), and --resume finishes that epoch
# from its next step. SIGTERM (143) without --save-checkpoint says that nothing was saved. Each run
# is signalled once its first epoch's line shows it training; job control (set -m) starts it with
# SIGINT's default action, which a script's background job would otherwise have ignored.
wait_for_line() {  # file, pattern: until a line of the file matches (2 minutes at most)
    local tries=0
    until grep -q "$2" "$1" || [ $tries -ge 1200 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done
}
interrupted() {  # name, signal, epochs, then flags; leaves the exit status in $status
    local name=$1 signal=$2 epochs=$3
    shift 3
    set -m
    "$program" --data "$work/no-such-directory" --limit 256 --threads 2 --batch 1 --epochs "$epochs" "$@" \
        >"$work/$name.out" 2>&1 &
    local pid=$!
    set +m
    wait_for_line "$work/$name.out" "^Epoch 1/$epochs"
    kill -"$signal" $pid
    status=0
    wait $pid || status=$?
}
# A step's callback sees the signal, so the run stops inside an epoch unless the signal came in its
# last of 256 steps: then once more (a run that stops only at epochs' ends fails both).
for attempt in 1 2; do
    interrupted interrupted INT 1000 --save-checkpoint "$work/interrupted.safetensors"
    stopped=$(sed -n 's/^interrupted in epoch \([0-9]*\) after step \([0-9]*\) of 256$/\1 \2/p' "$work/interrupted.out")
    [ -n "$stopped" ] && break
done
[ "$status" -eq 130 ] && [ -f "$work/interrupted.safetensors" ] ||
    fail "Ctrl-C: exited $status, checkpoint $(ls "$work/interrupted.safetensors" 2>&1): $(tail -2 "$work/interrupted.out")"
grep -q "^checkpoint: $work/interrupted.safetensors (--resume it" "$work/interrupted.out" ||
    fail "Ctrl-C did not say where it saved: $(tail -2 "$work/interrupted.out")"
if [ -z "$stopped" ]; then
    fail "Ctrl-C did not stop inside an epoch: $(tail -3 "$work/interrupted.out")"
else
    read -r epoch step <<<"$stopped"
    resumable interrupted_resumed --epochs 1 --resume "$work/interrupted.safetensors"
    grep -q "^resumed from .* inside epoch $epoch after step $step of 256$" "$work/interrupted_resumed.out" &&
        [ "$(json_value interrupted_resumed steps)" = $((256 - step)) ] ||
        fail "resumed after step $step of epoch $epoch: $(grep -E '^(resumed|Epoch)' "$work/interrupted_resumed.out")"
    grep -q "warning: the run saved in" "$work/interrupted_resumed.out" && fail "resumed as saved, yet warned"
    # Other training rows abandon the saved epoch, which is warned of.
    resumable interrupted_other_rows --epochs 1 --limit 200 --resume "$work/interrupted.safetensors"
    grep -q "warning: the run saved in .* stopped inside an epoch of 256 training images in batches of 1; this one has 200" \
        "$work/interrupted_other_rows.out" && [ "$(json_value interrupted_other_rows steps)" = 200 ] ||
        fail "resumed on 200 rows: $(grep -E '^(warning|Epoch)' "$work/interrupted_other_rows.out")"
fi
echo '{"earlier": "report"}' >"$work/kept.json"
interrupted terminated TERM 1000 --json "$work/kept.json"
[ "$status" -eq 143 ] && grep -q "^nothing saved: give --save-checkpoint" "$work/terminated.out" ||
    fail "SIGTERM without --save-checkpoint: exited $status: $(tail -2 "$work/terminated.out")"
[ "$(cat "$work/kept.json")" = '{"earlier": "report"}' ] || fail "an interrupted run changed --json's file"
# Ignored on entry (a background job of a script without job control), SIGINT stays ignored.
"$program" --data "$work/no-such-directory" --limit 256 --threads 2 --batch 1 --epochs 2 >"$work/ignored.out" 2>&1 &
pid=$!
wait_for_line "$work/ignored.out" "^Epoch 1/2"
kill -INT $pid
status=0
wait $pid || status=$?
[ "$status" -eq 0 ] && grep -q "^Epoch 2/2" "$work/ignored.out" ||
    fail "an ignored SIGINT stopped the run: exited $status: $(tail -2 "$work/ignored.out")"

# --json is written once the run has succeeded: a failed run leaves an earlier report as it was; a
# link keeps leading to the report; /dev/stdout, or the file stdout goes to, gets it after the
# progress lines; a destination that cannot be written fails before training.
short=(--data "$work/no-such-directory" --limit 64 --threads 2 --epochs 1)
"$program" "${short[@]}" --resume "$work/no-such-checkpoint" --json "$work/kept.json" >"$work/failed.out" 2>&1 &&
    fail "a run resuming a missing checkpoint succeeded"
[ "$(cat "$work/kept.json")" = '{"earlier": "report"}' ] || fail "a failed run changed --json's file"
ln -s kept.json "$work/linked.json"
"$program" "${short[@]}" --json "$work/linked.json" >"$work/linked.out" 2>&1 || fail "the linked run exited $?"
[ -L "$work/linked.json" ] && grep -q '"steps": 2,' "$work/kept.json" ||
    fail "--json through a link: $(ls -l "$work/linked.json"), $(head -c 80 "$work/kept.json")"
"$program" "${short[@]}" --json /dev/stdout >"$work/stdout.out" 2>&1 || fail "the /dev/stdout run exited $?"
sed -n '/^Epoch 1\/1/,/^}$/p' "$work/stdout.out" | grep -q '^  "steps": 2,$' ||
    fail "--json /dev/stdout into a file: $(grep -E '^(Epoch|\{|\})' "$work/stdout.out")"
"$program" "${short[@]}" --json "$work/no-such-directory/report.json" >"$work/unwritable.out" 2>&1
status=$?
[ "$status" -eq 1 ] && grep -q "no directory .* to write it in" "$work/unwritable.out" &&
    ! grep -q '^Epoch' "$work/unwritable.out" ||
    fail "--json into a missing directory: exited $status: $(tail -1 "$work/unwritable.out")"

finish_checks "sample checkpoints and signals"
