// Weight averaging through the C API (mpt_trainer_options_set_ema, mpt_trainer_swap_ema_weights;
// Keras's use_ema): the averages against Keras's formula computed here from the weights after every
// step, skipped steps, the exchange (both ways, bit for bit, with what sees the averages), what is
// refused while the model holds them, fit's callbacks, checkpoints, and the refusals. This file is
// compiled without floating-point contraction (tests/CMakeLists.txt), so the formula computed here
// rounds as the library's does.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::file_contains;
using mpt_test::same_bits;

constexpr int64_t kRows = 48;
constexpr int64_t kBatch = 16;
constexpr float kMomentum = 0.75f;  // far from 1, so that a few steps move the averages visibly

BlobTrainerSetup averaging_setup() {
    BlobTrainerSetup setup;
    setup.ema_momentum = kMomentum;
    setup.learning_rate = 0.2f;
    return setup;
}

// Keras's moving average after one more applied step with `weights`.
void average_in(std::vector<float>& averages, const std::vector<float>& weights, float momentum) {
    REQUIRE(averages.size() == weights.size());
    for (size_t i = 0; i < weights.size(); ++i) averages[i] = momentum * averages[i] + (1.0f - momentum) * weights[i];
}

// Exchanges the weights and the averages; returns whether the model holds the averages now.
bool swap(const BlobTrainer& trainer) {
    int holds = -1;
    REQUIRE_OK(mpt_trainer_swap_ema_weights(trainer.trainer, &holds));
    REQUIRE((holds == 0 || holds == 1));
    return holds == 1;
}

// The trainer's averages, read by exchanging twice (which must bring the weights back).
std::vector<float> averages_of(const BlobTrainer& trainer) {
    const std::vector<float> weights = trainer.weights();
    REQUIRE(swap(trainer));
    const std::vector<float> averages = trainer.weights();
    REQUIRE_FALSE(swap(trainer));
    REQUIRE(same_bits(weights, trainer.weights()));
    return averages;
}

void step_on(const BlobTrainer& trainer, mpt_dataset_t* dataset, int step, int64_t rows) {
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, (kBatch * step) % (rows - kBatch + 1), kBatch, nullptr));
}

}  // namespace

TEST_CASE("the averages are Keras's moving average of the weights after every step; the first step copies them") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 51, 1.0);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM}) {
            CAPTURE(precision);
            CAPTURE(optimizer);
            BlobTrainerSetup setup = averaging_setup();
            setup.precision = precision;
            setup.optimizer = optimizer;
            setup.momentum = optimizer == MPT_OPTIMIZER_SGD ? 0.9f : 0.0f;
            setup.learning_rate = optimizer == MPT_OPTIMIZER_SGD ? 0.2f : 0.02f;
            BlobTrainerSetup plain_setup = setup;
            plain_setup.ema_momentum = 0.0f;
            BlobTrainer trainer(setup), plain(plain_setup);
            mpt_dataset_t* dataset = trainer.labels(blobs);
            mpt_dataset_t* plain_dataset = plain.labels(blobs);
            std::vector<float> expected;
            for (int step = 0; step < 6; ++step) {
                CAPTURE(step);
                step_on(trainer, dataset, step, kRows);
                step_on(plain, plain_dataset, step, kRows);
                const std::vector<float> weights = trainer.weights();
                if (step == 0) expected = weights;
                else average_in(expected, weights, kMomentum);
                CHECK(same_bits(averages_of(trainer), expected));
                // Averaging and exchanging (the low-precision copies made again from the weights
                // brought back) change nothing in training.
                CHECK(same_bits(weights, plain.weights()));
            }
            CHECK_FALSE(same_bits(expected, trainer.weights()));
            mpt_dataset_destroy(dataset);
            mpt_dataset_destroy(plain_dataset);
        }
    }
}

