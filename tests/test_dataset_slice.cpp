// Dataset slices through the C API (mpt_dataset_create_slice): a slice trains, steps, evaluates and
// validates bit for bit as a dataset made from a copy of its rows, for every kind of dataset and
// precision; slices of slices count from their own first row; a slice outlives its source's
// handle; binary cross-entropy judges a slice's targets, not its source's; an interrupted epoch
// resumes on its own rows only; and the refusals.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
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
using mpt_test::kBlobFeatures;
using mpt_test::evaluate;
using mpt_test::Evaluation;
using mpt_test::Kind;
using mpt_test::make_dataset;
using mpt_test::rows_of;
using mpt_test::same_bits;

constexpr int64_t kRows = 120;

mpt_dataset_t* slice_of(const mpt_dataset_t* dataset, int64_t first, int64_t rows) {
    mpt_dataset_t* slice = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(dataset, first, rows, &slice));
    return slice;
}

// Keras's validation_split 0.25, as slices of one dataset and as two datasets of copied rows.
constexpr int64_t kTrainRows = 90;
mpt_dataset_t* split_by_slices(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    mpt_dataset_t* whole = make_dataset(trainer, blobs, kind);
    mpt_dataset_t* training = slice_of(whole, 0, kTrainRows);
    *validation = slice_of(whole, kTrainRows, kRows - kTrainRows);
    mpt_dataset_destroy(whole);  // the slices keep the storage
    return training;
}
mpt_dataset_t* split_by_copies(const BlobTrainer& trainer, const Blobs& blobs, Kind kind, mpt_dataset_t** validation) {
    *validation = make_dataset(trainer, rows_of(blobs, kTrainRows, kRows - kTrainRows), kind);
    return make_dataset(trainer, rows_of(blobs, 0, kTrainRows), kind);
}

}  // namespace

TEST_CASE("a validation split made of slices trains, steps, validates and evaluates bit for bit as one of copied rows") {
    mpt_test::check_runs_as_copies(mpt_test::make_blobs(kRows, 11, 1.2), split_by_slices, split_by_copies);
}

TEST_CASE("a slice of a slice counts from that slice's first row") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 5);
    BlobTrainer sliced(BlobTrainerSetup{}), copied(BlobTrainerSetup{});
    mpt_dataset_t* whole = sliced.labels(blobs);
    mpt_dataset_t* outer = slice_of(whole, 10, 80);
    mpt_dataset_t* inner = slice_of(outer, 25, 48);  // rows 35..82 of the whole
    int64_t rows = 0, features = 0;
    REQUIRE_OK(mpt_dataset_get_rows(inner, &rows));
    REQUIRE_OK(mpt_dataset_get_features(inner, &features));
    CHECK(rows == 48);
    CHECK(features == kBlobFeatures);
    mpt_dataset_t* copy = copied.labels(rows_of(blobs, 35, 48));
    REQUIRE_OK(mpt_trainer_fit(sliced.trainer, inner, 2, 16, 1));
    REQUIRE_OK(mpt_trainer_fit(copied.trainer, copy, 2, 16, 1));
    CHECK(same_bits(sliced.weights(), copied.weights()));
    const Evaluation a = evaluate(sliced, inner), b = evaluate(copied, copy);
    CHECK(a.loss == b.loss);
    CHECK(a.accuracy == b.accuracy);
    // The last row of the whole, through both slices, is a row like any other.
    mpt_dataset_t* last = slice_of(whole, kRows - 1, 1);
    mpt_dataset_t* last_copy = sliced.labels(rows_of(blobs, kRows - 1, 1));
    const Evaluation c = evaluate(sliced, last), d = evaluate(sliced, last_copy);
    CHECK(c.loss == d.loss);
    CHECK(c.accuracy == d.accuracy);
    for (mpt_dataset_t* dataset : {whole, outer, inner, copy, last, last_copy}) mpt_dataset_destroy(dataset);
}

