/* See per_class.h. */
#include "per_class.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static const char* const class_names[PER_CLASS_COUNT] = {"airplane", "automobile", "bird", "cat", "deer",
                                                         "dog", "frog", "horse", "ship", "truck"};

/* The first largest output, as the library's accuracy counts it. */
static int predicted_class(const float* outputs)
{
    int best = 0, c;
    for (c = 1; c < PER_CLASS_COUNT; ++c)
        if (outputs[c] > outputs[best])
            best = c;
    return best;
}

int per_class_report(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t rows,
                     double accuracy[PER_CLASS_COUNT], double* overall)
{
    int64_t confusion[PER_CLASS_COUNT][PER_CLASS_COUNT] = {{0}};
    float* outputs = malloc((size_t)rows * PER_CLASS_COUNT * sizeof(float));
    int32_t* labels = malloc((size_t)rows * sizeof(int32_t));
    int64_t r, correct = 0;
    int c, p, failed = 1;

    if (outputs == NULL || labels == NULL) {
        check_report_plain("no memory for the predictions of %" PRId64 " images", rows);
        goto done;
    }
    CHECK_MPT(mpt_trainer_predict_dataset(trainer, dataset, 0, outputs, rows * PER_CLASS_COUNT),
              "predicting the test set");
    CHECK_MPT(mpt_dataset_get_labels(dataset, labels, rows), "reading the test set's labels");
    for (r = 0; r < rows; ++r)
        ++confusion[labels[r]][predicted_class(outputs + r * PER_CLASS_COUNT)];

    printf("confusion matrix (rows: true class, columns: predicted):\n%12s", "");
    for (p = 0; p < PER_CLASS_COUNT; ++p)
        printf(" %6.6s", class_names[p]);
    printf("  accuracy\n");
    for (c = 0; c < PER_CLASS_COUNT; ++c) {
        int64_t total = 0;
        printf("%12s", class_names[c]);
        for (p = 0; p < PER_CLASS_COUNT; ++p) {
            printf(" %6" PRId64, confusion[c][p]);
            total += confusion[c][p];
        }
        accuracy[c] = total > 0 ? (double)confusion[c][c] / (double)total : 0.0;
        correct += confusion[c][c];
        printf("  %.4f\n", accuracy[c]);
    }
    *overall = rows > 0 ? (double)correct / (double)rows : 0.0;
    fflush(stdout);
    failed = 0;

done:
    free(outputs);
    free(labels);
    return failed;
}
