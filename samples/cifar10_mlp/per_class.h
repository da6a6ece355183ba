/* --per-class: the test set's confusion matrix and per-class accuracy, from the trainer's predictions
 * over the data set (mpt_trainer_predict_dataset) and its labels (mpt_dataset_get_labels). */
#ifndef CIFAR10_PER_CLASS_H
#define CIFAR10_PER_CLASS_H

#include <stdint.h>

#include <mptrain/mptrain.h>

enum { PER_CLASS_COUNT = 10 };

/* Predicts every row of `dataset` (`rows` images), prints the confusion matrix (rows: true class,
 * columns: predicted) and each class's accuracy (recall), and writes those accuracies to `accuracy`
 * and the overall one to *overall. Returns 0, or 1 after printing the error. */
int per_class_report(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t rows,
                     double accuracy[PER_CLASS_COUNT], double* overall);

#endif
