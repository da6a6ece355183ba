// test_cuda_api: bad input on the backend fails with the CPU's status and harms nothing (the same
// context, model and trainer then train), and dynamic loss scaling backs off on NaN data down to its
// minimum scale.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda_api/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

using namespace mpt_test::cuda_api;

TEST_CASE("bad input fails with the CPU's status and the same context, model and trainer then train to high accuracy") {
    BACKEND_OR_SKIP(backend);
    Session session(backend, 96);
    const Blobs& blobs = session.blobs;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> before = session.weights();

    SUBCASE("NaN and Inf samples") {
        mpt_dataset_t* dataset = nullptr;
        for (float bad : {nan, inf, -inf}) {
            CAPTURE(bad);
            Blobs poisoned = blobs;
            poisoned.x[5 * kFeatures + 2] = bad;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures,
                                                                      poisoned.y.data(), kClasses, 1, &dataset));
        }
        CHECK(dataset == nullptr);
        // Without the check the data is accepted, and fp32 training refuses the batch instead.
        Blobs poisoned = blobs;
        poisoned.x[0] = nan;  // row 0: in the first batch of an unshuffled epoch
        REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(),
                                          kClasses, 0, &dataset));
        float loss = -7.0f;
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, dataset, 0, 16, &loss));
        CHECK(loss == -7.0f);
        CHECK(same_bits(before, session.weights()));  // the update was skipped
        // The CPU stops fit at the bad step, a GPU at the end of the epoch (its other steps run):
        // only the status is common. (The epoch counts as interrupted: a fit on data of the same
        // geometry would finish it, so the bad data is fitted once.)
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        for (float value : session.weights()) CHECK(std::isfinite(value));
        mpt_dataset_destroy(dataset);
    }
    SUBCASE("labels out of range") {
        mpt_dataset_t* dataset = nullptr;
        for (int32_t bad : {-1, kClasses, std::numeric_limits<int32_t>::max()}) {
            CAPTURE(bad);
            std::vector<int32_t> labels = blobs.y;
            labels[95] = bad;
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                        mpt_dataset_create_f32(session.context, blobs.x.data(), 96, kFeatures, labels.data(), kClasses,
                                               1, &dataset));
        }
        CHECK(dataset == nullptr);
        // Labels within their dataset's range but beyond the model's outputs.
        std::vector<int32_t> five(96);
        for (size_t i = 0; i < five.size(); ++i) five[i] = static_cast<int32_t>(i % 5);
        REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 96, kFeatures, five.data(), 5, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, dataset, 0, 16, nullptr));
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(dataset);
    }
    SUBCASE("a dataset whose feature count does not match the model") {
        std::vector<int32_t> labels(192, 1);  // the 4-wide rows read as 2-wide: 192 rows
        mpt_dataset_t* narrow = nullptr;
        REQUIRE_OK(
            mpt_dataset_create_f32(session.context, blobs.x.data(), 192, 2, labels.data(), kClasses, 1, &narrow));
        float loss = -7.0f, accuracy = -7.0f;
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, narrow, 1, 16, 1));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, narrow, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_evaluate(session.trainer, narrow, 16, &loss, &accuracy));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(narrow);
    }
    SUBCASE("a batch size of 0") {
        float loss = -7.0f, accuracy = -7.0f;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, 0, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, -16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, 0, 0, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_trainer_evaluate(session.trainer, session.dataset, -1, &loss, &accuracy));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(same_bits(before, session.weights()));
    }
    SUBCASE("NULL handles and pointers") {
        float loss = -7.0f, accuracy = -7.0f, out[kClasses] = {-7.0f, -7.0f, -7.0f};
        int64_t steps = -7;
        mpt_dataset_t* dataset = nullptr;
        mpt_model_t* model = nullptr;
        mpt_trainer_t* trainer = nullptr;
        const float* x = blobs.x.data();
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(nullptr, session.dataset, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, nullptr, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(nullptr, session.dataset, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, nullptr, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(nullptr, session.dataset, 16, &loss, &accuracy));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(session.trainer, nullptr, 16, &loss, &accuracy));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(nullptr, x, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, nullptr, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, x, 1, nullptr, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(nullptr, x, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, nullptr, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, x, 1, nullptr, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_progress(nullptr, &steps, nullptr));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_set_callbacks(nullptr, nullptr, nullptr, nullptr));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(nullptr, nullptr, &trainer));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(nullptr, kFeatures, &model));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_dataset_create_f32(nullptr, x, 4, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32(session.context, nullptr, 4, kFeatures,
                                                                        blobs.y.data(), kClasses, 1, &dataset));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(steps == -7);
        for (float value : out) CHECK(value == -7.0f);
        CHECK(dataset == nullptr);
        CHECK(model == nullptr);
        CHECK(trainer == nullptr);
        CHECK(same_bits(before, session.weights()));
    }
    SUBCASE("a dataset from another context (on the CPU)") {
        mpt_context_t* cpu = new_context(MPT_BACKEND_CPU);
        mpt_dataset_t* foreign = new_dataset(cpu, blobs);
        // capi_errors/dataset_cases.cpp asks only for a failure with a message.
        const mpt_status status = mpt_trainer_fit(session.trainer, foreign, 1, 16, 0);
        CHECK(status != MPT_STATUS_OK);
        CHECK(std::string(mpt_last_error()) != "");
        CHECK(mpt_trainer_evaluate(session.trainer, foreign, 16, nullptr, nullptr) != MPT_STATUS_OK);
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(foreign);
        mpt_context_destroy(cpu);
    }

    // The same handles train the good data to high accuracy.
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 10, 16, 1));
    float loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, &loss, &accuracy));
    CHECK(std::isfinite(loss));
    CHECK(accuracy > 0.9f);
    std::vector<float> out = model_predict(session.model, blobs.x, 4, kClasses);
    for (float p : out) CHECK(std::isfinite(p));
}

