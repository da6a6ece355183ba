// Gradient clipping by global norm through the C API (mpt_trainer_options_set_global_clipnorm,
// Keras's global_clipnorm): a clipped step against the unclipped one (one factor for all layers,
// from the norm of the unscaled gradients), a bound above the norm changing nothing, skipped steps,
// checkpoints, the gradient norm reported, and the refusals. The CPU takes the norm from the batch
// (Gram matrices) up to 64 rows and from the gradients written in memory above: the cases that
// step run on both sides of that line (kSmallBatch, kLargeBatch).
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::kBlobHidden;
using mpt_test::same_bits;

constexpr int64_t kRows = 48;
constexpr int64_t kSmallBatch = 16, kLargeBatch = 96;
// The blob model's parameters in BlobTrainer::weights()'s order: layer 0's weights and biases, then
// layer 1's.
constexpr int64_t kLayerParameters[2] = {kBlobHidden * kBlobFeatures + kBlobHidden, kBlobClasses * kBlobHidden + kBlobClasses};

// Steps `trainer` over `steps` batches of `batch` rows of `blobs` (a multiple of `batch` rows), in order.
void take_steps(const BlobTrainer& trainer, const Blobs& blobs, int steps, int64_t batch = kSmallBatch) {
    mpt_dataset_t* dataset = trainer.labels(blobs);
    for (int s = 0; s < steps; ++s)
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, (batch * s) % blobs.rows(), batch, nullptr));
    mpt_dataset_destroy(dataset);
}

// The change one step over all of `blobs` makes to every parameter: before - after, in double.
std::vector<double> one_step_change(const BlobTrainerSetup& setup, const Blobs& blobs) {
    BlobTrainer trainer(setup);
    const std::vector<float> before = trainer.weights();
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, blobs.rows(), nullptr));
    mpt_dataset_destroy(dataset);
    const std::vector<float> after = trainer.weights();
    std::vector<double> change;
    for (size_t i = 0; i < before.size(); ++i) change.push_back(static_cast<double>(before[i]) - after[i]);
    return change;
}

double norm(const std::vector<double>& values, size_t begin = 0, size_t end = SIZE_MAX) {
    double sum = 0.0;
    for (size_t i = begin; i < std::min(end, values.size()); ++i) sum += values[i] * values[i];
    return std::sqrt(sum);
}

float gradient_norm_of(const BlobTrainer& trainer) {
    float norm = 0.0f;
    REQUIRE_OK(mpt_trainer_get_gradient_norm(trainer.trainer, &norm));
    return norm;
}

double largest_magnitude(const std::vector<double>& values) {
    double largest = 0.0;
    for (double v : values) largest = std::max(largest, std::fabs(v));
    return largest;
}

// The largest |a[i] - factor * b[i]| relative to the largest |b[i]|.
double largest_relative_gap(const std::vector<double>& a, const std::vector<double>& b, double factor) {
    REQUIRE(a.size() == b.size());
    double gap = 0.0;
    for (size_t i = 0; i < a.size(); ++i) gap = std::max(gap, std::fabs(a[i] - factor * b[i]));
    return gap / largest_magnitude(b);
}

// The global norm of the first step's gradient over `blobs` (of setup's model and precision), from
// the change a plain SGD step makes: lr * g.
double gradient_norm(const BlobTrainerSetup& setup, const Blobs& blobs) {
    BlobTrainerSetup plain = setup;
    plain.optimizer = MPT_OPTIMIZER_SGD;
    plain.momentum = 0.0f;
    plain.global_clipnorm = 0.0f;
    return norm(one_step_change(plain, blobs)) / plain.learning_rate;
}

}  // namespace

