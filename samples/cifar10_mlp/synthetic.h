/* A generated CIFAR-shaped data set (32x32x3 uint8 images, labels 0..9) used when the real
 * CIFAR-10 files are missing, so the sample always runs. Learnable: every class has a random
 * prototype image, and each sample is its class's prototype blended with uniform noise. */
#ifndef CIFAR10_SYNTHETIC_H
#define CIFAR10_SYNTHETIC_H

#include <stdint.h>

#define SYNTHETIC_TRAIN_ROWS 5000
#define SYNTHETIC_TEST_ROWS 1000

typedef struct synthetic_split {
    uint8_t* samples; /* rows * 3072 bytes, channel-planar as CIFAR-10 */
    int32_t* labels;  /* rows labels in [0, 10) */
    int64_t rows;
} synthetic_split;

/* Generates `rows` samples. The prototypes come from a fixed seed, so every call (and every run)
 * sees the same classes; `stream` picks the noise and labels (train and test use different ones).
 * Returns 0, or -1 when memory runs out (nothing to free then). */
int synthetic_generate(int64_t rows, uint64_t stream, synthetic_split* out);
void synthetic_free(synthetic_split* split);

#endif