TEST_CASE("a slice keeps its storage and context after its source's and its context's handles are gone") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 9);
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_dataset_t* whole = mpt_test::blob_labels(context, blobs);
    mpt_dataset_t* slice = slice_of(whole, 60, 60);
    mpt_dataset_destroy(whole);
    mpt_context_destroy(context);  // the slice keeps the context alive, as every dataset does
    mpt_dataset_t* inner = slice_of(slice, 10, 50);
    mpt_dataset_destroy(slice);
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(inner, &rows));
    CHECK(rows == 50);
    // A slice belongs to its source's context: another context's trainer refuses it.
    BlobTrainer trainer(BlobTrainerSetup{});
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(trainer.trainer, inner, 1, 16, 1));
    mpt_dataset_destroy(inner);  // the last handle: storage and context go (LeakSanitizer checks)
}

TEST_CASE("binary cross-entropy judges the targets of the slice it is given, not its source's") {
    const mpt_test::BinaryTargets rows(13);
    rows.check_judged_by_own_rows(slice_of(rows.whole, 0, rows.kCountRow), slice_of(rows.whole, 20, 20));
}

TEST_CASE("slices out of range, NULL arguments and a destroyed source are refused and change nothing") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 3);
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    mpt_dataset_t* whole = mpt_test::blob_labels(context, blobs);
    static int marker;
    mpt_dataset_t* const sentinel = reinterpret_cast<mpt_dataset_t*>(&marker);  // failures leave `out` as it was
    mpt_dataset_t* out = sentinel;
    const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
    const int64_t refused[][2] = {{-1, 10},   {kRows, 1}, {big, 1},         {small, 1}, {0, 0},
                                  {0, -5},    {0, kRows + 1}, {kRows - 1, 2}, {1, big},  {60, 61}};
    for (const auto& range : refused) {
        CAPTURE(range[0]);
        CAPTURE(range[1]);
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_slice(whole, range[0], range[1], &out));
        CHECK(out == sentinel);
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_slice(nullptr, 0, 1, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_slice(whole, 0, 1, nullptr));
    CHECK(out == sentinel);
    // The widest and narrowest slices.
    mpt_dataset_t* all = slice_of(whole, 0, kRows);
    mpt_dataset_t* one = slice_of(whole, kRows - 1, 1);
    int64_t rows = 0;
    REQUIRE_OK(mpt_dataset_get_rows(all, &rows));
    CHECK(rows == kRows);
    REQUIRE_OK(mpt_dataset_get_rows(one, &rows));
    CHECK(rows == 1);
    // A slice's own bounds, not its source's.
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_slice(one, 0, 2, &out));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_slice(one, 1, 1, &out));
    CHECK(out == sentinel);
    for (mpt_dataset_t* dataset : {whole, all, one}) mpt_dataset_destroy(dataset);
    mpt_context_destroy(context);
}

namespace {

int cancel_at_step_2(int64_t, int64_t step, int64_t, float, float, void*) { return step == 2 ? 1 : 0; }

int64_t steps_taken(const BlobTrainer& trainer) {
    int64_t steps = 0, epochs = 0;
    REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, &epochs));
    return steps;
}

}  // namespace

TEST_CASE("an epoch cancelled on one fold is finished on the same rows, not on another fold of the same size") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 17);
    for (bool same_rows : {true, false}) {
        CAPTURE(same_rows);
        BlobTrainer trainer(BlobTrainerSetup{});
        mpt_dataset_t* whole = trainer.labels(blobs);
        mpt_dataset_t* fold = slice_of(whole, 0, 40);  // 5 steps of 8
        mpt_dataset_t* next = same_rows ? slice_of(whole, 0, 40) : slice_of(whole, 40, 40);
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, cancel_at_step_2, nullptr, nullptr));
        CHECK(mpt_trainer_fit(trainer.trainer, fold, 1, 8, 1) == MPT_STATUS_CANCELLED);
        CHECK(steps_taken(trainer) == 2);
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
        // A fit of no epochs decides too: it must not leave the old epoch resumable on other data.
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, next, 0, 8, 1));
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, next, 1, 8, 1));
        // The same rows (another handle on them) finish the epoch's 3 steps; another fold starts its own 5.
        CHECK(steps_taken(trainer) == (same_rows ? 5 : 7));
        for (mpt_dataset_t* dataset : {whole, fold, next}) mpt_dataset_destroy(dataset);
    }
}

