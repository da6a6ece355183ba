// Predictions over a dataset (mpt_trainer_predict_dataset) and a dataset's labels
// (mpt_dataset_get_labels) through the C API: the same outputs as mpt_trainer_predict on the same
// rows, whatever the batch size, the dataset's kind, slice or weights; a confusion matrix from the
// two; the callbacks' rules; and the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
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

constexpr int64_t kRows = 60;

std::vector<float> predict_dataset(const BlobTrainer& trainer, const mpt_dataset_t* dataset, int64_t rows,
                                   int64_t batch_size = 0) {
    std::vector<float> out(static_cast<size_t>(rows * trainer.outputs), NAN);
    REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, dataset, batch_size, out.data(),
                                           static_cast<int64_t>(out.size())));
    return out;
}

// Probabilities from batches of other sizes: the CPU's GEMMs block a batch by its rows, and take
// other kernels for a few rows (small_gemm; on AMX CPUs the tiles above), so sums of the same
// products may round differently: in fp32 some 1e-7 of a probability. Mixed precision rounds the
// hidden activations to 16 bits, where such a sum can round to the neighbouring value, so the bound
// is the compute dtype's epsilon (2^-10 fp16, 2^-7 bf16): mixed-fp16 moved 2.5e-5 on an AMX CPU,
// where batches of up to 8 rows sum each product once and larger ones in four parts. A batch's rows
// mixed up or misplaced move probabilities by tenths.
float batching_tolerance(mpt_precision precision) {
    switch (precision) {
        case MPT_PRECISION_MIXED_FP16: return 0x1p-10f;
        case MPT_PRECISION_MIXED_BF16: return 0x1p-7f;
        default: return 1e-5f;
    }
}

bool close(const std::vector<float>& a, const std::vector<float>& b, mpt_precision precision) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (!(std::fabs(a[i] - b[i]) <= batching_tolerance(precision))) return false;
    return true;
}

}  // namespace

TEST_CASE("predictions over a dataset are mpt_trainer_predict's on its rows: bit for bit in one batch, else close") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 31, 1.2);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        BlobTrainerSetup setup;
        setup.precision = precision;
        BlobTrainer trainer(setup);
        mpt_dataset_t* labels = trainer.labels(blobs);
        mpt_dataset_t* one_hot = trainer.one_hot(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, labels, 2, 16, 1));
        const std::vector<float> expected = trainer.predict(blobs);
        for (int64_t batch : {kRows, int64_t{1000}}) {  // one batch, as mpt_trainer_predict's here
            CAPTURE(batch);
            CHECK(same_bits(predict_dataset(trainer, labels, kRows, batch), expected));
            CHECK(same_bits(predict_dataset(trainer, one_hot, kRows, batch), expected));  // targets play no part
        }
        for (int64_t batch : {int64_t{0}, int64_t{7}, int64_t{16}}) {
            CAPTURE(batch);
            const std::vector<float> batched = predict_dataset(trainer, labels, kRows, batch);
            CHECK(close(batched, expected, precision));
            CHECK(same_bits(predict_dataset(trainer, one_hot, kRows, batch), batched));
        }
        // A slice's predictions are its rows', and weights change nothing.
        mpt_dataset_t* slice = nullptr;
        REQUIRE_OK(mpt_dataset_create_slice(labels, 25, 20, &slice));
        mpt_dataset_t* weighted = nullptr;
        const std::vector<float> weights(20, 3.0f);
        REQUIRE_OK(mpt_dataset_create_weighted(slice, weights.data(), 20, &weighted));
        const std::vector<float> part(expected.begin() + 25 * kBlobClasses, expected.begin() + 45 * kBlobClasses);
        const std::vector<float> sliced = predict_dataset(trainer, slice, 20, 8);
        CHECK(close(sliced, part, precision));
        CHECK(same_bits(predict_dataset(trainer, weighted, 20, 8), sliced));
        for (mpt_dataset_t* dataset : {labels, one_hot, slice, weighted}) mpt_dataset_destroy(dataset);
    }
}