TEST_CASE("a skipped step leaves the averages; the next applied step averages on from them") {
    BlobTrainerSetup setup = averaging_setup();
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 2.0f;  // above the minimum (1): the skip backs off rather than fails the step
    BlobTrainer trainer(setup);
    const Blobs blobs = mpt_test::make_blobs(kRows, 52, 1.0);
    Blobs poisoned = blobs;
    for (float& x : poisoned.x) x *= 1e6f;  // beyond fp16's range once gathered: the step is skipped
    mpt_dataset_t* dataset = trainer.labels(blobs);
    mpt_dataset_t* poisoned_dataset = trainer.labels(poisoned);
    step_on(trainer, dataset, 0, kRows);
    step_on(trainer, dataset, 1, kRows);
    const std::vector<float> weights = trainer.weights(), averages = averages_of(trainer);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, poisoned_dataset, 0, kBatch, nullptr));
    int64_t skipped = 0;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer.trainer, nullptr, nullptr, &skipped));
    REQUIRE(skipped == 1);
    CHECK(same_bits(weights, trainer.weights()));
    CHECK(same_bits(averages, averages_of(trainer)));
    step_on(trainer, dataset, 2, kRows);
    std::vector<float> expected = averages;
    average_in(expected, trainer.weights(), kMomentum);
    CHECK(same_bits(averages_of(trainer), expected));

    // Skipped before any applied step, the averages wait for the first applied step, which copies.
    BlobTrainer fresh(setup);
    mpt_dataset_t* fresh_poisoned = fresh.labels(poisoned);
    mpt_dataset_t* fresh_dataset = fresh.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(fresh.trainer, fresh_poisoned, 0, kBatch, nullptr));
    step_on(fresh, fresh_dataset, 0, kRows);
    CHECK(same_bits(averages_of(fresh), fresh.weights()));
    for (mpt_dataset_t* d : {dataset, poisoned_dataset, fresh_poisoned, fresh_dataset}) mpt_dataset_destroy(d);
}

namespace {

// One precision's case of the exchange: see the test case below.
void check_exchange_sees_averages(mpt_precision precision) {
    const Blobs blobs = mpt_test::make_blobs(kRows, 53, 1.0);
    BlobTrainerSetup setup = averaging_setup();
    setup.precision = precision;
    BlobTrainer trainer(setup);
    // Before any step the averages are the weights: the exchange changes no value.
    const std::vector<float> initial = trainer.weights();
    CHECK(swap(trainer));
    CHECK(same_bits(initial, trainer.weights()));
    CHECK_FALSE(swap(trainer));

    mpt_dataset_t* dataset = trainer.labels(blobs);
    for (int step = 0; step < 4; ++step) step_on(trainer, dataset, step, kRows);
    const std::vector<float> trained = trainer.weights();
    float trained_loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, &trained_loss, nullptr));
    const std::vector<float> trained_outputs = trainer.predict(blobs);
    REQUIRE(swap(trainer));
    const std::vector<float> averages = trainer.weights();
    CHECK_FALSE(same_bits(averages, trained));

    // A second model given the averages as its weights answers as the exchanged one does.
    BlobTrainerSetup reference_setup;
    reference_setup.precision = precision;
    BlobTrainer reference(reference_setup);
    int64_t offset = 0;
    for (int64_t layer = 0; layer < 2; ++layer) {
        const int64_t units = layer == 0 ? mpt_test::kBlobHidden : mpt_test::kBlobClasses;
        const int64_t inputs = layer == 0 ? mpt_test::kBlobFeatures : mpt_test::kBlobHidden;
        REQUIRE_OK(mpt_model_set_weights(reference.model, layer, averages.data() + offset, units * inputs,
                                         averages.data() + offset + units * inputs, units));
        offset += units * inputs + units;
    }
    mpt_dataset_t* reference_dataset = reference.labels(blobs);
    float loss = 0.0f, reference_loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, &loss, nullptr));
    REQUIRE_OK(mpt_trainer_evaluate(reference.trainer, reference_dataset, kBatch, &reference_loss, nullptr));
    CHECK(loss == reference_loss);
    CHECK(loss != trained_loss);
    CHECK(same_bits(trainer.predict(blobs), reference.predict(blobs)));
    std::vector<float> model_outputs(static_cast<size_t>(blobs.rows() * mpt_test::kBlobClasses));
    std::vector<float> reference_outputs(model_outputs.size());
    REQUIRE_OK(mpt_model_predict(trainer.model, blobs.x.data(), blobs.rows(), model_outputs.data(),
                                 static_cast<int64_t>(model_outputs.size())));
    REQUIRE_OK(mpt_model_predict(reference.model, blobs.x.data(), blobs.rows(), reference_outputs.data(),
                                 static_cast<int64_t>(reference_outputs.size())));
    CHECK(same_bits(model_outputs, reference_outputs));
    const mpt_test::TempDir directory;
    const std::string path = directory.file("averaged.safetensors");
    REQUIRE_OK(mpt_model_save(trainer.model, path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(trainer.context, path.c_str(), &loaded));
    std::vector<float> loaded_weights(static_cast<size_t>(mpt_test::kBlobHidden * mpt_test::kBlobFeatures));
    std::vector<float> loaded_bias(static_cast<size_t>(mpt_test::kBlobHidden));
    REQUIRE_OK(mpt_model_get_weights(loaded, 0, loaded_weights.data(), static_cast<int64_t>(loaded_weights.size()),
                                     loaded_bias.data(), static_cast<int64_t>(loaded_bias.size())));
    CHECK(same_bits(loaded_weights, std::vector<float>(averages.begin(), averages.begin() + loaded_weights.size())));
    mpt_model_destroy(loaded);

    // Back: the trained weights, bit for bit, and what was computed from them.
    CHECK_FALSE(swap(trainer));
    CHECK(same_bits(trained, trainer.weights()));
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 0, &loss, nullptr));
    CHECK(loss == trained_loss);
    CHECK(same_bits(trainer.predict(blobs), trained_outputs));
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(reference_dataset);
}

}  // namespace

