// Row weights through the C API (mpt_dataset_create_weighted, Keras's sample_weight): what a
// weighted step and evaluation compute (against exact equivalents and against the loss recomputed
// from the trainer's own predictions), how they combine with class weights and slices, every loss,
// and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::same_bits;

constexpr int64_t kRows = 48;

mpt_dataset_t* weighted(const mpt_dataset_t* dataset, const std::vector<float>& weights) {
    mpt_dataset_t* out = nullptr;
    REQUIRE_OK(mpt_dataset_create_weighted(dataset, weights.data(), static_cast<int64_t>(weights.size()), &out));
    return out;
}

// Weights that differ from row to row, with no period (a slice sees others than its source's first
// rows): 0.2 + 0.05 r, one row in seven 0.
std::vector<float> varied_weights(int64_t rows) {
    std::vector<float> weights;
    for (int64_t r = 0; r < rows; ++r) weights.push_back(r % 7 == 3 ? 0.0f : 0.2f + 0.05f * static_cast<float>(r));
    return weights;
}

// -log p of each row's class from the trainer's predicted probabilities, times its weight.
double weighted_cross_entropy(const std::vector<float>& probabilities, const Blobs& blobs,
                              const std::vector<float>& weights, const std::vector<float>& class_weights = {}) {
    double sum = 0.0;
    for (int64_t r = 0; r < blobs.rows(); ++r) {
        const int32_t label = blobs.y[static_cast<size_t>(r)];
        const double p = probabilities[static_cast<size_t>(r * kBlobClasses + label)];
        const double class_weight = class_weights.empty() ? 1.0 : class_weights[static_cast<size_t>(label)];
        sum += -std::log(p) * class_weight * weights[static_cast<size_t>(r)];
    }
    return sum / static_cast<double>(blobs.rows());
}

struct Evaluation {
    float loss = NAN, accuracy = NAN;
};

Evaluation evaluate(const BlobTrainer& trainer, const mpt_dataset_t* dataset) {
    Evaluation result;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 16, &result.loss, &result.accuracy));
    return result;
}

float step(const BlobTrainer& trainer, const mpt_dataset_t* dataset, int64_t first, int64_t rows) {
    float loss = NAN;
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, first, rows, &loss));
    return loss;
}

}  // namespace

TEST_CASE("row weights of 2 train a step as twice the learning rate, bit for bit, in fp32 and mixed precision") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 21, 1.0);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        BlobTrainerSetup setup;
        setup.precision = precision;
        BlobTrainerSetup doubled_rate = setup;
        doubled_rate.learning_rate = 2.0f * setup.learning_rate;
        BlobTrainer plain(setup), faster(doubled_rate), twice(setup);
        mpt_dataset_t* data = plain.labels(blobs);
        mpt_dataset_t* faster_data = faster.labels(blobs);
        mpt_dataset_t* unweighted = twice.labels(blobs);
        mpt_dataset_t* doubled = weighted(unweighted, std::vector<float>(kRows, 2.0f));
        const float plain_loss = step(plain, data, 0, kRows);
        const float faster_loss = step(faster, faster_data, 0, kRows);
        const float doubled_loss = step(twice, doubled, 0, kRows);
        // Every row's gradient doubles exactly; so does the update with twice the rate.
        CHECK(same_bits(twice.weights(), faster.weights()));
        CHECK_FALSE(same_bits(twice.weights(), plain.weights()));
        CHECK(faster_loss == plain_loss);
        CHECK(doubled_loss == 2.0f * plain_loss);
        for (mpt_dataset_t* dataset : {data, faster_data, unweighted, doubled}) mpt_dataset_destroy(dataset);
    }
}