TEST_CASE("a clipped SGD step is the unclipped step times clipnorm / global norm, the same factor in every layer") {
    for (int64_t rows : {kRows, kLargeBatch}) {
        CAPTURE(rows);
        const Blobs blobs = mpt_test::make_blobs(rows, 31, 1.0);
        BlobTrainerSetup setup;
        setup.learning_rate = 0.5f;
        const std::vector<double> unclipped = one_step_change(setup, blobs);
        const double gradient = norm(unclipped) / setup.learning_rate;
        REQUIRE(gradient > 0.1);
        // Clipping each layer by its own norm (Keras's clipnorm) would give each layer its own factor.
        const size_t split = static_cast<size_t>(kLayerParameters[0]);
        for (double ratio : {0.25, 0.6}) {
            CAPTURE(ratio);
            BlobTrainerSetup clipped = setup;
            clipped.global_clipnorm = static_cast<float>(gradient * ratio);
            const std::vector<double> change = one_step_change(clipped, blobs);
            const double factor = static_cast<double>(clipped.global_clipnorm) / gradient;
            CHECK(largest_relative_gap(change, unclipped, factor) < 1e-5);
            // Each layer by the one factor, and the step's gradient now as long as the bound.
            CHECK(norm(change, 0, split) / norm(unclipped, 0, split) == doctest::Approx(factor).epsilon(1e-5));
            CHECK(norm(change, split) / norm(unclipped, split) == doctest::Approx(factor).epsilon(1e-5));
            CHECK(norm(change) / setup.learning_rate == doctest::Approx(clipped.global_clipnorm).epsilon(1e-5));
        }
        // A bound above the norm leaves plain SGD's step as it was (within float rounding: the clipped
        // step adds a gradient it keeps in memory, the plain one accumulates it into the weights).
        BlobTrainerSetup loose = setup;
        loose.global_clipnorm = static_cast<float>(gradient * 1.01);
        CHECK(largest_relative_gap(one_step_change(loose, blobs), unclipped, 1.0) < 1e-6);
    }
}

TEST_CASE("a clipped step is exactly as long as the bound, whatever the model's width and the batch size") {
    // The gradients lie in the parameter layout, with alignment gaps between the layers' weights and
    // biases that no gradient fills: a norm that took in whatever another buffer left there (the
    // logits, at hidden width 8) came out several times too long.
    for (int64_t hidden : {8, 16, 24, 40}) {
        for (int64_t rows : {16, 32, 48, 96, 128}) {
            CAPTURE(hidden);
            CAPTURE(rows);
            const Blobs blobs = mpt_test::make_blobs(rows, 38, 1.0);
            BlobTrainerSetup setup;
            setup.hidden = hidden;
            setup.learning_rate = 0.5f;
            setup.global_clipnorm = static_cast<float>(gradient_norm(setup, blobs) / 2.0);
            const std::vector<double> change = one_step_change(setup, blobs);
            CHECK(norm(change) / setup.learning_rate == doctest::Approx(setup.global_clipnorm).epsilon(1e-5));
        }
    }
}

TEST_CASE("steps on either side of the 64 rows up to which the CPU clips from the batch clip alike") {
    // A trainer planned for large batches keeps every layer's gradient in one scratch; its steps of
    // 64 rows or fewer take the norm from the batch and write their gradients where they like. The
    // next large step must sum only what it wrote (seen failing when it summed the parameter
    // layout's alignment gaps, which the smaller step had filled with the second layer's values).
    const Blobs blobs = mpt_test::make_blobs(256, 42, 1.0);
    BlobTrainerSetup setup;
    setup.hidden = 64;
    setup.outputs = 16;  // 3 classes used: the second layer's weight gradient has 16 rows of values
    setup.momentum = 0.9f;
    setup.global_clipnorm = 0.05f;
    struct Steps {
        std::vector<float> norms, weights;
    };
    const auto steps_at = [&](const BlobTrainer& trainer) {
        Steps steps;
        mpt_dataset_t* dataset = trainer.labels(blobs);
        for (int64_t batch : {128, 32, 128, 128, 64, 256}) {
            REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, batch, nullptr));
            steps.norms.push_back(gradient_norm_of(trainer));
        }
        mpt_dataset_destroy(dataset);
        steps.weights = trainer.weights();
        return steps;
    };
    const BlobTrainer mixed(setup);
    REQUIRE(setenv("MPTRAIN_CPU_CLIP_FROM_BATCH", "0", 1) == 0);  // read when a context is created
    const BlobTrainer written(setup);
    REQUIRE(unsetenv("MPTRAIN_CPU_CLIP_FROM_BATCH") == 0);
    const Steps a = steps_at(mixed), b = steps_at(written);
    for (size_t step = 0; step < a.norms.size(); ++step) {
        CAPTURE(step);
        CHECK(a.norms[step] == doctest::Approx(b.norms[step]).epsilon(1e-5));
        CHECK(a.norms[step] > setup.global_clipnorm);  // every step clipped
    }
    double largest_gap = 0.0, largest = 0.0;
    for (size_t i = 0; i < a.weights.size(); ++i) {
        largest_gap = std::max(largest_gap, std::fabs(static_cast<double>(a.weights[i]) - b.weights[i]));
        largest = std::max(largest, std::fabs(static_cast<double>(b.weights[i])));
    }
    CHECK(largest_gap / largest < 1e-5);
}

