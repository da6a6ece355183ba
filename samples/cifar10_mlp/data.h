/* Where the training data comes from: the CIFAR-10 binary files (--data, $MPTRAIN_CIFAR10_DIR or
 * ./data/cifar-10-batches-bin), or, when they are missing, a generated set after a loud warning. */
#ifndef CIFAR10_DATA_H
#define CIFAR10_DATA_H

#include <stdint.h>

#include <mptrain/mptrain.h>

#include "synthetic.h"

#define CIFAR10_DEFAULT_DIRECTORY "./data/cifar-10-batches-bin"

/* A CIFAR-10 image as the model sees it (32x32x3 values, flattened) and the classes. */
enum { IMAGE_FEATURES = 32 * 32 * 3, CLASSES = 10 };

typedef struct data_source {
    int generated;          /* 1: the CIFAR-10 files are missing; train on the generated set */
    char directory[4096];   /* the CIFAR-10 directory used (or looked at) */
    const char* origin;     /* how that directory was chosen: "--data", "$MPTRAIN_CIFAR10_DIR", ... */
    synthetic_split train;  /* generated set (only when `generated`) */
    synthetic_split test;
} data_source;

/* Finds the CIFAR-10 files; when any is missing, prints the warning to stderr and generates the
 * replacement set (the training part cut to `limit` rows when 0 < limit < its size).
 * Returns 0, or 1 after printing an error. Release with data_release. */
int data_locate(const char* flag_directory, int64_t limit, data_source* out);
void data_release(data_source* source);

/* Creates the training set (the first `limit` rows; 0 = all) and the test set on `context`.
 * Returns 0, or 1 after printing the mptrain error; *train and *test are then NULL. */
int data_open(mpt_context_t* context, const data_source* source, int64_t limit, mpt_dataset_t** train,
              mpt_dataset_t** test);

/* "CIFAR-10" or "generated (not CIFAR-10)", for summaries. */
const char* data_description(const data_source* source);

#endif
