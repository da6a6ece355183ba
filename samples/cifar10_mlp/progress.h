/* Training progress on stdout. On a terminal: a Keras-like bar redrawn in place with '\r' at most
 * ten times a second ("Epoch 1/5" then " 812/1562 [=====>....] - 41ms/step - loss: ... -
 * accuracy: ..."). Otherwise (pipe, file): one line per epoch, so logs stay readable. */
#ifndef CIFAR10_PROGRESS_H
#define CIFAR10_PROGRESS_H

#include <stdint.h>

#include <mptrain/mptrain.h>

typedef struct progress {
    mpt_trainer_t* trainer;    /* asked for its step count at each epoch end */
    int interactive;           /* draw the in-place bar */
    int64_t total_epochs;
    int64_t epochs_done;
    int64_t steps_before_epoch; /* trainer steps when the current epoch began */
    int step_numbering_known;
    int64_t step_offset;        /* added to the callback's `step` to count finished steps */
    double epoch_start;         /* timer_seconds() */
    double last_draw;
    int drawn_since_epoch_start;
    int line_length;            /* characters of the bar now on screen, to blank a shorter redraw */
    float loss;                 /* last epoch's mean training loss and accuracy */
    float accuracy;
    int validated;              /* the epoch-end caller set the next two for this epoch's line */
    float validation_loss;
    float validation_accuracy;
    int clipping;               /* --clipnorm: each epoch's line shows its last step's gradient norm */
    float gradient_norm;        /* that norm, before clipping (NaN for a skipped step) */
    double device_seconds;      /* summed mpt_trainer_get_last_epoch_time: GPU time on CUDA */
    int64_t device_steps;       /* the steps those epochs timed */
    int failed;                 /* an mptrain call inside a callback failed; fit was cancelled */
    mpt_status failure_status;
    char failure[1024];         /* "error: ..." line to print once fit has returned */
} progress;

/* Returns non-zero when stdout is a terminal. */
int progress_stdout_is_terminal(void);

void progress_init(progress* state, mpt_trainer_t* trainer, int64_t total_epochs, int interactive);
/* Call right before mpt_trainer_fit: prints "Epoch 1/N" on a terminal and starts the epoch clock. */
void progress_begin(progress* state);
/* Call right after mpt_trainer_fit returns (also on failure): ends a half-drawn bar line. */
void progress_end(progress* state);

/* Callbacks for mpt_trainer_set_callbacks with `state` as user_data. */
int progress_on_step(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy,
                     void* user_data);
int progress_on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data);

#endif