TEST_CASE("trainers of one context clipping at different batch sizes share the CPU's scratch") {
    const Blobs blobs = mpt_test::make_blobs(64, 43, 1.0);
    BlobTrainerSetup setup;
    setup.global_clipnorm = 0.05f;
    const BlobTrainer large(setup);
    // A second trainer on the same context (its backend), stepping at 16 rows between large's steps.
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(large.context, kBlobFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, kBlobHidden, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, kBlobClasses, MPT_ACTIVATION_SOFTMAX));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, 0.05f));
    mpt_trainer_t* small = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &small));
    mpt_trainer_options_destroy(options);
    mpt_dataset_t* dataset = large.labels(blobs);
    for (int round = 0; round < 2; ++round) {
        REQUIRE_OK(mpt_trainer_step(large.trainer, dataset, 0, 64, nullptr));
        REQUIRE_OK(mpt_trainer_step(small, dataset, 0, 16, nullptr));
    }
    REQUIRE_OK(mpt_trainer_step(large.trainer, dataset, 0, 64, nullptr));
    float norm = 0.0f;
    REQUIRE_OK(mpt_trainer_get_gradient_norm(large.trainer, &norm));
    CHECK(std::isfinite(norm));
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(small);
    mpt_model_destroy(model);
}

TEST_CASE("a bound above the gradients' norm changes nothing, bit for bit, with momentum and Adam in every precision") {
    const Blobs blobs = mpt_test::make_blobs(2 * kLargeBatch, 32, 1.0);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM}) {
            for (int64_t batch : {kSmallBatch, kLargeBatch}) {
                CAPTURE(static_cast<int>(precision));
                CAPTURE(static_cast<int>(optimizer));
                CAPTURE(batch);
                BlobTrainerSetup setup;
                setup.precision = precision;
                setup.optimizer = optimizer;
                setup.momentum = optimizer == MPT_OPTIMIZER_SGD ? 0.9f : 0.0f;
                BlobTrainerSetup bounded = setup;
                bounded.global_clipnorm = 1e30f;
                BlobTrainer plain(setup), clipped(bounded);
                REQUIRE(same_bits(plain.weights(), clipped.weights()));
                take_steps(plain, blobs, 5, batch);
                take_steps(clipped, blobs, 5, batch);
                CHECK(same_bits(plain.weights(), clipped.weights()));
                CHECK_FALSE(same_bits(plain.weights(), BlobTrainer(setup).weights()));  // they did train
            }
        }
    }
}

TEST_CASE("the norm is the unscaled gradients': a loss scale changes no clipped step") {
    const Blobs blobs = mpt_test::make_blobs(2 * kLargeBatch, 33, 1.0);
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_SGD;
    setup.momentum = 0.5f;
    setup.global_clipnorm = static_cast<float>(gradient_norm(setup, blobs) / 3.0);

    SUBCASE("a static power-of-two scale in fp32 clips bit for bit as no scaling") {
        BlobTrainerSetup scaled = setup;
        scaled.loss_scaling = MPT_LOSS_SCALING_STATIC;
        scaled.initial_scale = 1024.0f;
        for (int64_t batch : {kSmallBatch, kLargeBatch}) {
            CAPTURE(batch);
            BlobTrainer plain(setup), with_scale(scaled);
            take_steps(plain, blobs, 4, batch);
            take_steps(with_scale, blobs, 4, batch);
            float scale = 0.0f;
            REQUIRE_OK(mpt_trainer_get_loss_scale(with_scale.trainer, &scale, nullptr, nullptr));
            REQUIRE(scale == 1024.0f);
            CHECK(same_bits(plain.weights(), with_scale.weights()));
        }
    }
    SUBCASE("mixed precision (fp16 at its dynamic 2^15) clips within its rounding of fp32's step") {
        const std::vector<double> reference = one_step_change(setup, blobs);
        for (mpt_precision precision : {MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
            CAPTURE(static_cast<int>(precision));
            BlobTrainerSetup mixed = setup;
            mixed.precision = precision;
            const std::vector<double> change = one_step_change(mixed, blobs);
            // A norm taken with the scale in it would shrink fp16's step 2^15-fold.
            CHECK(largest_relative_gap(change, reference, 1.0) < 3e-2);
            CHECK(norm(change) / setup.learning_rate == doctest::Approx(setup.global_clipnorm).epsilon(1e-2));
        }
    }
}

TEST_CASE("under clipping a step with non-finite gradients is skipped: no weight moves and the scale halves") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 34, 1.0);
    BlobTrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 16777216.0f;  // 2^24: (p - y) * scale / rows overflows fp16 at first
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.global_clipnorm = 0.5f;
    BlobTrainerSetup unclipped = setup;
    unclipped.global_clipnorm = 0.0f;
    BlobTrainer clipped(setup), plain(unclipped);
    mpt_dataset_t* dataset = clipped.labels(blobs);
    mpt_dataset_t* plain_dataset = plain.labels(blobs);
    int64_t skipped = 0, plain_skipped = 0;
    float scale = 0.0f;
    for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        const std::vector<float> before = clipped.weights();
        REQUIRE_OK(mpt_trainer_step(clipped.trainer, dataset, 0, kRows, nullptr));
        REQUIRE_OK(mpt_trainer_step(plain.trainer, plain_dataset, 0, kRows, nullptr));
        int64_t now_skipped = 0;
        REQUIRE_OK(mpt_trainer_get_loss_scale(clipped.trainer, &scale, nullptr, &now_skipped));
        REQUIRE_OK(mpt_trainer_get_loss_scale(plain.trainer, nullptr, nullptr, &plain_skipped));
        CHECK(now_skipped == plain_skipped);  // clipping decides nothing about finiteness
        if (now_skipped > skipped) CHECK(same_bits(before, clipped.weights()));
        else CHECK_FALSE(same_bits(before, clipped.weights()));
        skipped = now_skipped;
    }
    CHECK(skipped >= 1);
    CHECK(skipped < 12);
    CHECK(scale == 16777216.0f / static_cast<float>(int64_t{1} << skipped));
    for (float w : clipped.weights()) CHECK(std::isfinite(w));
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(plain_dataset);
}

