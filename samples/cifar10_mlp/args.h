/* Command-line options of mptrain-cifar10 and the names used for precisions and backends. */
#ifndef CIFAR10_ARGS_H
#define CIFAR10_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include <mptrain/mptrain.h>

typedef struct cli_options {
    const char* data_directory; /* --data; NULL: $MPTRAIN_CIFAR10_DIR, else the default */
    int64_t epochs;
    int64_t batch_size;
    int batch_given;            /* --batch appeared: else 32, or with --resume the saved run's */
    int64_t micro_batch_size;   /* --micro-batch: gradient accumulation's rows per pass; 0 = whole batches */
    mpt_precision precision;
    mpt_optimizer optimizer;    /* --optimizer: sgd (the default), adam, adamw, rmsprop or lion */
    float momentum;             /* --momentum: SGD's or RMSprop's, in [0, 1); 0 = none */
    float weight_decay;         /* --weight-decay: in [0, 1), when weight_decay_given */
    int weight_decay_given;     /* --weight-decay appeared: else the optimizer's default (AdamW 0.004) */
    float learning_rate;
    float learning_rate_decay;  /* --lr-decay: the rate is multiplied by it after every epoch; 1 = constant */
    mpt_lr_schedule lr_schedule; /* --lr-schedule: evaluated per step by the library, decaying to 0 over the run */
    int64_t warmup_steps;       /* --warmup: the schedule's linear warm-up */
    float label_smoothing;      /* --label-smoothing: s in [0, 1), targets t (1 - s) + s / 10; 0 = none */
    float global_clipnorm;      /* --clipnorm: the gradients' largest global L2 norm; 0 = no clipping */
    float ema_momentum;         /* --ema: the momentum of the weights' moving average, in (0, 1); 0 = none */
    float dropout;              /* --dropout: both hidden layers' dropout rate, in [0, 1); 0 = none */
    float input_dropout;        /* --input-dropout: the inputs' dropout rate, in [0, 1); 0 = none */
    int64_t limit;              /* first N training images; 0 = all */
    double validation_split;    /* --validation-split: the last fraction held out of training; 0 = none */
    uint64_t seed;
    mpt_backend backend;
    int threads;                /* 0 = all cores */
    int threads_given;          /* --threads appeared: pass it on, else keep the library default */
    const char* json_path;      /* --json; NULL = no file */
    int compare;
    int validate;               /* --validate: evaluate the test set after every epoch */
    int per_class;              /* --per-class: the test set's confusion matrix and per-class accuracy */
    int standardize;            /* --standardize: each feature to mean 0, deviation 1 by the training rows' statistics */
    const char* resume_path;    /* --resume: the model and its training options from this checkpoint; NULL = none */
    const char* checkpoint_path; /* --save-checkpoint: the trainer's checkpoint after training; NULL = none */
} cli_options;

typedef enum args_result {
    ARGS_RUN = 0,  /* options are valid: run */
    ARGS_HELP = 1, /* --help printed the usage to stdout: exit 0 */
    ARGS_ERROR = 2 /* a message and the usage went to stderr: exit 2 */
} args_result;

args_result args_parse(int argc, char** argv, cli_options* out);
void args_print_usage(FILE* stream, const char* program);

/* "fp32", "mixed-fp16", "mixed-bf16", "auto" (the --precision spellings). */
const char* args_precision_name(mpt_precision precision);
/* "auto", "cpu", "cuda" (the --backend spellings). */
const char* args_backend_name(mpt_backend backend);
/* "sgd", "adam", "adamw", "rmsprop" (the --optimizer spellings). */
const char* args_optimizer_name(mpt_optimizer optimizer);
/* "constant", "linear", "cosine" (the --lr-schedule spellings); "step" is not offered. */
const char* args_schedule_name(mpt_lr_schedule schedule);

#endif
