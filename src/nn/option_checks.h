// The values trainer options may take, checked one option at a time: by the C API's setters as a
// caller sets them, and all together for options read from a checkpoint, so that both accept the
// same values. Each check fails with MPT_STATUS_INVALID_ARGUMENT naming the option.
#pragma once

#include "nn/trainer.h"

namespace mpt {

void require_finite_positive(float value, const char* name);
// value in [low, high).
void require_range(float value, float low, float high, const char* name);
void check_huber_delta(float delta);
void check_class_weights(const float* weights, int64_t count);
void check_global_clipnorm(float clipnorm);
void check_ema_momentum(float momentum);
void check_lr_schedule(const LrSchedule& schedule);
void check_scaler_dynamics(const LossScalerConfig& scaler);
// Every value of `config` as the setters and mpt_trainer_create check it (the enums excepted: a
// TrainerConfig holds known ones).
void check_trainer_config(const TrainerConfig& config);

}  // namespace mpt
