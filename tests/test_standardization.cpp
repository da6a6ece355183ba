// Standardized datasets through the C API (mpt_dataset_create_standardized,
// mpt_dataset_get_feature_statistics): a standardized view trains, steps, validates and evaluates
// bit for bit as a float dataset holding the standardized values, for every kind of dataset and
// precision; the statistics are the population's, to float rounding of a double reference, and
// standardizing by them gives mean 0 and standard deviation 1; a constant feature becomes 0;
// slices, weighted views and subsets keep the standardization, a new one replaces it; and the
// refusals, which leave the caller's arrays as they were.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/dataset_run.h"
#include "support/standardized_blobs.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::kBlobFeatures;
using mpt_test::Kind;
using mpt_test::make_dataset;
using mpt_test::same_bits;
using namespace mpt_test::standardizing;

mpt_dataset_t* standardized(const mpt_dataset_t* dataset, const Statistics& by) {
    mpt_dataset_t* result = nullptr;
    REQUIRE_OK(mpt_dataset_create_standardized(dataset, by.mean.data(), by.stddev.data(), kBlobFeatures, &result));
    return result;
}

// The training set's statistics standardize both sets (from slices of one standardized view).
mpt_dataset_t* split_standardized(const BlobTrainer& trainer, const Blobs& blobs, Kind kind,
                                  mpt_dataset_t** validation) {
    mpt_dataset_t* whole = make_dataset(trainer, blobs, kind);
    mpt_dataset_t* head = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole, 0, kTrainingRows, &head));
    mpt_dataset_t* view = standardized(whole, statistics_of(head));
    mpt_dataset_t* training = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(view, 0, kTrainingRows, &training));
    REQUIRE_OK(mpt_dataset_create_slice(view, kTrainingRows, kRows - kTrainingRows, validation));
    for (mpt_dataset_t* dataset : {whole, head, view}) mpt_dataset_destroy(dataset);
    return training;
}

// The trainer's predictions over `view` (through the gather) are its predictions for the kRows
// float rows `expected`, bit for bit: in one batch, as mpt_trainer_predict's (batches of other sizes
// may sum in other orders, as OpenBLAS's Haswell kernels do).
void check_predicts_as(const BlobTrainer& trainer, const mpt_dataset_t* view, const std::vector<float>& expected) {
    std::vector<float> predicted(static_cast<size_t>(kRows * mpt_test::kBlobClasses));
    REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, view, kRows, predicted.data(),
                                           static_cast<int64_t>(predicted.size())));
    std::vector<float> reference(predicted.size());
    REQUIRE_OK(mpt_trainer_predict(trainer.trainer, expected.data(), kRows, reference.data(),
                                   static_cast<int64_t>(reference.size())));
    CHECK(same_bits(predicted, reference));
}

}  // namespace

TEST_CASE("a standardized dataset trains, steps, validates and evaluates bit for bit as one of standardized floats") {
    // u8 quantises x * 16 + 128 into [0, 255]: the offset blobs would clip, so those stay near 0.
    mpt_test::check_runs_as_copies(mpt_test::make_blobs(kRows, 41, 1.2), split_standardized, split_copied);
}

TEST_CASE("feature statistics are the population's, and standardizing by them gives mean 0 and deviation 1") {
    const Blobs blobs = offset_blobs(52);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(blobs);
    const Statistics statistics = statistics_of(dataset);
    for (int64_t f = 0; f < kBlobFeatures; ++f) {
        CAPTURE(f);
        double sum = 0, squares = 0;
        for (int64_t r = 0; r < kRows; ++r) sum += blobs.x[static_cast<size_t>(r * kBlobFeatures + f)];
        const double mean = sum / kRows;
        for (int64_t r = 0; r < kRows; ++r) {
            const double deviation = blobs.x[static_cast<size_t>(r * kBlobFeatures + f)] - mean;
            squares += deviation * deviation;
        }
        CHECK(statistics.mean[static_cast<size_t>(f)] == static_cast<float>(mean));
        CHECK(statistics.stddev[static_cast<size_t>(f)] == static_cast<float>(std::sqrt(squares / kRows)));  // not / (n - 1)
    }
    mpt_dataset_t* view = standardized(dataset, statistics);
    const Statistics after = statistics_of(view);  // of the standardized values
    for (int64_t f = 0; f < kBlobFeatures; ++f) {
        CHECK(std::fabs(after.mean[static_cast<size_t>(f)]) < 1e-6f);
        CHECK(after.stddev[static_cast<size_t>(f)] == doctest::Approx(1.0).epsilon(1e-6));
    }
    // Either output may be left out, and a slice's statistics are its own rows'.
    std::vector<float> means(kBlobFeatures);
    REQUIRE_OK(mpt_dataset_get_feature_statistics(dataset, means.data(), nullptr, kBlobFeatures));
    CHECK(same_bits(means, statistics.mean));
    mpt_dataset_t* slice = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(dataset, 60, 30, &slice));
    mpt_dataset_t* copied = trainer.labels(mpt_test::rows_of(blobs, 60, 30));
    CHECK(same_bits(statistics_of(slice).stddev, statistics_of(copied).stddev));
    CHECK(same_bits(statistics_of(slice).mean, statistics_of(copied).mean));
    for (mpt_dataset_t* d : {dataset, view, slice, copied}) mpt_dataset_destroy(d);
}

