// test_capi_errors: datasets: labels out of range and empty shapes at creation, NaN and Inf in
// samples or targets with and without check_finite, the CIFAR-10 loader's bad files, a dataset from
// another context.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

using namespace mpt_test::capi_errors;

TEST_CASE("labels outside [0, num_classes) and empty shapes are rejected at dataset creation") {
    Session session;
    const Blobs blobs = make_blobs(8, 3);
    const std::vector<uint8_t> bytes(8 * kFeatures, 100);
    mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
    for (int32_t bad : {-1, kClasses, kClasses + 7, std::numeric_limits<int32_t>::min()}) {
        CAPTURE(bad);
        for (size_t row : {size_t{0}, size_t{7}}) {
            std::vector<int32_t> labels = blobs.y;
            labels[row] = bad;
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures,
                                                                            labels.data(), kClasses, 1, &dataset));
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_dataset_create_u8(session.context, bytes.data(), 8, kFeatures, labels.data(), kClasses,
                                              1.0f / 255.0f, 0.0f, &dataset));
        }
    }
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, blobs.y.data(), 0, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 0, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), 8, 0, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_f32(session.context, blobs.x.data(), -8, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32_targets(session.context, blobs.x.data(), 8, kFeatures,
                                                                            blobs.x.data(), 0, 1, &dataset));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                mpt_dataset_create_u8(session.context, bytes.data(), 8, kFeatures, blobs.y.data(), kClasses,
                                      std::numeric_limits<float>::quiet_NaN(), 0.0f, &dataset));
    CHECK(dataset == sentinel_handle<mpt_dataset_t>());

    // The boundary labels 0 and num_classes - 1 are fine.
    std::vector<int32_t> edge(8, 0);
    edge[3] = kClasses - 1;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, edge.data(), kClasses, 1, &dataset));
    mpt_dataset_destroy(dataset);
    require_usable(session);
}

TEST_CASE("NaN and Inf in samples or targets fail dataset creation with NON_FINITE when check_finite is set") {
    Session session;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (float bad : {nan, inf, -inf}) {
        CAPTURE(bad);
        Blobs blobs = make_blobs(8, 3);
        blobs.x[5 * kFeatures + 2] = bad;
        std::vector<float> targets(8, 0.5f);
        mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures,
                                                                  blobs.y.data(), kClasses, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32_targets(session.context, blobs.x.data(), 8, kFeatures,
                                                                          targets.data(), 1, 1, &dataset));
        const Blobs clean = make_blobs(8, 3);
        targets[6] = bad;
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32_targets(session.context, clean.x.data(), 8, kFeatures,
                                                                          targets.data(), 1, 1, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
        // Without the check the same data is accepted.
        REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 8, kFeatures, blobs.y.data(), kClasses, 0,
                                          &dataset));
        mpt_dataset_destroy(dataset);
    }
    require_usable(session);
}

TEST_CASE("without check_finite, a NaN or Inf batch makes fp32 step and fit return NON_FINITE and leaves the weights unchanged") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_ADAM}) {
        for (float bad : {nan, inf}) {
            CAPTURE(optimizer);
            CAPTURE(bad);
            Session session;
            mpt_trainer_destroy(session.trainer);
            session.trainer = new_trainer(session.model, optimizer);
            Blobs poisoned = session.blobs;
            poisoned.x[0] = bad;  // row 0: in the first batch of an unshuffled epoch
            mpt_dataset_t* dataset = nullptr;
            REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(),
                                              kClasses, 0, &dataset));
            const std::vector<float> before = weights_of(session.model, kSmallShapes);
            float loss = -7.0f;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, dataset, 0, 16, &loss));
            CHECK(loss == -7.0f);
            CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
            CHECK(same_bits(before, weights_of(session.model, kSmallShapes)));
            // A batch without the bad row trains.
            REQUIRE_OK(mpt_trainer_step(session.trainer, dataset, 16, 16, &loss));
            CHECK(std::isfinite(loss));
            const std::vector<float> after_clean_step = weights_of(session.model, kSmallShapes);
            CHECK_FALSE(same_bits(before, after_clean_step));
            for (float value : after_clean_step) CHECK(std::isfinite(value));

            // The refused steps left no trace in the optimizer: the same clean step on a fresh model
            // from the same seed gives bit-identical weights.
            mpt_context_t* context = new_context(7);
            mpt_model_t* model = new_model(context);
            mpt_trainer_t* trainer = new_trainer(model, optimizer);
            mpt_dataset_t* clean = new_dataset(context, session.blobs);
            REQUIRE_OK(mpt_trainer_step(trainer, clean, 16, 16, nullptr));
            CHECK(same_bits(after_clean_step, weights_of(model, kSmallShapes)));
            mpt_dataset_destroy(clean);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);

            mpt_dataset_destroy(dataset);
            require_usable(session);
        }
    }
}

namespace {

constexpr int64_t kCifarRecords = 10000, kCifarPixels = 3072, kCifarRecordBytes = 3073;

// Record r: label r % 2; pixel 0 is 128 for label 1 and 127 for label 0 (so x0 = 128/255 or
// 127/255 lies just above or below 0.5 only when scaled by 1/255); other pixels vary.
std::vector<uint8_t> cifar_bytes() {
    std::vector<uint8_t> bytes(static_cast<size_t>(kCifarRecords * kCifarRecordBytes));
    for (int64_t r = 0; r < kCifarRecords; ++r) {
        uint8_t* record = bytes.data() + r * kCifarRecordBytes;
        record[0] = static_cast<uint8_t>(r % 2);
        record[1] = record[0] ? 128 : 127;
        for (int64_t p = 1; p < kCifarPixels; ++p) record[1 + p] = static_cast<uint8_t>((r * 7 + p) % 256);
    }
    return bytes;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    REQUIRE(file.good());
    file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    REQUIRE(file.good());
}

}  // namespace

