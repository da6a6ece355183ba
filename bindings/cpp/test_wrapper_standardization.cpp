// Standardization through the C++ wrapper: a dataset standardized by its own feature statistics, and a
// model that standardizes its inputs (trained on raw rows, saved with it, refused).

#include "wrapper_test_support.h"

#include <cmath>
#include <limits>
#include <optional>

namespace {

/** Blobs with feature f scaled by 3 (f + 1) and moved by 5 f - 4: features far from mean 0, stddev 1. */
std::vector<float> scaled_blob_samples(int64_t rows, unsigned seed, std::vector<int32_t>& labels) {
    std::vector<float> samples = blob_samples(rows, seed, labels);
    for (size_t i = 0; i < samples.size(); ++i) {
        const auto feature = static_cast<float>(static_cast<int64_t>(i) % kFeatures);
        samples[i] = samples[i] * 3.0f * (feature + 1.0f) + 5.0f * feature - 4.0f;
    }
    return samples;
}

}  // namespace

TEST_CASE("a dataset standardized by its own feature statistics has features of mean 0 and stddev 1, and trains") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = scaled_blob_samples(90, 70, labels);
    auto context = cpu_context();
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const mptrain::FeatureStatistics raw = data.feature_statistics();
    REQUIRE(raw.mean.size() == static_cast<size_t>(kFeatures));
    REQUIRE(raw.stddev.size() == static_cast<size_t>(kFeatures));
    for (int64_t f = 0; f < kFeatures; ++f) {  // the population's, against a double reference
        double sum = 0.0, squares = 0.0;
        for (int64_t r = 0; r < 90; ++r) sum += samples[static_cast<size_t>(r * kFeatures + f)];
        const double mean = sum / 90.0;
        for (int64_t r = 0; r < 90; ++r) {
            const double d = samples[static_cast<size_t>(r * kFeatures + f)] - mean;
            squares += d * d;
        }
        CHECK(raw.mean[static_cast<size_t>(f)] == doctest::Approx(mean).epsilon(1e-6));
        CHECK(raw.stddev[static_cast<size_t>(f)] == doctest::Approx(std::sqrt(squares / 90.0)).epsilon(1e-6));
        CHECK(std::fabs(raw.stddev[static_cast<size_t>(f)] - 1.0f) > 0.5f);  // far from standardized
    }
    const auto standardized = data.standardized(raw.mean, raw.stddev);
    CHECK(standardized.rows() == 90);
    CHECK(standardized.labels() == labels);
    const mptrain::FeatureStatistics after = standardized.feature_statistics();
    for (size_t f = 0; f < static_cast<size_t>(kFeatures); ++f) {
        CHECK(std::fabs(after.mean[f]) < 1e-5f);
        CHECK(std::fabs(after.stddev[f] - 1.0f) < 1e-5f);
    }
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(standardized, 3, 16);
    CHECK(trainer.progress().second == 3);
    CHECK(std::isfinite(trainer.evaluate(standardized).loss));
}

