// Optimizer update rules per element, on fp32 master weights. The gradient arrives multiplied by the
// loss scale; `inverse_scale` undoes it inside the update so no separate unscale pass touches memory.
#pragma once

#include <cmath>
#include <cstdint>

#include "amp/loss_scaler.h"
#include "core/host_device.h"
#include "nn/lr_schedule.h"

namespace mpt {

enum class OptimizerKind : uint8_t { sgd = 0, adam = 1, adamw = 2, rmsprop = 3, lion = 4 };

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::sgd;
    float learning_rate = 0.01f;  // the base rate: each step's is this times the schedule's factor
    LrSchedule schedule;
    float momentum = 0.0f;
    bool nesterov = false;
    float beta1 = 0.9f;     // Adam's and Lion's
    float beta2 = 0.999f;   // Adam's; Lion's default is 0.99 (the C API's options set it)
    float rho = 0.9f;          // RMSprop's decay of the squared gradients' average
    // Keras's (and PyTorch's) centered RMSprop: the root is of the gradients' variance estimate,
    // the squared gradients' average less the square of the gradients' own average.
    bool centered = false;
    float epsilon = 1e-7f;     // Adam's and RMSprop's
    // Keras's weight_decay, for every optimizer: each step first multiplies each weight and bias by
    // (1 - rate * weight_decay). AdamW is Adam with it on by default (0.004).
    float weight_decay = 0.0f;
    // Keras's global_clipnorm: when > 0, every step's unscaled gradients (all layers' weights and
    // biases together) are scaled by global_clipnorm / max(their L2 norm, global_clipnorm) before
    // the update rule sees them. 0: no clipping.
    float global_clipnorm = 0.0f;
    // Keras's ema_momentum: when > 0, the trainer keeps an exponential moving average of the master
    // weights, averaged_weight's after every applied step (the first applied step copies them). 0: none.
    float ema_momentum = 0.0f;
};

inline bool clips_gradients(const OptimizerConfig& config) { return config.global_clipnorm > 0.0f; }
inline bool averages_weights(const OptimizerConfig& config) { return config.ema_momentum > 0.0f; }

// One weight's moving average after an applied step, Keras's momentum * average + (1 - momentum) *
// weight, each product and the sum rounded once (the CUDA kernel spells the roundings out, so both
// backends agree bit for bit).
inline float averaged_weight(float average, float weight, float momentum) {
    return momentum * average + (1.0f - momentum) * weight;
}

// Optimizer state arrays per parameter: SGD with momentum keeps a velocity, Adam two moments,
// RMSprop the squared gradients' average, then with momentum its own velocity, then when centered
// the gradients' average, Lion its momentum (optimizer_update_element's state1, state2, state3 in
// that order).
constexpr int kMaxOptimizerStates = 3;
inline int optimizer_state_count(const OptimizerConfig& config) {
    if (config.kind == OptimizerKind::sgd) return config.momentum != 0.0f ? 1 : 0;
    if (config.kind == OptimizerKind::rmsprop) return 1 + (config.momentum != 0.0f ? 1 : 0) + (config.centered ? 1 : 0);
    if (config.kind == OptimizerKind::lion) return 1;
    return 2;
}

MPT_HOST_DEVICE bool is_adam(const OptimizerConfig& config) {
    return config.kind == OptimizerKind::adam || config.kind == OptimizerKind::adamw;
}

// SGD without momentum: an update with no state, w' = keep * w - rate * g with keep the factor
// weight decay leaves (plain_sgd_keep), which can be applied as one GEMM into the weights (beta
// keep) without a gradient tensor.
MPT_HOST_DEVICE bool is_plain_sgd(const OptimizerConfig& config) {
    return config.kind == OptimizerKind::sgd && config.momentum == 0.0f;
}

// What of each weight a plain SGD step at `rate` keeps before the gradient's term: 1 - rate * decay,
// exactly 1 without weight decay (the GEMM then only adds to the weights).
MPT_HOST_DEVICE float plain_sgd_keep(const OptimizerConfig& config, float rate) {
    return 1.0f - rate * config.weight_decay;
}

