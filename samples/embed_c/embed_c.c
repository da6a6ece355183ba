/* embed_c: the smallest C program that embeds mptrain. It trains an MLP on three generated
 * Gaussian blobs, prints the accuracy, predicts two points, and shows how an error surfaces.
 * Built against an installed mptrain through pkg-config (see Makefile). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mptrain/mptrain.h>

#define ROWS 600
#define FEATURES 4
#define CLASSES 3

/* Stops the program with the library's message when a call fails. */
#define CHECK(call)                                                                              \
    do {                                                                                         \
        mpt_status status_ = (call);                                                             \
        if (status_ != MPT_STATUS_OK) {                                                          \
            fprintf(stderr, "%s failed: %s: %s\n", #call, mpt_status_string(status_), mpt_last_error()); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static uint64_t rng_state = 12345;
static double uniform(void) { /* xorshift64*: reproducible data on every platform */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2.0 * log(uniform() + 1e-12)) * cos(6.283185307179586 * uniform()); }

static int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) {
    (void)user_data;
    printf("epoch %lld: loss %.4f accuracy %.3f\n", (long long)epoch, loss, accuracy);
    return 0; /* non-zero would stop training */
}

int main(void) {
    static float samples[ROWS * FEATURES];
    static int32_t labels[ROWS];
    for (int row = 0; row < ROWS; ++row) {
        const int label = row % CLASSES;
        labels[row] = label;
        for (int f = 0; f < FEATURES; ++f)
            samples[row * FEATURES + f] = (float)((f % CLASSES == label ? 2.5 : 0.0) + 0.6 * normal());
    }

    printf("mptrain %s\n", mpt_version());
    mpt_context_options_t* context_options = NULL;
    CHECK(mpt_context_options_create(&context_options));
    CHECK(mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU));
    CHECK(mpt_context_options_set_threads(context_options, 1));
    mpt_context_t* context = NULL;
    CHECK(mpt_context_create(context_options, &context));
    mpt_context_options_destroy(context_options);

    mpt_model_t* model = NULL;
    CHECK(mpt_model_create(context, FEATURES, &model));
    CHECK(mpt_model_add_dense(model, 16, MPT_ACTIVATION_RELU));
    CHECK(mpt_model_add_dense(model, CLASSES, MPT_ACTIVATION_SOFTMAX));

    mpt_dataset_t* dataset = NULL;
    CHECK(mpt_dataset_create_f32(context, samples, ROWS, FEATURES, labels, CLASSES, 1, &dataset));

    mpt_trainer_options_t* trainer_options = NULL;
    CHECK(mpt_trainer_options_create(&trainer_options));
    CHECK(mpt_trainer_options_set_optimizer(trainer_options, MPT_OPTIMIZER_ADAM));
    CHECK(mpt_trainer_options_set_learning_rate(trainer_options, 0.01f));
    mpt_trainer_t* trainer = NULL;
    CHECK(mpt_trainer_create(model, trainer_options, &trainer));
    mpt_trainer_options_destroy(trainer_options);
    CHECK(mpt_trainer_set_callbacks(trainer, NULL, on_epoch_end, NULL));
    CHECK(mpt_trainer_fit(trainer, dataset, 5, 32, 1));

    float loss = 0.0f, accuracy = 0.0f;
    CHECK(mpt_trainer_evaluate(trainer, dataset, 0, &loss, &accuracy));
    printf("accuracy %.3f (loss %.4f)\n", accuracy, loss);

    const float points[2 * FEATURES] = {2.5f, 0, 0, 2.5f, /* class 0 */ 0, 0, 2.5f, 0 /* class 2 */};
    float probabilities[2 * CLASSES];
    CHECK(mpt_model_predict(model, points, 2, probabilities, 2 * CLASSES));
    for (int row = 0; row < 2; ++row)
        printf("point %d: p = [%.3f %.3f %.3f]\n", row, probabilities[row * CLASSES], probabilities[row * CLASSES + 1],
               probabilities[row * CLASSES + 2]);

    /* Errors come back as a status plus a thread-local message; nothing aborts. */
    const mpt_status status = mpt_model_predict(model, points, 2, probabilities, 5);
    printf("a wrong output size gives %s: %s\n", mpt_status_string(status), mpt_last_error());

    /* Handles may be destroyed in any order: children keep their parents alive. */
    mpt_context_destroy(context);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    if (accuracy < 0.9f || status != MPT_STATUS_SHAPE_MISMATCH) {
        fprintf(stderr, "unexpected result\n");
        return 1;
    }
    return 0;
}
