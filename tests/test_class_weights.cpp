// Class weights through the C API (Keras's fit(class_weight=)): what a weighted step computes and
// trains (checked against exact equivalents and against the loss recomputed from the trainer's own
// predictions), that evaluation stays unweighted, what weighting does for a rare class, and the
// refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::Blobs;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::same_bits;

constexpr int64_t kRows = 96, kHidden = 16;

// The blob model (4 -> 16 relu -> 3 softmax) and its trainer, with class weights among its options.
using TrainerSetup = mpt_test::BlobTrainerSetup;
using Trainer = mpt_test::BlobTrainer;

}  // namespace

TEST_CASE("weights of 1 train bit for bit as none, and weights of 2 as none at twice the learning rate (plain SGD)") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 3, 1.5);
    TrainerSetup none;
    TrainerSetup ones = none;
    ones.class_weights = {1.0f, 1.0f, 1.0f};
    TrainerSetup twos = none;
    twos.class_weights = {2.0f, 2.0f, 2.0f};
    TrainerSetup doubled_rate = none;
    doubled_rate.learning_rate = 2 * none.learning_rate;
    Trainer a(none), b(ones), c(twos), d(doubled_rate);
    for (Trainer* trainer : {&a, &b, &c, &d}) {
        mpt_dataset_t* dataset = trainer->labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer->trainer, dataset, 2, 16, 1));
        mpt_dataset_destroy(dataset);
    }
    CHECK(same_bits(a.weights(), b.weights()));
    // Doubling every row's loss doubles every gradient exactly (a power of two), as doubling the rate does.
    CHECK(same_bits(c.weights(), d.weights()));
    CHECK_FALSE(same_bits(a.weights(), c.weights()));
}

TEST_CASE("a weighted step's loss is mean(w[y] * -log p[y]) and trains on it; evaluate reports the unweighted loss") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 5, 1.5);
    const std::vector<float> class_weights = {0.25f, 4.0f, 1.5f};
    TrainerSetup weighted;
    weighted.class_weights = class_weights;
    Trainer trainer(weighted), plain(TrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(blobs);
    mpt_dataset_t* plain_set = plain.labels(blobs);
    const std::vector<float> p = trainer.predict(blobs);  // before the step: what it computes its loss on
    double weighted_loss = 0.0, unweighted_loss = 0.0;
    for (int64_t r = 0; r < blobs.rows(); ++r) {
        const double negative_log = -std::log(static_cast<double>(p[static_cast<size_t>(r * kBlobClasses + blobs.y[r])]));
        weighted_loss += class_weights[static_cast<size_t>(blobs.y[r])] * negative_log;
        unweighted_loss += negative_log;
    }
    const double rows = static_cast<double>(blobs.rows());
    float evaluated = NAN, plain_evaluated = NAN, accuracy = NAN, plain_accuracy = NAN;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 32, &evaluated, &accuracy));
    CHECK(evaluated == doctest::Approx(unweighted_loss / rows).epsilon(1e-5));
    float step_loss = NAN;
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, blobs.rows(), &step_loss));
    CHECK(step_loss == doctest::Approx(weighted_loss / rows).epsilon(1e-5));
    REQUIRE_OK(mpt_trainer_step(plain.trainer, plain_set, 0, blobs.rows(), nullptr));
    CHECK_FALSE(same_bits(trainer.weights(), plain.weights()));
    // After the step, the same weights through an unweighted trainer evaluate alike.
    mpt_trainer_t* unweighted = nullptr;
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_create(trainer.model, options, &unweighted));
    mpt_trainer_options_destroy(options);
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 32, &evaluated, &accuracy));
    REQUIRE_OK(mpt_trainer_evaluate(unweighted, dataset, 32, &plain_evaluated, &plain_accuracy));
    CHECK(evaluated == plain_evaluated);
    CHECK(accuracy == plain_accuracy);
    mpt_trainer_destroy(unweighted);
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(plain_set);
}

TEST_CASE("one-hot targets take the weight of their class: they train bit for bit as their labels, in every precision") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 9, 1.5);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        TrainerSetup sparse;
        sparse.precision = precision;
        sparse.optimizer = MPT_OPTIMIZER_ADAM;
        sparse.learning_rate = 0.01f;
        sparse.class_weights = {3.0f, 0.5f, 1.0f};
        TrainerSetup categorical = sparse;
        categorical.loss = MPT_LOSS_CATEGORICAL_CROSSENTROPY;
        Trainer a(sparse), b(categorical);
        mpt_dataset_t* labels = a.labels(blobs);
        mpt_dataset_t* rows = b.one_hot(blobs);
        REQUIRE_OK(mpt_trainer_fit(a.trainer, labels, 3, 16, 1));
        REQUIRE_OK(mpt_trainer_fit(b.trainer, rows, 3, 16, 1));
        CHECK(same_bits(a.weights(), b.weights()));
        mpt_dataset_destroy(labels);
        mpt_dataset_destroy(rows);
    }
}