TEST_CASE("a uint8 dataset's statistics are of its scaled values, and a constant feature becomes 0") {
    BlobTrainer trainer(BlobTrainerSetup{});
    // Feature 0 is 200 in every row; the others vary.
    std::vector<uint8_t> samples(static_cast<size_t>(kRows * kBlobFeatures));
    std::vector<int32_t> labels(static_cast<size_t>(kRows));
    for (int64_t r = 0; r < kRows; ++r) {
        samples[static_cast<size_t>(r * kBlobFeatures)] = 200;
        for (int64_t f = 1; f < kBlobFeatures; ++f)
            samples[static_cast<size_t>(r * kBlobFeatures + f)] = static_cast<uint8_t>((r * 37 + f * 11) % 256);
        labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % mpt_test::kBlobClasses);
    }
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_u8(trainer.context, samples.data(), kRows, kBlobFeatures, labels.data(),
                                     mpt_test::kBlobClasses, 1.0f / 255, 0.0f, &dataset));
    const Statistics statistics = statistics_of(dataset);
    CHECK(statistics.mean[0] == 200.0f * (1.0f / 255));  // the dataset's value, x * scale
    CHECK(statistics.stddev[0] == 0.0f);
    mpt_dataset_t* view = standardized(dataset, statistics);
    // Every batch's feature 0 is (x - mean) / 1e-7 = 0: the predictions of the view are those of
    // rows whose feature 0 is 0 and whose others are standardized.
    std::vector<float> expected(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
        const size_t f = i % kBlobFeatures;
        const float value = static_cast<float>(samples[i]) * (1.0f / 255) + 0.0f;
        const float centred = value - statistics.mean[f];
        expected[i] = f == 0 ? 0.0f : centred / statistics.stddev[f];
    }
    check_predicts_as(trainer, view, expected);
    const Statistics after = statistics_of(view);
    CHECK(after.mean[0] == 0.0f);
    CHECK(after.stddev[0] == 0.0f);
    mpt_dataset_destroy(view);
    mpt_dataset_destroy(dataset);
}

// The population statistics of `values` (rows x kBlobFeatures), as the header specifies them: summed
// in double in row order, two passes.
Statistics reference_statistics(const std::vector<float>& values) {
    Statistics statistics;
    const int64_t rows = static_cast<int64_t>(values.size()) / kBlobFeatures;
    for (int64_t f = 0; f < kBlobFeatures; ++f) {
        double sum = 0, squares = 0;
        for (int64_t r = 0; r < rows; ++r) sum += values[static_cast<size_t>(r * kBlobFeatures + f)];
        const double mean = sum / static_cast<double>(rows);
        for (int64_t r = 0; r < rows; ++r) {
            const double deviation = values[static_cast<size_t>(r * kBlobFeatures + f)] - mean;
            squares += deviation * deviation;
        }
        statistics.mean[static_cast<size_t>(f)] = static_cast<float>(mean);
        statistics.stddev[static_cast<size_t>(f)] = static_cast<float>(std::sqrt(squares / static_cast<double>(rows)));
    }
    return statistics;
}

TEST_CASE("a uint8 dataset's statistics are of its values after both its scale and its offset") {
    BlobTrainer trainer(BlobTrainerSetup{});
    std::vector<uint8_t> samples(static_cast<size_t>(kRows * kBlobFeatures));
    std::vector<int32_t> labels(static_cast<size_t>(kRows));
    for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<uint8_t>((i * 37 + i / 7) % 256);
    for (int64_t r = 0; r < kRows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % mpt_test::kBlobClasses);
    const float scale = 0.5f, offset = -3.0f;
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_u8(trainer.context, samples.data(), kRows, kBlobFeatures, labels.data(),
                                     mpt_test::kBlobClasses, scale, offset, &dataset));
    std::vector<float> values(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) values[i] = static_cast<float>(samples[i]) * scale + offset;
    const Statistics expected = reference_statistics(values);
    const Statistics statistics = statistics_of(dataset);
    CHECK(same_bits(statistics.mean, expected.mean));
    CHECK(same_bits(statistics.stddev, expected.stddev));
    mpt_dataset_destroy(dataset);
}