TEST_CASE("a weighted step and evaluation report the mean of each row's loss times its weight; accuracy is unweighted") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 22, 1.5);
    const std::vector<float> weights = varied_weights(kRows);
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    BlobTrainer trainer(setup);
    mpt_dataset_t* plain = trainer.labels(blobs);
    mpt_dataset_t* data = weighted(plain, weights);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 2, 16, 1));
    const std::vector<float> probabilities = trainer.predict(blobs);
    const double unweighted_loss = weighted_cross_entropy(probabilities, blobs, std::vector<float>(kRows, 1.0f));
    const double expected = weighted_cross_entropy(probabilities, blobs, weights);
    REQUIRE(std::fabs(expected - unweighted_loss) > 1e-2 * unweighted_loss);  // the two can be told apart
    const Evaluation weighted_evaluation = evaluate(trainer, data), plain_evaluation = evaluate(trainer, plain);
    CHECK(weighted_evaluation.loss == doctest::Approx(expected).epsilon(1e-5));
    CHECK(plain_evaluation.loss == doctest::Approx(unweighted_loss).epsilon(1e-5));
    CHECK(weighted_evaluation.accuracy == plain_evaluation.accuracy);
    CHECK(step(trainer, data, 0, kRows) == doctest::Approx(expected).epsilon(1e-5));
    for (mpt_dataset_t* dataset : {plain, data}) mpt_dataset_destroy(dataset);
}

