#!/usr/bin/env bash
# The sample's command line as a user meets it: --help, refused flags (exit 2 with the reason), and
# short runs on the generated data set (no CIFAR-10 here) whose JSON reflects the flags. The
# learning-rate and label-smoothing flags must change what is trained, not only what is printed;
# --validation-split must hold out exactly the last rows. Checkpoints, signals and the JSON's file:
# test_cli_checkpoints.sh (a test of its own, so that the two run side by side).
# Usage: test_cli.sh path/to/mptrain-cifar10
source "$(dirname "$0")/cli_test_common.sh"

"$program" --help >"$work/help" 2>&1 || fail "--help exited $?"
for flag in --optimizer --momentum --weight-decay --lr-schedule --warmup --lr-decay --label-smoothing --clipnorm --ema --dropout --input-dropout --validation-split --per-class --standardize --compare --save-checkpoint --resume; do
    grep -q -- "$flag" "$work/help" || fail "--help does not mention $flag"
done

refused --lr-schedule step "constant, linear or cosine"
refused --lr-schedule "" "constant, linear or cosine"
refused --warmup -1 "--warmup must be an integer >= 0"
refused --warmup 1.5 "--warmup must be an integer >= 0"
refused --lr-decay 0 "--lr-decay must be a number in (0, 1]"
refused --lr 0 "--lr must be a positive number"
refused --epochs 0 "--epochs must be an integer >= 1"
refused --label-smoothing 1 "--label-smoothing must be a number in"
refused --label-smoothing -0.1 "--label-smoothing must be a number in"
refused --label-smoothing 0.99999999 "--label-smoothing must be a number in"  # 1 once rounded to float
refused --label-smoothing nan "--label-smoothing must be a number in"
refused --optimizer lamb "--optimizer must be sgd, adam, adamw, rmsprop or lion"
refused --optimizer SGD "--optimizer must be sgd, adam, adamw, rmsprop or lion"
refused --momentum 1 "--momentum must be a number in \[0, 1)"
refused --momentum -0.5 "--momentum must be a number in \[0, 1)"
refused --weight-decay 1 "--weight-decay must be a number in \[0, 1)"
refused --weight-decay nan "--weight-decay must be a number in \[0, 1)"
refused --optimizer adam --momentum 0.9 "--optimizer adam takes none"
refused --momentum 0.9 --optimizer adamw "--optimizer adamw takes none"
refused --optimizer lion --momentum 0.5 "--optimizer lion takes none"
refused --clipnorm 0 "--clipnorm must be a positive number"
refused --clipnorm -1 "--clipnorm must be a positive number"
refused --clipnorm nan "--clipnorm must be a positive number"
refused --clipnorm inf "--clipnorm must be a positive number"
refused --ema 0 "--ema must be a number in (0, 1)"
refused --ema 1 "--ema must be a number in (0, 1)"
refused --ema -0.5 "--ema must be a number in (0, 1)"
refused --ema nan "--ema must be a number in (0, 1)"
refused --ema 0.99999999 "--ema must be a number in (0, 1)"  # 1 once rounded to float
refused --dropout 1 "--dropout must be a number in"
refused --dropout -0.1 "--dropout must be a number in"
refused --dropout nan "--dropout must be a number in"
refused --dropout 0.99999999 "--dropout must be a number in"  # 1 once rounded to float
refused --input-dropout 1 "--input-dropout must be a number in"
refused --input-dropout -0.5 "--input-dropout must be a number in"
refused --validation-split 0 "--validation-split must be a number in (0, 1)"
refused --validation-split 1 "--validation-split must be a number in (0, 1)"
refused --validation-split -0.2 "--validation-split must be a number in (0, 1)"
refused --validation-split nan "--validation-split must be a number in (0, 1)"
refused --validation-split 0.2 --validate "give one of them"
refused --per-class=1 "takes no value"
refused --standardize=1 "takes no value"
refused --frobnicate "unknown option"
refused --micro-batch -1 "--micro-batch must be an integer >= 0"

# 256 generated images, batch 32: 8 steps an epoch, 16 in all.
run() {  # name, then flags
    local name=$1
    shift
    "$program" --data "$work/no-such-directory" --limit 256 --epochs 2 --threads 2 --lr 0.05 \
        --json "$work/$name.json" "$@" >"$work/$name.out" 2>&1 ||
        { fail "run '$name' ($*) exited $?: $(tail -3 "$work/$name.out")"; return; }
    grep -q '"steps": 16,' "$work/$name.json" || fail "run '$name': steps are not 16"
}

