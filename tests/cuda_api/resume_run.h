// The run that tests/cuda_api/'s resumption and callback cases repeat step by step: mixed-fp16 Adam
// on a small model whose dynamic loss scaler starts at 2^24 (its first steps overflow), its scaler
// state and progress read back.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cuda_api/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace mpt_test::cuda_api {

inline constexpr int64_t kResumeRows = 160, kResumeFeatures = 12, kResumeClasses = 4,
                         kResumeBatch = 16;          // 10 steps an epoch
inline constexpr float kInitialScale = 16777216.0f;  // 2^24: the first fp16 steps overflow and the scale moves
inline const std::vector<LayerSpec> kResumeModel = {{20, MPT_ACTIVATION_RELU},
                                                    {kResumeClasses, MPT_ACTIVATION_SOFTMAX}};

struct ScalerState {
    float scale = 0.0f;
    int64_t growth = -1, skipped = -1, steps = -1, epochs = -1;
};

// A learning-rate schedule as mpt_trainer_options_set_lr_schedule takes it.
struct Schedule {
    mpt_lr_schedule kind = MPT_LR_SCHEDULE_CONSTANT;
    int64_t warmup_steps = 0, decay_steps = 0;
    float factor = 1.0f;
};

// Mixed-fp16 Adam with a dynamic loss scaler that starts at 2^24 and grows every 4 finite steps.
struct ResumeRun : mpt_test::Handles {
    explicit ResumeRun(mpt_backend backend, const Schedule& schedule = Schedule{}) {
        TestRng rng(8);
        std::vector<float> samples(kResumeRows * kResumeFeatures);
        std::vector<int32_t> labels(kResumeRows);
        for (int64_t r = 0; r < kResumeRows; ++r) {
            labels[r] = static_cast<int32_t>(r % kResumeClasses);
            for (int64_t f = 0; f < kResumeFeatures; ++f)
                samples[r * kResumeFeatures + f] =
                    static_cast<float>(rng.normal() + 2.0 * (f % kResumeClasses == labels[r]));
        }
        context = new_context(backend);
        model = new_model(context, kResumeFeatures, kResumeModel);
        REQUIRE_OK(mpt_dataset_create_f32(context, samples.data(), kResumeRows, kResumeFeatures, labels.data(),
                                          kResumeClasses, 1, &dataset));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_FP16));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
        REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.01f));
        REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, kInitialScale));
        REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 4, 1.0f, kInitialScale));
        REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, schedule.kind, schedule.warmup_steps,
                                                       schedule.decay_steps, schedule.factor));
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
    }

    std::vector<float> weights() const { return weights_of(model, kResumeFeatures, kResumeModel); }
    ScalerState state() const {
        ScalerState s;
        REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &s.scale, &s.growth, &s.skipped));
        REQUIRE_OK(mpt_trainer_get_progress(trainer, &s.steps, &s.epochs));
        return s;
    }
};

}  // namespace mpt_test::cuda_api
