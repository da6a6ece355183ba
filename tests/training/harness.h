// What tests/test_training.cpp and its cases in tests/training/ share: a CPU context, models and
// trainers built through the C API from a few fields, tasks as host arrays (blobs, XOR of signs) and
// their data sets, and the model's weights, memory and predictions as read back through the API.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace mpt_test::training {

// bf16 keeps 8 significant bits: unit roundoff u = 2^-8 (round to nearest). Tolerances for
// mixed-precision results are stated as multiples of it.
inline constexpr double kBf16Roundoff = 1.0 / 256.0;

using mpt_test::TestRng;

inline mpt_context_t* new_context(uint64_t seed = 42) { return mpt_test::create_context(MPT_BACKEND_CPU, seed); }

struct LayerSpec {
    int64_t units;
    mpt_activation activation;
};

inline mpt_model_t* new_model(mpt_context_t* context, int64_t inputs, const std::vector<LayerSpec>& layers) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, inputs, &model));
    for (const LayerSpec& layer : layers) REQUIRE_OK(mpt_model_add_dense(model, layer.units, layer.activation));
    return model;
}

struct TrainerSetup {
    mpt_precision precision = MPT_PRECISION_FP32;
    mpt_loss loss = MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    mpt_optimizer optimizer = MPT_OPTIMIZER_SGD;
    float learning_rate = 0.1f;
    float momentum = 0.0f;
    bool nesterov = false;
    float adam_epsilon = 0.0f;  // 0: the default (Adam's, or RMSprop's with rmsprop_rho)
    float rmsprop_rho = 0.0f;   // 0: the default; else set with adam_epsilon (or its default)
    bool rmsprop_centered = false;
    float lion_beta1 = -1.0f, lion_beta2 = -1.0f;  // < 0: the defaults; else set together
    float weight_decay = -1.0f;                    // < 0: the default
    bool weight_decay_before_optimizer = false;    // the order of the two setters
    mpt_loss_scaling scaling = MPT_LOSS_SCALING_DEFAULT;
    float initial_scale = 0.0f;  // 0: the default
    bool dynamics = false;
    float growth = 2.0f, backoff = 0.5f, min_scale = 1.0f, max_scale = 16777216.0f;
    int64_t interval = 2000;
    mpt_lr_schedule schedule = MPT_LR_SCHEDULE_CONSTANT;
    int64_t warmup_steps = 0, decay_steps = 0;
    float decay_factor = 1.0f;
};

inline mpt_trainer_t* new_trainer(mpt_model_t* model, const TrainerSetup& setup) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, setup.precision));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, setup.loss));
    if (setup.weight_decay >= 0.0f && setup.weight_decay_before_optimizer)
        REQUIRE_OK(mpt_trainer_options_set_weight_decay(options, setup.weight_decay));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, setup.optimizer));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, setup.learning_rate));
    if (setup.momentum > 0.0f) REQUIRE_OK(mpt_trainer_options_set_momentum(options, setup.momentum, setup.nesterov));
    if (setup.adam_epsilon > 0.0f) REQUIRE_OK(mpt_trainer_options_set_adam(options, 0.9f, 0.999f, setup.adam_epsilon));
    if (setup.rmsprop_rho > 0.0f)
        REQUIRE_OK(mpt_trainer_options_set_rmsprop(options, setup.rmsprop_rho,
                                                   setup.adam_epsilon > 0.0f ? setup.adam_epsilon : 1e-7f));
    if (setup.weight_decay >= 0.0f && !setup.weight_decay_before_optimizer)
        REQUIRE_OK(mpt_trainer_options_set_weight_decay(options, setup.weight_decay));
    if (setup.rmsprop_centered) REQUIRE_OK(mpt_trainer_options_set_rmsprop_centered(options, 1));
    if (setup.lion_beta1 >= 0.0f) REQUIRE_OK(mpt_trainer_options_set_lion(options, setup.lion_beta1, setup.lion_beta2));
    if (setup.initial_scale > 0.0f)
        REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, setup.scaling, setup.initial_scale));
    if (setup.dynamics)
        REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, setup.growth, setup.backoff, setup.interval,
                                                                setup.min_scale, setup.max_scale));
    REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, setup.schedule, setup.warmup_steps, setup.decay_steps,
                                                   setup.decay_factor));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    return trainer;
}