TEST_CASE("while exchanged, evaluate, predict, the model's own calls and model files see the averages") {
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(precision);
        check_exchange_sees_averages(precision);
    }
}

TEST_CASE("while the model holds the averages, training and checkpoints are refused, for every trainer of the model") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 54, 1.0);
    BlobTrainer trainer(averaging_setup());
    mpt_dataset_t* dataset = trainer.labels(blobs);
    step_on(trainer, dataset, 0, kRows);
    const mpt_test::TempDir directory;
    const std::string path = directory.file("checkpoint.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));

    // A second trainer of the same model, averaging too, and one that does not average.
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, 0.5f));
    mpt_trainer_t* other = nullptr;
    REQUIRE_OK(mpt_trainer_create(trainer.model, options, &other));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, 0.0f));
    mpt_trainer_t* plain = nullptr;
    REQUIRE_OK(mpt_trainer_create(trainer.model, options, &plain));
    mpt_trainer_options_destroy(options);
    int holds = -1;
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_swap_ema_weights(plain, &holds));
    CHECK(holds == -1);
    CHECK(std::string(mpt_last_error()).find("mpt_trainer_options_set_ema") != std::string::npos);

    REQUIRE(swap(trainer));
    const std::vector<float> averages = trainer.weights();
    const auto check_refused = [&](mpt_status status, const char* expected) {
        CHECK(status == MPT_STATUS_INVALID_STATE);
        CHECK_MESSAGE(std::string(mpt_last_error()).find(expected) != std::string::npos, mpt_last_error());
    };
    check_refused(mpt_trainer_step(trainer.trainer, dataset, 0, kBatch, nullptr), "this trainer's averaged weights");
    check_refused(mpt_trainer_fit(trainer.trainer, dataset, 1, kBatch, 0), "cannot train");
    check_refused(mpt_trainer_save_checkpoint(trainer.trainer, directory.file("refused.safetensors").c_str()),
                  "cannot save a checkpoint");
    check_refused(mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()), "cannot load a checkpoint");
    check_refused(mpt_trainer_step(other, dataset, 0, kBatch, nullptr), "another trainer's averaged weights");
    check_refused(mpt_trainer_step(plain, dataset, 0, kBatch, nullptr), "another trainer's averaged weights");
    check_refused(mpt_trainer_swap_ema_weights(other, nullptr), "another trainer's averaged weights");
    CHECK(same_bits(averages, trainer.weights()));  // nothing refused changed a weight
    // Evaluating is allowed, from any trainer of the model.
    float loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(plain, dataset, 0, &loss, nullptr));

    // Back in their places, all of it works again.
    CHECK_FALSE(swap(trainer));
    REQUIRE_OK(mpt_trainer_step(other, dataset, 0, kBatch, nullptr));
    REQUIRE_OK(mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
    step_on(trainer, dataset, 1, kRows);
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, path.c_str()));

    // Destroyed while the model holds its averages, a trainer leaves them there, and the model
    // trains on with another trainer.
    const std::vector<float> final_averages = averages_of(trainer);
    REQUIRE(swap(trainer));
    mpt_trainer_destroy(trainer.trainer);
    trainer.trainer = nullptr;
    CHECK(same_bits(final_averages, trainer.weights()));
    REQUIRE_OK(mpt_trainer_step(plain, dataset, 0, kBatch, nullptr));
    mpt_trainer_destroy(other);
    mpt_trainer_destroy(plain);
    mpt_dataset_destroy(dataset);
}