run constant
run cosine --lr-schedule cosine --warmup 4
run linear --lr-schedule linear
run warmup --warmup 4
run smoothed --label-smoothing 0.1
run clipped --clipnorm 0.5
run clipped_hard --clipnorm 1e-6
[ "$(json_value cosine lr_schedule)" = '"cosine"' ] || fail "cosine run's JSON says $(json_value cosine lr_schedule)"
[ "$(json_value cosine warmup_steps)" = 4 ] || fail "cosine run's JSON has warmup_steps $(json_value cosine warmup_steps)"
[ "$(json_value constant lr_schedule)" = '"constant"' ] || fail "constant run's JSON says $(json_value constant lr_schedule)"
# What the run ran on: mpt_context_describe's object, on one line.
json_value constant context | grep -Eq '^\{"version":"[^"]*","backend":"(cpu|cuda)","device":"[^"]+"' ||
    fail "constant run's JSON has no context description: $(json_value constant context)"
grep -q "cosine to 0 over 12 steps after 4 warm-up steps" "$work/cosine.out" ||
    fail "cosine run's header: $(grep '^data' "$work/cosine.out")"
# The rates the library trained with, read back by the sample: 8 steps an epoch, --lr 0.05. After
# epoch 1 (step 8): cosine with 4 warm-up steps is 4 steps into a decay of 12, (1 + cos(pi/3)) / 2 =
# 0.75 of the rate; linear 8 steps into 16, a half. After the run (step 16) both have reached 0.
rate_is() {  # run, field, expected
    local value
    value=$(json_value "$1" "$2")
    awk -v a="$value" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-9 + 1e-5 * b) }' ||
        fail "run '$1': $2 is '$value', not $3"
}
rate_is constant learning_rate_after_first_epoch 0.05
rate_is constant learning_rate_at_end 0.05
rate_is cosine learning_rate_after_first_epoch 0.0375
rate_is cosine learning_rate_at_end 0
rate_is linear learning_rate_after_first_epoch 0.025
rate_is linear learning_rate_at_end 0
rate_is warmup learning_rate_after_first_epoch 0.05
rate_is warmup learning_rate_at_end 0.05
rate_is smoothed label_smoothing 0.1
[ "$(json_value constant label_smoothing)" = 0 ] || fail "constant run's JSON has label_smoothing $(json_value constant label_smoothing)"
grep -q "| label smoothing 0.1 |" "$work/smoothed.out" || fail "smoothed run's header: $(grep '^data' "$work/smoothed.out")"
rate_is clipped global_clipnorm 0.5
[ "$(json_value constant global_clipnorm)" = 0 ] || fail "constant run's JSON has global_clipnorm $(json_value constant global_clipnorm)"
grep -q "| clipnorm 0.5 |" "$work/clipped.out" || fail "clipped run's header: $(grep '^data' "$work/clipped.out")"
# Each epoch's line and the JSON show the last step's gradient norm, before clipping: above 1e-6.
[ "$(grep -c ' - grad_norm: ' "$work/clipped_hard.out")" = 2 ] || fail "clipped run's epoch lines: $(grep '^Epoch' "$work/clipped_hard.out")"
awk -v norm="$(json_value clipped_hard last_gradient_norm)" 'BEGIN { exit !(norm > 1e-3) }' ||
    fail "the clipped run's last gradient norm is '$(json_value clipped_hard last_gradient_norm)'"
[ -z "$(json_value constant last_gradient_norm)" ] || fail "an unclipped run's JSON has a gradient norm"
grep -q 'grad_norm' "$work/constant.out" && fail "an unclipped run's epoch lines show a gradient norm"
# Steps clipped to a norm of 1e-6 barely move the weights: the loss stays where it started (2.35
# here), where the unclipped run's falls (to 2.13).
awk -v hard="$(json_value clipped_hard train_loss)" -v plain="$(json_value constant train_loss)" \
    'BEGIN { exit !(plain < hard - 0.1) }' ||
    fail "a clipnorm of 1e-6 trained to loss $(json_value clipped_hard train_loss), unclipped $(json_value constant train_loss)"
