// test_training: the loss scaler step by step: overflowing fp16 steps skipped with the scale halved,
// growth after each interval up to max_scale, the defaults of each precision, a static scale.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"
#include "training/reference_network.h"

using namespace mpt_test::training;

namespace {

struct ScalerState {
    float scale = 0;
    int64_t growth_tracker = -1, skipped = -1;
};

ScalerState scaler_state(mpt_trainer_t* trainer) {
    ScalerState state;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &state.scale, &state.growth_tracker, &state.skipped));
    return state;
}

}  // namespace

TEST_CASE("mixed-fp16 at an initial scale of 2^24 skips the overflowing steps, halving the scale each time, then trains") {
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 21);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    const int64_t batch = 16;
    mpt_context_t* context = new_context(9);
    mpt_model_t* model = new_model(context, 4, specs);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 16777216.0f;  // 2^24
    setup.learning_rate = 0.1f;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    mpt_dataset_t* dataset = labels_dataset(context, task);

    // Independently of the library: at 2^24 the first batch's scaled dlogits, (p - y) * scale / batch,
    // exceed fp16's largest finite value 65504, so that step must be skipped.
    auto largest_dlogit = [&](int64_t first) {
        const RefNet net = read_net(model, 4, specs);
        double largest = 0;
        for (int64_t r = first; r < first + batch; ++r) {
            std::vector<double> dz;
            reference_head(MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX,
                           forward(net, task.x.data() + r * 4), row_targets(task, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, r), dz);
            for (double d : dz) largest = std::max(largest, std::fabs(d));
        }
        return largest / static_cast<double>(batch);
    };
    REQUIRE(largest_dlogit(0) * 16777216.0 > 65504.0);

    ScalerState state = scaler_state(trainer);
    CHECK(state.scale == 16777216.0f);
    CHECK(state.skipped == 0);
    float initial_loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &initial_loss, nullptr));
    int64_t applied = 0, skipped_in_a_row_at_start = 0;
    bool still_skipping = true;
    for (int step = 0; step < 40; ++step) {
        CAPTURE(step);
        const int64_t first = (step * batch) % task.rows;
        const std::vector<float> before = flat_weights(model, 4, specs);
        const double dlogit = largest_dlogit(first);
        REQUIRE_OK(mpt_trainer_step(trainer, dataset, first, batch, nullptr));
        const ScalerState after = scaler_state(trainer);
        const std::vector<float> weights = flat_weights(model, 4, specs);
        if (after.skipped == state.skipped + 1) {
            CHECK(after.scale == state.scale * 0.5f);  // halved, exactly
            CHECK(after.growth_tracker == 0);
            CHECK(same_bits(before, weights));  // a skipped step changes no weight
            if (still_skipping) ++skipped_in_a_row_at_start;
        } else {
            REQUIRE(after.skipped == state.skipped);
            still_skipping = false;
            ++applied;
            CHECK(after.scale == state.scale);  // the growth interval (2000) is far away
            CHECK(after.growth_tracker == state.growth_tracker + 1);
            CHECK_FALSE(same_bits(before, weights));
            // An accepted step's scaled dlogits fit fp16 (with 1% for the fp16 forward pass).
            CHECK(dlogit * state.scale <= 65504.0 * 1.01);
            for (float w : weights) REQUIRE(std::isfinite(w));
        }
        state = after;
    }
    CHECK(skipped_in_a_row_at_start >= 1);
    CHECK(state.scale == doctest::Approx(16777216.0 / std::pow(2.0, static_cast<double>(state.skipped))));
    CHECK(applied >= 30);
    float final_loss = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &final_loss, nullptr));
    CHECK(final_loss < 0.7f * initial_loss);
    int64_t steps = 0;
    REQUIRE_OK(mpt_trainer_get_progress(trainer, &steps, nullptr));
    CHECK(steps == 40);  // skipped updates count as steps
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("with growth interval 3 the fp16 scale doubles after every 3 finite steps, up to max_scale") {
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 22);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(9);
    mpt_model_t* model = new_model(context, 4, specs);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 256.0f;
    setup.dynamics = true;
    setup.interval = 3;
    setup.max_scale = 4096.0f;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    mpt_dataset_t* dataset = labels_dataset(context, task);
    CHECK(scaler_state(trainer).scale == 256.0f);
    for (int step = 1; step <= 18; ++step) {
        CAPTURE(step);
        REQUIRE_OK(mpt_trainer_step(trainer, dataset, (step * 16) % 256, 16, nullptr));
        const ScalerState state = scaler_state(trainer);
        // 256 * 2^floor(step / 3), capped at 4096 = 256 * 2^4 (reached at step 12).
        const double expected = std::min(4096.0, 256.0 * std::pow(2.0, step / 3));
        CHECK(state.scale == expected);
        CHECK(state.skipped == 0);
        if (step < 12) CHECK(state.growth_tracker == step % 3);
    }
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("the default loss scaling is dynamic at 2^15 for fp16 and off (scale 1) for bf16 and fp32; static keeps its scale") {
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 23);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    struct Case {
        mpt_precision precision;
        mpt_loss_scaling scaling;
        float initial;
        float expected;
    };
    const Case cases[] = {
        {MPT_PRECISION_MIXED_FP16, MPT_LOSS_SCALING_DEFAULT, 0.0f, 32768.0f},
        {MPT_PRECISION_MIXED_BF16, MPT_LOSS_SCALING_DEFAULT, 0.0f, 1.0f},
        {MPT_PRECISION_MIXED_BF16, MPT_LOSS_SCALING_DEFAULT, 1024.0f, 1.0f},  // the initial scale is unused
        {MPT_PRECISION_FP32, MPT_LOSS_SCALING_DEFAULT, 0.0f, 1.0f},
        {MPT_PRECISION_MIXED_FP16, MPT_LOSS_SCALING_OFF, 1024.0f, 1.0f},
        {MPT_PRECISION_MIXED_FP16, MPT_LOSS_SCALING_STATIC, 128.0f, 128.0f},
        {MPT_PRECISION_MIXED_BF16, MPT_LOSS_SCALING_STATIC, 64.0f, 64.0f},
    };
    for (const Case& c : cases) {
        const std::string precision_label = precision_name(c.precision);
        CAPTURE(precision_label);
        CAPTURE(c.scaling);
        mpt_context_t* context = new_context(9);
        mpt_model_t* model = new_model(context, 4, specs);
        TrainerSetup setup;
        setup.precision = c.precision;
        setup.scaling = c.scaling;
        setup.initial_scale = c.initial;
        setup.dynamics = true;
        setup.interval = 5;  // a dynamic scaler visibly grows (twice) within the 10 steps
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, task);
        CHECK(scaler_state(trainer).scale == c.expected);
        for (int step = 0; step < 10; ++step) REQUIRE_OK(mpt_trainer_step(trainer, dataset, step * 16, 16, nullptr));
        const ScalerState state = scaler_state(trainer);
        const bool dynamic = c.precision == MPT_PRECISION_MIXED_FP16 && c.scaling == MPT_LOSS_SCALING_DEFAULT;
        CHECK(state.skipped == 0);
        if (dynamic) CHECK(state.scale == c.expected * 4.0f);  // 10 finite steps, doubling every 5
        else CHECK(state.scale == c.expected);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
}

