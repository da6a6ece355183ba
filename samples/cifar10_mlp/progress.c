/* Keras-like progress bar (terminal) and per-epoch lines (pipes), fed by mptrain's callbacks. */
#define _POSIX_C_SOURCE 200809L

#include "progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"
#include "timer.h"

enum { BAR_WIDTH = 30 };
static const double redraw_interval_seconds = 0.1;

int progress_stdout_is_terminal(void)
{
    return isatty(STDOUT_FILENO);
}

void progress_init(progress* state, mpt_trainer_t* trainer, int64_t total_epochs, int interactive)
{
    memset(state, 0, sizeof *state);
    state->trainer = trainer;
    state->total_epochs = total_epochs;
    state->interactive = interactive;
    /* A resumed trainer has taken steps already: the first epoch's are those after them. */
    if (mpt_trainer_get_progress(trainer, &state->steps_before_epoch, NULL) != MPT_STATUS_OK)
        state->steps_before_epoch = 0;
}

static void start_epoch(progress* state)
{
    if (state->interactive) {
        printf("Epoch %" PRId64 "/%" PRId64 "\n", state->epochs_done + 1, state->total_epochs);
        fflush(stdout);
    }
    state->epoch_start = timer_seconds();
    state->drawn_since_epoch_start = 0;
    state->line_length = 0;
}

void progress_begin(progress* state)
{
    start_epoch(state);
}

void progress_end(progress* state)
{
    if (state->interactive && state->line_length > 0) {
        putchar('\n');
        state->line_length = 0;
    }
    fflush(stdout);
}

/* "41ms/step" as Keras writes it: whole seconds, milliseconds or microseconds. */
static void format_time_per_step(char* text, size_t size, double seconds_per_step)
{
    if (seconds_per_step >= 1.0)
        snprintf(text, size, "%.0fs/step", seconds_per_step);
    else if (seconds_per_step >= 1e-3)
        snprintf(text, size, "%.0fms/step", seconds_per_step * 1e3);
    else
        snprintf(text, size, "%.0fus/step", seconds_per_step * 1e6);
}

static int decimal_digits(int64_t value)
{
    int digits = 1;
    while (value >= 10) {
        value /= 10;
        ++digits;
    }
    return digits;
}

static void draw_bar(progress* state, int64_t done, int64_t total, float loss, float accuracy, int final)
{
    char line[512]; /* the longest possible line (20-digit counts, 39-digit float loss) fits */
    char per_step[32];
    const double elapsed = timer_seconds() - state->epoch_start;
    int filled, length, i;

    if (total < 1)
        total = 1;
    if (done > total)
        done = total;
    filled = (int)(BAR_WIDTH * done / total);

    length = snprintf(line, sizeof line, "%*" PRId64 "/%" PRId64 " [", decimal_digits(total), done, total);
    /* Same drawing as Keras: '=' for done, '>' at the head while running, '.' for the rest. */
    for (i = 0; i < filled - 1; ++i)
        line[length++] = '=';
    if (filled > 0)
        line[length++] = done < total ? '>' : '=';
    for (i = filled; i < BAR_WIDTH; ++i)
        line[length++] = '.';
    line[length] = '\0';

    format_time_per_step(per_step, sizeof per_step, done > 0 ? elapsed / (double)done : 0.0);
    if (final)
        length += snprintf(line + length, sizeof line - (size_t)length, "] - %.0fs %s", elapsed, per_step);
    else
        length += snprintf(line + length, sizeof line - (size_t)length, "] - %s", per_step);
    length += snprintf(line + length, sizeof line - (size_t)length, " - loss: %.4f - accuracy: %.4f",
                       (double)loss, (double)accuracy);
    if (final && state->validated)
        length += snprintf(line + length, sizeof line - (size_t)length, " - val_loss: %.4f - val_accuracy: %.4f",
                           (double)state->validation_loss, (double)state->validation_accuracy);
    if (final && state->clipping)
        length += snprintf(line + length, sizeof line - (size_t)length, " - grad_norm: %.4g",
                           (double)state->gradient_norm);

    /* Blank what is left of a longer previous line. */
    printf("\r%s%*s", line, state->line_length > length ? state->line_length - length : 0, "");
    state->line_length = length;
    fflush(stdout);
}

