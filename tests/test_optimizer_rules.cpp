// The optimizer's element rule (optimizer_update_element, shared by the CPU and the CUDA update
// kernels) at an edge that no few-step reference reaches: centered RMSprop's variance estimate
// v - a^2, which float rounding can take below 0 (and below -epsilon) after many steps of a
// steady gradient, where the root would be NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

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
