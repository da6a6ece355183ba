// test_training: what fit's callbacks may do mid-run: set the model's weights, evaluate a validation
// set at an epoch's end (and fail alone when that runs out of memory).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"

using namespace mpt_test::training;

namespace {

// Sets every layer of a model to the weights `layers` (as read_weights gives them) from a progress
// callback, at its `at_step`-th call.
struct SetWeightsAt {
    mpt_model_t* model;
    const std::vector<std::pair<std::vector<float>, std::vector<float>>>* layers;
    int64_t at_call;
    int64_t calls = 0;
    mpt_status status = MPT_STATUS_INTERNAL;
};

int set_weights_at(int64_t, int64_t, int64_t, float, float, void* user_data) {
    SetWeightsAt& action = *static_cast<SetWeightsAt*>(user_data);
    if (++action.calls != action.at_call) return 0;
    for (size_t i = 0; i < action.layers->size(); ++i) {
        const auto& [w, b] = (*action.layers)[i];
        action.status = mpt_model_set_weights(action.model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()),
                                              b.data(), static_cast<int64_t>(b.size()));
        if (action.status != MPT_STATUS_OK) break;
    }
    return 0;
}

}  // namespace

// A callback may set the model's weights in the middle of fit: the steps after it train from them,
// in every precision, as mpt_trainer_step on the same rows does (the low-precision copies follow the
// new masters, not only at the next epoch).
TEST_CASE("weights set from a progress callback are what fit's next steps train from, in every precision") {
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {2, MPT_ACTIVATION_SOFTMAX}};
    const Task task = make_xor(96, 31);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision_name(precision));
        TrainerSetup setup;
        setup.precision = precision;
        mpt_context_t* context = new_context(5);
        mpt_dataset_t* dataset = labels_dataset(context, task);
        mpt_model_t* source = new_model(context, task.features, specs);  // other weights, to set (read: built)
        const auto replacement = read_weights(source, task.features, specs);

        mpt_model_t* fitted = new_model(context, task.features, specs);
        mpt_trainer_t* fitting = new_trainer(fitted, setup);
        SetWeightsAt action{fitted, &replacement, 2};
        REQUIRE_OK(mpt_trainer_set_callbacks(fitting, &set_weights_at, nullptr, &action));
        REQUIRE_OK(mpt_trainer_fit(fitting, dataset, 1, 16, 0));  // unshuffled: steps take rows in order
        REQUIRE(action.status == MPT_STATUS_OK);

        mpt_model_t* stepped = new_model(context, task.features, specs);
        mpt_trainer_t* stepping = new_trainer(stepped, setup);
        REQUIRE_OK(mpt_trainer_step(stepping, dataset, 0, 16, nullptr));  // builds the model and its copies
        for (size_t i = 0; i < replacement.size(); ++i)
            REQUIRE_OK(mpt_model_set_weights(stepped, static_cast<int64_t>(i), replacement[i].first.data(),
                                             static_cast<int64_t>(replacement[i].first.size()),
                                             replacement[i].second.data(), static_cast<int64_t>(replacement[i].second.size())));
        for (int64_t first = 32; first < 96; first += 16) REQUIRE_OK(mpt_trainer_step(stepping, dataset, first, 16, nullptr));
        CHECK(same_bits(flat_weights(fitted, task.features, specs), flat_weights(stepped, task.features, specs)));

        mpt_trainer_destroy(stepping);
        mpt_model_destroy(stepped);
        mpt_trainer_destroy(fitting);
        mpt_model_destroy(fitted);
        mpt_model_destroy(source);
        mpt_dataset_destroy(dataset);
        mpt_context_destroy(context);
    }
}
namespace {

// What an epoch-end callback saw and got: the validation set's loss and accuracy after each epoch,
// fit's own epoch means, and the statuses of calls that stay refused there.
struct Validation {
    mpt_trainer_t* trainer = nullptr;
    mpt_dataset_t* validation = nullptr;
    mpt_dataset_t* training = nullptr;
    int64_t batch = 0;
    std::vector<float> losses, accuracies, epoch_losses;
    std::vector<mpt_status> evaluated, refused;
    mpt_status from_progress = MPT_STATUS_OK;
};

int validate_at_epoch_end(int64_t, float loss, float, void* user_data) {
    auto* v = static_cast<Validation*>(user_data);
    v->epoch_losses.push_back(loss);
    float validation_loss = -1.0f, validation_accuracy = -1.0f;
    v->evaluated.push_back(mpt_trainer_evaluate(v->trainer, v->validation, v->batch, &validation_loss, &validation_accuracy));
    v->losses.push_back(validation_loss);
    v->accuracies.push_back(validation_accuracy);
    float out[3];
    const float row[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    v->refused.push_back(mpt_trainer_step(v->trainer, v->training, 0, 16, nullptr));
    v->refused.push_back(mpt_trainer_predict(v->trainer, row, 1, out, 3));
    v->refused.push_back(mpt_trainer_fit(v->trainer, v->training, 1, 16, 1));
    return 0;
}

int evaluate_from_progress(int64_t, int64_t step, int64_t, float, float, void* user_data) {
    auto* v = static_cast<Validation*>(user_data);
    if (step == 2) v->from_progress = mpt_trainer_evaluate(v->trainer, v->validation, 0, nullptr, nullptr);
    return 0;
}

}  // namespace

TEST_CASE("an epoch-end callback may evaluate a validation set: the numbers of an evaluation between fits, the run unchanged") {
    const Task train = make_blobs(160, 4, 3, 1.2, 0.8, 31), held_out = make_blobs(70, 4, 3, 1.2, 0.8, 32);
    const std::vector<LayerSpec> specs = {{12, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16}) {
        for (int64_t validation_batch : {int64_t{0}, int64_t{64}}) {  // fit's batch (16), and more than it
            CAPTURE(static_cast<int>(precision));
            CAPTURE(validation_batch);
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.01f;
            // The same seed, so the same initial weights and shuffles, for three runs.
            struct Run {
                mpt_context_t* context;
                mpt_model_t* model;
                mpt_trainer_t* trainer;
                mpt_dataset_t* training;
                mpt_dataset_t* validation;
            };
            const auto open = [&]() {
                Run run{};
                run.context = new_context(17);
                run.model = new_model(run.context, 4, specs);
                run.trainer = new_trainer(run.model, setup);
                run.training = labels_dataset(run.context, train);
                run.validation = labels_dataset(run.context, held_out);
                return run;
            };
            const auto close = [](Run& run) {
                mpt_dataset_destroy(run.validation);
                mpt_dataset_destroy(run.training);
                mpt_trainer_destroy(run.trainer);
                mpt_model_destroy(run.model);
                mpt_context_destroy(run.context);
            };

            Run validated = open();
            Validation v;
            v.trainer = validated.trainer;
            v.validation = validated.validation;
            v.training = validated.training;
            v.batch = validation_batch;
            REQUIRE_OK(mpt_trainer_set_callbacks(validated.trainer, evaluate_from_progress, validate_at_epoch_end, &v));
            REQUIRE_OK(mpt_trainer_fit(validated.trainer, validated.training, 3, 16, 1));
            CHECK(v.from_progress == MPT_STATUS_INVALID_STATE);  // mid-epoch: steps are in flight
            REQUIRE(v.evaluated.size() == 3);
            for (mpt_status status : v.evaluated) CHECK(status == MPT_STATUS_OK);
            for (mpt_status status : v.refused) CHECK(status == MPT_STATUS_INVALID_STATE);
            int64_t steps = 0, epochs = 0;
            REQUIRE_OK(mpt_trainer_get_progress(validated.trainer, &steps, &epochs));
            CHECK(steps == 30);
            CHECK(epochs == 3);

            // Evaluations between one-epoch fits give the same numbers, bit for bit.
            Run between = open();
            for (int epoch = 0; epoch < 3; ++epoch) {
                CAPTURE(epoch);
                REQUIRE_OK(mpt_trainer_fit(between.trainer, between.training, 1, 16, 1));
                float loss = 0.0f, accuracy = 0.0f;
                REQUIRE_OK(mpt_trainer_evaluate(between.trainer, between.validation, validation_batch, &loss, &accuracy));
                CHECK(loss == v.losses[static_cast<size_t>(epoch)]);
                CHECK(accuracy == v.accuracies[static_cast<size_t>(epoch)]);
            }
            // A run without evaluations trains the same weights and reports the same epoch means.
            Run plain = open();
            Validation plain_seen;
            REQUIRE_OK(mpt_trainer_set_callbacks(plain.trainer, nullptr,
                                                 [](int64_t, float loss, float, void* user) {
                                                     static_cast<Validation*>(user)->epoch_losses.push_back(loss);
                                                     return 0;
                                                 },
                                                 &plain_seen));
            REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain.training, 3, 16, 1));
            CHECK(plain_seen.epoch_losses == v.epoch_losses);
            const std::vector<float> expected = flat_weights(plain.model, 4, specs);
            CHECK(flat_weights(validated.model, 4, specs) == expected);
            CHECK(flat_weights(between.model, 4, specs) == expected);
            close(plain);
            close(between);
            close(validated);
        }
    }
}

