// C API: trainer options and trainers. Argument checks and translation only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capi_internal.h"
#include "core/finite_values.h"
#include "core/float_bits.h"
#include "nn/checkpoint.h"
#include "nn/model.h"
#include "nn/option_checks.h"

using mpt::capi::impl_of;
using mpt::capi::require_pointer;
using mpt::fail;
using mpt::require;
using mpt::require_finite_positive;
using mpt::require_range;

namespace {

// Adam's and Lion's betas (checked), which the optimizer's default no longer replaces; -0 as 0: one
// value, one checkpoint option.
void choose_betas(mpt_trainer_options_t* options, float beta1, float beta2) {
    options->config.optimizer.beta1 = beta1 == 0.0f ? 0.0f : beta1;
    options->config.optimizer.beta2 = beta2 == 0.0f ? 0.0f : beta2;
    options->betas_chosen = true;
}

// A getter of one value: `read` gives it from the options' config (an enum class as the C enum, a
// bool as an int).
template <typename T, typename Read>
mpt_status read_option(const mpt_trainer_options_t* options, T* out, Read read) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_pointer(out, "out");
    *out = static_cast<T>(read(options->config));
    MPT_API_END
}

// A getter's optional out-parameter: written when the caller asked for it (not NULL).
template <typename T>
void write_if_asked(T* out, T value) {
    if (out) *out = value;
}

// The data set of a fit, step or evaluate, kept alive for the call: a callback may destroy its
// handle meanwhile.
std::shared_ptr<const mpt::Dataset> held_dataset(const mpt_dataset_t* dataset) {
    impl_of(dataset, "dataset");
    return dataset->impl;
}

}  // namespace

extern "C" {

mpt_status mpt_trainer_options_create(mpt_trainer_options_t** out) {
    MPT_API_BEGIN
    require_pointer(out, "out");
    *out = new mpt_trainer_options{};
    MPT_API_END
}

void mpt_trainer_options_destroy(mpt_trainer_options_t* options) { delete options; }

mpt_status mpt_trainer_options_set_precision(mpt_trainer_options_t* options, mpt_precision precision) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.precision = mpt::capi::checked_enum(precision, MPT_PRECISION_FP32, MPT_PRECISION_AUTO, "precision");
    MPT_API_END
}

mpt_status mpt_trainer_options_set_loss(mpt_trainer_options_t* options, mpt_loss loss) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.loss.kind = static_cast<mpt::LossKind>(mpt::capi::checked_enum(
        loss, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_LOSS_HUBER, "loss"));
    MPT_API_END
}

mpt_status mpt_trainer_options_set_huber_delta(mpt_trainer_options_t* options, float delta) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    mpt::check_huber_delta(delta);
    options->config.loss.huber_delta = delta;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_label_smoothing(mpt_trainer_options_t* options, float label_smoothing) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(label_smoothing, 0.0f, 1.0f, "label_smoothing");
    options->config.loss.label_smoothing = label_smoothing == 0.0f ? 0.0f : label_smoothing;  // -0 as 0
    MPT_API_END
}

mpt_status mpt_trainer_options_set_class_weights(mpt_trainer_options_t* options, const float* weights, int64_t count) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    mpt::check_class_weights(weights, count);
    options->config.loss.class_weights.assign(weights, weights + count);
    for (float& weight : options->config.loss.class_weights) weight = weight == 0.0f ? 0.0f : weight;  // -0 as 0
    MPT_API_END
}

