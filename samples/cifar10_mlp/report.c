/* The comparison table and the JSON metrics file. */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "json_writer.h"

enum { LABEL_COLUMNS = 22, VALUE_COLUMNS = 14 };

/* Characters as a terminal shows them: UTF-8 continuation bytes take no column ("µs"). */
static int display_width(const char* text)
{
    int width = 0;
    for (; *text != '\0'; ++text)
        if (((unsigned char)*text & 0xC0u) != 0x80u)
            ++width;
    return width;
}

static void print_row(const char* label, const char* fp32, const char* mixed, const char* ratio)
{
    int pad = LABEL_COLUMNS - display_width(label);
    printf("  %s%*s%*s%*s%*s\n", label, pad > 0 ? pad : 0, "", VALUE_COLUMNS, fp32, VALUE_COLUMNS, mixed,
           VALUE_COLUMNS, ratio);
}

static void print_number_row(const char* label, int decimals, double fp32, double mixed)
{
    char fp32_text[32], mixed_text[32], ratio_text[32];
    snprintf(fp32_text, sizeof fp32_text, "%.*f", decimals, fp32);
    snprintf(mixed_text, sizeof mixed_text, "%.*f", decimals, mixed);
    if (fp32 != 0.0)
        snprintf(ratio_text, sizeof ratio_text, "%.3f", mixed / fp32);
    else
        snprintf(ratio_text, sizeof ratio_text, "n/a");
    print_row(label, fp32_text, mixed_text, ratio_text);
}

void report_compare(const run_result* fp32, const run_result* mixed)
{
    const int in_ms = fp32->us_per_step >= 1000.0 || mixed->us_per_step >= 1000.0;
    const double step_unit = in_ms ? 1e-3 : 1.0;

    printf("\nfp32 vs %s on %s (batch %" PRId64 ", %" PRId64 " epoch%s, %" PRId64 " training images, %" PRId64
           " steps each)\n",
           args_precision_name(mixed->precision), args_backend_name(fp32->backend), fp32->batch_size,
           fp32->epochs, fp32->epochs == 1 ? "" : "s", fp32->train_rows, fp32->steps);
    print_row("", "fp32", "mixed", "mixed/fp32");
    print_number_row("train time (s)", 3, fp32->train_seconds, mixed->train_seconds);
    print_number_row(in_ms ? "time per step (ms)" : "time per step (\xC2\xB5s)", in_ms ? 3 : 1,
                     fp32->us_per_step * step_unit, mixed->us_per_step * step_unit);
    print_number_row("device train time (s)", 3, fp32->train_device_seconds, mixed->train_device_seconds);
    print_number_row("test time (s)", 3, fp32->test_seconds, mixed->test_seconds);
    print_number_row("test accuracy", 4, (double)fp32->test_accuracy, (double)mixed->test_accuracy);
    print_number_row("train loss", 4, (double)fp32->train_loss, (double)mixed->train_loss);
    if (mixed->us_per_step > 0.0 && fp32->us_per_step > 0.0) {
        const double speedup = fp32->us_per_step / mixed->us_per_step;
        if (speedup >= 1.0)
            printf("  mixed (%s) steps are %.2fx as fast as fp32\n", args_precision_name(mixed->precision),
                   speedup);
        else
            printf("  mixed (%s) steps are SLOWER than fp32: %.2fx the time\n",
                   args_precision_name(mixed->precision), 1.0 / speedup);
    }
    fflush(stdout);
}