TEST_CASE("uint8 samples are predicted from their normalised values") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 32, 1.2);
    BlobTrainer trainer(BlobTrainerSetup{});
    std::vector<uint8_t> bytes(blobs.x.size());
    std::vector<float> normalised(blobs.x.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
        const long q = std::lround(blobs.x[i] * 20.0f + 128.0f);
        bytes[i] = static_cast<uint8_t>(q < 0 ? 0 : q > 255 ? 255 : q);
        normalised[i] = static_cast<float>(bytes[i]) * 0.05f - 6.4f;
    }
    mpt_dataset_t* data = nullptr;
    REQUIRE_OK(mpt_dataset_create_u8(trainer.context, bytes.data(), kRows, kBlobFeatures, blobs.y.data(), kBlobClasses,
                                     0.05f, -6.4f, &data));
    Blobs as_floats = blobs;
    as_floats.x = normalised;
    const std::vector<float> got = predict_dataset(trainer, data, kRows), expected = trainer.predict(as_floats);
    // One rounding of x * scale + offset (fused or not) apart: probabilities within 1e-5 relative.
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    mpt_dataset_destroy(data);
}

TEST_CASE("labels and predictions of a dataset give its confusion matrix; a slice's labels are its rows'") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 33, 0.8);
    BlobTrainer trainer(BlobTrainerSetup{});
    mpt_dataset_t* data = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 5, 12, 1));
    std::vector<int32_t> labels(kRows, -1);
    REQUIRE_OK(mpt_dataset_get_labels(data, labels.data(), kRows));
    CHECK(labels == blobs.y);
    const std::vector<float> probabilities = predict_dataset(trainer, data, kRows);
    int64_t confusion[kBlobClasses][kBlobClasses] = {};
    for (int64_t r = 0; r < kRows; ++r) {
        int64_t predicted = 0;
        for (int64_t c = 1; c < kBlobClasses; ++c)
            if (probabilities[static_cast<size_t>(r * kBlobClasses + c)] >
                probabilities[static_cast<size_t>(r * kBlobClasses + predicted)])
                predicted = c;
        ++confusion[labels[static_cast<size_t>(r)]][predicted];
    }
    int64_t correct = 0;
    for (int64_t c = 0; c < kBlobClasses; ++c) correct += confusion[c][c];
    float loss = NAN, accuracy = NAN;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, data, 0, &loss, &accuracy));
    CHECK(static_cast<double>(correct) / kRows == doctest::Approx(accuracy).epsilon(1e-6));  // evaluate's count
    mpt_dataset_t* slice = nullptr;
    REQUIRE_OK(mpt_dataset_create_slice(data, 41, 9, &slice));
    std::vector<int32_t> slice_labels(9, -1);
    REQUIRE_OK(mpt_dataset_get_labels(slice, slice_labels.data(), 9));
    CHECK(slice_labels == std::vector<int32_t>(blobs.y.begin() + 41, blobs.y.begin() + 50));
    for (mpt_dataset_t* dataset : {data, slice}) mpt_dataset_destroy(dataset);
}

namespace {

struct CallbackProbe {
    const BlobTrainer* trainer;
    const mpt_dataset_t* dataset;
    mpt_status from_progress = MPT_STATUS_OK;
    std::vector<float> at_epoch_end;
};

int predict_from_progress(int64_t, int64_t step, int64_t, float, float, void* user_data) {
    auto& probe = *static_cast<CallbackProbe*>(user_data);
    if (step == 1) {
        std::vector<float> out(static_cast<size_t>(kRows * kBlobClasses));
        probe.from_progress = mpt_trainer_predict_dataset(probe.trainer->trainer, probe.dataset, 0, out.data(),
                                                          static_cast<int64_t>(out.size()));
    }
    return 0;
}

int predict_at_epoch_end(int64_t epoch, float, float, void* user_data) {
    auto& probe = *static_cast<CallbackProbe*>(user_data);
    if (epoch != 0) return 0;
    probe.at_epoch_end.assign(static_cast<size_t>(kRows * kBlobClasses), NAN);
    return mpt_trainer_predict_dataset(probe.trainer->trainer, probe.dataset, 0, probe.at_epoch_end.data(),
                                       static_cast<int64_t>(probe.at_epoch_end.size())) != MPT_STATUS_OK;
}

}  // namespace