mpt_status mpt_trainer_options_set_optimizer(mpt_trainer_options_t* options, mpt_optimizer optimizer) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    const mpt_optimizer kind = mpt::capi::checked_enum(optimizer, MPT_OPTIMIZER_SGD, MPT_OPTIMIZER_LION, "optimizer");
    options->config.optimizer.kind = static_cast<mpt::OptimizerKind>(kind);
    // Keras's AdamW default decay and Lion's default beta2, unless the caller chose them, in either order.
    if (!options->weight_decay_chosen) options->config.optimizer.weight_decay = kind == MPT_OPTIMIZER_ADAMW ? 0.004f : 0.0f;
    if (!options->betas_chosen) options->config.optimizer.beta2 = kind == MPT_OPTIMIZER_LION ? 0.99f : 0.999f;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_learning_rate(mpt_trainer_options_t* options, float learning_rate) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_finite_positive(learning_rate, "learning_rate");
    options->config.optimizer.learning_rate = learning_rate;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_momentum(mpt_trainer_options_t* options, float momentum, int nesterov) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(momentum, 0.0f, 1.0f, "momentum");
    options->config.optimizer.momentum = momentum == 0.0f ? 0.0f : momentum;  // -0 as 0
    options->config.optimizer.nesterov = nesterov != 0;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_adam(mpt_trainer_options_t* options, float beta1, float beta2, float epsilon) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(beta1, 0.0f, 1.0f, "beta1");
    require_range(beta2, 0.0f, 1.0f, "beta2");
    require_finite_positive(epsilon, "epsilon");
    choose_betas(options, beta1, beta2);
    options->config.optimizer.epsilon = epsilon;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_lion(mpt_trainer_options_t* options, float beta1, float beta2) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(beta1, 0.0f, 1.0f, "beta1");
    require_range(beta2, 0.0f, 1.0f, "beta2");
    choose_betas(options, beta1, beta2);
    MPT_API_END
}

mpt_status mpt_trainer_options_set_rmsprop(mpt_trainer_options_t* options, float rho, float epsilon) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(rho, 0.0f, 1.0f, "rho");
    require_finite_positive(epsilon, "epsilon");
    options->config.optimizer.rho = rho == 0.0f ? 0.0f : rho;  // -0 as 0: one value, one checkpoint option
    options->config.optimizer.epsilon = epsilon;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_rmsprop_centered(mpt_trainer_options_t* options, int centered) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.optimizer.centered = centered != 0;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_weight_decay(mpt_trainer_options_t* options, float weight_decay) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_range(weight_decay, 0.0f, 1.0f, "weight_decay");
    options->config.optimizer.weight_decay = weight_decay == 0.0f ? 0.0f : weight_decay;  // -0 as 0
    options->weight_decay_chosen = true;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_global_clipnorm(mpt_trainer_options_t* options, float clipnorm) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    mpt::check_global_clipnorm(clipnorm);
    options->config.optimizer.global_clipnorm = clipnorm == 0.0f ? 0.0f : clipnorm;  // -0 as 0
    MPT_API_END
}

mpt_status mpt_trainer_options_set_ema(mpt_trainer_options_t* options, float momentum) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    mpt::check_ema_momentum(momentum);
    options->config.optimizer.ema_momentum = momentum == 0.0f ? 0.0f : momentum;  // -0 as 0
    MPT_API_END
}

mpt_status mpt_trainer_options_set_micro_batch_size(mpt_trainer_options_t* options, int64_t rows) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require(rows >= 0, MPT_STATUS_INVALID_ARGUMENT, "the micro-batch size must be >= 0 (0: every batch in one pass)");
    options->config.micro_batch_size = rows;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_lr_schedule(mpt_trainer_options_t* options, mpt_lr_schedule schedule,
                                               int64_t warmup_steps, int64_t decay_steps, float factor) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    const mpt_lr_schedule kind =
        mpt::capi::checked_enum(schedule, MPT_LR_SCHEDULE_CONSTANT, MPT_LR_SCHEDULE_STEP, "learning-rate schedule");
    mpt::LrSchedule chosen;
    chosen.kind = static_cast<mpt::LrScheduleKind>(kind);
    chosen.warmup_steps = warmup_steps;
    chosen.decay_steps = decay_steps;
    chosen.decay_factor = factor == 0.0f ? 0.0f : factor;  // -0 as 0: one value, one checkpoint option
    mpt::check_lr_schedule(chosen);
    options->config.optimizer.schedule = chosen;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_loss_scaling(mpt_trainer_options_t* options, mpt_loss_scaling mode,
                                                float initial_scale) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    const mpt_loss_scaling scaling =
        mpt::capi::checked_enum(mode, MPT_LOSS_SCALING_DEFAULT, MPT_LOSS_SCALING_DYNAMIC, "loss scaling mode");
    require_finite_positive(initial_scale, "initial_scale");
    options->config.loss_scaling = scaling;
    options->config.scaler.initial_scale = initial_scale;
    MPT_API_END
}

