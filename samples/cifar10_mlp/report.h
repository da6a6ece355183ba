/* What the sample hands back after training: the fp32-vs-mixed table and the JSON metrics file. */
#ifndef CIFAR10_REPORT_H
#define CIFAR10_REPORT_H

#include <stdio.h>

#include "args.h"
#include "data.h"
#include "run.h"

/* Prints the --compare table: rows train time, time per step, test time, test accuracy, train loss;
 * columns fp32, mixed, mixed/fp32. */
void report_compare(const run_result* fp32, const run_result* mixed);

/* Opens the --json file before training, so a bad path fails in a second, not after an hour.
 * Returns NULL after printing the error. */
FILE* report_open_json(const char* path);

/* Closes the --json file after a failed run and removes it when it is a regular file, so no empty
 * metrics file is left behind (never /dev/stdout or a pipe). */
void report_discard_json(FILE* file, const char* path);

/* Writes the metrics of one run (`mixed` NULL) as a flat object, or of a comparison as
 * {"fp32": {...}, "mixed": {...}}, and closes `file`. Returns 0, or 1 after printing the error. */
int report_write_json(FILE* file, const char* path, const cli_options* options, const data_source* data,
                      const run_result* run, const run_result* mixed);

#endif