TEST_CASE("standardizing by a mean or stddev of the wrong size throws SHAPE_MISMATCH; a negative stddev INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 71);
    const std::vector<float> ones(kFeatures, 1.0f), zeros(kFeatures, 0.0f);
    CHECK(status_of([&] { data.standardized(std::vector<float>(kFeatures - 1, 0.0f), std::vector<float>(kFeatures - 1, 1.0f)); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized(std::vector<float>(kFeatures + 1, 0.0f), ones); }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized(zeros, std::vector<float>(kFeatures - 1, 1.0f)); }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { data.standardized({}, {}); }) == MPT_STATUS_SHAPE_MISMATCH);
    std::vector<float> negative = ones;
    negative[2] = -1.0f;
    CHECK(status_of([&] { data.standardized(zeros, negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.standardized(zeros, ones).slice(10, 5).rows() == 5);
}

TEST_CASE("a model standardizing its inputs by a dataset's statistics trains on the raw rows and predicts from raw inputs as a plain copy from standardized ones") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = scaled_blob_samples(90, 72, labels);
    auto context = cpu_context();
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const mptrain::FeatureStatistics statistics = data.feature_statistics();
    auto model = mlp(context);
    CHECK(!model.input_standardization().has_value());
    CHECK(&model.set_input_standardization(statistics.mean, statistics.stddev) == &model);
    const std::optional<mptrain::FeatureStatistics> read = model.input_standardization();
    REQUIRE(read.has_value());
    CHECK(bits_of(read->mean) == bits_of(statistics.mean));
    CHECK(bits_of(read->stddev) == bits_of(statistics.stddev));
    mptrain::Trainer trainer(model, adam());
    trainer.fit(data, 5, 16);
    CHECK(trainer.evaluate(data).accuracy > 0.9f);

    // The header's (x - mean) / stddev, each operation in float, for a plain model of the same weights.
    std::vector<float> standardized(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        const size_t f = i % static_cast<size_t>(kFeatures);
        const float centred = samples[i] - statistics.mean[f];
        standardized[i] = centred / statistics.stddev[f];
    }
    auto plain = mlp(context);
    for (int64_t layer = 0; layer < model.layer_count(); ++layer) {
        const auto [weights, bias] = model.weights(layer);
        plain.set_weights(layer, weights, bias);
    }
    const std::vector<float> predicted = model.predict(samples);
    CHECK(bits_of(predicted) == bits_of(plain.predict(standardized)));
    CHECK(bits_of(predicted) != bits_of(plain.predict(samples)));
}

TEST_CASE("a model's input standardization is saved with it; cleared, it reads back as none and is not saved") {
    auto context = cpu_context();
    auto model = mlp(context);
    const std::vector<float> mean{0.5f, -1.25f, 3.0f, 0.0f}, stddev{2.0f, 0.75f, 1.5f, 0.0f};
    model.set_input_standardization(mean, stddev);
    std::vector<int32_t> labels;
    const std::vector<float> inputs = blob_samples(12, 73, labels);
    const std::vector<float> predicted = model.predict(inputs);
    TempDir directory;
    const std::string path = directory.file("standardizing.safetensors");
    model.save(path);
    {
        auto loaded = mptrain::Model::load(context, path);
        const auto kept = loaded.input_standardization();
        REQUIRE(kept.has_value());
        CHECK(bits_of(kept->mean) == bits_of(mean));
        CHECK(bits_of(kept->stddev) == bits_of(stddev));  // as set: the 0 not floored
        CHECK(bits_of(loaded.predict(inputs)) == bits_of(predicted));
    }
    CHECK(&model.clear_input_standardization() == &model);
    CHECK(!model.input_standardization().has_value());
    CHECK(bits_of(model.predict(inputs)) != bits_of(predicted));
    model.clear_input_standardization();  // none to remove: still none
    CHECK(!model.input_standardization().has_value());
    model.save(path);
    CHECK(!mptrain::Model::load(context, path).input_standardization().has_value());
}

TEST_CASE("a model's input standardization of the wrong size throws SHAPE_MISMATCH, a NaN mean or negative stddev INVALID_ARGUMENT, the model unchanged") {
    auto context = cpu_context();
    auto model = mlp(context);
    const std::vector<float> ones(kFeatures, 1.0f), zeros(kFeatures, 0.0f);
    model.set_input_standardization(zeros, ones);
    CHECK(status_of([&] {
              model.set_input_standardization(std::vector<float>(kFeatures - 1, 0.0f), std::vector<float>(kFeatures - 1, 1.0f));
          }) == MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization(std::vector<float>(kFeatures + 1, 0.0f), ones); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization(zeros, std::vector<float>(kFeatures - 1, 1.0f)); }) ==
          MPT_STATUS_SHAPE_MISMATCH);
    CHECK(status_of([&] { model.set_input_standardization({}, {}); }) == MPT_STATUS_SHAPE_MISMATCH);  // not a clear
    std::vector<float> nan_mean = zeros, negative = ones;
    nan_mean[1] = std::numeric_limits<float>::quiet_NaN();
    negative[2] = -1.0f;
    CHECK(status_of([&] { model.set_input_standardization(nan_mean, ones); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { model.set_input_standardization(zeros, negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    const auto kept = model.input_standardization();
    REQUIRE(kept.has_value());
    CHECK(kept->mean == zeros);
    CHECK(kept->stddev == ones);
}

TEST_CASE("fitting a model that standardizes its inputs on a standardized dataset throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 74);
    const mptrain::FeatureStatistics statistics = data.feature_statistics();
    auto model = mlp(context);
    model.set_input_standardization(statistics.mean, statistics.stddev);
    mptrain::Trainer trainer(model, adam());
    const auto standardized = data.standardized(statistics.mean, statistics.stddev);
    CHECK(status_of([&] { trainer.fit(standardized, 1, 16); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(trainer.progress().second == 0);
    trainer.fit(data, 1, 16);  // the raw rows train
    CHECK(trainer.progress().second == 1);
}