mpt_status mpt_trainer_options_set_loss_scaler_dynamics(mpt_trainer_options_t* options, float growth_factor,
                                                        float backoff_factor, int64_t growth_interval, float min_scale,
                                                        float max_scale) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    mpt::LossScalerConfig scaler = options->config.scaler;
    scaler.growth_factor = growth_factor;
    scaler.backoff_factor = backoff_factor;
    scaler.growth_interval = growth_interval;
    scaler.min_scale = min_scale;
    scaler.max_scale = max_scale;
    mpt::check_scaler_dynamics(scaler);
    options->config.scaler = scaler;
    MPT_API_END
}

// Each getter reads what the options hold; those of several values write the ones asked for.
mpt_status mpt_trainer_options_get_precision(const mpt_trainer_options_t* options, mpt_precision* out) {
    return read_option(options, out, [](const auto& config) { return config.precision; });
}

mpt_status mpt_trainer_options_get_loss(const mpt_trainer_options_t* options, mpt_loss* out) {
    return read_option(options, out, [](const auto& config) { return config.loss.kind; });
}

mpt_status mpt_trainer_options_get_huber_delta(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.loss.huber_delta; });
}

mpt_status mpt_trainer_options_get_label_smoothing(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.loss.label_smoothing; });
}

mpt_status mpt_trainer_options_get_class_weights(const mpt_trainer_options_t* options, float* weights,
                                                 int64_t capacity, int64_t* count) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require_pointer(count, "count");
    const std::vector<float>& held = options->config.loss.class_weights;
    const auto size = static_cast<int64_t>(held.size());
    if (weights) {
        if (capacity < size)
            fail(MPT_STATUS_SHAPE_MISMATCH, "the options hold " + std::to_string(size) +
                                                " class weights, more than the capacity " + std::to_string(capacity));
        std::copy(held.begin(), held.end(), weights);
    }
    *count = size;
    MPT_API_END
}

mpt_status mpt_trainer_options_get_optimizer(const mpt_trainer_options_t* options, mpt_optimizer* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.kind; });
}

mpt_status mpt_trainer_options_get_learning_rate(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.learning_rate; });
}

mpt_status mpt_trainer_options_get_momentum(const mpt_trainer_options_t* options, float* momentum, int* nesterov) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    write_if_asked(momentum, options->config.optimizer.momentum);
    write_if_asked(nesterov, options->config.optimizer.nesterov ? 1 : 0);
    MPT_API_END
}

mpt_status mpt_trainer_options_get_adam(const mpt_trainer_options_t* options, float* beta1, float* beta2,
                                        float* epsilon) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    write_if_asked(beta1, options->config.optimizer.beta1);
    write_if_asked(beta2, options->config.optimizer.beta2);
    write_if_asked(epsilon, options->config.optimizer.epsilon);
    MPT_API_END
}

mpt_status mpt_trainer_options_get_lion(const mpt_trainer_options_t* options, float* beta1, float* beta2) {
    return mpt_trainer_options_get_adam(options, beta1, beta2, nullptr);  // one pair of betas
}

mpt_status mpt_trainer_options_get_rmsprop(const mpt_trainer_options_t* options, float* rho, float* epsilon) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    write_if_asked(rho, options->config.optimizer.rho);
    write_if_asked(epsilon, options->config.optimizer.epsilon);
    MPT_API_END
}

mpt_status mpt_trainer_options_get_rmsprop_centered(const mpt_trainer_options_t* options, int* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.centered; });
}

mpt_status mpt_trainer_options_get_weight_decay(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.weight_decay; });
}

mpt_status mpt_trainer_options_get_global_clipnorm(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.global_clipnorm; });
}

mpt_status mpt_trainer_options_get_ema(const mpt_trainer_options_t* options, float* out) {
    return read_option(options, out, [](const auto& config) { return config.optimizer.ema_momentum; });
}

mpt_status mpt_trainer_options_get_micro_batch_size(const mpt_trainer_options_t* options, int64_t* out) {
    return read_option(options, out, [](const auto& config) { return config.micro_batch_size; });
}

