// test_training: each learning-rate schedule gives every step the rate of its formula (warm-up,
// linear, cosine, step decay), skipped steps counted, and trains with it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"

using namespace mpt_test::training;

namespace {

// The schedule's factor at `step` as mptrain.h defines it, in double.
double schedule_factor(const TrainerSetup& setup, int64_t step) {
    if (step < setup.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(setup.warmup_steps);
    const double decayed = static_cast<double>(step - setup.warmup_steps);
    const double f = setup.decay_factor;
    switch (setup.schedule) {
        case MPT_LR_SCHEDULE_CONSTANT:
            return 1.0;
        case MPT_LR_SCHEDULE_LINEAR:
            return f + (1 - f) * (1 - std::min(1.0, decayed / setup.decay_steps));
        case MPT_LR_SCHEDULE_COSINE:
            return f +
                   (1 - f) * 0.5 * (1 + std::cos(3.14159265358979323846 * std::min(1.0, decayed / setup.decay_steps)));
        case MPT_LR_SCHEDULE_STEP:
            return std::pow(f, std::floor(decayed / setup.decay_steps));
    }
    return -1.0;
}

}  // namespace

TEST_CASE(
    "each learning-rate schedule gives every step the rate of its formula, skipped steps counted, and trains with it") {
    struct Case {
        const char* name;
        mpt_lr_schedule schedule;
        int64_t warmup, decay;
        float factor;
    };
    const Case cases[] = {
        {"constant after a warm-up", MPT_LR_SCHEDULE_CONSTANT, 4, 0, 1.0f},
        {"linear to a quarter", MPT_LR_SCHEDULE_LINEAR, 3, 8, 0.25f},
        {"cosine to zero without warm-up", MPT_LR_SCHEDULE_COSINE, 0, 10, 0.0f},
        {"cosine to a tenth after a warm-up", MPT_LR_SCHEDULE_COSINE, 5, 7, 0.1f},
        {"step: halved every 3 steps", MPT_LR_SCHEDULE_STEP, 2, 3, 0.5f},
    };
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 24);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    for (const Case& c : cases) {
        CAPTURE(std::string(c.name));
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16}) {
            CAPTURE(static_cast<int>(precision));
            mpt_context_t* context = new_context(9);
            mpt_model_t* scheduled_model = new_model(context, 4, specs);
            mpt_model_t* manual_model = new_model(context, 4, specs);  // the same seed: the same weights
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_SGD;
            setup.momentum = 0.9f;
            setup.learning_rate = 0.2f;
            if (precision == MPT_PRECISION_MIXED_FP16) {  // 2^24 overflows fp16: the first steps are skipped
                setup.scaling = MPT_LOSS_SCALING_DYNAMIC;
                setup.initial_scale = 16777216.0f;
            }
            TrainerSetup manual_setup = setup;
            setup.schedule = c.schedule;
            setup.warmup_steps = c.warmup;
            setup.decay_steps = c.decay;
            setup.decay_factor = c.factor;
            mpt_trainer_t* scheduled = new_trainer(scheduled_model, setup);
            mpt_trainer_t* manual = new_trainer(manual_model, manual_setup);
            mpt_dataset_t* dataset = labels_dataset(context, task);
            // Rates set by hand before each step train the same weights, bit for bit, up to the
            // first step at rate 0 (which mpt_trainer_set_learning_rate refuses).
            int64_t compared_steps = -1;
            const auto compare_weights = [&](int64_t steps) {
                compared_steps = steps;
                for (int64_t layer = 0; layer < 2; ++layer) {
                    const size_t count = layer == 0 ? 4 * 16 : 16 * 3;
                    std::vector<float> a(count), b(count);
                    const int64_t n = static_cast<int64_t>(count);
                    REQUIRE_OK(mpt_model_get_weights(scheduled_model, layer, a.data(), n, nullptr, 0));
                    REQUIRE_OK(mpt_model_get_weights(manual_model, layer, b.data(), n, nullptr, 0));
                    CHECK(std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0);
                }
            };
            for (int64_t step = 0; step < 20; ++step) {
                CAPTURE(step);
                int64_t steps = -1;
                REQUIRE_OK(mpt_trainer_get_progress(scheduled, &steps, nullptr));
                REQUIRE(steps == step);
                float rate = 0.0f;
                REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(scheduled, &rate));
                CHECK(rate == doctest::Approx(0.2 * schedule_factor(setup, step)).epsilon(1e-6));
                if (rate == 0.0f && compared_steps < 0) compare_weights(step);
                const int64_t first = (step * 16) % 256;
                REQUIRE_OK(mpt_trainer_step(scheduled, dataset, first, 16, nullptr));
                if (compared_steps < 0) {
                    REQUIRE_OK(mpt_trainer_set_learning_rate(manual, rate));
                    REQUIRE_OK(mpt_trainer_step(manual, dataset, first, 16, nullptr));
                }
            }
            if (compared_steps < 0) compare_weights(20);
            CHECK(compared_steps >= 10);
            float base = 0.0f;
            REQUIRE_OK(mpt_trainer_get_learning_rate(scheduled, &base));
            CHECK(base == 0.2f);  // the schedule multiplies the base rate; it does not change it
            int64_t skipped = -1;
            REQUIRE_OK(mpt_trainer_get_loss_scale(scheduled, nullptr, nullptr, &skipped));
            if (precision == MPT_PRECISION_MIXED_FP16)
                CHECK(skipped > 0);
            else
                CHECK(skipped == 0);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(scheduled);
            mpt_trainer_destroy(manual);
            mpt_model_destroy(scheduled_model);
            mpt_model_destroy(manual_model);
            mpt_context_destroy(context);
        }
    }
}