TEST_CASE("weighting a rare class by its rarity raises its recall") {
    // 240 rows: class 0 is 90% of them, classes 1 and 2 5% each, and the classes overlap.
    constexpr int64_t rows = 240;
    mpt_test::TestRng rng(21);
    static const double centres[kBlobClasses][kBlobFeatures] = {{0, 0, 0, 0}, {1.2, 1.2, 0, 0}, {0, 0, 1.2, 1.2}};
    Blobs blobs;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t label = r % 20 == 0 ? 1 : r % 20 == 1 ? 2 : 0;
        for (int64_t f = 0; f < kBlobFeatures; ++f)
            blobs.x.push_back(static_cast<float>(centres[label][f] + rng.normal()));
        blobs.y.push_back(label);
    }
    auto rare_recall = [&](const std::vector<float>& class_weights) {
        TrainerSetup setup;
        setup.optimizer = MPT_OPTIMIZER_ADAM;
        setup.learning_rate = 0.01f;
        setup.class_weights = class_weights;
        Trainer trainer(setup);
        mpt_dataset_t* dataset = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 40, 16, 1));
        mpt_dataset_destroy(dataset);
        const std::vector<float> p = trainer.predict(blobs);
        int64_t rare = 0, found = 0;
        for (int64_t r = 0; r < rows; ++r) {
            if (blobs.y[r] == 0) continue;
            const float* row = &p[static_cast<size_t>(r * kBlobClasses)];
            ++rare;
            found += std::max_element(row, row + kBlobClasses) - row == blobs.y[r];
        }
        return static_cast<double>(found) / static_cast<double>(rare);
    };
    const double unweighted = rare_recall({}), weighted = rare_recall({1.0f / 0.9f, 1.0f / 0.05f, 1.0f / 0.05f});
    MESSAGE("recall of the rare classes: " << unweighted << " unweighted, " << weighted << " weighted by rarity");
    CHECK(weighted > unweighted + 0.25);
}

TEST_CASE("class weights are refused when invalid, for a loss without classes or of the wrong count; refusals keep the last value") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float good[kBlobClasses] = {1.0f, 2.0f, 0.0f};
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(nullptr, good, kBlobClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, nullptr, kBlobClasses));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, good, -1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, good, (int64_t{1} << 24) + 1));
    for (float bad : {-1.0f, std::nanf(""), INFINITY}) {
        const float weights[kBlobClasses] = {1.0f, bad, 1.0f};
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, weights, kBlobClasses));
    }
    const float zeros[kBlobClasses] = {0.0f, 0.0f, 0.0f};
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, zeros, kBlobClasses));

    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 1);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kBlobFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, kBlobClasses, MPT_ACTIVATION_SIGMOID));
    mpt_trainer_t* trainer = nullptr;
    // None of the refused values was kept: binary cross-entropy takes these options.
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_BINARY_CROSSENTROPY));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    trainer = nullptr;
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, good, kBlobClasses));
    for (mpt_loss loss : {MPT_LOSS_BINARY_CROSSENTROPY, MPT_LOSS_MEAN_SQUARED_ERROR}) {
        REQUIRE_OK(mpt_trainer_options_set_loss(options, loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, options, &trainer));
        CHECK(std::string(mpt_last_error()).find("class weights") != std::string::npos);
    }
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));  // 3 weights, 3 outputs
    mpt_trainer_destroy(trainer);
    trainer = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_class_weights(options, zeros, kBlobClasses));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));  // the refusal kept the 3 good weights
    mpt_trainer_destroy(trainer);
    trainer = nullptr;
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, good, 2));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_create(model, options, &trainer));
    CHECK(trainer == nullptr);
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, nullptr, 0));  // removed
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_MEAN_SQUARED_ERROR));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("class weights are checked before the trainer plans its memory: a refusal is the documented one under any budget") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 1, 1024);  // too small for any trainer
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kBlobFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, kHidden, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, kBlobClasses, MPT_ACTIVATION_SOFTMAX));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float weights[kBlobClasses] = {1.0f, 2.0f, 3.0f};
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, weights, 2));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_create(model, options, &trainer));
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, weights, kBlobClasses));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_MEAN_SQUARED_ERROR));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, options, &trainer));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_create(model, options, &trainer));  // valid: then the budget
    CHECK(trainer == nullptr);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}