TEST_CASE("fit with clipping trains the blobs, and evaluate is as without it") {
    const Blobs blobs = mpt_test::make_blobs(240, 35, 0.8);
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    setup.global_clipnorm = 0.1f;  // far below the first steps' norms: every early step is clipped
    REQUIRE(gradient_norm(setup, blobs) > 2.0 * setup.global_clipnorm);
    mpt_test::check_fit_learns_blobs(BlobTrainer(setup), blobs, 20);
}

TEST_CASE("clipping is an option a checkpoint must match, and a clipped run resumes bit for bit") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 36, 1.0);
    const mpt_test::TempDir directory;
    const std::string path = directory.file("clipped.safetensors");
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.global_clipnorm = 0.5f;
    BlobTrainer original(setup), resumed(setup);
    take_steps(original, blobs, 2);
    REQUIRE_OK(mpt_trainer_save_checkpoint(original.trainer, path.c_str()));
    take_steps(original, blobs, 3);
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()));
    take_steps(resumed, blobs, 3);
    CHECK(same_bits(original.weights(), resumed.weights()));

    for (float other : {0.0f, 0.25f}) {
        CAPTURE(other);
        BlobTrainerSetup different = setup;
        different.global_clipnorm = other;
        BlobTrainer trainer(different);
        const std::vector<float> before = trainer.weights();
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(trainer.trainer, path.c_str()));
        const std::string expected = std::string("global_clipnorm 0.5 (this trainer: ") + (other == 0.0f ? "0" : "0.25") + ")";
        CHECK_MESSAGE(std::string(mpt_last_error()).find(expected) != std::string::npos, mpt_last_error());
        CHECK(same_bits(before, trainer.weights()));
    }
    // And the other way: an unclipped run's checkpoint refuses a clipping trainer.
    BlobTrainerSetup unclipped = setup;
    unclipped.global_clipnorm = 0.0f;
    BlobTrainer plain(unclipped), clipping(setup);
    const std::string plain_path = directory.file("plain.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(plain.trainer, plain_path.c_str()));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_load_checkpoint(clipping.trainer, plain_path.c_str()));
    CHECK_MESSAGE(std::string(mpt_last_error()).find("global_clipnorm 0 (this trainer: 0.5)") != std::string::npos,
                  mpt_last_error());
}