// In fp32 a power-of-two scale is exact, so a scaled and unscaled run must agree to rounding: this
// proves the scale is divided back out of the update.
TEST_CASE("a static power-of-two loss scale in fp32 trains to the same weights as no scaling") {
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 24);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    std::vector<float> weights[2];
    for (int scaled = 0; scaled < 2; ++scaled) {
        for (mpt_optimizer optimizer : {MPT_OPTIMIZER_SGD}) {
            mpt_context_t* context = new_context(9);
            mpt_model_t* model = new_model(context, 4, specs);
            TrainerSetup setup;
            setup.optimizer = optimizer;
            setup.scaling = scaled ? MPT_LOSS_SCALING_STATIC : MPT_LOSS_SCALING_OFF;
            setup.initial_scale = 1024.0f;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            CHECK(scaler_state(trainer).scale == (scaled ? 1024.0f : 1.0f));
            mpt_dataset_t* dataset = labels_dataset(context, task);
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 3, 16, 1));
            weights[scaled] = flat_weights(model, 4, specs);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
    REQUIRE(weights[0].size() == weights[1].size());
    for (size_t i = 0; i < weights[0].size(); ++i)
        CHECK(weights[1][i] == doctest::Approx(weights[0][i]).epsilon(1e-5).scale(0.1));
}