namespace {

struct CallbackUse {
    const BlobTrainer* trainer = nullptr;
    const Blobs* blobs = nullptr;
    mpt_dataset_t* evaluation = nullptr;
    bool swap_back = true;
    mpt_status progress_swap = MPT_STATUS_OK;
    std::string progress_error;
    std::vector<float> losses;  // the averaged model's, at every epoch's end
    std::vector<std::vector<float>> averages;
};

int swap_from_progress(int64_t, int64_t, int64_t, float, float, void* user_data) {
    auto& use = *static_cast<CallbackUse*>(user_data);
    if (use.progress_swap == MPT_STATUS_OK) {
        use.progress_swap = mpt_trainer_swap_ema_weights(use.trainer->trainer, nullptr);
        use.progress_error = mpt_last_error();
    }
    return 0;
}

int evaluate_averages_at_epoch_end(int64_t, float, float, void* user_data) {
    auto& use = *static_cast<CallbackUse*>(user_data);
    int holds = 0;
    if (mpt_trainer_swap_ema_weights(use.trainer->trainer, &holds) != MPT_STATUS_OK || holds != 1) return 1;
    float loss = 0.0f;
    if (mpt_trainer_evaluate(use.trainer->trainer, use.evaluation, 0, &loss, nullptr) != MPT_STATUS_OK) return 1;
    use.losses.push_back(loss);
    use.averages.push_back(use.trainer->weights());
    if (use.swap_back && mpt_trainer_swap_ema_weights(use.trainer->trainer, &holds) != MPT_STATUS_OK) return 1;
    return 0;
}

}  // namespace

TEST_CASE("fit's epoch-end callback may evaluate the averages; its progress callback may not exchange them") {
    const Blobs blobs = mpt_test::make_blobs(96, 55, 1.0);
    BlobTrainer trainer(averaging_setup()), plain(averaging_setup());
    mpt_dataset_t* dataset = trainer.labels(blobs);
    mpt_dataset_t* plain_dataset = plain.labels(blobs);
    CallbackUse use;
    use.trainer = &trainer;
    use.evaluation = dataset;
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, swap_from_progress, evaluate_averages_at_epoch_end, &use));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 3, kBatch, 1));
    REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain_dataset, 3, kBatch, 1));
    CHECK(use.progress_swap == MPT_STATUS_INVALID_STATE);
    CHECK_FALSE(use.progress_error.empty());
    REQUIRE(use.losses.size() == 3);
    // The exchanges changed nothing in the run; the last epoch's averages are the trainer's.
    CHECK(same_bits(trainer.weights(), plain.weights()));
    CHECK(same_bits(use.averages.back(), averages_of(plain)));
    CHECK(use.losses.back() < use.losses.front());

    // Left in the model by the callback, the averages stop fit before its next epoch, and an
    // automatic checkpoint due at that epoch's end is refused too.
    use.swap_back = false;
    use.losses.clear();
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, evaluate_averages_at_epoch_end, &use));
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_fit(trainer.trainer, dataset, 2, kBatch, 1));
    CHECK(std::string(mpt_last_error()).find("after the epoch-end callback") != std::string::npos);
    CHECK(use.losses.size() == 1);
    CHECK_FALSE(swap(trainer));
    const mpt_test::TempDir directory;
    REQUIRE_OK(mpt_trainer_set_checkpointing(trainer.trainer, directory.path.c_str(), 0, 1, 1));
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_fit(trainer.trainer, dataset, 1, kBatch, 1));
    CHECK(std::string(mpt_last_error()).find("cannot save a checkpoint") != std::string::npos);
    // With one epoch and no checkpointing, fit ends with the averages in the model (Keras's finish).
    REQUIRE_OK(mpt_trainer_set_checkpointing(trainer.trainer, nullptr, 0, 0, 1));
    CHECK_FALSE(swap(trainer));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 1, kBatch, 1));
    CHECK(swap(trainer) == false);
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(plain_dataset);
}