TEST_CASE("predictions from the epoch-end callback are those between fits; the progress callback is refused") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 34, 1.2);
    BlobTrainer during(BlobTrainerSetup{}), between(BlobTrainerSetup{});
    mpt_dataset_t* data = during.labels(blobs);
    mpt_dataset_t* other = between.labels(blobs);
    CallbackProbe probe{&during, data, MPT_STATUS_OK, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(during.trainer, predict_from_progress, predict_at_epoch_end, &probe));
    REQUIRE_OK(mpt_trainer_fit(during.trainer, data, 2, 12, 1));
    CHECK(probe.from_progress == MPT_STATUS_INVALID_STATE);
    REQUIRE_OK(mpt_trainer_fit(between.trainer, other, 1, 12, 1));
    CHECK(same_bits(probe.at_epoch_end, predict_dataset(between, other, kRows)));
    REQUIRE_OK(mpt_trainer_fit(between.trainer, other, 1, 12, 1));
    CHECK(same_bits(during.weights(), between.weights()));  // predicting left the run as it was
    for (mpt_dataset_t* dataset : {data, other}) mpt_dataset_destroy(dataset);
}

TEST_CASE("predictions and labels refuse wrong counts, other contexts, other widths and NULLs") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 35);
    BlobTrainer trainer(BlobTrainerSetup{}), stranger(BlobTrainerSetup{});
    mpt_dataset_t* data = trainer.labels(blobs);
    mpt_dataset_t* one_hot = trainer.one_hot(blobs);
    mpt_dataset_t* foreign = stranger.labels(blobs);
    std::vector<float> out(static_cast<size_t>(kRows * kBlobClasses + 1), 7.0f);
    const int64_t exact = kRows * kBlobClasses;
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_predict_dataset(trainer.trainer, data, 0, out.data(), exact + 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_predict_dataset(trainer.trainer, data, 0, out.data(), exact - 1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(trainer.trainer, data, -1, out.data(), exact));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(trainer.trainer, foreign, 0, out.data(), exact));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(nullptr, data, 0, out.data(), exact));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(trainer.trainer, nullptr, 0, out.data(), exact));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict_dataset(trainer.trainer, data, 0, nullptr, exact));
    std::vector<float> wide(static_cast<size_t>(kRows * (kBlobFeatures + 1)), 0.5f);
    std::vector<int32_t> labels = blobs.y;
    mpt_dataset_t* wider = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(trainer.context, wide.data(), kRows, kBlobFeatures + 1, labels.data(), kBlobClasses,
                                      1, &wider));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_predict_dataset(trainer.trainer, wider, 0, out.data(), exact));
    for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == 7.0f);  // failures write nothing

    std::vector<int32_t> got(kRows + 1, -5);
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_dataset_get_labels(data, got.data(), kRows + 1));
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_dataset_get_labels(data, got.data(), kRows - 1));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_get_labels(one_hot, got.data(), kRows));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_get_labels(nullptr, got.data(), kRows));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_get_labels(data, nullptr, kRows));
    for (int32_t value : got) CHECK(value == -5);
    // The trainer predicts on after the refusals.
    CHECK(same_bits(predict_dataset(trainer, data, kRows), trainer.predict(blobs)));
    for (mpt_dataset_t* dataset : {data, one_hot, foreign, wider}) mpt_dataset_destroy(dataset);
}