// Records in `state` the norm of a step's gradients and the factor global_clipnorm scales them by,
// from the sum of their squares as the backward pass left them (multiplied by the loss scale):
// norm = sqrt(sum) / loss_scale and clipnorm / max(norm, clipnorm), in double, so the factor is
// exactly 1 when the norm is within the bound. A skipped step (found_inf) records NaN and 1: its
// gradients are not finite, or were not computed at all, and no update reads the factor.
MPT_HOST_DEVICE void record_global_clip(TrainState& state, double scaled_sum_of_squares, float clipnorm) {
    if (state.found_inf) {
        state.gradient_norm = NAN;
        state.clip_factor = 1.0f;
        return;
    }
    // Finite: decide_update bounds every applied step's gradients well inside the double sum's range.
    const double norm = sqrt(scaled_sum_of_squares) / static_cast<double>(state.loss_scale);
    state.gradient_norm = static_cast<float>(norm);
    state.clip_factor = norm > static_cast<double>(clipnorm) ? static_cast<float>(static_cast<double>(clipnorm) / norm) : 1.0f;
}

// The learning rate of the step numbered `steps` (from 0, skipped steps included): the base rate
// times the schedule's factor there.
MPT_HOST_DEVICE float scheduled_learning_rate(const OptimizerConfig& config, int64_t steps) {
    return config.learning_rate * lr_schedule_factor(config.schedule, steps);
}

// Per-step scalars derived once per update, before its elements (the rate, Adam's bias corrections).
struct OptimizerStepScalars {
    float inverse_scale;
    float learning_rate;    // this step's: the base rate times the schedule's factor
    float step_size;        // the rate, or rate * sqrt(1 - beta2^t) / (1 - beta1^t) for Adam
    float epsilon_hat;      // Adam: added to sqrt(v), RMSprop: to v under the root; Keras's epsilon as given
};

// `applied_steps` counts the updates applied (Adam's t - 1), `steps` all steps (the schedule's).
// The step's scalars without Adam's bias corrections: all a rule other than Adam's reads. Its own
// function so that kernels that run only plain SGD compile no double pow() (a call that cost the
// fused SGD kernel register spills).
MPT_HOST_DEVICE OptimizerStepScalars plain_step_scalars(const OptimizerConfig& config, float loss_scale, int64_t steps) {
    OptimizerStepScalars scalars;
    scalars.inverse_scale = 1.0f / loss_scale;
    scalars.learning_rate = scheduled_learning_rate(config, steps);
    scalars.step_size = scalars.learning_rate;
    scalars.epsilon_hat = config.epsilon;
    return scalars;
}

MPT_HOST_DEVICE OptimizerStepScalars optimizer_step_scalars(const OptimizerConfig& config, float loss_scale,
                                                            int64_t applied_steps, int64_t steps) {
    OptimizerStepScalars scalars = plain_step_scalars(config, loss_scale, steps);
    if (is_adam(config)) {
        const double t = static_cast<double>(applied_steps + 1);
        const double correction1 = 1.0 - pow(static_cast<double>(config.beta1), t);
        const double correction2 = 1.0 - pow(static_cast<double>(config.beta2), t);
        scalars.step_size = static_cast<float>(scalars.learning_rate * sqrt(correction2) / correction1);
        // Keras's epsilon is the paper's "epsilon hat": added to sqrt(v) as it is.
    }
    return scalars;
}

// The weight after Keras's weight decay, which it applies before the update rule; the rule then
// sees the gradient of the weight as it was (the same for AdamW as decoupled decay in the paper).
MPT_HOST_DEVICE float decayed_weight(const OptimizerConfig& config, const OptimizerStepScalars& scalars, float weight) {
    return config.weight_decay != 0.0f ? weight - scalars.learning_rate * config.weight_decay * weight : weight;
}

