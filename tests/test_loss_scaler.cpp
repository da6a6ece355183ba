// The dynamic loss scaler's state machine, step by step, against the rules in DESIGN.md.
#include <doctest/doctest.h>

#include <initializer_list>

#include "amp/loss_scaler.h"

using namespace mpt;

namespace {

LossScalerConfig dynamic_config() {
    LossScalerConfig config;
    config.mode = LossScaling::dynamic;
    return config;
}

void step(TrainState& state, const LossScalerConfig& config, bool overflow) {
    state.found_inf = overflow ? 1 : 0;
    advance_loss_scaler(state, config);
}

}  // namespace

TEST_CASE("the dynamic scaler starts at 2^15 and doubles after exactly 2000 finite steps") {
    const LossScalerConfig config = dynamic_config();
    TrainState state = initial_train_state(config);
    CHECK(state.loss_scale == 32768.0f);
    for (int i = 0; i < 1999; ++i) step(state, config, false);
    CHECK(state.loss_scale == 32768.0f);
    CHECK(state.growth_tracker == 1999);
    step(state, config, false);
    CHECK(state.loss_scale == 65536.0f);
    CHECK(state.growth_tracker == 0);
    CHECK(state.applied_steps == 2000);
    CHECK(state.skipped_steps == 0);
}

TEST_CASE("an overflow halves the scale, skips the update and resets the growth tracker") {
    const LossScalerConfig config = dynamic_config();
    TrainState state = initial_train_state(config);
    for (int i = 0; i < 1500; ++i) step(state, config, false);
    step(state, config, true);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(state.growth_tracker == 0);
    CHECK(state.skipped_steps == 1);
    CHECK(state.applied_steps == 1500);
    CHECK(state.steps == 1501);
    // Growth needs a fresh run of 2000 finite steps after the overflow.
    for (int i = 0; i < 1999; ++i) step(state, config, false);
    CHECK(state.loss_scale == 16384.0f);
    step(state, config, false);
    CHECK(state.loss_scale == 32768.0f);
}

TEST_CASE("the scale stays within its configured bounds") {
    LossScalerConfig config = dynamic_config();
    config.initial_scale = 4.0f;
    config.min_scale = 1.0f;
    config.max_scale = 16.0f;
    config.growth_interval = 1;
    TrainState state = initial_train_state(config);
    for (int i = 0; i < 5; ++i) step(state, config, true);
    CHECK(state.loss_scale == 1.0f);
    for (int i = 0; i < 10; ++i) step(state, config, false);
    CHECK(state.loss_scale == 16.0f);
}

TEST_CASE("only overflows met at the minimum scale count as skipped there, the dead end the trainer reports") {
    LossScalerConfig config = dynamic_config();
    config.initial_scale = 4.0f;
    config.min_scale = 2.0f;
    TrainState state = initial_train_state(config);
    step(state, config, true);  // 4 -> 2
    CHECK(state.skipped_at_min_scale == 0);
    step(state, config, false);
    step(state, config, true);  // at 2 already: backing off changes nothing
    CHECK(state.loss_scale == 2.0f);
    CHECK(state.skipped_at_min_scale == 1);
    step(state, config, true);
    CHECK(state.skipped_at_min_scale == 2);
    CHECK(state.skipped_steps == 3);
    // Static scaling and no scaling have no minimum to reach: their skips fail the step anyway.
    for (LossScaling mode : {LossScaling::fixed, LossScaling::off}) {
        config.mode = mode;
        config.initial_scale = 1.0f;
        state = initial_train_state(config);
        step(state, config, true);
        CHECK(state.skipped_at_min_scale == 0);
    }
}

TEST_CASE("custom growth factor, backoff and interval are honoured") {
    LossScalerConfig config = dynamic_config();
    config.initial_scale = 1024.0f;
    config.growth_factor = 4.0f;
    config.backoff_factor = 0.25f;
    config.growth_interval = 3;
    TrainState state = initial_train_state(config);
    step(state, config, false);
    step(state, config, false);
    CHECK(state.loss_scale == 1024.0f);
    step(state, config, false);
    CHECK(state.loss_scale == 4096.0f);
    step(state, config, true);
    CHECK(state.loss_scale == 1024.0f);
}

TEST_CASE("static scaling keeps its scale but still skips non-finite updates") {
    LossScalerConfig config;
    config.mode = LossScaling::fixed;
    config.initial_scale = 128.0f;
    TrainState state = initial_train_state(config);
    step(state, config, true);
    CHECK(state.loss_scale == 128.0f);
    CHECK(state.skipped_steps == 1);
    for (int i = 0; i < 5000; ++i) step(state, config, false);
    CHECK(state.loss_scale == 128.0f);
}

TEST_CASE("with scaling off the scale is exactly 1 and never moves") {
    LossScalerConfig config;
    config.mode = LossScaling::off;
    config.initial_scale = 65536.0f;
    TrainState state = initial_train_state(config);
    CHECK(state.loss_scale == 1.0f);
    step(state, config, true);
    for (int i = 0; i < 3000; ++i) step(state, config, false);
    CHECK(state.loss_scale == 1.0f);
    CHECK(state.skipped_steps == 1);
    CHECK(state.applied_steps == 3000);
}
