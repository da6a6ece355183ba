// Dynamic loss scaling as a pure state machine. The state lives in backend memory (on a GPU, in
// device memory) and is advanced by the backend after each step's update, so a step never needs the
// host to look at it. The same inline transition runs on the CPU and in the CUDA kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace mpt {

enum class LossScaling : uint8_t { off = 1, fixed = 2, dynamic = 3 };

struct LossScalerConfig {
    LossScaling mode = LossScaling::off;
    float initial_scale = 32768.0f;  // 2^15
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int64_t growth_interval = 2000;
    float min_scale = 1.0f;
    float max_scale = 16777216.0f;  // 2^24
};

// Everything a step reads and writes about itself, kept in backend memory. Plain data with a fixed
// layout and no padding, so that its bytes compare and copy as its values.
struct TrainState {
    float loss_scale;          // multiplies dlogits; 1 when scaling is off
    int32_t found_inf;         // set by this step's finiteness checks, read by the update
    int64_t growth_tracker;    // consecutive finite steps since the scale last changed
    int64_t skipped_steps;     // updates skipped for non-finite gradients
    int64_t applied_steps;     // updates applied (Adam's bias-correction step count)
    int64_t steps;             // all optimizer steps, skipped or not
    // Dynamic scaling's dead end: updates skipped while the scale was already at min_scale (or below
    // it, from an initial scale set lower), where backing off cannot make the gradients finite. The
    // trainer fails the step when this grows (DeepSpeed's raise_error_at_min_scale) rather than skip
    // every step from then on unseen.
    int64_t skipped_at_min_scale;
    // Gradient clipping's (Backend::clip_factor): the last step's unscaled gradients' global L2 norm,
    // NaN where none was taken (no clipping, no step yet, a skipped step), and the factor that step's
    // update scaled them by. An observation, not kept by checkpoints.
    float gradient_norm;
    float clip_factor;
};
static_assert(sizeof(TrainState) == 56, "TrainState has no padding");

inline TrainState initial_train_state(const LossScalerConfig& config) {
    TrainState state{};
    state.loss_scale = config.mode == LossScaling::off ? 1.0f : config.initial_scale;
    state.gradient_norm = NAN;
    state.clip_factor = 1.0f;
    return state;
}

// The update decision's proof (Backend::decide_update), for `layer_count` layers' (max|dZ|, max|A_prev|)
// pairs: every weight gradient is a sum of `rows` products |dZ| * |A| <= max|dZ| * max|A|, so if that
// bound (with max|A| taken as at least 1, for the bias gradient) is finite in fp32 for every layer,
// so is every gradient. An infinite maximum makes it false (max_abs reports NaN as +Inf; a NaN
// max|A_prev| itself would count as 1, as std::max(1.0, NaN) did before).
MPT_HOST_DEVICE bool gradient_bound_finite(float max_output_grad, float max_input, int64_t rows) {
    const double bound = static_cast<double>(rows) * max_output_grad * fmax(1.0, static_cast<double>(max_input));
    return bound < 3.0e38;
}
MPT_HOST_DEVICE bool gradient_bounds_finite(const float* max_abs_pairs, int layer_count, int64_t rows) {
    for (int layer = 0; layer < layer_count; ++layer)
        if (!gradient_bound_finite(max_abs_pairs[2 * layer], max_abs_pairs[2 * layer + 1], rows)) return false;
    return true;
}

// Batch-based gradient clipping's range (CpuBackend::clip_factor_from_batch): values whose largest
// magnitude lies in [2^-40, 2^40] keep their Gram matrices' sums (at most 2^31 products each) far
// inside fp32's range; others are scaled into [0.5, 1) first.
constexpr float kGramSafeLow = 0x1p-40f, kGramSafeHigh = 0x1p40f;

// Whether a layer input's max|A_prev| of `largest` decides the update and scales the clipping's
// Gram matrices exactly as a max of 0 does: 0 itself, or within [kGramSafeLow, 1] (the proof
// above takes max|A| as at least 1; the clipping scales nothing there). A max_abs pass that would
// only ever find such a maximum can be left out (Executor::decide_from_bounds).
MPT_HOST_DEVICE bool input_max_decides_as_none(float largest) {
    return largest == 0.0f || (largest >= kGramSafeLow && largest <= 1.0f);
}

// Advances the state after a step whose gradients were finite or not (state.found_inf).
MPT_HOST_DEVICE void advance_loss_scaler(TrainState& state, const LossScalerConfig& config) {
    state.steps += 1;
    if (state.found_inf) {
        state.skipped_steps += 1;
        state.growth_tracker = 0;
        if (config.mode == LossScaling::dynamic) {
            if (state.loss_scale <= config.min_scale) state.skipped_at_min_scale += 1;
            float scaled = state.loss_scale * config.backoff_factor;
            state.loss_scale = scaled < config.min_scale ? config.min_scale : scaled;
        }
        return;
    }
    state.applied_steps += 1;
    if (config.mode != LossScaling::dynamic) return;
    state.growth_tracker += 1;
    if (state.growth_tracker >= config.growth_interval) {
        float grown = state.loss_scale * config.growth_factor;
        state.loss_scale = grown > config.max_scale ? config.max_scale : grown;
        state.growth_tracker = 0;
    }
}

}  // namespace mpt