mpt_status mpt_trainer_options_get_lr_schedule(const mpt_trainer_options_t* options, mpt_lr_schedule* schedule,
                                               int64_t* warmup_steps, int64_t* decay_steps, float* factor) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    const mpt::LrSchedule& held = options->config.optimizer.schedule;
    write_if_asked(schedule, static_cast<mpt_lr_schedule>(held.kind));
    write_if_asked(warmup_steps, held.warmup_steps);
    write_if_asked(decay_steps, held.decay_steps);
    write_if_asked(factor, held.decay_factor);
    MPT_API_END
}

mpt_status mpt_trainer_options_get_loss_scaling(const mpt_trainer_options_t* options, mpt_loss_scaling* mode,
                                                float* initial_scale) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    write_if_asked(mode, options->config.loss_scaling);
    write_if_asked(initial_scale, options->config.scaler.initial_scale);
    MPT_API_END
}

mpt_status mpt_trainer_options_get_loss_scaler_dynamics(const mpt_trainer_options_t* options, float* growth_factor,
                                                        float* backoff_factor, int64_t* growth_interval,
                                                        float* min_scale, float* max_scale) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    const mpt::LossScalerConfig& scaler = options->config.scaler;
    write_if_asked(growth_factor, scaler.growth_factor);
    write_if_asked(backoff_factor, scaler.backoff_factor);
    write_if_asked(growth_interval, scaler.growth_interval);
    write_if_asked(min_scale, scaler.min_scale);
    write_if_asked(max_scale, scaler.max_scale);
    MPT_API_END
}

mpt_status mpt_trainer_options_create_from_checkpoint(const char* path, mpt_trainer_options_t** out) {
    MPT_API_BEGIN
    require_pointer(path, "path");
    require_pointer(out, "out");
    // Every value is the checkpoint's own, chosen as a caller's would be: no default replaces it.
    *out = new mpt_trainer_options{mpt::read_checkpoint_options(path), true, true};
    MPT_API_END
}

mpt_status mpt_trainer_create(mpt_model_t* model, const mpt_trainer_options_t* options, mpt_trainer_t** out) {
    MPT_API_BEGIN
    impl_of(model, "model");
    require_pointer(out, "out");
    require(!model->impl->layers().empty(), MPT_STATUS_INVALID_STATE, "the model has no layers");
    const mpt_trainer_options given = options ? *options : mpt_trainer_options{};
    auto trainer = std::make_unique<mpt::Trainer>(model->impl, given.config);
    *out = new mpt_trainer{std::move(trainer)};
    (*out)->weight_decay_chosen = given.weight_decay_chosen;
    (*out)->betas_chosen = given.betas_chosen;
    MPT_API_END
}

void mpt_trainer_destroy(mpt_trainer_t* trainer) {
    if (!trainer) return;
    if (mpt::capi::used_by_this_thread(*trainer)) {
        // From a callback of a call that uses the trainer: that call still does. Fit stops after
        // the callback, and the call deletes the trainer as it returns (ExclusiveUse).
        trainer->destroy_when_done = true;
        if (trainer->impl) trainer->impl->stop_soon("the trainer was destroyed from a callback of this call");
        return;
    }
    mpt::DeviceScope device_scope;  // freeing GPU memory makes the backend's device current
    mpt::capi::destroy_holding_context(trainer);
}

mpt_status mpt_trainer_set_callbacks(mpt_trainer_t* trainer, mpt_progress_fn progress, mpt_epoch_end_fn epoch_end,
                                     void* user_data) {
    MPT_API_BEGIN
    impl_of(trainer, "trainer").set_callbacks(mpt::TrainerCallbacks{progress, epoch_end, user_data});
    MPT_API_END
}

mpt_status mpt_trainer_fit(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t epochs, int64_t batch_size,
                           int shuffle) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    mpt::capi::ExclusiveUse exclusive(*trainer);
    const std::shared_ptr<const mpt::Dataset> data = held_dataset(dataset);
    impl.fit(*data, epochs, batch_size, shuffle != 0);
    MPT_API_END
}

mpt_status mpt_trainer_step(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t first, int64_t batch_size,
                            float* loss) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    mpt::capi::ExclusiveUse exclusive(*trainer);
    const std::shared_ptr<const mpt::Dataset> data = held_dataset(dataset);
    const float batch_loss = impl.step(*data, first, batch_size);
    if (loss) *loss = batch_loss;
    MPT_API_END
}

