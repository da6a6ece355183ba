// test_cuda_api: what a progress callback reads and does on the backend: its own step's loss scale
// and gradient norm, and cancelling fit, after which the next fit finishes the epoch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_api/harness.h"
#include "cuda_api/resume_run.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/normalised_error.h"

using namespace mpt_test::cuda_api;

namespace {

// What a progress callback reads of its step: the scaler state (mpt_trainer_get_loss_scale) and
// the gradient norm (mpt_trainer_get_gradient_norm).
struct StepTrace {
    mpt_trainer_t* trainer;
    std::vector<ScalerState> states;
    std::vector<float> norms;
    mpt_status status = MPT_STATUS_OK;
};

int trace_step(int64_t, int64_t, int64_t, float, float, void* user_data) {
    StepTrace& trace = *static_cast<StepTrace*>(user_data);
    ScalerState state;
    float norm = 0.0f;
    for (mpt_status status : {mpt_trainer_get_loss_scale(trace.trainer, &state.scale, &state.growth, &state.skipped),
                              mpt_trainer_get_gradient_norm(trace.trainer, &norm)})
        if (status != MPT_STATUS_OK) trace.status = status;
    trace.states.push_back(state);
    trace.norms.push_back(norm);
    return 0;
}

}  // namespace

TEST_CASE("the loss scale a progress callback reads is its own step's, as step by step, overflows included") {
    BACKEND_OR_SKIP(backend);
    // Mixed fp16 from a scale of 2^24: the first steps overflow and the scale moves at every step.
    ResumeRun fitted(backend), stepped(backend);
    StepTrace trace{fitted.trainer, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(fitted.trainer, trace_step, nullptr, &trace));
    REQUIRE_OK(mpt_trainer_fit(fitted.trainer, fitted.dataset, 2, kResumeBatch, 0));  // unshuffled: batches in order
    CHECK(trace.status == MPT_STATUS_OK);
    const int64_t steps_per_epoch = kResumeRows / kResumeBatch;
    REQUIRE(trace.states.size() == static_cast<size_t>(2 * steps_per_epoch));
    bool scale_moved = false;
    for (int64_t s = 0; s < 2 * steps_per_epoch; ++s) {
        CAPTURE(s);
        REQUIRE_OK(mpt_trainer_step(stepped.trainer, stepped.dataset, (s % steps_per_epoch) * kResumeBatch, kResumeBatch,
                                    nullptr));
        const ScalerState after = stepped.state();
        const ScalerState& seen = trace.states[static_cast<size_t>(s)];
        CHECK(seen.scale == after.scale);
        CHECK(seen.growth == after.growth);
        CHECK(seen.skipped == after.skipped);
        scale_moved |= s > 0 && seen.scale != trace.states[static_cast<size_t>(s - 1)].scale;
    }
    CHECK(scale_moved);
    CHECK(trace.states.back().skipped > 0);
}

TEST_CASE("a progress callback reads its own step's gradient norm, as step by step, skipped steps' NaN included") {
    BACKEND_OR_SKIP(backend);
    constexpr int64_t kRows = 96;
    const Blobs blobs = make_blobs(kRows, 40, 1.0);
    mpt_test::BlobTrainerSetup setup;
    setup.backend = backend;
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 16777216.0f;  // 2^24: the first steps overflow and are skipped
    setup.global_clipnorm = 0.5f;
    const mpt_test::BlobTrainer fitted(setup), stepped(setup);
    StepTrace trace{fitted.trainer, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(fitted.trainer, trace_step, nullptr, &trace));
    mpt_dataset_t* fitted_data = fitted.labels(blobs);
    mpt_dataset_t* stepped_data = stepped.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(fitted.trainer, fitted_data, 2, 16, 0));  // unshuffled: batches in order
    CHECK(trace.status == MPT_STATUS_OK);
    const int64_t steps_per_epoch = kRows / 16;
    REQUIRE(trace.norms.size() == static_cast<size_t>(2 * steps_per_epoch));
    int skipped = 0;
    for (int64_t s = 0; s < 2 * steps_per_epoch; ++s) {
        CAPTURE(s);
        REQUIRE_OK(mpt_trainer_step(stepped.trainer, stepped_data, (s % steps_per_epoch) * 16, 16, nullptr));
        float expected = 0.0f;
        REQUIRE_OK(mpt_trainer_get_gradient_norm(stepped.trainer, &expected));
        const float seen = trace.norms[static_cast<size_t>(s)];
        if (std::isnan(expected)) {
            ++skipped;
            CHECK(std::isnan(seen));
        } else if (backend == MPT_BACKEND_CPU) {
            CHECK(seen == expected);
        } else {  // graph replays against eager steps: the GEMMs may sum in another order
            CHECK(seen == doctest::Approx(expected).epsilon(1e-5));
        }
    }
    CHECK(skipped >= 1);
    CHECK(skipped < 2 * steps_per_epoch);
    mpt_dataset_destroy(fitted_data);
    mpt_dataset_destroy(stepped_data);
}