int progress_on_step(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy,
                     void* user_data)
{
    progress* state = (progress*)user_data;
    double now;
    int64_t done;
    (void)epoch; /* epochs are counted here, from the epoch-end callback, whatever their numbering */

    /* The header does not say whether `step` counts from 0 or 1; the first call tells. */
    if (!state->step_numbering_known) {
        state->step_offset = step == 0 ? 1 : 0;
        state->step_numbering_known = 1;
    }
    done = step + state->step_offset;
    if (interrupt_requested())
        return 1; /* Ctrl-C: stop fit after this step (run.c saves the checkpoint) */
    if (!state->interactive)
        return 0;

    now = timer_seconds();
    if (state->drawn_since_epoch_start && done < steps_per_epoch
        && now - state->last_draw < redraw_interval_seconds)
        return 0;
    draw_bar(state, done, steps_per_epoch, loss, accuracy, 0);
    state->last_draw = now;
    state->drawn_since_epoch_start = 1;
    return 0;
}

/* Printing now would tear the bar; keeps the message for after fit has returned and returns 1,
 * which cancels fit. Copies the message before mpt_status_string, which is an mptrain call too. */
static int fail_in_callback(progress* state, mpt_status status, const char* what)
{
    char message[512];
    snprintf(message, sizeof message, "%s", mpt_last_error());
    snprintf(state->failure, sizeof state->failure, "error: %s: %s: %s", what, mpt_status_string(status),
             message);
    state->failure_status = status;
    state->failed = 1;
    return 1;
}

int progress_on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data)
{
    progress* state = (progress*)user_data;
    const double elapsed = timer_seconds() - state->epoch_start;
    int64_t steps_now = 0, steps, epoch_device_steps = 0;
    double epoch_device_seconds = 0.0;
    mpt_status status;
    (void)epoch;

    status = mpt_trainer_get_progress(state->trainer, &steps_now, NULL);
    if (status != MPT_STATUS_OK)
        return fail_in_callback(state, status, "reading the trainer's step count at the end of an epoch");
    /* The device's own clock: wall time here also counts the host's waits and this callback. */
    status = mpt_trainer_get_last_epoch_time(state->trainer, &epoch_device_seconds, &epoch_device_steps);
    if (status != MPT_STATUS_OK)
        return fail_in_callback(state, status, "reading the epoch's device time");
    state->device_seconds += epoch_device_seconds;
    state->device_steps += epoch_device_steps;
    if (state->clipping) {
        status = mpt_trainer_get_gradient_norm(state->trainer, &state->gradient_norm);
        if (status != MPT_STATUS_OK)
            return fail_in_callback(state, status, "reading the last step's gradient norm at the end of an epoch");
    }
    steps = steps_now - state->steps_before_epoch;
    state->steps_before_epoch = steps_now;
    state->loss = loss;
    state->accuracy = accuracy;
    ++state->epochs_done;

    if (state->interactive) {
        draw_bar(state, steps, steps, loss, accuracy, 1);
        progress_end(state);
        if (state->epochs_done < state->total_epochs)
            start_epoch(state);
    } else {
        /* Logs get compared and parsed: always milliseconds, with enough digits for a GPU. */
        const double ms_per_step = steps > 0 ? elapsed * 1e3 / (double)steps : 0.0;
        printf("Epoch %" PRId64 "/%" PRId64 " - %" PRId64 " step%s - %.2fs - %.*fms/step - loss: %.4f"
               " - accuracy: %.4f",
               state->epochs_done, state->total_epochs, steps, steps == 1 ? "" : "s", elapsed, ms_per_step < 10.0 ? 3 : 1,
               ms_per_step, (double)loss, (double)accuracy);
        if (state->validated)
            printf(" - val_loss: %.4f - val_accuracy: %.4f", (double)state->validation_loss,
                   (double)state->validation_accuracy);
        if (state->clipping)
            printf(" - grad_norm: %.4g", (double)state->gradient_norm);
        printf("\n");
        fflush(stdout);
        state->epoch_start = timer_seconds();
    }
    return 0;
}