// The norm is that of the gradients the step computed through its masks: from the batch, that is the
// dropped inputs' Gram matrix (the undropped batch's would give another norm, and a step of another
// length). One seed draws the same masks in every trainer here, so the clipped step is the unclipped
// one scaled.
TEST_CASE("with input and hidden dropout a clipped step is the dropped step scaled to the bound") {
    for (int64_t rows : {kRows, kLargeBatch}) {  // from the batch, and from the written gradients
        CAPTURE(rows);
        const Blobs blobs = mpt_test::make_blobs(rows, 41, 1.0);
        BlobTrainerSetup setup;
        setup.learning_rate = 0.5f;
        setup.input_dropout = 0.3f;
        setup.hidden_dropout = 0.2f;
        const double dropped_norm = gradient_norm(setup, blobs);
        BlobTrainerSetup undropped = setup;
        undropped.input_dropout = 0.0f;
        CHECK(std::fabs(gradient_norm(undropped, blobs) - dropped_norm) > 1e-3 * dropped_norm);  // the masks matter
        setup.global_clipnorm = static_cast<float>(dropped_norm / 2.0);
        const std::vector<double> clipped = one_step_change(setup, blobs);
        CHECK(norm(clipped) / setup.learning_rate == doctest::Approx(setup.global_clipnorm).epsilon(1e-5).scale(0));
        BlobTrainerSetup unclipped = setup;
        unclipped.global_clipnorm = 0.0f;
        CHECK(largest_relative_gap(clipped, one_step_change(unclipped, blobs), 0.5) < 1e-5);
    }
}

TEST_CASE("the gradient norm a clipping trainer reports is its last step's, before clipping; NaN where none was taken") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 39, 1.0);
    BlobTrainerSetup setup;
    setup.learning_rate = 0.5f;
    const double first_norm = gradient_norm(setup, blobs);
    setup.global_clipnorm = static_cast<float>(first_norm / 4.0);
    BlobTrainerSetup unclipped = setup;
    unclipped.global_clipnorm = 0.0f;
    BlobTrainer clipping(setup), plain(unclipped);
    CHECK(std::isnan(gradient_norm_of(clipping)));  // no step yet
    mpt_dataset_t* dataset = clipping.labels(blobs);
    mpt_dataset_t* plain_dataset = plain.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(clipping.trainer, dataset, 0, kRows, nullptr));
    REQUIRE_OK(mpt_trainer_step(plain.trainer, plain_dataset, 0, kRows, nullptr));
    // The norm before clipping, not the bound it was clipped to.
    CHECK(gradient_norm_of(clipping) == doctest::Approx(first_norm).epsilon(1e-5));
    CHECK(std::isnan(gradient_norm_of(plain)));  // only clipping takes it
    // Each step's own: the second step's gradients are not the first's.
    REQUIRE_OK(mpt_trainer_step(clipping.trainer, dataset, 0, kRows, nullptr));
    const float second = gradient_norm_of(clipping);
    CHECK(std::isfinite(second));
    CHECK(second != doctest::Approx(first_norm).epsilon(1e-3));
    // A checkpoint keeps no norm: loaded, there is none until the next step.
    const mpt_test::TempDir directory;
    const std::string path = directory.file("norm.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(clipping.trainer, path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(clipping.trainer, path.c_str()));
    CHECK(std::isnan(gradient_norm_of(clipping)));
    REQUIRE_OK(mpt_trainer_step(clipping.trainer, dataset, 0, kRows, nullptr));
    CHECK(std::isfinite(gradient_norm_of(clipping)));
    float ignored = 0.0f;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_gradient_norm(nullptr, &ignored));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_gradient_norm(clipping.trainer, nullptr));
    mpt_dataset_destroy(dataset);
    mpt_dataset_destroy(plain_dataset);
}

TEST_CASE("global_clipnorm refuses negative, NaN and infinite bounds; 0 (or -0) turns clipping off") {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    const float infinity = std::numeric_limits<float>::infinity();
    for (float bad : {-1.0f, -1e-30f, std::numeric_limits<float>::quiet_NaN(), infinity, -infinity}) {
        CAPTURE(bad);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_global_clipnorm(options, bad));
        CHECK(std::string(mpt_last_error()).find("global_clipnorm") != std::string::npos);
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_global_clipnorm(nullptr, 1.0f));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, 1e-30f));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, 0.0f));
    mpt_trainer_options_destroy(options);

    // -0 is off: the same steps as a trainer never told to clip, and a checkpoint that loads there.
    const Blobs blobs = mpt_test::make_blobs(kRows, 37, 1.0);
    BlobTrainerSetup setup;
    setup.momentum = 0.9f;
    BlobTrainerSetup negative_zero = setup;
    negative_zero.global_clipnorm = -0.0f;
    BlobTrainer plain(setup), off(negative_zero);
    take_steps(plain, blobs, 3);
    take_steps(off, blobs, 3);
    CHECK(same_bits(plain.weights(), off.weights()));
    const mpt_test::TempDir directory;
    const std::string path = directory.file("off.safetensors");
    REQUIRE_OK(mpt_trainer_save_checkpoint(off.trainer, path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(plain.trainer, path.c_str()));
}