TEST_CASE("an epoch abandoned by a fit of no epochs with another batch size stays abandoned") {
    const Blobs blobs = mpt_test::make_blobs(48, 18);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* data = trainer.labels(blobs);  // 6 steps of 8, 2 of 24
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, cancel_at_step_2, nullptr, nullptr));
    CHECK(mpt_trainer_fit(trainer.trainer, data, 1, 8, 1) == MPT_STATUS_CANCELLED);
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 0, 24, 1));  // another batch size: abandoned
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 1, 24, 1));
    int64_t steps = 0, epochs = 0;
    REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, &epochs));
    CHECK(steps == 2 + 2);  // a whole new epoch of 2 steps, not "step 2 of 2" resumed as done
    CHECK(epochs == 1);
    mpt_dataset_destroy(data);
}

namespace {

// A checkpoint file of this process, removed at the end of the scope.
struct CheckpointFile {
    std::string path = (std::filesystem::temp_directory_path() /
                         ("mptrain-test-dataset-slice-" + std::to_string(::getpid()) + ".safetensors"))
                           .string();
    ~CheckpointFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("a step between an interrupted fit and a checkpoint leaves that epoch unfinished in the file") {
    const Blobs blobs = mpt_test::make_blobs(48, 19);
    BlobTrainer live(BlobTrainerSetup{}), loaded(BlobTrainerSetup{});
    mpt_dataset_t* data = live.labels(blobs);
    mpt_dataset_t* loaded_data = loaded.labels(blobs);
    REQUIRE_OK(mpt_trainer_set_callbacks(live.trainer, cancel_at_step_2, nullptr, nullptr));
    CHECK(mpt_trainer_fit(live.trainer, data, 1, 8, 1) == MPT_STATUS_CANCELLED);  // step 2 of 6
    REQUIRE_OK(mpt_trainer_set_callbacks(live.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_step(live.trainer, data, 0, 24, nullptr));  // another batch size: 2 of "2"
    const CheckpointFile file;
    REQUIRE_OK(mpt_trainer_save_checkpoint(live.trainer, file.path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(loaded.trainer, file.path.c_str()));
    int64_t steps = 0, epochs = -1;
    REQUIRE_OK(mpt_trainer_get_progress(loaded.trainer, &steps, &epochs));
    CHECK(steps == 3);
    CHECK(epochs == 0);  // the epoch of batch 8 is 2 steps in, not done
    // Both finish it the same way: its 4 steps left, in its order.
    REQUIRE_OK(mpt_trainer_fit(live.trainer, data, 1, 8, 1));
    REQUIRE_OK(mpt_trainer_fit(loaded.trainer, loaded_data, 1, 8, 1));
    CHECK(steps_taken(live) == 7);
    CHECK(steps_taken(loaded) == 7);
    CHECK(same_bits(live.weights(), loaded.weights()));
    for (mpt_dataset_t* dataset : {data, loaded_data}) mpt_dataset_destroy(dataset);
}

TEST_CASE("a fit of no epochs leaves an epoch loaded from a checkpoint resumable on any data of its size") {
    const Blobs blobs = mpt_test::make_blobs(48, 20);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* a = trainer.labels(blobs);
    mpt_dataset_t* b = trainer.labels(blobs);  // the same values, another dataset
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, cancel_at_step_2, nullptr, nullptr));
    CHECK(mpt_trainer_fit(trainer.trainer, a, 1, 8, 1) == MPT_STATUS_CANCELLED);
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, nullptr, nullptr));
    const CheckpointFile file;
    REQUIRE_OK(mpt_trainer_save_checkpoint(trainer.trainer, file.path.c_str()));
    REQUIRE_OK(mpt_trainer_load_checkpoint(trainer.trainer, file.path.c_str()));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, a, 0, 8, 1));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, b, 1, 8, 1));
    int64_t steps = 0, epochs = 0;
    REQUIRE_OK(mpt_trainer_get_progress(trainer.trainer, &steps, &epochs));
    CHECK(steps == 6);  // the loaded epoch's 4 steps left, on b
    CHECK(epochs == 1);
    for (mpt_dataset_t* dataset : {a, b}) mpt_dataset_destroy(dataset);
}