# --ema trains as the constant run does and evaluates the test set with the averaged weights too:
# a second test line and its own numbers in the JSON.
run averaged --ema 0.9
grep -q "| ema 0.9 |" "$work/averaged.out" || fail "averaged run's header: $(grep '^data' "$work/averaged.out")"
rate_is averaged ema_momentum 0.9
[ "$(json_value averaged train_loss)" = "$(json_value constant train_loss)" ] || fail "--ema changed the training loss"
[ "$(json_value averaged test_loss)" = "$(json_value constant test_loss)" ] || fail "--ema changed the trained weights' test loss"
ema_line=$(sed -n 's/^test (ema 0.9): loss \([0-9.]*\) - accuracy \([0-9.]*\)$/\1/p' "$work/averaged.out")
[ -n "$ema_line" ] || fail "the averaged run printed no test line for the averaged weights"
ema_loss=$(json_value averaged ema_test_loss)
[ -n "$ema_loss" ] && [ "$ema_loss" != "$(json_value averaged test_loss)" ] ||
    fail "the averaged weights' test loss '$ema_loss' is missing or the trained weights'"
[ -z "$(json_value constant ema_test_loss)" ] || fail "a run without --ema reports an averaged test loss"
# --dropout drops units while training only: the same header and JSON, another training run (its
# loss, taken with units dropped, is higher), and its test evaluated on every unit.
run dropped --dropout 0.5
grep -q "| dropout 0.5 |" "$work/dropped.out" || fail "dropout run's header: $(grep '^data' "$work/dropped.out")"
rate_is dropped dropout 0.5
[ "$(json_value constant dropout)" = 0 ] || fail "constant run's JSON has dropout $(json_value constant dropout)"
awk -v dropped="$(json_value dropped train_loss)" -v plain="$(json_value constant train_loss)" \
    'BEGIN { exit !(dropped > plain + 0.01) }' ||
    fail "--dropout 0.5 trained to loss $(json_value dropped train_loss), no dropout to $(json_value constant train_loss)"
# --input-dropout likewise, on the pixels.
run inputs_dropped --input-dropout 0.3
grep -q "| input dropout 0.3 |" "$work/inputs_dropped.out" ||
    fail "input dropout run's header: $(grep '^data' "$work/inputs_dropped.out")"
rate_is inputs_dropped input_dropout 0.3
[ "$(json_value constant input_dropout)" = 0 ] || fail "constant run's JSON has input_dropout $(json_value constant input_dropout)"
[ "$(json_value inputs_dropped train_loss)" != "$(json_value constant train_loss)" ] ||
    fail "--input-dropout 0.3 trained as no dropout"
# A warm-up as long as the run is said to be one.
"$program" --data "$work/no-such-directory" --limit 256 --epochs 2 --threads 2 --lr-schedule cosine --warmup 16 \
    >"$work/long_warmup.out" 2>&1 || fail "a warm-up as long as the run exited $?"
grep -q "warning: --warmup 16 lasts the whole run of 16 steps" "$work/long_warmup.out" ||
    fail "a warm-up as long as the run gave no warning"
constant_loss=$(json_value constant train_loss)
for name in cosine linear warmup smoothed; do
    loss=$(json_value "$name" train_loss)
    [ -n "$loss" ] && [ "$loss" != "$constant_loss" ] || fail "run '$name' trained the constant run's loss $constant_loss"
