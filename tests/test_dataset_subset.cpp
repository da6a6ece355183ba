// Dataset subsets through the C API (mpt_dataset_create_subset): a k-fold split made of subsets
// trains, steps, validates and evaluates bit for bit as datasets of copied rows, for every kind of
// dataset and precision; a subset takes any rows in the order given (repeats included) with their
// labels, targets and weights, counted from a slice's own first row; it outlives its source;
// binary cross-entropy judges its own targets; and the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/dataset_run.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::Blobs;
using mpt_test::evaluate;
using mpt_test::Evaluation;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::Kind;
using mpt_test::make_dataset;
using mpt_test::same_bits;

constexpr int64_t kRows = 120;

mpt_dataset_t* subset_of(const mpt_dataset_t* dataset, const std::vector<int64_t>& rows) {
    mpt_dataset_t* subset = nullptr;
    REQUIRE_OK(mpt_dataset_create_subset(dataset, rows.data(), static_cast<int64_t>(rows.size()), &subset));
    return subset;
}

// Rows `rows` of `blobs`, copied in that order.
Blobs rows_at(const Blobs& blobs, const std::vector<int64_t>& rows) {
    Blobs picked;
    for (int64_t r : rows) {
        picked.x.insert(picked.x.end(), blobs.x.begin() + r * kBlobFeatures, blobs.x.begin() + (r + 1) * kBlobFeatures);
        picked.y.push_back(blobs.y[static_cast<size_t>(r)]);
    }
    return picked;
}

// The third of four folds (rows 60..89) held out; the rows around it train, as one dataset.
std::vector<int64_t> fold_rows() {
    std::vector<int64_t> rows;
    for (int64_t r = 60; r < 90; ++r) rows.push_back(r);
    return rows;
}
std::vector<int64_t> training_rows() {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < kRows; ++r)
        if (r < 60 || r >= 90) rows.push_back(r);
    return rows;
}

mpt_dataset_t* fold_by_subsets(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    mpt_dataset_t* whole = make_dataset(trainer, blobs, kind);
    mpt_dataset_t* training = subset_of(whole, training_rows());
    *validation = subset_of(whole, fold_rows());
    mpt_dataset_destroy(whole);  // the subsets hold copies
    return training;
}
mpt_dataset_t* fold_by_copies(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    *validation = make_dataset(trainer, rows_at(blobs, fold_rows()), kind);
    return make_dataset(trainer, rows_at(blobs, training_rows()), kind);
}

}  // namespace

TEST_CASE("a k-fold split made of subsets trains, steps, validates and evaluates bit for bit as one of copied rows") {
    mpt_test::check_runs_as_copies(mpt_test::make_blobs(kRows, 41, 1.2), fold_by_subsets, fold_by_copies);
}