// Plain SGD's rule for one master weight (is_plain_sgd). Its own function so that a kernel that
// runs only this rule (CUDA's fused SGD) compiles none of the others; optimizer_update_element
// calls it too.
MPT_HOST_DEVICE float plain_sgd_update_element(const OptimizerConfig& config, const OptimizerStepScalars& scalars,
                                               float weight, float scaled_gradient) {
    const float gradient = scaled_gradient * scalars.inverse_scale;
    return decayed_weight(config, scalars, weight) - scalars.learning_rate * gradient;
}

// Updates one master weight in place; the states past optimizer_state_count are unused.
MPT_HOST_DEVICE float optimizer_update_element(const OptimizerConfig& config, const OptimizerStepScalars& scalars,
                                               float weight, float scaled_gradient, float& state1, float& state2,
                                               float& state3) {
    if (is_plain_sgd(config)) return plain_sgd_update_element(config, scalars, weight, scaled_gradient);
    const float gradient = scaled_gradient * scalars.inverse_scale;
    weight = decayed_weight(config, scalars, weight);
    switch (config.kind) {
        case OptimizerKind::sgd: {  // (with momentum: plain SGD returned above)
            // Keras's formulation: v = m*v - lr*g; w += v (Nesterov: w += m*v - lr*g).
            const float velocity = config.momentum * state1 - scalars.learning_rate * gradient;
            state1 = velocity;
            if (config.nesterov) return weight + config.momentum * velocity - scalars.learning_rate * gradient;
            return weight + velocity;
        }
        case OptimizerKind::rmsprop: {
            // Keras's RMSprop: v = rho v + (1 - rho) g^2, increment lr g / sqrt(v + eps); centered, the
            // gradients' average a = rho a + (1 - rho) g too and v - a^2 under the root for v (never
            // below 0: v >= a^2 holds exactly, but not always after rounding; Keras's root is NaN
            // there below -eps, smaller than ours above); with momentum, velocity = momentum velocity
            // + increment and w -= velocity.
            state1 = config.rho * state1 + (1.0f - config.rho) * gradient * gradient;
            float second_moment = state1;
            if (config.centered) {
                float& average = config.momentum != 0.0f ? state3 : state2;
                average = config.rho * average + (1.0f - config.rho) * gradient;
                const float variance = state1 - average * average;
                second_moment = variance > 0.0f ? variance : 0.0f;  // fmaxf's result, NaN included; it vectorises
            }
            const float increment = scalars.learning_rate * gradient / sqrtf(second_moment + scalars.epsilon_hat);
            if (config.momentum == 0.0f) return weight - increment;
            state2 = config.momentum * state2 + increment;
            return weight - state2;
        }
        case OptimizerKind::lion: {
            // Lion (Chen et al. 2023), as Keras's: the step is the rate times the sign of an
            // interpolation between the momentum and the gradient, c = beta1 m + (1 - beta1) g, so
            // every weight moves by exactly the rate (or not at all, where c is 0); the momentum then
            // follows the gradient at its own, slower rate beta2. The sign as the difference of two
            // comparisons: 0 gives 0, as Keras's ops.sign, and the CPU's loop vectorises (as nested
            // conditionals it stayed scalar, 11x slower).
            const float interpolation = config.beta1 * state1 + (1.0f - config.beta1) * gradient;
            const float sign = static_cast<float>(interpolation > 0.0f) - static_cast<float>(interpolation < 0.0f);
            state1 = config.beta2 * state1 + (1.0f - config.beta2) * gradient;
            return weight - scalars.learning_rate * sign;
        }
        case OptimizerKind::adam:
        case OptimizerKind::adamw: {
            state1 = config.beta1 * state1 + (1.0f - config.beta1) * gradient;
            state2 = config.beta2 * state2 + (1.0f - config.beta2) * gradient * gradient;
            return weight - scalars.step_size * state1 / (sqrtf(state2) + scalars.epsilon_hat);
        }
    }
    return weight;
}

}  // namespace mpt