done
# --validate evaluates the test set after each epoch from the epoch-end callback: a line's val_loss,
# the last one the final test loss, and the run otherwise the constant one, loss for loss.
run validated --validate
[ "$(grep -c ' - val_loss: ' "$work/validated.out")" = 2 ] || fail "--validate did not report both epochs"
last_val=$(sed -n 's/.* - val_loss: \([0-9.]*\) - val_accuracy: \([0-9.]*\)$/\1 \2/p' "$work/validated.out" | tail -1)
test_line=$(sed -n 's/^test: loss \([0-9.]*\) - accuracy \([0-9.]*\) .*/\1 \2/p' "$work/validated.out")
[ -n "$last_val" ] && [ "$last_val" = "$test_line" ] || fail "the last val_loss/accuracy '$last_val' is not the test's '$test_line'"
[ "$(json_value validated train_loss)" = "$constant_loss" ] || fail "--validate changed the training loss"
[ "$(json_value validated validate)" = true ] || fail "--validate is not in the JSON"
# --validation-split 0.2 of 320 images holds out the last 64, Keras's split: the first 256 train
# exactly as --limit 256 alone does (the generated rows do not depend on the limit), and the
# held-out rows are evaluated after each epoch, the last line's numbers in the JSON.
run split --limit 320 --validation-split 0.2
grep -q "256 training / 64 validation (the last 0.2) / " "$work/split.out" || fail "split run's header: $(grep '^data' "$work/split.out")"
[ "$(json_value split train_images)" = 256 ] || fail "split run's JSON has train_images $(json_value split train_images)"
[ "$(json_value split validation_images)" = 64 ] || fail "split run's JSON has validation_images $(json_value split validation_images)"
[ "$(json_value split train_loss)" = "$constant_loss" ] || fail "the split run did not train the first 256 images as --limit 256"
[ "$(grep -c ' - val_loss: ' "$work/split.out")" = 2 ] || fail "--validation-split did not report both epochs"
split_val=$(sed -n 's/.* - val_loss: \([0-9.]*\) - val_accuracy: .*$/\1/p' "$work/split.out" | tail -1)
json_val=$(json_value split validation_loss)
awk -v a="$split_val" -v b="$json_val" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 5e-5) }' ||
    fail "the last val_loss '$split_val' is not the JSON's validation_loss '$json_val'"
[ "$split_val" != "$(sed -n 's/^test: loss \([0-9.]*\) .*/\1/p' "$work/split.out")" ] ||
    fail "--validation-split evaluated the test set"
[ -z "$(json_value constant validation_loss)" ] || fail "a run without validation has a validation_loss in its JSON"
"$program" --data "$work/no-such-directory" --limit 1 --validation-split 0.5 >"$work/no_rows.out" 2>&1 &&
    fail "a split of 1 image into none exited 0"
