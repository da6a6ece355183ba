// See option_checks.h.
#include "nn/option_checks.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/float_bits.h"
#include "nn/loss.h"
#include "nn/model.h"

namespace mpt {

void require_finite_positive(float value, const char* name) {
    if (!(std::isfinite(value) && value > 0.0f))
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string(name) + " must be finite and positive");
}

void require_range(float value, float low, float high, const char* name) {
    if (!(value >= low && value < high))
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string(name) + " must be in [" + std::to_string(low) + ", " +
                                              std::to_string(high) + ")");
}

void check_huber_delta(float delta) {
    if (!valid_huber_delta(delta))
        fail(MPT_STATUS_INVALID_ARGUMENT, "the Huber delta must be finite and above 0, not " + number_text(delta));
}

void check_class_weights(const float* weights, int64_t count) {
    require(count >= 0 && count <= kMaxFeatures, MPT_STATUS_INVALID_ARGUMENT,
            "count must be in [0, 2^24], a layer's most units (0: no class weights)");
    require(count == 0 || weights != nullptr, MPT_STATUS_INVALID_ARGUMENT, "weights is NULL");
    require(count == 0 || valid_class_weights(weights, count), MPT_STATUS_INVALID_ARGUMENT,
            "class weights must be finite, >= 0 and not all 0");
}

void check_global_clipnorm(float clipnorm) {
    if (clipnorm != 0.0f) require_finite_positive(clipnorm, "global_clipnorm");
}

void check_ema_momentum(float momentum) {
    require(momentum == 0.0f || (momentum > 0.0f && momentum < 1.0f), MPT_STATUS_INVALID_ARGUMENT,
            "ema momentum must be in (0, 1), or 0 to keep no average");
}

void check_lr_schedule(const LrSchedule& schedule) {
    require(schedule.warmup_steps >= 0, MPT_STATUS_INVALID_ARGUMENT, "warmup_steps must be >= 0");
    const float factor = schedule.decay_factor;
    if (schedule.kind == LrScheduleKind::constant) {
        require(schedule.decay_steps == 0 && factor == 1.0f, MPT_STATUS_INVALID_ARGUMENT,
                "a constant learning-rate schedule takes decay_steps 0 and factor 1 (it has no decay)");
        return;
    }
    require(schedule.decay_steps >= 1, MPT_STATUS_INVALID_ARGUMENT, "decay_steps must be >= 1");
    if (schedule.kind == LrScheduleKind::step)
        require(factor > 0.0f && factor <= 1.0f, MPT_STATUS_INVALID_ARGUMENT, "a step schedule's factor must be in (0, 1]");
    else
        require(factor >= 0.0f && factor <= 1.0f, MPT_STATUS_INVALID_ARGUMENT,
                "a linear or cosine schedule's factor (its final fraction of the rate) must be in [0, 1]");
}

void check_scaler_dynamics(const LossScalerConfig& scaler) {
    require(std::isfinite(scaler.growth_factor) && scaler.growth_factor > 1.0f, MPT_STATUS_INVALID_ARGUMENT,
            "growth_factor must be > 1");
    require(scaler.backoff_factor > 0.0f && scaler.backoff_factor < 1.0f, MPT_STATUS_INVALID_ARGUMENT,
            "backoff_factor must be in (0, 1)");
    require(scaler.growth_interval >= 1, MPT_STATUS_INVALID_ARGUMENT, "growth_interval must be >= 1");
    require(std::isfinite(scaler.max_scale) && scaler.min_scale >= 1.0f && scaler.min_scale <= scaler.max_scale,
            MPT_STATUS_INVALID_ARGUMENT, "scales must satisfy 1 <= min_scale <= max_scale < Inf");
}

void check_trainer_config(const TrainerConfig& config) {
    check_huber_delta(config.loss.huber_delta);
    require_range(config.loss.label_smoothing, 0.0f, 1.0f, "label_smoothing");
    check_class_weights(config.loss.class_weights.data(), static_cast<int64_t>(config.loss.class_weights.size()));
    // What mpt_trainer_create refuses of the loss's settings (the setters take each alone).
    if (config.loss.label_smoothing != 0.0f && !loss_takes_label_smoothing(config.loss.kind))
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string("label smoothing with ") + loss_name(config.loss.kind));
    if (!config.loss.class_weights.empty() && !loss_takes_class_weights(config.loss.kind))
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string("class weights with ") + loss_name(config.loss.kind));
    const OptimizerConfig& optimizer = config.optimizer;
    require_finite_positive(optimizer.learning_rate, "learning_rate");
    require_range(optimizer.momentum, 0.0f, 1.0f, "momentum");
    require_range(optimizer.beta1, 0.0f, 1.0f, "beta1");
    require_range(optimizer.beta2, 0.0f, 1.0f, "beta2");
    require_finite_positive(optimizer.epsilon, "epsilon");
    require_range(optimizer.rho, 0.0f, 1.0f, "rho");
    require_range(optimizer.weight_decay, 0.0f, 1.0f, "weight_decay");
    // What mpt_trainer_create refuses of the momentum's setting (the setter takes both).
    require(!(optimizer.kind == OptimizerKind::rmsprop && optimizer.nesterov && optimizer.momentum != 0.0f),
            MPT_STATUS_INVALID_ARGUMENT, "RMSprop takes momentum, not Nesterov momentum");
    check_global_clipnorm(optimizer.global_clipnorm);
    check_ema_momentum(optimizer.ema_momentum);
    require(config.micro_batch_size >= 0, MPT_STATUS_INVALID_ARGUMENT, "the micro-batch size must be >= 0");
    check_lr_schedule(optimizer.schedule);
    require_finite_positive(config.scaler.initial_scale, "initial_scale");
    check_scaler_dynamics(config.scaler);
}

}  // namespace mpt
