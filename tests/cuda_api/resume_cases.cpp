// test_cuda_api: checkpoints and resumption on the backend: a mixed-fp16 Adam run resumed from each
// automatic checkpoint, a learning rate halved from the epoch-end callback, a per-step schedule
// resumed mid-way, and an evaluation from the epoch-end callback that leaves the run as it was.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_api/harness.h"
#include "cuda_api/resume_run.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/normalised_error.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

using namespace mpt_test::cuda_api;

TEST_CASE("a mixed-fp16 Adam run resumed from each automatic checkpoint ends with the uninterrupted run's scaler, progress and weights") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> uninterrupted;
    ScalerState final_state;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 0, 100));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        uninterrupted = run.weights();
        final_state = run.state();
    }
    CHECK(final_state.steps == 30);
    CHECK(final_state.epochs == 3);
    CHECK(final_state.skipped > 0);  // 2^24 overflowed fp16: the scaler backed off
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    REQUIRE(checkpoints.size() == 4);  // steps 7, 14, 21, 28 of 30
    bool saw_moved_scale = false;
    for (size_t i = 0; i < checkpoints.size(); ++i) {
        CAPTURE(checkpoints[i].string());
        const int64_t step = 7 * static_cast<int64_t>(i + 1);
        char expected_name[64];
        std::snprintf(expected_name, sizeof expected_name, "checkpoint-%012lld.safetensors", static_cast<long long>(step));
        CHECK(checkpoints[i].filename().string() == expected_name);

        ResumeRun resumed(backend);  // a fresh context, model and trainer
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoints[i].c_str()));
        const ScalerState at_checkpoint = resumed.state();
        CHECK(at_checkpoint.steps == step);
        CHECK(at_checkpoint.epochs == step / 10);  // inside epoch step / 10
        saw_moved_scale |= at_checkpoint.scale != kInitialScale && at_checkpoint.scale != 1.0f;
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kResumeBatch, 1));

        const ScalerState state = resumed.state();
        CHECK(state.scale == final_state.scale);
        CHECK(state.growth == final_state.growth);
        CHECK(state.skipped == final_state.skipped);
        CHECK(state.steps == final_state.steps);
        CHECK(state.epochs == final_state.epochs);
        const std::vector<float> weights = resumed.weights();
        const bool identical = same_bits(weights, uninterrupted);
        const double error = normalised_error(weights, uninterrupted);
        MESSAGE(backend_name(backend) << ": resumed from step " << step << ", weights "
                                      << std::string(identical ? "bit-identical" : "not bit-identical") << " (normalised error "
                                      << error << ")");
        CHECK(error <= kResumeBound);
        if (backend == MPT_BACKEND_CPU) CHECK(identical);  // the CPU resumes bit-exactly (header, test_checkpoint.cpp)
    }
    CHECK(saw_moved_scale);
}

namespace {

// The epoch-end callback of a schedule that halves the rate after every epoch.
int halve_rate_at_epoch_end(int64_t, float, float, void* user) {
    mpt_trainer_t* trainer = static_cast<mpt_trainer_t*>(user);
    float rate = 0.0f;
    return mpt_trainer_get_learning_rate(trainer, &rate) != MPT_STATUS_OK ||
           mpt_trainer_set_learning_rate(trainer, rate / 2) != MPT_STATUS_OK;
}

}  // namespace