mpt_status mpt_trainer_evaluate(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t batch_size, float* loss,
                                float* accuracy) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    // From fit's own epoch-end callback (this thread; another is refused by the context), fit waits
    // between two epochs with nothing queued and its metrics read: an evaluation may run inside it.
    std::optional<mpt::capi::ExclusiveUse> exclusive;
    if (!(mpt::capi::used_by_this_thread(*trainer) && impl.in_epoch_end_callback())) exclusive.emplace(*trainer);
    const std::shared_ptr<const mpt::Dataset> data = held_dataset(dataset);
    const mpt::EvaluationResult result = impl.evaluate(*data, batch_size);
    if (loss) *loss = result.loss;
    if (accuracy) *accuracy = result.accuracy;
    MPT_API_END
}

mpt_status mpt_trainer_predict(mpt_trainer_t* trainer, const float* inputs, int64_t rows, float* out,
                               int64_t out_count) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    mpt::capi::ExclusiveUse exclusive(*trainer);
    require_pointer(inputs, "inputs");
    require_pointer(out, "out");
    impl.model()->require_prediction_rows(rows);
    const int64_t expected = rows * impl.model()->output_features();
    if (out_count != expected)
        fail(MPT_STATUS_SHAPE_MISMATCH,
             "output count is " + std::to_string(out_count) + ", expected " + std::to_string(expected));
    impl.model()->require_finite_inputs(inputs, rows);
    impl.predict(inputs, rows, out);
    MPT_API_END
}

mpt_status mpt_trainer_predict_dataset(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t batch_size,
                                       float* out, int64_t out_count) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    // As evaluate: fit waits between epochs in its epoch-end callback, with nothing queued.
    std::optional<mpt::capi::ExclusiveUse> exclusive;
    if (!(mpt::capi::used_by_this_thread(*trainer) && impl.in_epoch_end_callback())) exclusive.emplace(*trainer);
    const std::shared_ptr<const mpt::Dataset> data = held_dataset(dataset);
    require_pointer(out, "out");
    const int64_t expected = data->rows() * impl.model()->output_features();
    if (out_count != expected)
        fail(MPT_STATUS_SHAPE_MISMATCH,
             "output count is " + std::to_string(out_count) + ", expected " + std::to_string(expected));
    impl.predict(*data, batch_size, out);
    MPT_API_END
}

mpt_status mpt_trainer_get_precision(const mpt_trainer_t* trainer, mpt_precision* out) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(out, "out");
    *out = impl.precision();
    MPT_API_END
}

mpt_status mpt_trainer_set_learning_rate(mpt_trainer_t* trainer, float learning_rate) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_finite_positive(learning_rate, "learning_rate");
    impl.set_learning_rate(learning_rate);  // from a callback of fit too: its next step reads it
    MPT_API_END
}

mpt_status mpt_trainer_get_learning_rate(const mpt_trainer_t* trainer, float* out) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(out, "out");
    *out = impl.learning_rate();
    MPT_API_END
}

mpt_status mpt_trainer_get_options(const mpt_trainer_t* trainer, mpt_trainer_options_t** out) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(out, "out");
    // The trainer's config holds the options as given, but for the base rate, which it keeps current.
    *out = new mpt_trainer_options{impl.config(), trainer->weight_decay_chosen, trainer->betas_chosen};
    MPT_API_END
}

mpt_status mpt_trainer_get_scheduled_learning_rate(const mpt_trainer_t* trainer, float* out) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(out, "out");
    *out = impl.scheduled_learning_rate();
    MPT_API_END
}

mpt_status mpt_trainer_get_loss_scale(const mpt_trainer_t* trainer, float* scale, int64_t* growth_tracker,
                                      int64_t* skipped_steps) {
    MPT_API_BEGIN
    const mpt::TrainState state = impl_of(trainer, "trainer").observed_state();
    if (scale) *scale = state.loss_scale;
    if (growth_tracker) *growth_tracker = state.growth_tracker;
    if (skipped_steps) *skipped_steps = state.skipped_steps;
    MPT_API_END
}

mpt_status mpt_trainer_get_gradient_norm(const mpt_trainer_t* trainer, float* out) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(out, "out");
    *out = impl.observed_state().gradient_norm;
    MPT_API_END
}