TEST_CASE("a standard deviation below 1e-7 (0, subnormal or not) divides by 1e-7, one above it by itself") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 55);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(blobs);
    Statistics by;
    by.mean = {0.5f, -0.25f, 1.0f, 0.0f};
    by.stddev = {0.0f, 1e-40f, 5e-8f, 1.5e-7f};
    const float divisors[kBlobFeatures] = {1e-7f, 1e-7f, 1e-7f, 1.5e-7f};
    mpt_dataset_t* view = standardized(dataset, by);
    std::vector<float> expected(blobs.x.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        const size_t f = i % kBlobFeatures;
        const float centred = blobs.x[i] - by.mean[f];
        expected[i] = centred / divisors[f];
    }
    // Through the gather (predictions over the view) and through the statistics alike.
    check_predicts_as(trainer, view, expected);
    const Statistics after = statistics_of(view), expected_after = reference_statistics(expected);
    CHECK(same_bits(after.mean, expected_after.mean));
    CHECK(same_bits(after.stddev, expected_after.stddev));
    mpt_dataset_destroy(view);
    mpt_dataset_destroy(dataset);
}

TEST_CASE("slices, weighted views and subsets keep a standardization, and a new one replaces it") {
    const Blobs blobs = offset_blobs(53);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(blobs);
    const Statistics statistics = statistics_of(dataset);
    mpt_dataset_t* view = standardized(dataset, statistics);
    const Statistics of_view = statistics_of(view);
    std::vector<float> weights(kRows, 2.0f);
    mpt_dataset_t* weighted = nullptr;
    REQUIRE_OK(mpt_dataset_create_weighted(view, weights.data(), kRows, &weighted));
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
    mpt_dataset_t* subset = nullptr;
    REQUIRE_OK(mpt_dataset_create_subset(view, all.data(), kRows, &subset));
    mpt_dataset_t* slice = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(view, 0, kRows, &slice));
    for (const mpt_dataset_t* kept : {weighted, subset, slice}) {
        const Statistics of_kept = statistics_of(kept);
        CHECK(same_bits(of_kept.mean, of_view.mean));
        CHECK(same_bits(of_kept.stddev, of_view.stddev));
    }
    // Standardizing the view again by other values standardizes the original values, not the view's.
    Statistics other = statistics;
    for (float& mean : other.mean) mean += 1.0f;
    for (float& stddev : other.stddev) stddev *= 2.0f;
    mpt_dataset_t* again = standardized(view, other);
    mpt_dataset_t* direct = standardized(dataset, other);
    CHECK(same_bits(statistics_of(again).mean, statistics_of(direct).mean));
    CHECK(same_bits(statistics_of(again).stddev, statistics_of(direct).stddev));
    CHECK(!same_bits(statistics_of(again).mean, of_view.mean));
    for (mpt_dataset_t* d : {dataset, view, weighted, subset, slice, again, direct}) mpt_dataset_destroy(d);
}