static void write_run(json_writer* json, const cli_options* options, const data_source* data,
                      const run_result* run)
{
    json_number(json, "train_loss", (double)run->train_loss);
    json_number(json, "train_accuracy", (double)run->train_accuracy);
    json_number(json, "test_loss", (double)run->test_loss);
    json_number(json, "test_accuracy", (double)run->test_accuracy);
    json_number(json, "train_seconds", run->train_seconds);
    json_number(json, "test_seconds", run->test_seconds);
    json_number(json, "us_per_step", run->us_per_step);
    json_number(json, "train_device_seconds", run->train_device_seconds);
    json_number(json, "device_us_per_step", run->device_us_per_step);
    json_string(json, "precision", args_precision_name(run->precision));
    json_string(json, "backend", args_backend_name(run->backend));
    json_integer(json, "epochs", run->epochs);
    json_integer(json, "batch", run->batch_size);
    json_integer(json, "micro_batch", options->micro_batch_size);
    json_integer(json, "steps", run->steps);
    if (options->resume_path != NULL) {
        json_string(json, "resumed_from", options->resume_path);
        json_integer(json, "epochs_before", run->epochs_before);
        json_integer(json, "steps_before", run->steps_before);
    }
    if (options->checkpoint_path != NULL)
        json_string(json, "checkpoint", options->checkpoint_path);
    json_integer(json, "train_images", run->train_rows);
    json_integer(json, "validation_images", run->validation_rows);
    json_integer(json, "test_images", run->test_rows);
    json_string(json, "optimizer", args_optimizer_name(run->settings.optimizer));
    json_number(json, "momentum", (double)run->settings.momentum);
    json_number(json, "weight_decay", (double)run->settings.weight_decay);
    json_number(json, "learning_rate", (double)run->settings.learning_rate);
    json_number(json, "learning_rate_decay", (double)options->learning_rate_decay);
    json_string(json, "lr_schedule", args_schedule_name(run->settings.lr_schedule));
    json_integer(json, "warmup_steps", run->settings.warmup_steps);
    json_number(json, "label_smoothing", (double)run->settings.label_smoothing);
    json_number(json, "global_clipnorm", (double)run->settings.global_clipnorm);
    if (run->settings.global_clipnorm > 0.0f)
        json_number(json, "last_gradient_norm", (double)run->last_gradient_norm);
    json_number(json, "ema_momentum", (double)run->settings.ema_momentum);
    json_number(json, "dropout", (double)run->settings.dropout);
    json_number(json, "input_dropout", (double)run->settings.input_dropout);
    if (run->ema_evaluated) {
        json_number(json, "ema_test_loss", (double)run->ema_test_loss);
        json_number(json, "ema_test_accuracy", (double)run->ema_test_accuracy);
    }
    json_boolean(json, "validate", options->validate);
    json_boolean(json, "standardize", run->settings.standardize);
    json_number(json, "validation_split", options->validation_split);
    if (run->per_class)
        json_number_array(json, "per_class_accuracy", run->class_accuracy, 10);
    if (run->validated) {
        json_number(json, "validation_loss", (double)run->validation_loss);
        json_number(json, "validation_accuracy", (double)run->validation_accuracy);
    }
    json_number(json, "learning_rate_after_first_epoch", (double)run->rate_after_first_epoch);
    json_number(json, "learning_rate_at_end", (double)run->rate_at_end);
    json_integer(json, "seed", (int64_t)options->seed);
    if (run->context_description[0] != '\0')
        json_raw(json, "context", run->context_description);
    json_integer(json, "parameters", run->parameters);
    json_integer(json, "arena_bytes", (int64_t)run->arena_bytes);
    json_integer(json, "skipped_steps", run->skipped_steps);
    json_string(json, "data", data->generated ? "generated" : "cifar10");
}

int report_write_json(json_destination* destination, const cli_options* options, const data_source* data,
                      const run_result* run, const run_result* mixed)
{
    json_writer json;
    FILE* file = json_destination_begin(destination);

    if (file == NULL)
        return 1;
    json_init(&json, file);
    json_begin_object(&json, NULL);
    if (mixed == NULL) {
        write_run(&json, options, data, run);
    } else {
        json_begin_object(&json, "fp32");
        write_run(&json, options, data, run);
        json_end_object(&json);
        json_begin_object(&json, "mixed");
        write_run(&json, options, data, mixed);
        json_end_object(&json);
    }
    json_end_object(&json);

    return json_destination_commit(destination, ferror(file));
}