mpt_status mpt_trainer_swap_ema_weights(mpt_trainer_t* trainer, int* holds_averages) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    // As evaluate: from fit's epoch-end callback fit waits between epochs with nothing queued.
    std::optional<mpt::capi::ExclusiveUse> exclusive;
    if (!(mpt::capi::used_by_this_thread(*trainer) && impl.in_epoch_end_callback())) exclusive.emplace(*trainer);
    impl.swap_averaged_weights();
    if (holds_averages) *holds_averages = impl.holds_averaged_weights() ? 1 : 0;
    MPT_API_END
}

mpt_status mpt_trainer_get_progress(const mpt_trainer_t* trainer, int64_t* steps, int64_t* epochs) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    if (steps) *steps = impl.steps_taken();
    if (epochs) *epochs = impl.epochs_completed();
    MPT_API_END
}

mpt_status mpt_trainer_get_batch_size(const mpt_trainer_t* trainer, int64_t* rows) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(rows, "rows");
    *rows = impl.last_batch_size();
    MPT_API_END
}

mpt_status mpt_trainer_get_unfinished_epoch(const mpt_trainer_t* trainer, int64_t* steps, int64_t* rows,
                                            int64_t* batch_size) {
    MPT_API_BEGIN
    const mpt::Trainer::UnfinishedEpoch epoch = impl_of(trainer, "trainer").unfinished_epoch();
    if (steps) *steps = epoch.steps;
    if (rows) *rows = epoch.rows;
    if (batch_size) *batch_size = epoch.batch_size;
    MPT_API_END
}

mpt_status mpt_trainer_save_checkpoint(mpt_trainer_t* trainer, const char* path) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    require_pointer(path, "path");
    // From fit's own progress or epoch-end callback: fit waits between two steps there, where it
    // takes its automatic checkpoints, so the state is whole. (The thread is checked first: only
    // the fitting thread may read in_callback.)
    if (mpt::capi::used_by_this_thread(*trainer) && impl.in_callback()) {
        mpt::save_checkpoint(impl, path);
    } else {
        mpt::capi::ExclusiveUse exclusive(*trainer);
        mpt::save_checkpoint(impl, path);
    }
    MPT_API_END
}

mpt_status mpt_trainer_load_checkpoint(mpt_trainer_t* trainer, const char* path) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    mpt::capi::ExclusiveUse exclusive(*trainer);
    require_pointer(path, "path");
    mpt::load_checkpoint(impl, path);
    MPT_API_END
}

mpt_status mpt_trainer_set_checkpointing(mpt_trainer_t* trainer, const char* directory, int64_t every_steps,
                                         int64_t every_epochs, int64_t keep_last) {
    MPT_API_BEGIN
    mpt::Trainer& impl = impl_of(trainer, "trainer");
    mpt::capi::ExclusiveUse exclusive(*trainer);
    mpt::CheckpointPolicy policy;
    if (directory) {
        policy.directory = directory;
        policy.every_steps = every_steps;
        policy.every_epochs = every_epochs;
        policy.keep_last = keep_last;
        require(every_steps > 0 || every_epochs > 0, MPT_STATUS_INVALID_ARGUMENT,
                "give every_steps or every_epochs (> 0), or a NULL directory to turn checkpointing off");
    }
    impl.set_checkpointing(policy);
    MPT_API_END
}

mpt_status mpt_trainer_get_last_epoch_time(const mpt_trainer_t* trainer, double* seconds, int64_t* steps) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    const mpt::EpochTiming timing = impl.last_epoch_timing();
    if (seconds) *seconds = timing.seconds;
    if (steps) *steps = timing.steps;
    MPT_API_END
}

mpt_status mpt_trainer_get_memory(const mpt_trainer_t* trainer, size_t* planned_bytes, size_t* allocated_bytes) {
    MPT_API_BEGIN
    const mpt::Trainer& impl = impl_of(trainer, "trainer");
    if (planned_bytes) *planned_bytes = impl.executor().planned_bytes();
    if (allocated_bytes) *allocated_bytes = impl.executor().allocated_bytes();
    MPT_API_END
}

}  // extern "C"