TEST_CASE("a subset takes any rows in the order given, repeats included, with their labels and weights, from a slice's own rows") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 42);
    BlobTrainer trainer(BlobTrainerSetup{});
    std::vector<float> weights;
    for (int64_t r = 0; r < kRows; ++r) weights.push_back(0.25f + 0.01f * static_cast<float>(r));
    mpt_dataset_t* whole = trainer.labels(blobs);
    mpt_dataset_t* weighted = nullptr;
    REQUIRE_OK(mpt_dataset_create_weighted(whole, weights.data(), kRows, &weighted));
    mpt_dataset_t* slice = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(weighted, 20, 80, &slice));  // rows 20..99
    const std::vector<int64_t> picked = {79, 0, 5, 5, 41, 0, 13};     // of the slice: rows 99, 20, 25, 25, 61, 20, 33
    mpt_dataset_t* subset = subset_of(slice, picked);
    mpt_dataset_destroy(slice);
    mpt_dataset_destroy(weighted);

    std::vector<int64_t> source_rows;
    std::vector<float> picked_weights;
    for (int64_t r : picked) {
        source_rows.push_back(20 + r);
        picked_weights.push_back(weights[static_cast<size_t>(20 + r)]);
    }
    const Blobs expected = rows_at(blobs, source_rows);
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(subset, &rows));
    CHECK(rows == 7);
    std::vector<int32_t> labels(7);
    REQUIRE_OK(mpt_dataset_get_labels(subset, labels.data(), 7));
    CHECK(labels == expected.y);
    // The samples, through the trainer's predictions over the subset and over the copied rows: bit for
    // bit in one batch, and within fp32 rounding in batches of 3, whose GEMMs (OpenBLAS's, on CPUs
    // without the small-batch kernels) may sum in another order.
    const std::vector<float> over_copies = trainer.predict(expected);
    for (int64_t batch : {int64_t{7}, int64_t{3}}) {
        CAPTURE(batch);
        std::vector<float> over_subset(static_cast<size_t>(7 * kBlobClasses));
        REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, subset, batch, over_subset.data(),
                                               static_cast<int64_t>(over_subset.size())));
        if (batch == 7) CHECK(same_bits(over_subset, over_copies));
        for (size_t i = 0; i < over_subset.size(); ++i) CHECK(over_subset[i] == doctest::Approx(over_copies[i]).epsilon(1e-5));
    }
    // The weights, through a weighted evaluation against the copied rows with the same weights.
    mpt_dataset_t* copy = trainer.labels(expected);
    mpt_dataset_t* weighted_copy = nullptr;
    REQUIRE_OK(mpt_dataset_create_weighted(copy, picked_weights.data(), 7, &weighted_copy));
    const Evaluation a = evaluate(trainer, subset, 4), b = evaluate(trainer, weighted_copy, 4);
    CHECK(a.loss == b.loss);
    CHECK(a.accuracy == b.accuracy);
    const Evaluation unweighted = evaluate(trainer, copy, 4);
    CHECK(a.loss != unweighted.loss);
    for (mpt_dataset_t* dataset : {whole, subset, copy, weighted_copy}) mpt_dataset_destroy(dataset);
}

TEST_CASE("a subset keeps its context after its source's and its context's handles are gone") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 43);
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_dataset_t* whole = mpt_test::blob_labels(context, blobs);
    mpt_dataset_t* subset = subset_of(whole, {3, 2, 1});
    mpt_dataset_destroy(whole);
    mpt_context_destroy(context);
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(subset, &rows));
    CHECK(rows == 3);
    BlobTrainer trainer(BlobTrainerSetup{});  // another context's trainer refuses it
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, subset, 1, 2, 1));
    mpt_dataset_destroy(subset);  // the last handle: storage and context go (LeakSanitizer checks)
}

TEST_CASE("binary cross-entropy judges the targets of the subset it is given, not its source's") {
    const mpt_test::BinaryTargets rows(44);
    std::vector<int64_t> others;
    for (int64_t r = 0; r < rows.kRows; ++r)
        if (r != rows.kCountRow) others.push_back(r);
    rows.check_judged_by_own_rows(subset_of(rows.whole, others), subset_of(rows.whole, {rows.kCountRow}));
}

TEST_CASE("subsets of rows out of range, no rows and NULL arguments are refused, naming the index, and change nothing") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 45);
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_dataset_t* whole = mpt_test::blob_labels(context, blobs);
    static int marker;
    mpt_dataset_t* const sentinel = reinterpret_cast<mpt_dataset_t*>(&marker);  // failures leave `out` as it was
    mpt_dataset_t* out = sentinel;
    const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
    for (int64_t bad : {int64_t{-1}, kRows, big, small}) {
        CAPTURE(bad);
        const std::vector<int64_t> rows = {0, 7, bad, 9};
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(whole, rows.data(), 4, &out));
        CHECK(std::string(mpt_last_error()).find("row 2 of the list is " + std::to_string(bad)) != std::string::npos);
        CHECK(out == sentinel);
    }
    const int64_t one = 0;
    for (int64_t count : {int64_t{0}, int64_t{-3}, small}) {
        CAPTURE(count);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(whole, &one, count, &out));
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(nullptr, &one, 1, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(whole, nullptr, 1, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(whole, &one, 1, nullptr));
    CHECK(out == sentinel);
    // A slice's own bounds, not its source's.
    mpt_dataset_t* last = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(whole, kRows - 1, 1, &last));
    const int64_t second = 1;
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_subset(last, &second, 1, &out));
    CHECK(out == sentinel);
    mpt_dataset_t* only = subset_of(last, {0, 0});
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(only, &rows));
    CHECK(rows == 2);
    for (mpt_dataset_t* dataset : {whole, last, only}) mpt_dataset_destroy(dataset);
    mpt_context_destroy(context);
}
