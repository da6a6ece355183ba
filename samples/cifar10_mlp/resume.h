/* --resume: a run continued from its checkpoint alone, the model and the trainer's options read
 * from the file (mpt_model_load, mpt_trainer_options_create_from_checkpoint). */
#ifndef CIFAR10_RESUME_H
#define CIFAR10_RESUME_H

#include <mptrain/mptrain.h>

#include "args.h"

/* The model in `options->resume_path` (the CIFAR-10 MLP's shape, or an error) and the options of
 * the trainer that saved it, with --micro-batch's size (no checkpoint records one). The caller
 * creates the trainer and loads the checkpoint into it. Returns 0, or 1 after printing the error. */
int resume_open(const cli_options* options, mpt_context_t* context, mpt_model_t** model,
                mpt_trainer_options_t** trainer_options);

#endif