namespace {

struct ProgressLog {
    int64_t cancel_at_step = -1;   // the progress call for this step returns 1; -1: never
    std::vector<int64_t> steps;    // every reported step, in the order reported
    int64_t steps_per_epoch = 0;
    int64_t epoch_end_calls = 0;
    float epoch_loss = NAN, epoch_accuracy = NAN;  // the last epoch-end call's means
    bool arguments_ok = true;      // epoch 0, finite loss, accuracy in [0, 1]
};

int on_progress(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy, void* user_data) {
    ProgressLog& log = *static_cast<ProgressLog*>(user_data);
    log.steps.push_back(step);
    log.steps_per_epoch = steps_per_epoch;
    log.arguments_ok &= epoch == 0 && std::isfinite(loss) && loss >= 0.0f && accuracy >= 0.0f && accuracy <= 1.0f;
    return step == log.cancel_at_step ? 1 : 0;
}

int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) {
    ProgressLog& log = *static_cast<ProgressLog*>(user_data);
    ++log.epoch_end_calls;
    log.epoch_loss = loss;
    log.epoch_accuracy = accuracy;
    log.arguments_ok &= epoch == 0;
    return 0;
}

std::vector<int64_t> step_range(int64_t first, int64_t last) {
    std::vector<int64_t> steps;
    for (int64_t s = first; s <= last; ++s) steps.push_back(s);
    return steps;
}

}  // namespace

TEST_CASE("a progress callback returning non-zero cancels fit, the progress says where, and the next fit finishes the epoch, its means as the uninterrupted one's") {
    BACKEND_OR_SKIP(backend);
    constexpr int64_t kRows = 640, kBatch = 16, kSteps = kRows / kBatch, kCancelAt = 5;
    // On a GPU the call for a step comes once the device has finished it, and the steps queued
    // behind it (at most 8, see mpt_progress_fn) have been issued: they run or are stopped.
    constexpr int64_t kQueuedAtMost = 8;

    std::vector<float> uninterrupted;
    ProgressLog reference_log;
    {
        Session reference(backend, kRows);
        REQUIRE_OK(mpt_trainer_set_callbacks(reference.trainer, nullptr, on_epoch_end, &reference_log));
        REQUIRE_OK(mpt_trainer_fit(reference.trainer, reference.dataset, 1, kBatch, 1));
        uninterrupted = reference.weights();
    }

    Session session(backend, kRows);
    ProgressLog log;
    log.cancel_at_step = kCancelAt;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 3, kBatch, 1));
    CHECK(log.steps == step_range(1, kCancelAt));  // every step up to the cancel, in order, and no more
    CHECK(log.steps_per_epoch == kSteps);
    CHECK(log.epoch_end_calls == 0);
    CHECK(log.arguments_ok);
    int64_t stopped = -1, epochs = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &stopped, &epochs));
    CHECK(epochs == 0);
    MESSAGE(backend_name(backend) << ": cancelled at step " << kCancelAt << ", stopped after " << stopped << " steps");
    if (backend == MPT_BACKEND_CPU) {
        CHECK(stopped == kCancelAt);  // called after each step: nothing runs behind the cancel
    } else {
        CHECK(stopped >= kCancelAt);
        CHECK(stopped <= kCancelAt + kQueuedAtMost);
    }

    // An evaluation in between borrows the metric sums the epoch keeps (graphs included: the
    // finished steps' sums are the ones a replayed step committed).
    float evaluated_loss = NAN;
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, &evaluated_loss, nullptr));
    CHECK(std::isfinite(evaluated_loss));

    // The next fit on the same data, batch size and shuffling finishes the interrupted epoch from
    // the step after the last one taken: one epoch in all.
    log = ProgressLog{};
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, kBatch, 1));
    CHECK(log.steps == step_range(stopped + 1, kSteps));
    CHECK(log.epoch_end_calls == 1);
    CHECK(log.arguments_ok);
    int64_t steps = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps == kSteps);
    CHECK(epochs == 1);
    // ... and ends where the uninterrupted epoch did.
    const std::vector<float> weights = session.weights();
    const double error = normalised_error(weights, uninterrupted);
    MESSAGE(backend_name(backend) << ": cancelled and finished epoch "
                                  << std::string(same_bits(weights, uninterrupted) ? "bit-identical" : "not bit-identical")
                                  << " to the uninterrupted one (normalised error " << error << ")");
    CHECK(error <= kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(weights, uninterrupted));
    // Its means are the uninterrupted epoch's: every step's loss counted once, the evaluation's not.
    CHECK(log.epoch_loss == doctest::Approx(reference_log.epoch_loss).epsilon(1e-4));
    CHECK(log.epoch_accuracy == doctest::Approx(reference_log.epoch_accuracy).epsilon(1e-4));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits({log.epoch_loss}, {reference_log.epoch_loss}));

    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, kBatch, 1));
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps == 2 * kSteps);
    CHECK(epochs == 2);
    CHECK(log.steps.size() == static_cast<size_t>(kSteps - stopped));  // no calls once cleared
}