namespace {

// From the callbacks of one trainer's fit, the exchange of another trainer of the same model.
struct OtherTrainerUse {
    mpt_trainer_t* other = nullptr;
    std::vector<mpt_status> progress_statuses, epoch_end_statuses;
    std::string message;
};

int swap_other_from_progress(int64_t, int64_t, int64_t, float, float, void* user_data) {
    auto& use = *static_cast<OtherTrainerUse*>(user_data);
    use.progress_statuses.push_back(mpt_trainer_swap_ema_weights(use.other, nullptr));
    use.message = mpt_last_error();
    return 0;
}

int swap_other_at_epoch_end(int64_t, float, float, void* user_data) {
    auto& use = *static_cast<OtherTrainerUse*>(user_data);
    use.epoch_end_statuses.push_back(mpt_trainer_swap_ema_weights(use.other, nullptr));
    return 0;
}

}  // namespace

TEST_CASE("while one trainer fits, another trainer of the model may not exchange its averages from its callbacks") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 57, 1.0);
    BlobTrainer fitting(averaging_setup()), plain(averaging_setup());
    // A second averaging trainer of each model, which takes a step first (averages of its own).
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, 0.5f));
    OtherTrainerUse use;
    mpt_trainer_t* plain_other = nullptr;
    REQUIRE_OK(mpt_trainer_create(fitting.model, options, &use.other));
    REQUIRE_OK(mpt_trainer_create(plain.model, options, &plain_other));
    mpt_trainer_options_destroy(options);
    mpt_dataset_t* dataset = fitting.labels(blobs);
    mpt_dataset_t* plain_dataset = plain.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(use.other, dataset, 0, kBatch, nullptr));
    REQUIRE_OK(mpt_trainer_step(plain_other, plain_dataset, 0, kBatch, nullptr));
    REQUIRE_OK(mpt_trainer_set_callbacks(fitting.trainer, swap_other_from_progress, swap_other_at_epoch_end, &use));
    REQUIRE_OK(mpt_trainer_fit(fitting.trainer, dataset, 2, kBatch, 1));
    REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain_dataset, 2, kBatch, 1));
    REQUIRE(use.progress_statuses.size() == 6);
    REQUIRE(use.epoch_end_statuses.size() == 2);
    for (mpt_status status : use.progress_statuses) CHECK(status == MPT_STATUS_INVALID_STATE);
    for (mpt_status status : use.epoch_end_statuses) CHECK(status == MPT_STATUS_INVALID_STATE);
    CHECK(use.message.find("inside fit") != std::string::npos);
    // Every step trained the weights, as a run without the attempts did; afterwards the exchange works.
    CHECK(same_bits(fitting.weights(), plain.weights()));
    int holds = 0;
    REQUIRE_OK(mpt_trainer_swap_ema_weights(use.other, &holds));
    CHECK(holds == 1);
    REQUIRE_OK(mpt_trainer_swap_ema_weights(use.other, &holds));
    CHECK(holds == 0);
    mpt_trainer_destroy(use.other);
    mpt_trainer_destroy(plain_other);
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(plain_dataset);
}

