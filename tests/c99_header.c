/* Compiled as C99 with -Wall -Wextra -Werror -pedantic: the public header must stay plain C, and a C
 * program must be able to train through it. Learns a linearly separable rule and checks accuracy. */
#include <mptrain/mptrain.h>

#include <stdio.h>
#include <stdlib.h>

#define ROWS 512
#define FEATURES 8

static int failures = 0;

static void expect(int condition, const char* what) {
    if (!condition) {
        fprintf(stderr, "FAILED: %s (%s)\n", what, mpt_last_error());
        ++failures;
    }
}

static int count_epochs(int64_t epoch, float loss, float accuracy, void* user_data) {
    (void)epoch; (void)loss; (void)accuracy;
    ++*(int*)user_data;
    return 0;
}

int main(void) {
    static float samples[ROWS * FEATURES];
    static int32_t labels[ROWS];
    mpt_context_options_t* context_options = NULL;
    mpt_context_t* context = NULL;
    mpt_model_t* model = NULL;
    mpt_dataset_t* dataset = NULL;
    mpt_trainer_options_t* options = NULL;
    mpt_trainer_t* trainer = NULL;
    float loss = 0.0f, accuracy = 0.0f;
    int epochs_seen = 0;
    int i, j;
    unsigned int state = 12345u;

    for (i = 0; i < ROWS; ++i) {
        float sum = 0.0f;
        for (j = 0; j < FEATURES; ++j) {
            state = state * 1103515245u + 12345u;
            samples[i * FEATURES + j] = (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
            sum += samples[i * FEATURES + j] * (float)(j + 1);
        }
        labels[i] = sum > 0.0f ? 1 : 0;
    }

    expect(mpt_context_options_create(&context_options) == MPT_STATUS_OK, "context options");
    expect(mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU) == MPT_STATUS_OK, "backend");
    expect(mpt_context_create(context_options, &context) == MPT_STATUS_OK, "context");
    mpt_context_options_destroy(context_options);
    expect(mpt_model_create(context, FEATURES, &model) == MPT_STATUS_OK, "model");
    expect(mpt_model_add_dense(model, 16, MPT_ACTIVATION_TANH) == MPT_STATUS_OK, "dense 16");
    expect(mpt_model_add_dense(model, 2, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK, "dense 2");
    expect(mpt_dataset_create_f32(context, samples, ROWS, FEATURES, labels, 2, 1, &dataset) == MPT_STATUS_OK, "dataset");
    expect(mpt_trainer_options_create(&options) == MPT_STATUS_OK, "trainer options");
    expect(mpt_trainer_options_set_learning_rate(options, 0.1f) == MPT_STATUS_OK, "learning rate");
    expect(mpt_trainer_create(model, options, &trainer) == MPT_STATUS_OK, "trainer");
    mpt_trainer_options_destroy(options);
    expect(mpt_trainer_set_callbacks(trainer, NULL, count_epochs, &epochs_seen) == MPT_STATUS_OK, "callbacks");
    expect(mpt_trainer_fit(trainer, dataset, 20, 32, 1) == MPT_STATUS_OK, "fit");
    expect(mpt_trainer_evaluate(trainer, dataset, 0, &loss, &accuracy) == MPT_STATUS_OK, "evaluate");
    expect(epochs_seen == 20, "epoch callback ran once per epoch");
    expect(accuracy > 0.95f, "a linear rule is learnt");
    expect(mpt_trainer_fit(NULL, dataset, 1, 32, 1) == MPT_STATUS_INVALID_ARGUMENT, "NULL trainer is rejected");

    mpt_trainer_destroy(trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
    printf("c99: accuracy %.3f, %d failures\n", (double)accuracy, failures);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
