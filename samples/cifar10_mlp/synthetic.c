/* Generated CIFAR-shaped images: class prototype + noise, from fixed seeds. */
#include "synthetic.h"

#include <stdlib.h>
#include <string.h>

enum { IMAGE_BYTES = 32 * 32 * 3, CLASSES = 10 };

/* The data must not change with --seed: results on it are compared across runs and machines. */
static const uint64_t prototype_seed = 0x43494641523130ull; /* "CIFAR10" */

/* splitmix64: small, fast and good enough to make noise; the same sequence on every platform. */
static uint64_t next_random(uint64_t* state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int synthetic_generate(int64_t rows, uint64_t stream, synthetic_split* out)
{
    uint8_t* prototypes = NULL;
    uint8_t* samples = NULL;
    int32_t* labels = NULL;
    uint64_t state = prototype_seed;
    int64_t row;
    size_t i;

    if (rows <= 0 || (uint64_t)rows > SIZE_MAX / IMAGE_BYTES)
        return -1;
    prototypes = malloc((size_t)CLASSES * IMAGE_BYTES);
    samples = malloc((size_t)rows * IMAGE_BYTES);
    labels = malloc((size_t)rows * sizeof *labels);
    if (prototypes == NULL || samples == NULL || labels == NULL) {
        free(prototypes);
        free(samples);
        free(labels);
        return -1;
    }

    for (i = 0; i < (size_t)CLASSES * IMAGE_BYTES; ++i)
        prototypes[i] = (uint8_t)(next_random(&state) >> 56);

    state = prototype_seed ^ (0xD1B54A32D192ED03ull * (stream + 1));
    for (row = 0; row < rows; ++row) {
        const int32_t label = (int32_t)(next_random(&state) % CLASSES);
        const uint8_t* prototype = prototypes + (size_t)label * IMAGE_BYTES;
        uint8_t* image = samples + (size_t)row * IMAGE_BYTES;
        labels[row] = label;
        /* One part prototype, three parts noise: every pixel is noisy, yet 3072 pixels together
         * tell the class apart, so a network learns it in an epoch without it being trivial. */
        for (i = 0; i < IMAGE_BYTES; i += 8) {
            uint64_t noise = next_random(&state);
            size_t k;
            for (k = 0; k < 8; ++k, noise >>= 8)
                image[i + k] = (uint8_t)((prototype[i + k] + 3u * (unsigned)(noise & 0xFFu)) / 4u);
        }
    }

    free(prototypes);
    out->samples = samples;
    out->labels = labels;
    out->rows = rows;
    return 0;
}

void synthetic_free(synthetic_split* split)
{
    if (split == NULL)
        return;
    free(split->samples);
    free(split->labels);
    memset(split, 0, sizeof *split);
}