// A dataset as host arrays: labels for sparse cross-entropy, float targets for the other losses.
struct Task {
    int64_t rows = 0, features = 0, classes = 0;
    std::vector<float> x;
    std::vector<int32_t> labels;  // one per row (also kept for float-target tasks when meaningful)
    std::vector<float> targets;   // rows * classes, when the task has float targets
};

// One-hot float targets from the labels.
inline void add_one_hot(Task& task) {
    task.targets.assign(static_cast<size_t>(task.rows * task.classes), 0.0f);
    for (int64_t r = 0; r < task.rows; ++r) task.targets[static_cast<size_t>(r * task.classes + task.labels[r])] = 1.0f;
}

inline mpt_dataset_t* labels_dataset(mpt_context_t* context, const Task& task) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, task.x.data(), task.rows, task.features, task.labels.data(),
                                      static_cast<int32_t>(task.classes), 1, &dataset));
    return dataset;
}

inline mpt_dataset_t* targets_dataset(mpt_context_t* context, const Task& task) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(context, task.x.data(), task.rows, task.features, task.targets.data(),
                                              task.classes, 1, &dataset));
    return dataset;
}

inline mpt_dataset_t* dataset_for(mpt_context_t* context, const Task& task, mpt_loss loss) {
    return loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? labels_dataset(context, task)
                                                            : targets_dataset(context, task);
}

// Gaussian blobs: `classes` centres drawn once from `centre_seed`, spread `spread` around them.
inline Task make_blobs(int64_t rows, int64_t features, int64_t classes, double separation, double spread, uint64_t seed,
                       uint64_t centre_seed = 1) {
    TestRng centre_rng(centre_seed), rng(seed);
    std::vector<double> centres(static_cast<size_t>(classes * features));
    for (double& c : centres) c = separation * centre_rng.normal();
    Task task;
    task.rows = rows;
    task.features = features;
    task.classes = classes;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t label = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(classes));
        for (int64_t f = 0; f < features; ++f)
            task.x.push_back(
                static_cast<float>(centres[static_cast<size_t>(label * features + f)] + spread * rng.normal()));
        task.labels.push_back(label);
    }
    return task;
}

// A rule no linear model can learn: the class is whether x0 and x1 have the same sign (XOR of
// signs), with a margin of 0.1 around the axes; x2 and x3 are noise.
inline Task make_xor(int64_t rows, uint64_t seed) {
    TestRng rng(seed);
    Task task;
    task.rows = rows;
    task.features = 4;
    task.classes = 2;
    while (static_cast<int64_t>(task.labels.size()) < rows) {
        const double x0 = rng.uniform(-1, 1), x1 = rng.uniform(-1, 1);
        if (std::fabs(x0) < 0.1 || std::fabs(x1) < 0.1) continue;
        task.x.insert(task.x.end(), {static_cast<float>(x0), static_cast<float>(x1),
                                     static_cast<float>(rng.uniform(-1, 1)), static_cast<float>(rng.uniform(-1, 1))});
        task.labels.push_back(x0 * x1 > 0 ? 1 : 0);
    }
    return task;
}

// The model's fp32 master weights as read through mpt_model_get_weights, per layer {w, b}.
inline std::vector<std::pair<std::vector<float>, std::vector<float>>> read_weights(
    mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<std::pair<std::vector<float>, std::vector<float>>> layers;
    int64_t fan_in = inputs;
    for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<float> w(static_cast<size_t>(specs[i].units * fan_in)), b(static_cast<size_t>(specs[i].units));
        REQUIRE_OK(mpt_model_get_weights(model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()),
                                         b.data(), static_cast<int64_t>(b.size())));
        layers.emplace_back(std::move(w), std::move(b));
        fan_in = specs[i].units;
    }
    return layers;
}

inline std::vector<float> flat_weights(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<float> all;
    for (const auto& [w, b] : read_weights(model, inputs, specs)) {
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

// The bytes a trainer holds now (mpt_trainer_get_memory's allocated bytes).
inline size_t trainer_allocated(mpt_trainer_t* trainer) {
    size_t planned = 0, bytes = 0;
    REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &bytes));
    return bytes;
}