TEST_CASE("a learning rate halved by the epoch-end callback reaches the steps (graphs included) and resumes from a checkpoint") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> scheduled;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_rate_at_epoch_end, run.trainer));
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 14, 0, 1));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        float rate = 0.0f;
        REQUIRE_OK(mpt_trainer_get_learning_rate(run.trainer, &rate));
        CHECK(rate == 0.01f / 8);
        scheduled = run.weights();
    }
    std::vector<float> between_fits, constant;
    {  // the same schedule, set between fits of one epoch each
        ResumeRun run(backend);
        for (int epoch = 0; epoch < 3; ++epoch) {
            REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 1, kResumeBatch, 1));
            REQUIRE_OK(mpt_trainer_set_learning_rate(run.trainer, std::ldexp(0.01f, -(epoch + 1))));
        }
        between_fits = run.weights();
    }
    {  // no schedule: a step replaying a graph captured at the first rate would train this
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        constant = run.weights();
    }
    const double schedule_error = normalised_error(between_fits, scheduled);
    const double constant_error = normalised_error(constant, scheduled);
    MESSAGE(backend_name(backend) << ": schedule from the callback against between fits " << schedule_error
                                  << ", against a constant rate " << constant_error);
    CHECK(schedule_error <= kResumeBound);
    CHECK(constant_error > 100 * kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(between_fits, scheduled));

    // The newest checkpoint, at step 28 (inside epoch 2), holds epoch 2's rate; a trainer set to
    // another rate takes it and, finishing that epoch, ends where the uninterrupted run did.
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    REQUIRE(checkpoints.size() == 1);
    CHECK(checkpoints[0].filename().string() == "checkpoint-000000000028.safetensors");
    ResumeRun resumed(backend);
    REQUIRE_OK(mpt_trainer_set_learning_rate(resumed.trainer, 0.5f));
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoints[0].c_str()));
    float rate = 0.0f;
    REQUIRE_OK(mpt_trainer_get_learning_rate(resumed.trainer, &rate));
    CHECK(rate == 0.01f / 4);  // step 28 lies inside epoch 2
    REQUIRE_OK(mpt_trainer_set_callbacks(resumed.trainer, nullptr, halve_rate_at_epoch_end, resumed.trainer));
    REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 1, kResumeBatch, 1));
    CHECK(normalised_error(resumed.weights(), scheduled) <= kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(resumed.weights(), scheduled));
}

namespace {

// Warm-up over 5 steps, then a cosine down to a tenth over 20: the 30 steps of three epochs cross
// both ends, and the first steps are skipped ones (2^24 overflows fp16), which the schedule counts.
const Schedule kCosine{MPT_LR_SCHEDULE_COSINE, 5, 20, 0.1f};

double cosine_rate(int64_t step) {
    const double base = 0.01;
    if (step < kCosine.warmup_steps) return base * static_cast<double>(step + 1) / kCosine.warmup_steps;
    const double progress = std::min(1.0, static_cast<double>(step - kCosine.warmup_steps) / kCosine.decay_steps);
    const double pi = 3.14159265358979323846;
    return base * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(pi * progress)));
}

}  // namespace

