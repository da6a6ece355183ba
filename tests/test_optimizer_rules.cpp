// The optimizer's element rule (optimizer_update_element, shared by the CPU and the CUDA update
// kernels) at an edge that no few-step reference reaches: centered RMSprop's variance estimate
// v - a^2, which float rounding can take below 0 (and below -epsilon) after many steps of a
// steady gradient, where the root would be NaN. And the CPU's vectorised loop over it
// (update_elements) against the rule called per element, bit for bit, for every variant it has.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_update_elements.h"
#include "nn/optimizer.h"

using namespace mpt;

TEST_CASE("centered RMSprop's variance estimate is held at 0 where rounding takes it below: no NaN") {
    OptimizerConfig config;
    config.kind = OptimizerKind::rmsprop;
    config.learning_rate = 0.01f;
    config.rho = 0.9f;
    config.epsilon = 1e-7f;
    config.centered = true;
    // A steady gradient of 0.911 (found by search): v and a^2 converge to the same float and, at
    // some step past 100, v - a^2 rounds to -1.8e-7, below -epsilon.
    const float gradient = 0.910999894f;
    float weight = 1.0f, squares = 0.0f, average = 0.0f, unused = 0.0f;
    int below_epsilon = 0;
    for (int64_t step = 0; step < 400; ++step) {
        const OptimizerStepScalars scalars = optimizer_step_scalars(config, 1.0f, step, step);
        weight = optimizer_update_element(config, scalars, weight, gradient, squares, average, unused);
        CAPTURE(step);
        REQUIRE(std::isfinite(weight));
        if (squares - average * average + config.epsilon < 0.0f) ++below_epsilon;
    }
    CHECK(below_epsilon > 0);  // the edge was reached, not only approached
    CHECK(unused == 0.0f);     // without momentum the average is the second state, the third untouched
}

// A padded unit's weights have gradient 0 every step and must stay 0; a unit no row reached (a dead
// ReLU) keeps its weights in plain SGD too. Lion's sign of 0 is 0, as Keras's ops.sign.
TEST_CASE("Lion moves a weight whose gradient and momentum are 0 by nothing, and others by exactly the rate") {
    OptimizerConfig lion;
    lion.kind = OptimizerKind::lion;
    lion.learning_rate = 0.25f;
    lion.beta2 = 0.99f;
    const OptimizerStepScalars scalars = optimizer_step_scalars(lion, 128.0f, 0, 0);
    float momentum = 0.0f, unused2 = 0.0f, unused3 = 0.0f;
    CHECK(optimizer_update_element(lion, scalars, 0.0f, 0.0f, momentum, unused2, unused3) == 0.0f);
    CHECK(momentum == 0.0f);
    CHECK(optimizer_update_element(lion, scalars, 1.0f, 1e-30f, momentum, unused2, unused3) == 0.75f);
    // The momentum follows the unscaled gradient: 1e-30 under a loss scale of 128.
    CHECK(momentum == (1.0f - 0.99f) * (1e-30f * (1.0f / 128.0f)));
    CHECK(optimizer_update_element(lion, scalars, 1.0f, -5e3f, momentum, unused2, unused3) == 1.25f);
}

TEST_CASE("the CPU's vectorised update loop gives the rule's bits per element, for every optimizer variant") {
    std::vector<OptimizerConfig> variants;
    for (OptimizerKind kind :
         {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::rmsprop, OptimizerKind::lion})
        for (float momentum : {0.0f, 0.9f})
            for (bool nesterov : {false, true})
                for (bool centered : {false, true})
                    for (float decay : {0.0f, 0.01f}) {
                        OptimizerConfig config;
                        config.kind = kind;
                        config.learning_rate = 0.01f;
                        config.momentum = momentum;
                        config.nesterov = nesterov;
                        config.centered = centered;
                        config.weight_decay = decay;
                        variants.push_back(config);
                    }
    // 1,003 elements: vector bodies and a scalar tail; gradients multiplied by a loss scale of 256,
    // some 0, some huge, one NaN; states as after some steps (v > 0, averages of either sign).
    constexpr int64_t kCount = 1003;
    std::mt19937 generator(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> master(kCount), gradient(kCount), states[kMaxOptimizerStates];
    for (int64_t i = 0; i < kCount; ++i) {
        master[i] = 0.1f * normal(generator);
        gradient[i] = i % 97 == 0 ? 0.0f : i % 101 == 0 ? 3e30f : 256.0f * 0.01f * normal(generator);
    }
    gradient[500] = NAN;
    for (auto& state : states) state.resize(kCount);
    for (int64_t i = 0; i < kCount; ++i) {
        states[0][i] = 1e-4f * (1.0f + std::fabs(normal(generator)));
        states[1][i] = 1e-3f * normal(generator);
        states[2][i] = 1e-3f * normal(generator);
    }
    for (const OptimizerConfig& config : variants) {
        CAPTURE(static_cast<int>(config.kind));
        CAPTURE(config.momentum);
        CAPTURE(config.nesterov);
        CAPTURE(config.centered);
        CAPTURE(config.weight_decay);
        const OptimizerStepScalars scalars = optimizer_step_scalars(config, 256.0f, 4, 4);
        const int count = optimizer_state_count(config);
        std::vector<float> expected_master = master, vector_master = master;
        std::vector<float> expected_states[kMaxOptimizerStates], vector_states[kMaxOptimizerStates];
        float* pointers[kMaxOptimizerStates] = {};
        for (int k = 0; k < kMaxOptimizerStates; ++k) {
            expected_states[k] = states[k];
            vector_states[k] = states[k];
            if (k < count) pointers[k] = vector_states[k].data();
        }
        for (int64_t i = 0; i < kCount; ++i) {
            float unused = 0.0f;
            float& s1 = count > 0 ? expected_states[0][i] : unused;
            float& s2 = count > 1 ? expected_states[1][i] : unused;
            float& s3 = count > 2 ? expected_states[2][i] : unused;
            expected_master[i] = optimizer_update_element(config, scalars, expected_master[i], gradient[i], s1, s2, s3);
        }
        // In two ranges, as the thread pool cuts it.
        update_elements(config, scalars, vector_master.data(), gradient.data(), pointers, 0, 517);
        update_elements(config, scalars, vector_master.data(), gradient.data(), pointers, 517, kCount);
        CHECK(std::memcmp(expected_master.data(), vector_master.data(), kCount * sizeof(float)) == 0);
        for (int k = 0; k < kMaxOptimizerStates; ++k)
            CHECK(std::memcmp(expected_states[k].data(), vector_states[k].data(), kCount * sizeof(float)) == 0);
    }
}