// The bytes a context's memory accounting holds now.
inline size_t context_used(mpt_context_t* context) {
    size_t bytes = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &bytes, nullptr));
    return bytes;
}

// Whether `auto` resolves to mixed-bf16 on the CPU: there the CPU multiplies bf16 natively (AMX
// tiles or AVX512-BF16 dot products), and predictions on a few rows make weight words.
inline bool auto_is_native_bf16() {
    mpt_context_t* probe = new_context();
    mpt_precision automatic = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(probe, MPT_PRECISION_AUTO, &automatic));
    mpt_context_destroy(probe);
    return automatic == MPT_PRECISION_MIXED_BF16;
}

// Whether the CPU backend multiplies `precision`'s low dtype natively, as a context's description
// says ("bf16_gemm", "fp16_gemm"): AMX tiles multiply both, AVX512-BF16's dot products bf16 alone.
inline bool cpu_multiplies_natively(mpt_precision precision) {
    mpt_context_t* probe = new_context();
    size_t length = 0;
    REQUIRE_OK(mpt_context_describe(probe, nullptr, 0, &length));
    std::string text(length + 1, '\0');
    REQUIRE_OK(mpt_context_describe(probe, &text[0], text.size(), &length));
    mpt_context_destroy(probe);
    const std::string key = precision == MPT_PRECISION_MIXED_FP16 ? "\"fp16_gemm\":\"" : "\"bf16_gemm\":\"";
    const size_t at = text.find(key);
    INFO(text);
    REQUIRE(at != std::string::npos);
    const std::string emulated = "emulated in fp32";
    return text.compare(at + key.size(), emulated.size(), emulated) != 0;
}

using mpt_test::same_bits;

// Random weights and non-zero biases written through mpt_model_set_weights (so that every bias
// path, and any leak from padded units, shows up).
inline void randomise_weights(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs, uint64_t seed,
                              double weight_scale = 0.6, double bias_scale = 0.5) {
    TestRng rng(seed);
    int64_t fan_in = inputs;
    for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<float> w(static_cast<size_t>(specs[i].units * fan_in)), b(static_cast<size_t>(specs[i].units));
        for (float& v : w) v = static_cast<float>(weight_scale * rng.normal());
        for (float& v : b) v = static_cast<float>(bias_scale * rng.normal());
        REQUIRE_OK(mpt_model_set_weights(model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()),
                                         b.data(), static_cast<int64_t>(b.size())));
        fan_in = specs[i].units;
    }
}

inline int64_t argmax(const float* values, int64_t count) { return std::max_element(values, values + count) - values; }

// Accuracy of predictions (rows x classes) against labels, computed here.
inline double accuracy_of(const std::vector<float>& predictions, const Task& task) {
    int64_t correct = 0;
    for (int64_t r = 0; r < task.rows; ++r)
        correct += argmax(predictions.data() + r * task.classes, task.classes) == task.labels[static_cast<size_t>(r)];
    return static_cast<double>(correct) / static_cast<double>(task.rows);
}

inline std::vector<float> trainer_predict(mpt_trainer_t* trainer, const Task& task) {
    std::vector<float> out(static_cast<size_t>(task.rows * task.classes));
    REQUIRE_OK(mpt_trainer_predict(trainer, task.x.data(), task.rows, out.data(), static_cast<int64_t>(out.size())));
    return out;
}

inline std::vector<float> model_predict(mpt_model_t* model, const Task& task) {
    std::vector<float> out(static_cast<size_t>(task.rows * task.classes));
    REQUIRE_OK(mpt_model_predict(model, task.x.data(), task.rows, out.data(), static_cast<int64_t>(out.size())));
    return out;
}

inline const char* precision_name(mpt_precision precision) {
    switch (precision) {
        case MPT_PRECISION_FP32:
            return "fp32";
        case MPT_PRECISION_MIXED_FP16:
            return "mixed-fp16";
        case MPT_PRECISION_MIXED_BF16:
            return "mixed-bf16";
        default:
            return "auto";
    }
}

}  // namespace mpt_test::training
