// What tests/test_cuda_fast_paths.cpp and its cases in tests/fast_paths/ share: the small and the
// seed MLP trained for two epochs (bf16, replayed, from an overflowing fp16 scale) and compared, a
// per-step schedule, and a CUDA context made under one switch's setting; with the fixtures and the
// CUDA backend's header every case there uses. Included in a build with the CUDA backend only.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/environment_setting.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"

namespace mpt::testing::fast_paths {

// Two epochs of mixed-bf16 training of the seed MLP on `data` at `batch`; the loss on it after.
inline float train_seed_mlp_two_bf16_epochs(const std::shared_ptr<Context>& context, const SyntheticData& data,
                                     int64_t batch) {
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(make_seed_mlp(context), config);
    trainer.fit(*dataset, 2, batch, true);
    REQUIRE(trainer.epochs_completed() == 2);
    return trainer.evaluate(*dataset, 256).loss;
}

// Trains at batch 32 (the fused SGD kernel's case) and at batch 96 and 256 (the weight-gradient
// GEMM with its bias-gradient epilogue), so every GEMM kind of a step is planned.
inline void train_at_every_batch_kind(const std::shared_ptr<Model>& model, Dataset& dataset, mpt_precision precision) {
    TrainerConfig config;
    config.precision = precision;
    Trainer trainer(model, config);
    for (int64_t batch : {32, 96, 256}) trainer.fit(dataset, 1, batch, true);
    trainer.evaluate(dataset, 128);
}

// Two epochs of training a small MLP on `rows` synthetic rows at `precision`; the loss on them after.
inline float train_two_epochs(const std::shared_ptr<Context>& context, mpt_precision precision, int64_t rows, int64_t batch,
                       unsigned seed, const LrSchedule& schedule = LrSchedule{}) {
    const SyntheticData data = synthetic_data(rows, 100, seed);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = precision;
    config.optimizer.schedule = schedule;
    Trainer trainer(make_mlp(context, data.features), config);
    trainer.fit(*dataset, 2, batch, true);
    REQUIRE(trainer.epochs_completed() == 2);
    return trainer.evaluate(*dataset, 64).loss;
}

// Two epochs of mixed-bf16 training (20 steps each at batch 32) of a small MLP on synthetic data; the
// loss on it after.
inline float train_two_bf16_epochs(const std::shared_ptr<Context>& context, unsigned seed,
                            const LrSchedule& schedule = LrSchedule{}, int64_t batch = 32) {
    return train_two_epochs(context, MPT_PRECISION_MIXED_BF16, 640, batch, seed, schedule);
}

// train_two_bf16_epochs, whose steps must all have been captured without a refusal and replayed.
inline float train_two_bf16_epochs_replayed(const std::shared_ptr<Context>& context, unsigned seed,
                                     const LrSchedule& schedule = LrSchedule{}) {
    const float loss = train_two_bf16_epochs(context, seed, schedule);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(context->backend()));
    CHECK(cuda_backend_graph_refusals(context->backend()) == 0);
    CHECK(cuda_backend_graph_replays(context->backend()) >= 30);
    return loss;
}

// A rate that changes at every step (warm-up, then a cosine to 0 over 30 steps), evaluated by the
// update kernels from the step count in device memory.
inline LrSchedule per_step_cosine() {
    LrSchedule cosine;
    cosine.kind = LrScheduleKind::cosine;
    cosine.warmup_steps = 5;
    cosine.decay_steps = 30;
    cosine.decay_factor = 0.0f;
    return cosine;
}

// Two epochs of mixed-fp16 training under dynamic loss scaling from a scale of 2^24: the first
// steps' scaled gradients overflow fp16, so those updates are skipped and each halves the scale on
// the device. The paths that fold the scaler's work into other kernels (begin_step into the loss
// head, the decision into the max pass, finish_step into the grouped update) must skip the same
// steps and leave the same scale, bit for bit, as the unfolded ones.
struct OverflowingRun {
    float loss;
    TrainState state;
};
inline OverflowingRun train_two_fp16_epochs_from_overflow(const std::shared_ptr<Context>& context, unsigned seed,
                                                   int64_t batch = 32) {
    const SyntheticData data = synthetic_data(20 * batch, 100, seed);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;
    config.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    config.scaler.initial_scale = 16777216.0f;
    Trainer trainer(make_mlp(context, data.features), config);
    trainer.fit(*dataset, 2, batch, true);
    return OverflowingRun{trainer.evaluate(*dataset, 64).loss, trainer.state()};
}

// The two runs skipped the same steps, left the same scale and trained to the same loss (`epsilon`:
// within that relative error; 0, bit for bit), and some steps were skipped.
inline void check_same_overflow_run(const OverflowingRun& run, const OverflowingRun& reference, double epsilon = 0.0) {
    CHECK(run.state.skipped_steps > 0);
    CHECK(run.state.skipped_steps == reference.state.skipped_steps);
    CHECK(run.state.applied_steps == reference.state.applied_steps);
    CHECK(run.state.steps == reference.state.steps);
    CHECK(run.state.loss_scale == reference.state.loss_scale);
    CHECK(run.state.growth_tracker == reference.state.growth_tracker);
    CHECK(std::isfinite(run.loss));
    if (epsilon == 0.0)
        CHECK(run.loss == reference.loss);
    else
        CHECK(run.loss == doctest::Approx(reference.loss).epsilon(epsilon));
}

// A CUDA context made with `variable` set to `value` (read when the backend is made), the
// environment as it was for the contexts made after it, however the making ends.
inline std::shared_ptr<Context> cuda_context_under(const char* variable, const char* value) {
    const EnvironmentSetting setting(variable, value);
    return make_context(MPT_BACKEND_CUDA);
}

}  // namespace mpt::testing::fast_paths