TEST_CASE("rows weighted 0 teach nothing: weights 2 on half the batch train as that half alone") {
    // With SGD a batch of n rows, half weighted 2 and half 0, has the mean gradient of its first
    // half: (2 sum_half g) / n = sum_half g / (n / 2). Only the GEMMs' summation order differs.
    const Blobs blobs = mpt_test::make_blobs(kRows, 23, 1.0);
    std::vector<float> weights(kRows, 0.0f);
    Blobs half;
    for (int64_t r = 0; r < kRows; ++r) {
        if (r % 2) continue;
        weights[static_cast<size_t>(r)] = 2.0f;
        half.x.insert(half.x.end(), blobs.x.begin() + r * kBlobFeatures, blobs.x.begin() + (r + 1) * kBlobFeatures);
        half.y.push_back(blobs.y[static_cast<size_t>(r)]);
    }
    BlobTrainer masked(BlobTrainerSetup{}), halved(BlobTrainerSetup{});
    mpt_dataset_t* whole = masked.labels(blobs);
    mpt_dataset_t* data = weighted(whole, weights);
    mpt_dataset_t* half_data = halved.labels(half);
    for (int s = 0; s < 5; ++s) {
        const float masked_loss = step(masked, data, 0, kRows), halved_loss = step(halved, half_data, 0, kRows / 2);
        CHECK(masked_loss == doctest::Approx(halved_loss).epsilon(1e-6));
    }
    const std::vector<float> a = masked.weights(), b = halved.weights();
    double largest = 0.0, scale = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        largest = std::max(largest, static_cast<double>(std::fabs(a[i] - b[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    CHECK(largest <= 1e-6 * scale);
    for (mpt_dataset_t* dataset : {whole, data, half_data}) mpt_dataset_destroy(dataset);
}

TEST_CASE("row weights multiply class weights, and evaluation keeps only the row weights") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 24, 1.5);
    const std::vector<float> weights = varied_weights(kRows), class_weights = {0.5f, 3.0f, 1.0f};
    BlobTrainerSetup setup;
    setup.class_weights = class_weights;
    BlobTrainer trainer(setup);
    mpt_dataset_t* plain = trainer.labels(blobs);
    mpt_dataset_t* data = weighted(plain, weights);
    const std::vector<float> probabilities = trainer.predict(blobs);
    const double both = weighted_cross_entropy(probabilities, blobs, weights, class_weights);
    const double rows_only = weighted_cross_entropy(probabilities, blobs, weights);
    CHECK(evaluate(trainer, data).loss == doctest::Approx(rows_only).epsilon(1e-5));  // class weights: training only
    CHECK(step(trainer, data, 0, kRows) == doctest::Approx(both).epsilon(1e-5));
    for (mpt_dataset_t* dataset : {plain, data}) mpt_dataset_destroy(dataset);
}

TEST_CASE("every loss takes row weights: binary cross-entropy, mean squared error and one-hot targets") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 25, 1.5);
    const std::vector<float> weights = varied_weights(kRows);
    struct Case {
        mpt_loss loss;
        mpt_activation head;
        int64_t outputs;
    };
    for (const Case& c : {Case{MPT_LOSS_BINARY_CROSSENTROPY, MPT_ACTIVATION_SIGMOID, 1},
                          Case{MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_LINEAR, 1},
                          Case{MPT_LOSS_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX, kBlobClasses}}) {
        CAPTURE(static_cast<int>(c.loss));
        BlobTrainerSetup setup;
        setup.loss = c.loss;
        setup.head = c.head;
        setup.outputs = c.outputs;
        BlobTrainer trainer(setup);
        // Binary targets: class 0 or not; MSE regresses them too.
        std::vector<float> targets;
        for (int64_t r = 0; r < kRows; ++r)
            for (int64_t k = 0; k < c.outputs; ++k)
                targets.push_back(c.outputs == 1 ? (blobs.y[static_cast<size_t>(r)] == 0 ? 1.0f : 0.0f)
                                                 : (blobs.y[static_cast<size_t>(r)] == k ? 1.0f : 0.0f));
        mpt_dataset_t* plain = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32_targets(trainer.context, blobs.x.data(), kRows, kBlobFeatures, targets.data(),
                                                  c.outputs, 1, &plain));
        mpt_dataset_t* data = weighted(plain, weights);
        std::vector<float> out(static_cast<size_t>(kRows * c.outputs));
        REQUIRE_OK(mpt_trainer_predict(trainer.trainer, blobs.x.data(), kRows, out.data(), static_cast<int64_t>(out.size())));
        // Each row's loss from the definitions (mean over outputs for BCE and MSE), times its weight.
        double expected = 0.0;
        for (int64_t r = 0; r < kRows; ++r) {
            double row = 0.0;
            for (int64_t k = 0; k < c.outputs; ++k) {
                const double y = out[static_cast<size_t>(r * c.outputs + k)], t = targets[static_cast<size_t>(r * c.outputs + k)];
                if (c.loss == MPT_LOSS_BINARY_CROSSENTROPY) row += -(t * std::log(y) + (1 - t) * std::log(1 - y)) / c.outputs;
                else if (c.loss == MPT_LOSS_MEAN_SQUARED_ERROR) row += (y - t) * (y - t) / c.outputs;
                else if (t != 0.0) row += -t * std::log(y);
            }
            expected += row * weights[static_cast<size_t>(r)];
        }
        expected /= kRows;
        CHECK(evaluate(trainer, data).loss == doctest::Approx(expected).epsilon(1e-5));
        CHECK(step(trainer, data, 0, kRows) == doctest::Approx(expected).epsilon(1e-5));
        for (mpt_dataset_t* dataset : {plain, data}) mpt_dataset_destroy(dataset);
    }
}

TEST_CASE("weights so large that the loss passes the largest float fail the step as non-finite, changing nothing") {
    Blobs blobs = mpt_test::make_blobs(kRows, 28, 1.5);
    // Small inputs keep the gradients' bound finite: only the loss (log 3 a row, times 3.4e38) is not.
    for (float& x : blobs.x) x *= 0.01f;
    BlobTrainer trainer(BlobTrainerSetup{});  // fp32, no loss scaling: a non-finite step is an error
    mpt_dataset_t* plain = trainer.labels(blobs);
    mpt_dataset_t* data = weighted(plain, std::vector<float>(kRows, 3.4e38f));  // each finite, valid
    const std::vector<float> before = trainer.weights();
    float loss = 0.0f;
    CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(trainer.trainer, data, 0, kRows, &loss));
    CHECK(same_bits(trainer.weights(), before));
    CHECK(std::isfinite(step(trainer, plain, 0, kRows)));  // the trainer trains on
    for (mpt_dataset_t* dataset : {plain, data}) mpt_dataset_destroy(dataset);
}

