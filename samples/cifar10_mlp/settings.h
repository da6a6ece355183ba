/* What a run trains with, read back from its trainer and model rather than from the flags: a run
 * resumed from a checkpoint has the file's, and defaults (AdamW's weight decay) are the library's. */
#ifndef CIFAR10_SETTINGS_H
#define CIFAR10_SETTINGS_H

#include <stdint.h>

#include <mptrain/mptrain.h>

typedef struct trained_settings {
    mpt_optimizer optimizer;
    float momentum;
    float weight_decay;
    float learning_rate;      /* the base rate the run starts from */
    mpt_lr_schedule lr_schedule;
    int64_t warmup_steps;
    int64_t decay_steps;
    float label_smoothing;
    float global_clipnorm;
    float ema_momentum;
    float dropout;            /* the hidden layers' (the first's; the sample gives both one rate) */
    float input_dropout;
    int standardize;          /* the model standardizes its inputs */
} trained_settings;

/* Reads `trainer`'s options (a copy of them) and `model`'s dropout and standardization. Returns 0,
 * or 1 after printing the error. */
int settings_read(const mpt_trainer_t* trainer, const mpt_model_t* model, trained_settings* out);

#endif
