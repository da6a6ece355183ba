/* mptrain-call-overhead: what one C API call costs beyond its work, for embedders that call the
 * library many times per second: nanoseconds per call of a getter (mpt_model_get_layer_count: the
 * handle checks, the error state, the context taken for the calling thread and given back) and of a
 * one-row prediction through a 4-3 softmax layer, each the median of 7 rounds.
 * Usage: mptrain-call-overhead [getter calls per round (default 2000000)] */
#include <mptrain/mptrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ROUNDS = 7 };

static double seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int by_value(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(double* values)
{
    qsort(values, ROUNDS, sizeof *values, by_value);
    return values[ROUNDS / 2];
}

int main(int argc, char** argv)
{
    const long calls = argc > 1 ? atol(argv[1]) : 2000000;
    mpt_context_options_t* options = NULL;
    mpt_context_t* context = NULL;
    mpt_model_t* model = NULL;
    const float inputs[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float outputs[3];
    double getter[ROUNDS], predict[ROUNDS];
    int round;
    long i;
    mpt_status status = mpt_context_options_create(&options);
    if (!status) status = mpt_context_options_set_backend(options, MPT_BACKEND_CPU);
    if (!status) status = mpt_context_options_set_threads(options, 1);
    if (!status) status = mpt_context_create(options, &context);
    if (!status) status = mpt_model_create(context, 4, &model);
    if (!status) status = mpt_model_add_dense(model, 3, MPT_ACTIVATION_SOFTMAX);
    if (!status) status = mpt_model_predict(model, inputs, 1, outputs, 3); /* builds the model */
    if (status || calls < 10) {
        fprintf(stderr, "setup failed: %s %s\n", mpt_status_string(status), mpt_last_error());
        return 1;
    }
    for (round = 0; round < ROUNDS; ++round) {
        int64_t layers = 0;
        double start = seconds();
        for (i = 0; i < calls; ++i) status |= mpt_model_get_layer_count(model, &layers);
        getter[round] = (seconds() - start) * 1e9 / (double)calls;
        start = seconds();
        for (i = 0; i < calls / 10; ++i) status |= mpt_model_predict(model, inputs, 1, outputs, 3);
        predict[round] = (seconds() - start) * 1e9 / (double)(calls / 10);
    }
    if (status) {
        fprintf(stderr, "a timed call failed: %s\n", mpt_last_error());
        return 1;
    }
    printf("mptrain %s, median of %d rounds\n", mpt_version(), ROUNDS);
    printf("mpt_model_get_layer_count          %8.1f ns/call\n", median(getter));
    printf("mpt_model_predict, 1 row, 4-3 layer %8.1f ns/call\n", median(predict));
    mpt_model_destroy(model);
    mpt_context_destroy(context);
    mpt_context_options_destroy(options);
    return 0;
}