grep -q "leaves none to train on" "$work/no_rows.out" || fail "a split leaving nothing to train on: $(tail -1 "$work/no_rows.out")"
# --standardize trains on standardized values (another loss), and with a split too.
run standardized --standardize
[ "$(json_value standardized standardize)" = true ] || fail "--standardize is not in the JSON"
[ "$(json_value constant standardize)" = false ] || fail "a run without --standardize says standardize: $(json_value constant standardize)"
loss=$(json_value standardized train_loss)
[ -n "$loss" ] && [ "$loss" != "$constant_loss" ] || fail "--standardize trained the constant run's loss $constant_loss"
run standardized_split --standardize --limit 320 --validation-split 0.2
[ "$(grep -c ' - val_loss: ' "$work/standardized_split.out")" = 2 ] || fail "--standardize with a split did not validate both epochs"
# --per-class: the test set's confusion matrix, whose diagonal over its total is the test accuracy,
# and the per-class accuracies in the JSON; the run itself is the constant one.
run per_class --per-class
[ "$(json_value per_class train_loss)" = "$constant_loss" ] || fail "--per-class changed the training loss"
matrix_accuracy=$(awk '/^confusion matrix/ { on = 1; next } on && NF == 12 && row < 10 { for (i = 2; i <= 11; ++i) { total += $i; if (i - 2 == row) right += $i } ++row }
    END { if (row == 10 && total > 0) printf "%.4f", right / total }' "$work/per_class.out")
test_accuracy=$(sed -n 's/^test: loss [0-9.]* - accuracy \([0-9.]*\) .*/\1/p' "$work/per_class.out")
[ -n "$matrix_accuracy" ] && [ "$matrix_accuracy" = "$test_accuracy" ] ||
    fail "the confusion matrix's accuracy '$matrix_accuracy' is not the test accuracy '$test_accuracy'"
grep -q "warning: the confusion matrix" "$work/per_class.out" && fail "--per-class warned: $(grep warning "$work/per_class.out")"
[ "$(json_value per_class per_class_accuracy | tr -cd ',' | wc -c)" = 9 ] ||
    fail "per_class_accuracy is not 10 numbers: $(json_value per_class per_class_accuracy)"
[ -z "$(json_value constant per_class_accuracy)" ] || fail "a run without --per-class has per_class_accuracy"
# --optimizer, --momentum and --weight-decay reach the trainer: another loss each, said in the header
# and the JSON (the decay AdamW trains with by default included); the seed recipe's header unchanged.
run adam --optimizer adam --lr 0.001
run adamw --optimizer adamw --lr 0.001
run rmsprop --optimizer rmsprop --lr 0.001 --momentum 0.5
run lion --optimizer lion --lr 0.0001
run sgd_momentum --momentum 0.9
run decayed --weight-decay 0.1
grep -q "| batch 32 | adam | lr 0.001" "$work/adam.out" || fail "adam run's header: $(grep '^data' "$work/adam.out")"
grep -q "| batch 32 | rmsprop momentum 0.5 | lr 0.001" "$work/rmsprop.out" ||
    fail "rmsprop run's header: $(grep '^data' "$work/rmsprop.out")"
grep -q "| batch 32 | lion | lr 0.0001" "$work/lion.out" || fail "lion run's header: $(grep '^data' "$work/lion.out")"
[ "$(json_value lion optimizer)" = '"lion"' ] || fail "lion run's JSON says $(json_value lion optimizer)"
grep -q "| batch 32 | sgd weight decay 0.1 | lr 0.05" "$work/decayed.out" ||
    fail "decayed run's header: $(grep '^data' "$work/decayed.out")"
grep -q "| batch 32 | lr 0.05" "$work/constant.out" || fail "the seed recipe's header: $(grep '^data' "$work/constant.out")"
[ "$(json_value adam optimizer)" = '"adam"' ] || fail "adam run's JSON says $(json_value adam optimizer)"
[ "$(json_value constant optimizer)" = '"sgd"' ] || fail "constant run's JSON says $(json_value constant optimizer)"
rate_is adamw weight_decay 0.004
rate_is adam weight_decay 0
rate_is decayed weight_decay 0.1
rate_is sgd_momentum momentum 0.9
rate_is constant momentum 0
for name in adam adamw rmsprop lion sgd_momentum decayed; do
    loss=$(json_value "$name" train_loss)
    [ -n "$loss" ] && [ "$loss" != "$constant_loss" ] || fail "run '$name' trained the constant run's loss $constant_loss"
done
[ "$(json_value adamw train_loss)" != "$(json_value adam train_loss)" ] || fail "AdamW trained as Adam (no decay)"

# --micro-batch runs each step's batch in micro-batches: the same 16 steps, with the gradients' sums
# in the trainer's memory (4 bytes a parameter), and the same loss but for rounding (which this
# chaotic run amplifies: its 16 steps turn the other rounding of the CPU's small-batch GEMMs, at 8
# rows, into 1e-4 of the loss in fp32; test_micro_batches holds the exact comparison). In fp32, which
# auto is not on a CPU with native bf16: there bf16's roundings of activations that differ in their
# last fp32 bit took it to 2e-3. A micro-batch as large as the batch changes no bit, and the header
# does not mention it.
run constant_fp32 --precision fp32
run micro --micro-batch 8 --precision fp32
run micro_whole --micro-batch 32 --precision fp32
constant_fp32_loss=$(json_value constant_fp32 train_loss)
grep -q "| batch 32 | micro-batches of 8 | lr 0.05" "$work/micro.out" || fail "micro run's header: $(grep '^data' "$work/micro.out")"
grep -q "micro-batches" "$work/micro_whole.out" && fail "micro_whole run's header: $(grep '^data' "$work/micro_whole.out")"
[ "$(json_value micro micro_batch)" = 8 ] || fail "micro run's JSON has micro_batch $(json_value micro micro_batch)"
[ "$(json_value constant micro_batch)" = 0 ] || fail "constant run's JSON has micro_batch $(json_value constant micro_batch)"
awk -v a="$(json_value micro arena_bytes)" -v b="$(json_value constant_fp32 arena_bytes)" 'BEGIN { exit !(a - b >= 4 * 11000000) }' ||
    fail "micro run's arena ($(json_value micro arena_bytes) bytes) holds no gradient sums next to $(json_value constant_fp32 arena_bytes)"
awk -v a="$(json_value micro train_loss)" -v b="$constant_fp32_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-3 * b) }' ||
    fail "micro run trained a loss of $(json_value micro train_loss), not about $constant_fp32_loss"
[ "$(json_value micro_whole train_loss)" = "$constant_fp32_loss" ] ||
    fail "micro_whole trained $(json_value micro_whole train_loss), not $constant_fp32_loss"

# The same flags train the same run.
run cosine_again --lr-schedule cosine --warmup 4
[ "$(json_value cosine_again train_loss)" = "$(json_value cosine train_loss)" ] || fail "the cosine run does not repeat"

finish_checks "sample command line"