namespace {

struct FailingValidation {
    mpt_trainer_t* trainer;
    mpt_dataset_t* validation;
    std::vector<mpt_status> statuses;
    std::vector<float> epoch_losses;
};

int validate_beyond_the_budget(int64_t, float loss, float, void* user_data) {
    auto* v = static_cast<FailingValidation*>(user_data);
    v->epoch_losses.push_back(loss);
    if (v->validation) v->statuses.push_back(mpt_trainer_evaluate(v->trainer, v->validation, 2048, nullptr, nullptr));
    return 0;
}

}  // namespace

// An evaluation whose larger batch does not fit the memory budget fails inside the callback (its
// step buffers given back for the larger plan), and fit plans its own again for the next epoch.
TEST_CASE("an epoch-end evaluation that runs out of memory fails alone: fit's next epochs train as without it") {
    const Task train = make_blobs(256, 64, 4, 1.0, 0.8, 41), held_out = make_blobs(2048, 64, 4, 1.0, 0.8, 42);
    const std::vector<LayerSpec> specs = {{48, MPT_ACTIVATION_RELU}, {4, MPT_ACTIVATION_SOFTMAX}};
    TrainerSetup setup;
    size_t budget = 0;
    {  // what fit and an evaluation at fit's batch take, both data sets included
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5);
        mpt_model_t* model = new_model(context, 64, specs);
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* training = labels_dataset(context, train);
        mpt_dataset_t* validation = labels_dataset(context, held_out);
        REQUIRE_OK(mpt_trainer_fit(trainer, training, 1, 16, 1));
        REQUIRE_OK(mpt_trainer_evaluate(trainer, validation, 16, nullptr, nullptr));
        REQUIRE_OK(mpt_context_get_memory(context, nullptr, &budget));
        budget += 4096;
        mpt_dataset_destroy(validation);
        mpt_dataset_destroy(training);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    std::vector<std::vector<float>> weights;
    std::vector<std::vector<float>> epoch_losses;
    for (bool evaluating : {true, false}) {
        CAPTURE(evaluating);
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5, budget);
        mpt_model_t* model = new_model(context, 64, specs);
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* training = labels_dataset(context, train);
        mpt_dataset_t* validation = labels_dataset(context, held_out);
        FailingValidation v{trainer, evaluating ? validation : nullptr, {}, {}};
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer, nullptr, validate_beyond_the_budget, &v));
        REQUIRE_OK(mpt_trainer_fit(trainer, training, 3, 16, 1));
        if (evaluating) {
            REQUIRE(v.statuses.size() == 3);
            for (mpt_status status : v.statuses) CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
        }
        weights.push_back(flat_weights(model, 64, specs));
        epoch_losses.push_back(v.epoch_losses);
        mpt_dataset_destroy(validation);
        mpt_dataset_destroy(training);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    CHECK(epoch_losses[0] == epoch_losses[1]);
    CHECK(weights[0] == weights[1]);
}