TEST_CASE("a per-step learning-rate schedule trains as the same rates set before each step, graphs included, and resumes mid-schedule") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> fitted;
    {  // fit, unshuffled, with a checkpoint every 7 steps
        ResumeRun run(backend, kCosine);
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 0, 100));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 0));
        CHECK(run.state().skipped > 0);
        fitted = run.weights();
    }
    std::vector<float> stepped, by_hand;
    {  // the same steps one by one, beside a constant-rate trainer given each step's rate by hand
        ResumeRun scheduled(backend, kCosine), manual(backend);
        for (int64_t step = 0; step < 30; ++step) {
            CAPTURE(step);
            float rate = 0.0f, base = 0.0f;
            REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(scheduled.trainer, &rate));
            REQUIRE_OK(mpt_trainer_get_learning_rate(scheduled.trainer, &base));
            CHECK(base == 0.01f);
            CHECK(rate == doctest::Approx(cosine_rate(step)).epsilon(1e-6));
            REQUIRE_OK(mpt_trainer_set_learning_rate(manual.trainer, rate));
            const int64_t first = (step % 10) * kResumeBatch;
            REQUIRE_OK(mpt_trainer_step(scheduled.trainer, scheduled.dataset, first, kResumeBatch, nullptr));
            REQUIRE_OK(mpt_trainer_step(manual.trainer, manual.dataset, first, kResumeBatch, nullptr));
        }
        stepped = scheduled.weights();
        by_hand = manual.weights();
        CHECK(scheduled.state().skipped == manual.state().skipped);
    }
    std::vector<float> constant;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 0));
        constant = run.weights();
    }
    const double stepped_error = normalised_error(by_hand, stepped), fitted_error = normalised_error(by_hand, fitted);
    const double constant_error = normalised_error(constant, fitted);
    MESSAGE(backend_name(backend) << ": scheduled steps against rates set by hand " << stepped_error
                                  << ", scheduled fit against them " << fitted_error << ", against a constant rate "
                                  << constant_error);
    CHECK(stepped_error <= kResumeBound);
    CHECK(fitted_error <= kResumeBound);
    CHECK(constant_error > 100 * kResumeBound);
    if (backend == MPT_BACKEND_CPU) {
        CHECK(same_bits(by_hand, stepped));
        CHECK(same_bits(by_hand, fitted));
    }

    // Each checkpoint resumes the schedule where it was: its step count is the schedule's.
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    REQUIRE(checkpoints.size() == 4);  // steps 7, 14, 21, 28
    for (const fs::path& checkpoint : checkpoints) {
        CAPTURE(checkpoint.string());
        ResumeRun resumed(backend, kCosine);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoint.c_str()));
        const ScalerState at_checkpoint = resumed.state();
        float rate = 0.0f;
        REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(resumed.trainer, &rate));
        CHECK(rate == doctest::Approx(cosine_rate(at_checkpoint.steps)).epsilon(1e-6));
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kResumeBatch, 0));
        CHECK(normalised_error(resumed.weights(), fitted) <= kResumeBound);
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(resumed.weights(), fitted));
    }
    // A trainer without the schedule, or with another, refuses the checkpoint and names the difference.
    ResumeRun constant_run(backend);
    CHECK(mpt_trainer_load_checkpoint(constant_run.trainer, checkpoints[0].c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    const std::string message = mpt_last_error();
    CHECK_MESSAGE(message.find("lr_schedule cosine (this trainer: constant)") != std::string::npos, message);
    CHECK_MESSAGE(message.find("lr_schedule decay_steps 20 (this trainer: 0)") != std::string::npos, message);
    ResumeRun shorter(backend, Schedule{MPT_LR_SCHEDULE_COSINE, 5, 10, 0.1f});
    CHECK(mpt_trainer_load_checkpoint(shorter.trainer, checkpoints[0].c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    const std::string shorter_message = mpt_last_error();
    CHECK_MESSAGE(shorter_message.find("lr_schedule decay_steps 20 (this trainer: 10)") != std::string::npos, shorter_message);
    CHECK_MESSAGE(shorter_message.find("lr_schedule cosine") == std::string::npos, shorter_message);
}

namespace {

struct EpochValidation {
    mpt_trainer_t* trainer;
    mpt_dataset_t* dataset;
    std::vector<float> losses;
    std::vector<mpt_status> statuses;
};

int validate_each_epoch(int64_t, float, float, void* user_data) {
    auto* v = static_cast<EpochValidation*>(user_data);
    float loss = -1.0f;
    v->statuses.push_back(mpt_trainer_evaluate(v->trainer, v->dataset, 0, &loss, nullptr));
    v->losses.push_back(loss);
    return 0;
}

}  // namespace

TEST_CASE("an evaluation from the epoch-end callback gives what one between fits gives and leaves the run as it was") {
    BACKEND_OR_SKIP(backend);
    ResumeRun validated(backend), between(backend), plain(backend);
    EpochValidation v{validated.trainer, validated.dataset, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(validated.trainer, nullptr, validate_each_epoch, &v));
    REQUIRE_OK(mpt_trainer_fit(validated.trainer, validated.dataset, 3, kResumeBatch, 1));
    REQUIRE(v.statuses.size() == 3);
    for (mpt_status status : v.statuses) CHECK(status == MPT_STATUS_OK);
    for (int epoch = 0; epoch < 3; ++epoch) {
        CAPTURE(epoch);
        REQUIRE_OK(mpt_trainer_fit(between.trainer, between.dataset, 1, kResumeBatch, 1));
        float loss = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(between.trainer, between.dataset, 0, &loss, nullptr));
        CHECK(loss == doctest::Approx(v.losses[static_cast<size_t>(epoch)]).epsilon(kResumeBound));
        if (backend == MPT_BACKEND_CPU) CHECK(loss == v.losses[static_cast<size_t>(epoch)]);
    }
    REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain.dataset, 3, kResumeBatch, 1));
    const double error = normalised_error(plain.weights(), validated.weights());
    MESSAGE(backend_name(backend) << ": validated run against a plain one " << error);
    CHECK(error <= kResumeBound);
    CHECK(validated.state().scale == plain.state().scale);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(plain.weights(), validated.weights()));
}
