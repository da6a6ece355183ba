/* What the sample hands back after training: the fp32-vs-mixed table and the JSON metrics file. */
#ifndef CIFAR10_REPORT_H
#define CIFAR10_REPORT_H

#include <stdio.h>

#include "args.h"
#include "data.h"
#include "json_destination.h"
#include "run.h"

/* Prints the --compare table: rows train time, time per step, test time, test accuracy, train loss;
 * columns fp32, mixed, mixed/fp32. */
void report_compare(const run_result* fp32, const run_result* mixed);

/* Writes the metrics of one run (`mixed` NULL) as a flat object, or of a comparison as
 * {"fp32": {...}, "mixed": {...}}, to `destination` (a file is rewritten). Returns 0, or 1 after
 * printing the error. */
int report_write_json(json_destination* destination, const cli_options* options, const data_source* data,
                      const run_result* run, const run_result* mixed);

#endif