namespace {

// A mixed-fp16 trainer with dynamic scaling from `initial` down to at least `minimum`, halving.
mpt_trainer_t* new_scaling_trainer(mpt_model_t* model, float initial, float minimum) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_FP16));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.1f));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, initial));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 2000, minimum, 16777216.0f));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    return trainer;
}

struct ScaleAndSkips {
    float scale = -1.0f;
    int64_t skipped = -1;
};

ScaleAndSkips scale_and_skips(const mpt_trainer_t* trainer) {
    ScaleAndSkips state;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &state.scale, nullptr, &state.skipped));
    return state;
}

}  // namespace

TEST_CASE("dynamic scaling backs off on NaN data down to its minimum scale; an overflow there fails with NON_FINITE") {
    BACKEND_OR_SKIP(backend);
    Session session(backend, 96);
    Blobs poisoned = session.blobs;
    for (int64_t r = 0; r < 96; ++r)
        poisoned.x[static_cast<size_t>(r * kFeatures)] = std::numeric_limits<float>::quiet_NaN();
    mpt_dataset_t* nan_rows = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(), kClasses, 0,
                                      &nan_rows));
    mpt_trainer_destroy(session.trainer);
    session.trainer = new_scaling_trainer(session.model, 8.0f, 2.0f);
    const std::vector<float> before = session.weights();

    SUBCASE("step: two back-offs, then every overflow at the minimum fails, and clean data still trains") {
        for (float scale : {4.0f, 2.0f}) {  // 8 -> 4 -> 2, each step skipped without an error
            REQUIRE_OK(mpt_trainer_step(session.trainer, nan_rows, 0, 16, nullptr));
            CHECK(scale_and_skips(session.trainer).scale == scale);
        }
        for (int64_t skipped : {3, 4}) {
            float loss = -7.0f;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, nan_rows, 16, 16, &loss));
            const std::string message = mpt_last_error();
            CHECK(message.find("loss scale already at its minimum (2)") != std::string::npos);
            CHECK(loss == -7.0f);
            CHECK(scale_and_skips(session.trainer).scale == 2.0f);
            CHECK(scale_and_skips(session.trainer).skipped == skipped);
        }
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));
        CHECK_FALSE(same_bits(before, session.weights()));
        CHECK(scale_and_skips(session.trainer).skipped == 4);

        // A checkpoint taken at the minimum resumes there: the resumed trainer's first overflow fails.
        TempDir directory;
        const std::string path = (directory.path / "at-minimum.safetensors").string();
        REQUIRE_OK(mpt_trainer_save_checkpoint(session.trainer, path.c_str()));
        mpt_trainer_t* resumed = new_scaling_trainer(session.model, 8.0f, 2.0f);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed, path.c_str()));
        CHECK(scale_and_skips(resumed).scale == 2.0f);
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(resumed, nan_rows, 0, 16, nullptr));
        REQUIRE_OK(mpt_trainer_step(resumed, session.dataset, 0, 16, nullptr));  // and still trains
        mpt_trainer_destroy(resumed);
    }
    SUBCASE("fit: the epoch's overflows reach the minimum and fit fails there, the weights unchanged") {
        // The CPU stops at the third step, a GPU at the end of the epoch (its other steps run).
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, nan_rows, 1, 16, 0));
        CHECK(std::string(mpt_last_error()).find("minimum (2)") != std::string::npos);
        const ScaleAndSkips after = scale_and_skips(session.trainer);
        CHECK(after.scale == 2.0f);
        CHECK(after.skipped >= 3);
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));  // still trains
        // Fewer overflows than it takes to reach the minimum skip their steps, and fit succeeds.
        mpt_trainer_t* fresh = new_scaling_trainer(session.model, 65536.0f, 1.0f);
        REQUIRE_OK(mpt_trainer_fit(fresh, nan_rows, 1, 16, 0));
        CHECK(scale_and_skips(fresh).scale == 1024.0f);  // 6 steps, 6 halvings
        CHECK(scale_and_skips(fresh).skipped == 6);
        mpt_trainer_destroy(fresh);
    }
    SUBCASE("fit with a progress callback, 24 steps an epoch: the steps queued behind the failure are no news") {
        // On a GPU the failure is found at the third step's report with later steps already queued,
        // which run (skipped, at the minimum) with their reports dropped: the next call must not fail
        // for them. The CPU stops at the third step.
        int64_t reported = 0;
        const mpt_progress_fn count_steps = [](int64_t, int64_t, int64_t, float, float, void* user) {
            ++*static_cast<int64_t*>(user);
            return 0;
        };
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, count_steps, nullptr, &reported));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, nan_rows, 1, 4, 0));
        CHECK(std::string(mpt_last_error()).find("step 3: ") == 0);
        CHECK(reported == 2);  // the steps before it; the failing step's callback is not called
        CHECK(scale_and_skips(session.trainer).skipped >= 3);
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 0));
        CHECK_FALSE(same_bits(before, session.weights()));
    }
    mpt_dataset_destroy(nan_rows);
}
