/* One training run of the CIFAR-10 MLP: a fresh context (so every run starts from the same seed),
 * the data, the model, fit with progress, then evaluation on the test set, timed. */
#ifndef CIFAR10_RUN_H
#define CIFAR10_RUN_H

#include <stddef.h>
#include <stdint.h>

#include <mptrain/mptrain.h>

#include "args.h"
#include "data.h"
#include "settings.h"

typedef struct run_result {
    mpt_precision precision;  /* resolved (never AUTO) */
    mpt_backend backend;      /* never AUTO */
    int64_t epochs;
    int64_t batch_size;
    int64_t steps;            /* optimizer steps taken by this run's fit */
    int64_t train_rows;       /* trained on: without the held-out rows */
    int64_t validation_rows;  /* --validation-split's held-out rows; 0: none */
    int64_t test_rows;
    int64_t parameters;
    trained_settings settings; /* what the run trains with, read back from its trainer and model */
    int64_t epochs_before;    /* --resume: the epochs and steps the run had taken when saved; else 0 */
    int64_t steps_before;
    float train_loss;         /* mean over the last epoch */
    float train_accuracy;
    float last_gradient_norm;  /* --clipnorm: the last step's gradient norm before clipping */
    float test_loss;
    float test_accuracy;
    int ema_evaluated;        /* --ema: the test set was evaluated with the averaged weights too */
    float ema_test_loss;
    float ema_test_accuracy;
    int validated;            /* the validation set was evaluated after each epoch; the last epoch's: */
    float validation_loss;
    float validation_accuracy;
    int per_class;            /* --per-class ran: the test set's accuracy by true class */
    double class_accuracy[10];
    double train_seconds;     /* wall time of mpt_trainer_fit */
    double test_seconds;      /* wall time of mpt_trainer_evaluate */
    double us_per_step;       /* train_seconds / steps, in microseconds */
    double train_device_seconds; /* summed epoch times from mptrain: CUDA events on a GPU, host on the CPU */
    int64_t device_steps;     /* the steps those epoch times cover */
    double device_us_per_step; /* train_device_seconds / device_steps, in microseconds */
    size_t arena_bytes;       /* trainer arena allocated */
    float loss_scale;
    int64_t skipped_steps;    /* updates skipped for non-finite gradients */
    float rate_after_first_epoch; /* the scheduled learning rate of the second epoch's first step */
    float rate_at_end;        /* the scheduled learning rate of a step after the run */
    /* mpt_context_describe after training (what ran: on a GPU the switches as the backend had them,
     * its graph captures, replays and refusals); "" when it did not fit. */
    char context_description[4096];
} run_result;

/* The precision `requested` resolves to on the context the options describe, and its backend.
 * Returns 0, or 1 after printing the error. */
int run_resolve_precision(const cli_options* options, mpt_precision requested, mpt_precision* resolved,
                          mpt_backend* backend);

/* Trains and evaluates with `precision`, printing progress and a summary to stdout.
 * Returns 0 and fills *result, or 1 after printing the error. */
int run_training(const cli_options* options, mpt_precision precision, const data_source* data,
                 run_result* result);

#endif