TEST_CASE("checkpoints keep the averages: a resumed run averages on bit for bit; the option must match") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 56, 1.0);
    const mpt_test::TempDir directory;
    const BlobTrainerSetup setup = averaging_setup();
    for (int steps_before : {0, 3}) {  // 0: saved before the first applied step
        CAPTURE(steps_before);
        const std::string path = directory.file("averaging-" + std::to_string(steps_before) + ".safetensors");
        BlobTrainer original(setup), resumed(setup);
        mpt_dataset_t* dataset = original.labels(blobs);
        mpt_dataset_t* resumed_dataset = resumed.labels(blobs);
        for (int step = 0; step < steps_before; ++step) step_on(original, dataset, step, kRows);
        REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));
        CHECK(file_contains(path, "averages.layers.1.bias"));
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
        CHECK(same_bits(averages_of(original), averages_of(resumed)));
        for (int step = steps_before; step < steps_before + 3; ++step) {
            step_on(original, dataset, step, kRows);
            step_on(resumed, resumed_dataset, step, kRows);
        }
        CHECK(same_bits(original.weights(), resumed.weights()));
        CHECK(same_bits(averages_of(original), averages_of(resumed)));
        mpt_dataset_destroy(dataset);
        mpt_dataset_destroy(resumed_dataset);
    }
    const std::string path = directory.file("averaging-3.safetensors");
    for (float other : {0.0f, 0.5f}) {
        CAPTURE(other);
        BlobTrainerSetup different = setup;
        different.ema_momentum = other;
        BlobTrainer trainer(different);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
        const std::string expected = std::string("ema_momentum 0.75 (this trainer: ") + (other == 0.0f ? "0" : "0.5") + ")";
        CHECK_MESSAGE(std::string(mpt_last_error()).find(expected) != std::string::npos, mpt_last_error());
    }
    // A run without averages writes none, and its checkpoint refuses an averaging trainer.
    BlobTrainerSetup plain_setup = setup;
    plain_setup.ema_momentum = 0.0f;
    BlobTrainer plain(plain_setup), averaging(setup);
    const std::string plain_path = directory.file("plain.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(plain.trainer, plain_path.c_str()));
    CHECK_FALSE(file_contains(plain_path, "averages."));
    CHECK_FALSE(file_contains(plain_path, "ema_momentum"));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(averaging.trainer, plain_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("ema_momentum 0 (this trainer: 0.75)") != std::string::npos,
                  mpt_last_error());
}

TEST_CASE("the averages cost the trainer 4 bytes a parameter of memory") {
    BlobTrainerSetup setup = averaging_setup();
    BlobTrainerSetup plain_setup = setup;
    plain_setup.ema_momentum = 0.0f;
    BlobTrainer trainer(setup), plain(plain_setup);
    size_t planned = 0, plain_planned = 0;
    REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &planned, nullptr));
    REQUIRE_OK(mpt_trainer_get_memory(plain.trainer, &plain_planned, nullptr));
    int64_t parameters = 0;
    REQUIRE_OK(mpt_model_get_parameter_count(trainer.model, &parameters));
    CHECK(planned >= plain_planned + 4 * static_cast<size_t>(parameters));
}

TEST_CASE("ema momentum refuses values outside (0, 1) other than 0; 0 (or -0) keeps no average") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    for (float bad : {-0.5f, 1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
        CAPTURE(bad);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_ema(options, bad));
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_ema(nullptr, 0.9f));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, 0.999f));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, std::numeric_limits<float>::denorm_min()));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, -0.0f));
    mpt_trainer_options_destroy(options);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_swap_ema_weights(nullptr, nullptr));
    // -0 kept no average: the trainer refuses the exchange.
    BlobTrainerSetup setup;
    setup.ema_momentum = -0.0f;
    BlobTrainer trainer(setup);
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_swap_ema_weights(trainer.trainer, nullptr));
}