TEST_CASE("a slice of a weighted dataset keeps its rows' weights; weighting again replaces them") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 26, 1.5);
    const std::vector<float> weights = varied_weights(kRows);
    BlobTrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    BlobTrainer a(setup), b(setup);
    // a: weight, then slice rows 10..39; b: slice, then weight them with the same weights.
    mpt_dataset_t* whole_a = a.labels(blobs);
    mpt_dataset_t* weighted_a = weighted(whole_a, weights);
    mpt_dataset_t* slice_a = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(weighted_a, 10, 30, &slice_a));
    mpt_dataset_t* whole_b = b.labels(blobs);
    mpt_dataset_t* plain_slice_b = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole_b, 10, 30, &plain_slice_b));
    mpt_dataset_t* slice_b = weighted(plain_slice_b, std::vector<float>(weights.begin() + 10, weights.begin() + 40));
    mpt_dataset_destroy(weighted_a);  // the slice keeps the weights
    REQUIRE_OK(mpt_trainer_fit(a.trainer, slice_a, 3, 8, 1));
    REQUIRE_OK(mpt_trainer_fit(b.trainer, slice_b, 3, 8, 1));
    CHECK(same_bits(a.weights(), b.weights()));
    const Evaluation ea = evaluate(a, slice_a), eb = evaluate(b, slice_b);
    CHECK(ea.loss == eb.loss);
    // Weighting the weighted slice again with all ones gives the plain slice's numbers.
    mpt_dataset_t* reweighted = weighted(slice_a, std::vector<float>(30, 1.0f));
    mpt_dataset_t* plain_slice_a = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole_a, 10, 30, &plain_slice_a));
    CHECK(evaluate(a, reweighted).loss == evaluate(a, plain_slice_a).loss);
    CHECK(evaluate(a, reweighted).loss != ea.loss);
    for (mpt_dataset_t* dataset : {whole_a, slice_a, whole_b, plain_slice_b, slice_b, reweighted, plain_slice_a})
        mpt_dataset_destroy(dataset);
}

TEST_CASE("row weights of the wrong count, negative, NaN or infinite, and NULL arguments are refused") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 27);
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_dataset_t* data = mpt_test::blob_labels(context, blobs);
    static int marker;
    mpt_dataset_t* const sentinel = reinterpret_cast<mpt_dataset_t*>(&marker);
    mpt_dataset_t* out = sentinel;
    std::vector<float> weights(kRows + 1, 1.0f);
    for (int64_t count : {int64_t{0}, kRows - 1, kRows + 1, int64_t{-1}, std::numeric_limits<int64_t>::max()})
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_dataset_create_weighted(data, weights.data(), count, &out));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_dataset_create_weighted(data, nullptr, 0, &out));  // none for none
    for (float bad : {-1.0f, -0.5f, -1e-30f, NAN, INFINITY, -INFINITY}) {
        CAPTURE(bad);
        std::vector<float> refused(kRows, 1.0f);
        refused[7] = bad;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_weighted(data, refused.data(), kRows, &out));
        CHECK(std::string(mpt_last_error()).find("row 7") != std::string::npos);
    }
    std::vector<float> tiny(kRows, 1.0f);
    tiny[2] = -1e-30f;
    CHECK(mpt_dataset_create_weighted(data, tiny.data(), kRows, &out) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(mpt_last_error()).find("is -1e-30") != std::string::npos);  // not "-0.000000"
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_weighted(nullptr, weights.data(), kRows, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_weighted(data, nullptr, kRows, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_weighted(data, weights.data(), kRows, nullptr));
    CHECK(out == sentinel);
    // All zeros and -0 are weights like any other.
    std::vector<float> zeros(kRows, 0.0f);
    zeros[3] = -0.0f;
    mpt_dataset_t* zero = weighted(data, zeros);
    mpt_dataset_destroy(zero);
    mpt_dataset_destroy(data);
    mpt_context_destroy(context);
}