TEST_CASE("the CIFAR-10 loader: missing files give IO_ERROR, wrong sizes and bad labels CORRUPT_DATA, a valid file loads") {
    Session session;
    mpt_test::TempDir dir("mptrain_cifar");
    mpt_dataset_t* dataset = sentinel_handle<mpt_dataset_t>();
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, (dir.path.string() + "/missing").c_str(), 0, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, (dir.path.string() + "/missing").c_str(), 1, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
    CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 10, &dataset));
    CHECK(dataset == sentinel_handle<mpt_dataset_t>());

    std::vector<uint8_t> bytes = cifar_bytes();
    const std::string test_batch = dir.file("test_batch.bin");
    SUBCASE("truncated and oversized files are CORRUPT_DATA, even when a limit would not reach the end") {
        for (size_t size : {size_t{0}, size_t{kCifarRecordBytes * 100}, bytes.size() - 1}) {
            CAPTURE(size);
            write_file(test_batch, bytes.data(), size);
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 10, &dataset));
        }
        bytes.push_back(0);
        write_file(test_batch, bytes.data(), bytes.size());
        CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
    }
    SUBCASE("a label byte of 10 (first or last record) is CORRUPT_DATA") {
        for (int64_t record : {int64_t{0}, kCifarRecords - 1}) {
            CAPTURE(record);
            std::vector<uint8_t> bad = bytes;
            bad[static_cast<size_t>(record * kCifarRecordBytes)] = 10;
            write_file(test_batch, bad.data(), bad.size());
            CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        }
        bytes[0] = 255;
        write_file(test_batch, bytes.data(), bytes.size());
        CHECK_FAILS(MPT_STATUS_CORRUPT_DATA, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());
    }
    SUBCASE("a valid file loads with its labels, scaled by 1/255, and limit keeps the first records") {
        write_file(test_batch, bytes.data(), bytes.size());
        mpt_dataset_t* full = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 0, &full));
        int64_t rows = 0, features = 0;
        REQUIRE_OK(mpt_dataset_get_rows(full, &rows));
        REQUIRE_OK(mpt_dataset_get_features(full, &features));
        CHECK(rows == kCifarRecords);
        CHECK(features == kCifarPixels);
        mpt_dataset_t* first = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 0, 100, &first));
        REQUIRE_OK(mpt_dataset_get_rows(first, &rows));
        CHECK(rows == 100);

        // The training split reads data_batch_1.bin first; with a limit inside it, the others are
        // not needed, without one the missing data_batch_2.bin is an IO_ERROR.
        write_file(dir.file("data_batch_1.bin"), bytes.data(), bytes.size());
        mpt_dataset_t* train = nullptr;
        REQUIRE_OK(mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 50, &train));
        REQUIRE_OK(mpt_dataset_get_rows(train, &rows));
        CHECK(rows == 50);
        CHECK_FAILS(MPT_STATUS_IO_ERROR, mpt_dataset_load_cifar10(session.context, dir.path.string().c_str(), 1, 0, &dataset));
        CHECK(dataset == sentinel_handle<mpt_dataset_t>());

        // A 3072 -> 10 linear model that predicts class 1 exactly when x0 > 0.5 (z1 = x0, z0 = 0.5,
        // the rest -30): accuracy 1 needs the labels and the 1/255 scaling. Loss by hand in double.
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(session.context, kCifarPixels, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 10, MPT_ACTIVATION_SOFTMAX));
        std::vector<float> w(10 * kCifarPixels, 0.0f), b(10, -30.0f);
        w[1 * kCifarPixels + 0] = 1.0f;
        b[0] = 0.5f;
        b[1] = 0.0f;
        REQUIRE_OK(mpt_model_set_weights(model, 0, w.data(), static_cast<int64_t>(w.size()), b.data(), 10));
        mpt_trainer_t* trainer = new_trainer(model);
        float loss = -1.0f, accuracy = -1.0f;
        REQUIRE_OK(mpt_trainer_evaluate(trainer, first, 64, &loss, &accuracy));
        CHECK(accuracy == 1.0f);
        double expected = 0.0;
        for (int r = 0; r < 100; ++r) {
            const double x0 = (r % 2 ? 128.0 : 127.0) / 255.0;
            double z[10] = {0.5, x0, -30, -30, -30, -30, -30, -30, -30, -30};
            double sum = 0.0;
            for (double v : z) sum += std::exp(v);
            expected += std::log(sum) - z[r % 2];
        }
        expected /= 100.0;
        CHECK(loss == doctest::Approx(expected).epsilon(1e-5));
        REQUIRE_OK(mpt_trainer_evaluate(trainer, train, 64, nullptr, &accuracy));
        CHECK(accuracy == 1.0f);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_dataset_destroy(train);
        mpt_dataset_destroy(first);
        mpt_dataset_destroy(full);
    }
    require_usable(session);
}

TEST_CASE("a dataset from another context is refused") {
    Session session;
    mpt_context_t* other = new_context(7);
    mpt_dataset_t* foreign = new_dataset(other, session.blobs);
    const mpt_status status = mpt_trainer_fit(session.trainer, foreign, 1, 16, 0);
    CHECK(status != MPT_STATUS_OK);
    CHECK(std::string(mpt_last_error()) != "");
    mpt_dataset_destroy(foreign);
    mpt_context_destroy(other);
    require_usable(session);
}