TEST_CASE("standardization and statistics refuse bad arguments and leave the caller's arrays as they were") {
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* dataset = trainer.labels(mpt_test::make_blobs(kRows, 54));
    std::vector<float> mean(kBlobFeatures, 0.5f), stddev(kBlobFeatures, 2.0f);
    mpt_dataset_t* out = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_standardized(nullptr, mean.data(), stddev.data(), kBlobFeatures, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_standardized(dataset, nullptr, stddev.data(), kBlobFeatures, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_standardized(dataset, mean.data(), nullptr, kBlobFeatures, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_standardized(dataset, mean.data(), stddev.data(), kBlobFeatures, nullptr));
    for (int64_t count : {int64_t{0}, kBlobFeatures - 1, kBlobFeatures + 1, int64_t{-1}})
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                    mpt_dataset_create_standardized(dataset, mean.data(), stddev.data(), count, &out));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float bad_mean : {nan, inf, -inf}) {
        std::vector<float> bad = mean;
        bad[2] = bad_mean;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_dataset_create_standardized(dataset, bad.data(), stddev.data(), kBlobFeatures, &out));
        CHECK(std::string(mpt_last_error()).find("feature 2") != std::string::npos);
    }
    for (float bad_stddev : {nan, inf, -1.0f, -1e-30f}) {
        std::vector<float> bad = stddev;
        bad[3] = bad_stddev;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_dataset_create_standardized(dataset, mean.data(), bad.data(), kBlobFeatures, &out));
        CHECK(std::string(mpt_last_error()).find("feature 3") != std::string::npos);
    }
    CHECK(out == nullptr);
    // A standard deviation of 0 (a constant feature) and of -0 are taken.
    stddev[1] = 0.0f;
    stddev[2] = -0.0f;
    REQUIRE_OK(mpt_dataset_create_standardized(dataset, mean.data(), stddev.data(), kBlobFeatures, &out));
    mpt_dataset_destroy(out);

    std::vector<float> untouched(kBlobFeatures, 42.0f), also_untouched(kBlobFeatures, 43.0f);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_get_feature_statistics(nullptr, untouched.data(), also_untouched.data(), kBlobFeatures));
    for (int64_t count : {int64_t{0}, kBlobFeatures - 1, kBlobFeatures + 1})
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH,
                    mpt_dataset_get_feature_statistics(dataset, untouched.data(), also_untouched.data(), count));
    CHECK(untouched == std::vector<float>(kBlobFeatures, 42.0f));
    CHECK(also_untouched == std::vector<float>(kBlobFeatures, 43.0f));
    mpt_dataset_destroy(dataset);
}

TEST_CASE("a feature with a non-finite sample has non-finite statistics, which a standardization refuses") {
    // A dataset created without check_finite may hold NaN or infinity: the statistics say so (as
    // Keras's adapt gives NaN) rather than failing, and the other features' are unaffected.
    Blobs blobs = mpt_test::make_blobs(kRows, 56);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* clean = trainer.labels(blobs);
    const Statistics finite = statistics_of(clean);
    mpt_dataset_destroy(clean);
    blobs.x[5 * kBlobFeatures + 1] = std::numeric_limits<float>::quiet_NaN();
    blobs.x[7 * kBlobFeatures + 2] = std::numeric_limits<float>::infinity();
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(trainer.context, blobs.x.data(), kRows, kBlobFeatures, blobs.y.data(),
                                      mpt_test::kBlobClasses, 0, &dataset));
    const Statistics statistics = statistics_of(dataset);
    CHECK(std::isnan(statistics.mean[1]));
    CHECK(std::isnan(statistics.stddev[1]));
    CHECK(statistics.mean[2] == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(statistics.stddev[2]));  // inf - inf
    for (size_t f : {size_t{0}, size_t{3}}) {
        CHECK(statistics.mean[f] == finite.mean[f]);
        CHECK(statistics.stddev[f] == finite.stddev[f]);
    }
    mpt_dataset_t* out = nullptr;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_standardized(dataset, statistics.mean.data(),
                                                                             statistics.stddev.data(), kBlobFeatures, &out));
    CHECK(std::string(mpt_last_error()).find("feature 1") != std::string::npos);
    CHECK(out == nullptr);
    mpt_dataset_destroy(dataset);
}

namespace {

int cancel_at_step_2(int64_t, int64_t step, int64_t, float, float, void*) { return step == 2 ? 1 : 0; }

}  // namespace

TEST_CASE("an epoch cancelled on a dataset is finished on a standardized view of its rows, made anew") {
    // The same rows, as for a weighted view: a caller who writes fit(data.standardized(m, s)) makes
    // a new view at every call, and its interrupted epoch must still be finished.
    const Blobs blobs = mpt_test::make_blobs(40, 57);  // 5 steps of 8
    for (bool same_rows : {true, false}) {
        CAPTURE(same_rows);
        BlobTrainer trainer(BlobTrainerSetup{});
        mpt_dataset_t* whole = trainer.labels(blobs);
        const Statistics statistics = statistics_of(whole);
        mpt_dataset_t* first = standardized(whole, statistics);
        mpt_dataset_t* other = trainer.labels(blobs);  // a copy of the rows: other data
        mpt_dataset_t* next = standardized(same_rows ? whole : other, statistics);
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, cancel_at_step_2, nullptr, nullptr));
        CHECK(mpt_trainer_fit(trainer.trainer, first, 1, 8, 1) == MPT_STATUS_CANCELLED);
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, next, 1, 8, 1));
        int64_t steps = 0, epochs = 0;
        REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, &epochs));
        CHECK(steps == (same_rows ? 5 : 7));
        CHECK(epochs == 1);
        for (mpt_dataset_t* dataset : {whole, first, other, next}) mpt_dataset_destroy(dataset);
    }
}
