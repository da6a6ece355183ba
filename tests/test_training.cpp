// End-to-end training through the C API (libmptrain.so only): models learn, mixed precision agrees
// with fp32, every loss and optimizer follows its definition, the loss scaler behaves step by step,
// runs are deterministic, and padding never leaks. References are written here, in double
// precision, from the definitions (Keras semantics), sharing no code with the library.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

// ---- helpers ---------------------------------------------------------------------------------


// bf16 keeps 8 significant bits: unit roundoff u = 2^-8 (round to nearest). Tolerances for
// mixed-precision results are stated as multiples of it.
constexpr double kBf16Roundoff = 1.0 / 256.0;

using mpt_test::TestRng;

mpt_context_t* new_context(uint64_t seed = 42) { return mpt_test::create_context(MPT_BACKEND_CPU, seed); }

struct LayerSpec {
    int64_t units;
    mpt_activation activation;
};

mpt_model_t* new_model(mpt_context_t* context, int64_t inputs, const std::vector<LayerSpec>& layers) {
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
    float weight_decay = -1.0f;  // < 0: the default
    bool weight_decay_before_optimizer = false;  // the order of the two setters
    mpt_loss_scaling scaling = MPT_LOSS_SCALING_DEFAULT;
    float initial_scale = 0.0f;  // 0: the default
    bool dynamics = false;
    float growth = 2.0f, backoff = 0.5f, min_scale = 1.0f, max_scale = 16777216.0f;
    int64_t interval = 2000;
    mpt_lr_schedule schedule = MPT_LR_SCHEDULE_CONSTANT;
    int64_t warmup_steps = 0, decay_steps = 0;
    float decay_factor = 1.0f;
};

mpt_trainer_t* new_trainer(mpt_model_t* model, const TrainerSetup& setup) {
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
    std::vector<int32_t> labels;   // one per row (also kept for float-target tasks when meaningful)
    std::vector<float> targets;    // rows * classes, when the task has float targets
};

// One-hot float targets from the labels.
void add_one_hot(Task& task) {
    task.targets.assign(static_cast<size_t>(task.rows * task.classes), 0.0f);
    for (int64_t r = 0; r < task.rows; ++r) task.targets[static_cast<size_t>(r * task.classes + task.labels[r])] = 1.0f;
}

mpt_dataset_t* labels_dataset(mpt_context_t* context, const Task& task) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, task.x.data(), task.rows, task.features, task.labels.data(),
                                      static_cast<int32_t>(task.classes), 1, &dataset));
    return dataset;
}

mpt_dataset_t* targets_dataset(mpt_context_t* context, const Task& task) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(context, task.x.data(), task.rows, task.features, task.targets.data(),
                                              task.classes, 1, &dataset));
    return dataset;
}

mpt_dataset_t* dataset_for(mpt_context_t* context, const Task& task, mpt_loss loss) {
    return loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? labels_dataset(context, task) : targets_dataset(context, task);
}

// Gaussian blobs: `classes` centres drawn once from `centre_seed`, spread `spread` around them.
Task make_blobs(int64_t rows, int64_t features, int64_t classes, double separation, double spread, uint64_t seed,
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
            task.x.push_back(static_cast<float>(centres[static_cast<size_t>(label * features + f)] + spread * rng.normal()));
        task.labels.push_back(label);
    }
    return task;
}

// A rule no linear model can learn: the class is whether x0 and x1 have the same sign (XOR of
// signs), with a margin of 0.1 around the axes; x2 and x3 are noise.
Task make_xor(int64_t rows, uint64_t seed) {
    TestRng rng(seed);
    Task task;
    task.rows = rows;
    task.features = 4;
    task.classes = 2;
    while (static_cast<int64_t>(task.labels.size()) < rows) {
        const double x0 = rng.uniform(-1, 1), x1 = rng.uniform(-1, 1);
        if (std::fabs(x0) < 0.1 || std::fabs(x1) < 0.1) continue;
        task.x.insert(task.x.end(), {static_cast<float>(x0), static_cast<float>(x1), static_cast<float>(rng.uniform(-1, 1)),
                                     static_cast<float>(rng.uniform(-1, 1))});
        task.labels.push_back(x0 * x1 > 0 ? 1 : 0);
    }
    return task;
}

// ---- reference network (double precision) ----------------------------------------------------

struct RefLayer {
    int64_t units = 0, inputs = 0;
    mpt_activation activation = MPT_ACTIVATION_LINEAR;
    std::vector<double> w;  // [units, inputs]
    std::vector<double> b;  // [units]
};

using RefNet = std::vector<RefLayer>;

// The model's fp32 master weights as read through mpt_model_get_weights, per layer {w, b}.
std::vector<std::pair<std::vector<float>, std::vector<float>>> read_weights(mpt_model_t* model, int64_t inputs,
                                                                            const std::vector<LayerSpec>& specs) {
    std::vector<std::pair<std::vector<float>, std::vector<float>>> layers;
    int64_t fan_in = inputs;
    for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<float> w(static_cast<size_t>(specs[i].units * fan_in)), b(static_cast<size_t>(specs[i].units));
        REQUIRE_OK(mpt_model_get_weights(model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()), b.data(),
                                         static_cast<int64_t>(b.size())));
        layers.emplace_back(std::move(w), std::move(b));
        fan_in = specs[i].units;
    }
    return layers;
}

std::vector<float> flat_weights(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<float> all;
    for (const auto& [w, b] : read_weights(model, inputs, specs)) {
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

// The bytes a trainer holds now (mpt_trainer_get_memory's allocated bytes).
size_t trainer_allocated(mpt_trainer_t* trainer) {
    size_t planned = 0, bytes = 0;
    REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &bytes));
    return bytes;
}

// The bytes a context's memory accounting holds now.
size_t context_used(mpt_context_t* context) {
    size_t bytes = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &bytes, nullptr));
    return bytes;
}

// Whether `auto` resolves to mixed-bf16 on the CPU: there the CPU has AMX, and predictions on a
// few rows make weight words.
bool amx_resolves_auto() {
    mpt_context_t* probe = new_context();
    mpt_precision automatic = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(probe, MPT_PRECISION_AUTO, &automatic));
    mpt_context_destroy(probe);
    return automatic == MPT_PRECISION_MIXED_BF16;
}

using mpt_test::same_bits;

RefNet read_net(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    RefNet net;
    int64_t fan_in = inputs;
    const auto weights = read_weights(model, inputs, specs);
    for (size_t i = 0; i < specs.size(); ++i) {
        RefLayer layer;
        layer.units = specs[i].units;
        layer.inputs = fan_in;
        layer.activation = specs[i].activation;
        layer.w.assign(weights[i].first.begin(), weights[i].first.end());
        layer.b.assign(weights[i].second.begin(), weights[i].second.end());
        net.push_back(std::move(layer));
        fan_in = specs[i].units;
    }
    return net;
}

// Random weights and non-zero biases written through mpt_model_set_weights (so that every bias
// path, and any leak from padded units, shows up).
void randomise_weights(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs, uint64_t seed,
                       double weight_scale = 0.6, double bias_scale = 0.5) {
    TestRng rng(seed);
    int64_t fan_in = inputs;
    for (size_t i = 0; i < specs.size(); ++i) {
        std::vector<float> w(static_cast<size_t>(specs[i].units * fan_in)), b(static_cast<size_t>(specs[i].units));
        for (float& v : w) v = static_cast<float>(weight_scale * rng.normal());
        for (float& v : b) v = static_cast<float>(bias_scale * rng.normal());
        REQUIRE_OK(mpt_model_set_weights(model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()), b.data(),
                                         static_cast<int64_t>(b.size())));
        fan_in = specs[i].units;
    }
}

double activate(mpt_activation activation, double z) {
    switch (activation) {
        case MPT_ACTIVATION_RELU: return z > 0 ? z : 0;
        case MPT_ACTIVATION_SIGMOID: return 1 / (1 + std::exp(-z));
        case MPT_ACTIVATION_TANH: return std::tanh(z);
        case MPT_ACTIVATION_LEAKY_RELU: return z > 0 ? z : 0.2 * z;
        case MPT_ACTIVATION_ELU: return z > 0 ? z : std::expm1(z);
        case MPT_ACTIVATION_SELU: return 1.0507009873554805 * (z > 0 ? z : 1.6732632423543772 * std::expm1(z));
        case MPT_ACTIVATION_SOFTPLUS: return std::log1p(std::exp(z));
        case MPT_ACTIVATION_SOFTSIGN: return z / (1 + std::abs(z));
        default: return z;
    }
}

// d activation / dz, from the output y.
double activation_slope(mpt_activation activation, double y) {
    switch (activation) {
        case MPT_ACTIVATION_RELU: return y > 0 ? 1 : 0;
        case MPT_ACTIVATION_SIGMOID: return y * (1 - y);
        case MPT_ACTIVATION_TANH: return 1 - y * y;
        case MPT_ACTIVATION_LEAKY_RELU: return y > 0 ? 1 : 0.2;
        case MPT_ACTIVATION_ELU: return y > 0 ? 1 : y + 1;
        case MPT_ACTIVATION_SELU: return y > 0 ? 1.0507009873554805 : y + 1.0507009873554805 * 1.6732632423543772;
        case MPT_ACTIVATION_SOFTPLUS: return -std::expm1(-y);
        case MPT_ACTIVATION_SOFTSIGN: return (1 - std::abs(y)) * (1 - std::abs(y));
        default: return 1;
    }
}

std::vector<double> softmax(const std::vector<double>& z) {
    const double top = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (size_t c = 0; c < z.size(); ++c) sum += (p[c] = std::exp(z[c] - top));
    for (double& v : p) v /= sum;
    return p;
}

struct RefForward {
    std::vector<std::vector<double>> outputs;  // outputs[0]: the input; outputs[i + 1]: layer i's activation
    std::vector<double> logits;                // the last layer before its activation
};

RefForward forward(const RefNet& net, const float* x) {
    RefForward result;
    result.outputs.emplace_back(x, x + net.front().inputs);
    for (size_t i = 0; i < net.size(); ++i) {
        const RefLayer& layer = net[i];
        const std::vector<double>& in = result.outputs.back();
        std::vector<double> z(static_cast<size_t>(layer.units));
        for (int64_t u = 0; u < layer.units; ++u) {
            double sum = layer.b[static_cast<size_t>(u)];
            for (int64_t k = 0; k < layer.inputs; ++k) sum += layer.w[static_cast<size_t>(u * layer.inputs + k)] * in[static_cast<size_t>(k)];
            z[static_cast<size_t>(u)] = sum;
        }
        std::vector<double> y(z.size());
        if (layer.activation == MPT_ACTIVATION_SOFTMAX) {
            y = softmax(z);
        } else {
            for (size_t u = 0; u < z.size(); ++u) y[u] = activate(layer.activation, z[u]);
        }
        if (i + 1 == net.size()) result.logits = z;
        result.outputs.push_back(std::move(y));
    }
    return result;
}

// The loss of one row and its gradient with respect to the logits, from the definitions (Keras):
//  - categorical (sparse or one-hot) with a softmax or linear head: -sum t log softmax(z) (a linear
//    head is taken as logits);
//  - categorical with another head: p = y / sum(y) (renormalised), -sum t log p;
//  - binary cross-entropy: mean over outputs of -(t log y + (1 - t) log(1 - y));
//  - mean squared error: mean over outputs of (y - t)^2.
// No target in these tests comes near the [1e-7, 1 - 1e-7] clipping.
double reference_head(mpt_loss loss, mpt_activation head, const RefForward& pass, const std::vector<double>& t,
                      std::vector<double>& dz) {
    const std::vector<double>& z = pass.logits;
    const std::vector<double>& y = pass.outputs.back();
    const size_t classes = z.size();
    dz.assign(classes, 0.0);
    double value = 0;
    const bool categorical =
        loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY || loss == MPT_LOSS_CATEGORICAL_CROSSENTROPY;
    if (categorical && (head == MPT_ACTIVATION_SOFTMAX || head == MPT_ACTIVATION_LINEAR)) {
        const std::vector<double> p = softmax(z);
        double target_sum = 0;
        for (size_t c = 0; c < classes; ++c) {
            value -= t[c] * std::log(p[c]);
            target_sum += t[c];
        }
        for (size_t c = 0; c < classes; ++c) dz[c] = p[c] * target_sum - t[c];
    } else if (categorical) {
        double sum = 0, target_sum = 0;
        for (size_t c = 0; c < classes; ++c) {
            sum += y[c];
            target_sum += t[c];
        }
        for (size_t c = 0; c < classes; ++c) {
            value -= t[c] * std::log(y[c] / sum);
            const double dy = -t[c] / y[c] + target_sum / sum;
            dz[c] = dy * activation_slope(head, y[c]);
        }
    } else if (loss == MPT_LOSS_BINARY_CROSSENTROPY) {
        for (size_t c = 0; c < classes; ++c) {
            value -= (t[c] * std::log(y[c]) + (1 - t[c]) * std::log(1 - y[c])) / static_cast<double>(classes);
            const double dy = (-t[c] / y[c] + (1 - t[c]) / (1 - y[c])) / static_cast<double>(classes);
            dz[c] = dy * activation_slope(head, y[c]);
        }
    } else {
        for (size_t c = 0; c < classes; ++c) {
            value += (y[c] - t[c]) * (y[c] - t[c]) / static_cast<double>(classes);
            dz[c] = 2 * (y[c] - t[c]) / static_cast<double>(classes) * activation_slope(head, y[c]);
        }
    }
    return value;
}

std::vector<double> row_targets(const Task& task, mpt_loss loss, int64_t row) {
    std::vector<double> t(static_cast<size_t>(task.classes), 0.0);
    if (loss == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        t[static_cast<size_t>(task.labels[static_cast<size_t>(row)])] = 1.0;
    } else {
        for (int64_t c = 0; c < task.classes; ++c) t[static_cast<size_t>(c)] = task.targets[static_cast<size_t>(row * task.classes + c)];
    }
    return t;
}

// Mean loss over rows [first, first + rows) and its gradient with respect to every parameter.
struct RefGradients {
    double loss = 0;
    std::vector<std::vector<double>> w, b;
};

RefGradients reference_gradients(const RefNet& net, const Task& task, mpt_loss loss, int64_t first, int64_t rows) {
    RefGradients grads;
    for (const RefLayer& layer : net) {
        grads.w.emplace_back(layer.w.size(), 0.0);
        grads.b.emplace_back(layer.b.size(), 0.0);
    }
    for (int64_t r = first; r < first + rows; ++r) {
        const RefForward pass = forward(net, task.x.data() + r * task.features);
        std::vector<double> delta;
        grads.loss += reference_head(loss, net.back().activation, pass, row_targets(task, loss, r), delta) / rows;
        for (double& d : delta) d /= static_cast<double>(rows);
        for (size_t i = net.size(); i-- > 0;) {
            const RefLayer& layer = net[i];
            const std::vector<double>& in = pass.outputs[i];
            for (int64_t u = 0; u < layer.units; ++u) {
                grads.b[i][static_cast<size_t>(u)] += delta[static_cast<size_t>(u)];
                for (int64_t k = 0; k < layer.inputs; ++k)
                    grads.w[i][static_cast<size_t>(u * layer.inputs + k)] += delta[static_cast<size_t>(u)] * in[static_cast<size_t>(k)];
            }
            if (i == 0) break;
            std::vector<double> previous(static_cast<size_t>(layer.inputs), 0.0);
            for (int64_t k = 0; k < layer.inputs; ++k) {
                double sum = 0;
                for (int64_t u = 0; u < layer.units; ++u)
                    sum += layer.w[static_cast<size_t>(u * layer.inputs + k)] * delta[static_cast<size_t>(u)];
                previous[static_cast<size_t>(k)] = sum * activation_slope(net[i - 1].activation, in[static_cast<size_t>(k)]);
            }
            delta = std::move(previous);
        }
    }
    return grads;
}

double reference_mean_loss(const RefNet& net, const Task& task, mpt_loss loss) {
    double total = 0;
    for (int64_t r = 0; r < task.rows; ++r) {
        std::vector<double> dz;
        total += reference_head(loss, net.back().activation, forward(net, task.x.data() + r * task.features),
                                row_targets(task, loss, r), dz);
    }
    return total / static_cast<double>(task.rows);
}

int64_t argmax(const float* values, int64_t count) {
    return std::max_element(values, values + count) - values;
}

// Accuracy of predictions (rows x classes) against labels, computed here.
double accuracy_of(const std::vector<float>& predictions, const Task& task) {
    int64_t correct = 0;
    for (int64_t r = 0; r < task.rows; ++r)
        correct += argmax(predictions.data() + r * task.classes, task.classes) == task.labels[static_cast<size_t>(r)];
    return static_cast<double>(correct) / static_cast<double>(task.rows);
}

std::vector<float> trainer_predict(mpt_trainer_t* trainer, const Task& task) {
    std::vector<float> out(static_cast<size_t>(task.rows * task.classes));
    REQUIRE_OK(mpt_trainer_predict(trainer, task.x.data(), task.rows, out.data(), static_cast<int64_t>(out.size())));
    return out;
}

std::vector<float> model_predict(mpt_model_t* model, const Task& task) {
    std::vector<float> out(static_cast<size_t>(task.rows * task.classes));
    REQUIRE_OK(mpt_model_predict(model, task.x.data(), task.rows, out.data(), static_cast<int64_t>(out.size())));
    return out;
}

const char* precision_name(mpt_precision precision) {
    switch (precision) {
        case MPT_PRECISION_FP32: return "fp32";
        case MPT_PRECISION_MIXED_FP16: return "mixed-fp16";
        case MPT_PRECISION_MIXED_BF16: return "mixed-bf16";
        default: return "auto";
    }
}

}  // namespace

// ---- (1) learning ------------------------------------------------------------------------------

// Trains specs on the XOR-of-signs rule and checks >= 0.95 held-out accuracy, from the trainer's
// outputs (in its precision), the fp32 model's and evaluate's.
void check_learns_xor(const std::vector<LayerSpec>& specs, mpt_precision precision) {
    const Task train = make_xor(1024, 1), test = make_xor(512, 2);
    const std::string precision_label = precision_name(precision);
    CAPTURE(precision_label);
    mpt_context_t* context = new_context(42);
    mpt_model_t* model = new_model(context, 4, specs);
    TrainerSetup setup;
    setup.precision = precision;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    mpt_precision actual = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &actual));
    CHECK(actual == precision);
    mpt_dataset_t* train_set = labels_dataset(context, train);
    mpt_dataset_t* test_set = labels_dataset(context, test);
    REQUIRE_OK(mpt_trainer_fit(trainer, train_set, 30, 32, 1));

    const double trainer_accuracy = accuracy_of(trainer_predict(trainer, test), test);
    const double fp32_accuracy = accuracy_of(model_predict(model, test), test);
    CHECK(trainer_accuracy >= 0.95);
    CHECK(fp32_accuracy >= 0.95);
    float evaluated = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, test_set, 0, nullptr, &evaluated));
    CHECK(std::fabs(evaluated - trainer_accuracy) <= 2.0 / 512);  // a borderline row or two may flip
    mpt_dataset_destroy(test_set);
    mpt_dataset_destroy(train_set);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("an MLP learns the XOR-of-signs rule to >= 0.95 held-out accuracy in fp32, mixed-fp16 and mixed-bf16") {
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {32, MPT_ACTIVATION_RELU}, {2, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16})
        check_learns_xor(specs, precision);
}

// Their derivatives come from the stored outputs, rounded to bf16 or fp16 in mixed precision.
TEST_CASE("leaky ReLU, ELU, SELU, softplus and softsign hidden layers learn the XOR-of-signs rule in mixed-bf16 and mixed-fp16") {
    for (mpt_activation hidden : {MPT_ACTIVATION_LEAKY_RELU, MPT_ACTIVATION_ELU, MPT_ACTIVATION_SELU,
                                  MPT_ACTIVATION_SOFTPLUS, MPT_ACTIVATION_SOFTSIGN}) {
        CAPTURE(hidden);
        const std::vector<LayerSpec> specs = {{32, hidden}, {32, hidden}, {2, MPT_ACTIVATION_SOFTMAX}};
        for (mpt_precision precision : {MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16})
            check_learns_xor(specs, precision);
    }
}

// ---- (2) mixed vs fp32 ---------------------------------------------------------------------------

// Overlapping blobs (accuracy well below 1, so it can move). The same seed, data and shuffles are
// trained in fp32 and in each mixed precision. bf16 has an 8-bit significand (u = 2^-8): every
// GEMM input rounds with relative error <= u, so logits carry a relative error of a few u, and the
// final mean loss, an average of such perturbed terms, moves by a small multiple of u. We allow
// 8u (about 0.031) relative on the final loss and 8u absolute on the final accuracy (about 8 of
// 1024 rows changing side). fp16 (11-bit significand) is held to the same bound.
TEST_CASE("mixed-bf16 and mixed-fp16 end within 8 bf16 roundoffs (8 * 2^-8) of fp32's final loss and accuracy") {
    const Task train = make_blobs(1024, 8, 4, 1.0, 1.0, 11), test = make_blobs(1024, 8, 4, 1.0, 1.0, 12);
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {4, MPT_ACTIVATION_SOFTMAX}};
    float loss[3] = {}, accuracy[3] = {};
    const mpt_precision precisions[3] = {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16};
    std::vector<float> fp32_weights;
    for (int p = 0; p < 3; ++p) {
        mpt_context_t* context = new_context(7);
        mpt_model_t* model = new_model(context, 8, specs);
        TrainerSetup setup;
        setup.precision = precisions[p];
        setup.learning_rate = 0.05f;
        setup.momentum = 0.9f;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* train_set = labels_dataset(context, train);
        REQUIRE_OK(mpt_trainer_fit(trainer, train_set, 8, 32, 1));
        // Both judged in fp32 on held-out data, loss and accuracy computed here.
        const RefNet net = read_net(model, 8, specs);
        loss[p] = static_cast<float>(reference_mean_loss(net, test, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
        accuracy[p] = static_cast<float>(accuracy_of(model_predict(model, test), test));
        const std::vector<float> weights = flat_weights(model, 8, specs);
        if (p == 0) fp32_weights = weights;
        else CHECK_FALSE(same_bits(weights, fp32_weights));  // the mixed run really ran in low precision
        mpt_dataset_destroy(train_set);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    INFO("final held-out loss fp32 " << loss[0] << ", bf16 " << loss[1] << ", fp16 " << loss[2] << "; accuracy "
                                         << accuracy[0] << ", " << accuracy[1] << ", " << accuracy[2]);
    CHECK(accuracy[0] > 0.6f);  // learned something, and not trivially perfect
    CHECK(accuracy[0] < 0.99f);
    for (int p = 1; p < 3; ++p) {
        const std::string precision_label = precision_name(precisions[p]);
        CAPTURE(precision_label);
        CHECK(std::fabs(loss[p] - loss[0]) <= 8 * kBf16Roundoff * loss[0]);
        CHECK(std::fabs(accuracy[p] - accuracy[0]) <= 8 * kBf16Roundoff);
    }
}

// ---- (3) losses and optimizers ------------------------------------------------------------------

namespace {

struct LossCase {
    const char* name;
    mpt_loss loss;
    mpt_activation head;
};

const LossCase kLossCases[] = {
    {"sparse categorical cross-entropy, softmax", MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX},
    {"categorical cross-entropy, softmax", MPT_LOSS_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX},
    {"categorical cross-entropy, sigmoid (renormalised)", MPT_LOSS_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
    {"binary cross-entropy, sigmoid", MPT_LOSS_BINARY_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
    {"mean squared error, linear", MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_LINEAR},
};

// A learnable task for each loss, 4 features, 3 outputs.
Task task_for(mpt_loss loss, int64_t rows, uint64_t seed) {
    Task task = make_blobs(rows, 4, 3, 1.5, 0.6, seed);
    if (loss == MPT_LOSS_CATEGORICAL_CROSSENTROPY) add_one_hot(task);
    if (loss == MPT_LOSS_BINARY_CROSSENTROPY) {  // independent yes/no questions about the point
        task.targets.resize(static_cast<size_t>(rows * 3));
        for (int64_t r = 0; r < rows; ++r) {
            const float* x = task.x.data() + r * 4;
            task.targets[static_cast<size_t>(r * 3 + 0)] = x[0] > 0 ? 1.0f : 0.0f;
            task.targets[static_cast<size_t>(r * 3 + 1)] = x[1] + x[2] > 0 ? 1.0f : 0.0f;
            task.targets[static_cast<size_t>(r * 3 + 2)] = task.labels[static_cast<size_t>(r)] == 2 ? 1.0f : 0.0f;
        }
    }
    if (loss == MPT_LOSS_MEAN_SQUARED_ERROR) {  // a smooth regression
        task.targets.resize(static_cast<size_t>(rows * 3));
        for (int64_t r = 0; r < rows; ++r) {
            const float* x = task.x.data() + r * 4;
            task.targets[static_cast<size_t>(r * 3 + 0)] = 0.5f * x[0] - 0.3f * x[1];
            task.targets[static_cast<size_t>(r * 3 + 1)] = std::tanh(x[2] + x[3]);
            task.targets[static_cast<size_t>(r * 3 + 2)] = 0.2f * x[0] * x[1];
        }
    }
    return task;
}

struct OptimizerCase {
    const char* name;
    mpt_optimizer optimizer;
    float learning_rate;
    float momentum;
    bool nesterov;
};

const OptimizerCase kOptimizerCases[] = {
    {"SGD", MPT_OPTIMIZER_SGD, 0.1f, 0.0f, false},
    {"SGD momentum", MPT_OPTIMIZER_SGD, 0.03f, 0.9f, false},
    {"SGD Nesterov", MPT_OPTIMIZER_SGD, 0.03f, 0.9f, true},
    {"Adam", MPT_OPTIMIZER_ADAM, 0.01f, 0.0f, false},
    {"AdamW", MPT_OPTIMIZER_ADAMW, 0.01f, 0.0f, false},
    {"RMSprop", MPT_OPTIMIZER_RMSPROP, 0.003f, 0.0f, false},
    {"RMSprop momentum", MPT_OPTIMIZER_RMSPROP, 0.001f, 0.9f, false},
    {"Lion", MPT_OPTIMIZER_LION, 0.003f, 0.0f, false},
};

}  // namespace

TEST_CASE("every loss with every optimizer starts at the reference loss and decreases it by more than half") {
    for (const LossCase& loss_case : kLossCases) {
        for (const OptimizerCase& optimizer_case : kOptimizerCases) {
            const std::string loss_name = loss_case.name, optimizer_name = optimizer_case.name;
            CAPTURE(loss_name);
            CAPTURE(optimizer_name);
            const Task task = task_for(loss_case.loss, 384, 5);
            const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_TANH}, {3, loss_case.head}};
            mpt_context_t* context = new_context(3);
            mpt_model_t* model = new_model(context, 4, specs);
            TrainerSetup setup;
            setup.loss = loss_case.loss;
            setup.optimizer = optimizer_case.optimizer;
            setup.learning_rate = optimizer_case.learning_rate;
            setup.momentum = optimizer_case.momentum;
            setup.nesterov = optimizer_case.nesterov;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = dataset_for(context, task, loss_case.loss);

            float before = -1.0f, after = -1.0f;
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 100, &before, nullptr));
            const double reference_before = reference_mean_loss(read_net(model, 4, specs), task, loss_case.loss);
            CHECK(before == doctest::Approx(reference_before).epsilon(1e-5));
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 20, 32, 1));
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 100, &after, nullptr));
            const double reference_after = reference_mean_loss(read_net(model, 4, specs), task, loss_case.loss);
            CHECK(after == doctest::Approx(reference_after).epsilon(1e-5));
            CHECK(reference_after < 0.5 * reference_before);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}

namespace {

// Compares the library's parameters after a step with expected values (per layer, row-major w then
// b); the tolerance is relative to the largest change the step makes.
void check_parameters(const std::vector<std::pair<std::vector<float>, std::vector<float>>>& actual,
                      const std::vector<std::vector<double>>& expected_w, const std::vector<std::vector<double>>& expected_b,
                      const std::vector<std::pair<std::vector<float>, std::vector<float>>>& before, double relative) {
    double largest_change = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
        for (size_t k = 0; k < expected_w[i].size(); ++k)
            largest_change = std::max(largest_change, std::fabs(expected_w[i][k] - before[i].first[k]));
        for (size_t k = 0; k < expected_b[i].size(); ++k)
            largest_change = std::max(largest_change, std::fabs(expected_b[i][k] - before[i].second[k]));
    }
    REQUIRE(largest_change > 0);
    const double tolerance = relative * largest_change + 1e-7;
    for (size_t i = 0; i < actual.size(); ++i) {
        double worst = 0;
        for (size_t k = 0; k < expected_w[i].size(); ++k)
            worst = std::max(worst, std::fabs(actual[i].first[k] - expected_w[i][k]));
        for (size_t k = 0; k < expected_b[i].size(); ++k)
            worst = std::max(worst, std::fabs(actual[i].second[k] - expected_b[i][k]));
        CAPTURE(i);
        CAPTURE(largest_change);
        CHECK(worst <= tolerance);
    }
}

}  // namespace

TEST_CASE("one fp32 SGD step matches a double-precision backward pass for every loss, head and hidden activation") {
    const int64_t rows = 6, inputs = 5;
    const float learning_rate = 0.5f;
    struct HeadCase {
        mpt_loss loss;
        mpt_activation head;
    };
    const HeadCase heads[] = {
        {MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX},
        {MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_LINEAR},
        {MPT_LOSS_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SOFTMAX},
        {MPT_LOSS_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {MPT_LOSS_BINARY_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_LINEAR},
        {MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_SIGMOID},
        {MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_TANH},
    };
    TestRng rng(77);
    Task task;
    task.rows = rows;
    task.features = inputs;
    task.classes = 3;
    for (int64_t i = 0; i < rows * inputs; ++i) task.x.push_back(static_cast<float>(rng.normal()));
    for (int64_t r = 0; r < rows; ++r) task.labels.push_back(static_cast<int32_t>(rng.next() % 3));
    for (const HeadCase& head : heads) {
        for (mpt_activation hidden : {MPT_ACTIVATION_SIGMOID, MPT_ACTIVATION_TANH, MPT_ACTIVATION_RELU,
                                      MPT_ACTIVATION_LEAKY_RELU, MPT_ACTIVATION_ELU, MPT_ACTIVATION_SELU,
                                      MPT_ACTIVATION_SOFTPLUS, MPT_ACTIVATION_SOFTSIGN}) {
            CAPTURE(head.loss);
            CAPTURE(head.head);
            CAPTURE(hidden);
            Task case_task = task;
            if (head.loss == MPT_LOSS_CATEGORICAL_CROSSENTROPY) add_one_hot(case_task);
            if (head.loss == MPT_LOSS_BINARY_CROSSENTROPY || head.loss == MPT_LOSS_MEAN_SQUARED_ERROR)
                for (int64_t i = 0; i < rows * 3; ++i) case_task.targets.push_back(static_cast<float>(rng.uniform(0.1, 0.9)));
            // 13 hidden units and 3 outputs: both padded internally, so a leak would show here too.
            const std::vector<LayerSpec> specs = {{13, hidden}, {3, head.head}};
            mpt_context_t* context = new_context(5);
            mpt_model_t* model = new_model(context, inputs, specs);
            randomise_weights(model, inputs, specs, 9);
            TrainerSetup setup;
            setup.loss = head.loss;
            setup.learning_rate = learning_rate;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = dataset_for(context, case_task, head.loss);

            const auto before = read_weights(model, inputs, specs);
            const RefNet net = read_net(model, inputs, specs);
            const RefGradients grads = reference_gradients(net, case_task, head.loss, 0, rows);
            float loss = -1.0f;
            REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, rows, &loss));
            CHECK(loss == doctest::Approx(grads.loss).epsilon(1e-5));
            std::vector<std::vector<double>> expected_w, expected_b;
            for (size_t i = 0; i < net.size(); ++i) {
                expected_w.push_back(net[i].w);
                expected_b.push_back(net[i].b);
                for (size_t k = 0; k < net[i].w.size(); ++k) expected_w[i][k] -= learning_rate * grads.w[i][k];
                for (size_t k = 0; k < net[i].b.size(); ++k) expected_b[i][k] -= learning_rate * grads.b[i][k];
            }
            check_parameters(read_weights(model, inputs, specs), expected_w, expected_b, before, 1e-4);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}

namespace {

// Two steps on the same batch with an optimizer, checked against its update rule written here
// from Keras's definitions; the second step's gradient is taken at the library's weights after
// the first, so only the update rule (and the state it carried over) is under test. For RMSprop
// `beta2` is rho.
void check_two_optimizer_steps(const TrainerSetup& setup, double beta1, double beta2, double epsilon,
                               double weight_decay) {
    const int64_t rows = 8, inputs = 5;
    TestRng rng(31);
    Task task;
    task.rows = rows;
    task.features = inputs;
    task.classes = 3;
    for (int64_t i = 0; i < rows * inputs; ++i) task.x.push_back(static_cast<float>(rng.normal()));
    for (int64_t r = 0; r < rows; ++r) task.labels.push_back(static_cast<int32_t>(r % 3));
    const std::vector<LayerSpec> specs = {{13, MPT_ACTIVATION_TANH}, {3, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(5);
    mpt_model_t* model = new_model(context, inputs, specs);
    randomise_weights(model, inputs, specs, 4);
    mpt_trainer_t* trainer = new_trainer(model, setup);
    mpt_dataset_t* dataset = labels_dataset(context, task);

    const double lr = setup.learning_rate, momentum = setup.momentum;
    const bool adam = setup.optimizer == MPT_OPTIMIZER_ADAM || setup.optimizer == MPT_OPTIMIZER_ADAMW;
    const bool rmsprop = setup.optimizer == MPT_OPTIMIZER_RMSPROP;
    const bool lion = setup.optimizer == MPT_OPTIMIZER_LION;
    const size_t layer_count = specs.size();
    // Optimizer state per parameter, flattened per layer as {w..., b...}.
    std::vector<std::vector<double>> state1(layer_count), state2(layer_count), state3(layer_count);
    for (int step = 1; step <= 2; ++step) {
        CAPTURE(step);
        const auto before = read_weights(model, inputs, specs);
        const RefNet net = read_net(model, inputs, specs);
        const RefGradients grads = reference_gradients(net, task, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 0, rows);
        std::vector<std::vector<double>> expected_w(layer_count), expected_b(layer_count);
        for (size_t i = 0; i < layer_count; ++i) {
            std::vector<double> params = net[i].w, gradient = grads.w[i];
            params.insert(params.end(), net[i].b.begin(), net[i].b.end());
            gradient.insert(gradient.end(), grads.b[i].begin(), grads.b[i].end());
            state1[i].resize(params.size(), 0.0);
            state2[i].resize(params.size(), 0.0);
            state3[i].resize(params.size(), 0.0);
            for (size_t k = 0; k < params.size(); ++k) {
                const double g = gradient[k];
                double& w = params[k];
                w -= lr * weight_decay * w;  // Keras: every optimizer decays first, then applies g
                if (rmsprop) {  // Keras RMSprop: v = rho v + (1 - rho) g^2; u = m u + lr g / sqrt(v + eps); w -= u
                    double& v = state1[i][k];
                    double& u = state2[i][k];
                    double& average = state3[i][k];  // centered: a = rho a + (1 - rho) g, v - a^2 for v
                    v = beta2 * v + (1 - beta2) * g * g;
                    double second_moment = v;
                    if (setup.rmsprop_centered) {
                        average = beta2 * average + (1 - beta2) * g;
                        second_moment = v - average * average;
                    }
                    u = momentum * u + lr * g / std::sqrt(second_moment + epsilon);
                    w -= u;
                } else if (lion) {  // Keras Lion: w -= lr sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g
                    double& m = state1[i][k];
                    const double c = beta1 * m + (1 - beta1) * g;
                    w -= lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
                    m = beta2 * m + (1 - beta2) * g;
                } else if (!adam) {  // Keras SGD: v = m v - lr g; w += v, or w += m v - lr g (Nesterov)
                    double& velocity = state1[i][k];
                    velocity = momentum * velocity - lr * g;
                    w += setup.nesterov ? momentum * velocity - lr * g : velocity;
                } else {  // Keras Adam(W): alpha = lr sqrt(1 - b2^t) / (1 - b1^t)
                    double& m = state1[i][k];
                    double& v = state2[i][k];
                    m = beta1 * m + (1 - beta1) * g;
                    v = beta2 * v + (1 - beta2) * g * g;
                    const double alpha = lr * std::sqrt(1 - std::pow(beta2, step)) / (1 - std::pow(beta1, step));
                    w -= alpha * m / (std::sqrt(v) + epsilon);
                }
            }
            expected_w[i].assign(params.begin(), params.begin() + static_cast<std::ptrdiff_t>(net[i].w.size()));
            expected_b[i].assign(params.begin() + static_cast<std::ptrdiff_t>(net[i].w.size()), params.end());
        }
        REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, rows, nullptr));
        check_parameters(read_weights(model, inputs, specs), expected_w, expected_b, before, 2e-4);
    }
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

}  // namespace

TEST_CASE("SGD with momentum and with Nesterov momentum follow Keras's update over two steps") {
    TrainerSetup setup;
    setup.learning_rate = 0.2f;
    setup.momentum = 0.9f;
    SUBCASE("momentum") { check_two_optimizer_steps(setup, 0, 0, 0, 0); }
    SUBCASE("Nesterov") {
        setup.nesterov = true;
        check_two_optimizer_steps(setup, 0, 0, 0, 0);
    }
    SUBCASE("plain SGD") {
        setup.momentum = 0.0f;
        check_two_optimizer_steps(setup, 0, 0, 0, 0);
    }
    // Keras's SGD(weight_decay=): the weights shrink by lr * decay before the gradient is applied.
    // Plain SGD applies it in its one GEMM (beta 1 - lr * decay; test_sgd_weight_decay.cpp); with
    // momentum the decay does not enter the velocity.
    SUBCASE("plain SGD with weight decay 0.3") {
        setup.momentum = 0.0f;
        setup.weight_decay = 0.3f;
        check_two_optimizer_steps(setup, 0, 0, 0, 0.3);
    }
    SUBCASE("Nesterov with weight decay 0.3") {
        setup.nesterov = true;
        setup.weight_decay = 0.3f;
        check_two_optimizer_steps(setup, 0, 0, 0, 0.3);
    }
}

// Epsilon 1e-12 keeps epsilon's placement out of this test (see the next one): what is checked is
// the moments, the bias correction and AdamW's decoupled decay.
TEST_CASE("Adam and AdamW follow Keras's moments, bias correction and decoupled decay over two steps") {
    TrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    setup.adam_epsilon = 1e-12f;
    SUBCASE("Adam") { check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.0); }
    SUBCASE("Adam with weight decay 0.1, as Keras's Adam(weight_decay=0.1): AdamW's rule") {
        setup.weight_decay = 0.1f;
        check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.1);
    }
    SUBCASE("AdamW with its default decay 0.004") {
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.004);
    }
    SUBCASE("AdamW with decay 0.1") {
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        setup.weight_decay = 0.1f;
        check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.1);
    }
    SUBCASE("AdamW with decay 0 chosen before the optimizer (the default does not replace it)") {
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        setup.weight_decay = 0.0f;
        setup.weight_decay_before_optimizer = true;
        check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.0);
    }
    SUBCASE("AdamW with decay 0.1 chosen before the optimizer") {
        setup.optimizer = MPT_OPTIMIZER_ADAMW;
        setup.weight_decay = 0.1f;
        setup.weight_decay_before_optimizer = true;
        check_two_optimizer_steps(setup, 0.9, 0.999, 1e-12, 0.1);
    }
}

// RMSprop's epsilon lies under the root (Keras), not beside it (PyTorch): at epsilon 0.01 and
// gradients of about 0.1 the two differ by some 30%, so the third subcase tells them apart.
TEST_CASE("RMSprop follows Keras's average of squared gradients, epsilon under the root, and momentum over two steps") {
    TrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_RMSPROP;
    setup.learning_rate = 0.01f;
    SUBCASE("the defaults: rho 0.9, epsilon 1e-7") { check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.0); }
    SUBCASE("rho 0.5") {
        setup.rmsprop_rho = 0.5f;
        check_two_optimizer_steps(setup, 0, 0.5, 1e-7, 0.0);
    }
    SUBCASE("epsilon 0.01") {
        setup.rmsprop_rho = 0.9f;
        setup.adam_epsilon = 0.01f;
        check_two_optimizer_steps(setup, 0, 0.9, 0.01, 0.0);
    }
    SUBCASE("momentum 0.8") {
        setup.momentum = 0.8f;
        check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.0);
    }
    SUBCASE("weight decay 0.1, before the rule as Keras's") {
        setup.weight_decay = 0.1f;
        check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.1);
    }
    SUBCASE("weight decay 0.1 with momentum 0.8") {
        setup.weight_decay = 0.1f;
        setup.momentum = 0.8f;
        check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.1);
    }
    // Keras's RMSprop(centered=True): v - a^2 under the root, a the gradients' own average.
    SUBCASE("centered") {
        setup.rmsprop_centered = true;
        check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.0);
    }
    SUBCASE("centered, rho 0.5") {
        setup.rmsprop_centered = true;
        setup.rmsprop_rho = 0.5f;
        check_two_optimizer_steps(setup, 0, 0.5, 1e-7, 0.0);
    }
    SUBCASE("centered with momentum 0.8 and weight decay 0.1: three state arrays") {
        setup.rmsprop_centered = true;
        setup.momentum = 0.8f;
        setup.weight_decay = 0.1f;
        check_two_optimizer_steps(setup, 0, 0.9, 1e-7, 0.1);
    }
}

// Lion moves every weight by the rate, in the direction of the sign of an interpolation of its
// momentum and gradient; which beta interpolates and which averages shows only where the two steps'
// gradients disagree in sign, so the rate is large enough (0.05) to turn some of them.
TEST_CASE("Lion follows Keras's signed interpolation and its slower momentum over two steps") {
    TrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_LION;
    setup.learning_rate = 0.05f;
    SUBCASE("the defaults: beta1 0.9, beta2 0.99") { check_two_optimizer_steps(setup, 0.9, 0.99, 0, 0.0); }
    SUBCASE("beta1 0.99, beta2 0.5: the momentum decides the second step's sign") {
        setup.lion_beta1 = 0.99f;
        setup.lion_beta2 = 0.5f;
        check_two_optimizer_steps(setup, 0.99, 0.5, 0, 0.0);
    }
    SUBCASE("beta1 0.3, beta2 0.9") {
        setup.lion_beta1 = 0.3f;
        setup.lion_beta2 = 0.9f;
        check_two_optimizer_steps(setup, 0.3, 0.9, 0, 0.0);
    }
    SUBCASE("beta1 0: signSGD") {
        setup.lion_beta1 = 0.0f;
        setup.lion_beta2 = 0.99f;
        check_two_optimizer_steps(setup, 0.0, 0.99, 0, 0.0);
    }
    SUBCASE("weight decay 0.5, before the rule as Keras's") {
        setup.weight_decay = 0.5f;
        check_two_optimizer_steps(setup, 0.9, 0.99, 0, 0.5);
    }
}

// Keras documents its epsilon as "epsilon hat" of Kingma & Ba (the formula just before their
// Section 2.1): w -= alpha * m / (sqrt(v) + epsilon), v not bias-corrected. Algorithm 1's placement
// (epsilon added to sqrt(v_hat), i.e. epsilon * sqrt(1 - beta2^t) here) differs visibly: at step 1
// with the default 1e-7, a weight whose gradient is ~1e-4 moves by lr * 0.978 in Keras, lr * 0.999
// in the other.
TEST_CASE("Adam's epsilon is Keras's epsilon-hat, added to sqrt(v) before bias correction") {
    TrainerSetup setup;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    SUBCASE("the default epsilon 1e-7") { check_two_optimizer_steps(setup, 0.9, 0.999, 1e-7, 0.0); }
    SUBCASE("epsilon 0.01") {
        setup.adam_epsilon = 0.01f;
        check_two_optimizer_steps(setup, 0.9, 0.999, 0.01, 0.0);
    }
}

// ---- learning-rate schedules ----------------------------------------------------------------------

namespace {

// The schedule's factor at `step` as mptrain.h defines it, in double.
double schedule_factor(const TrainerSetup& setup, int64_t step) {
    if (step < setup.warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(setup.warmup_steps);
    const double decayed = static_cast<double>(step - setup.warmup_steps);
    const double f = setup.decay_factor;
    switch (setup.schedule) {
        case MPT_LR_SCHEDULE_CONSTANT: return 1.0;
        case MPT_LR_SCHEDULE_LINEAR: return f + (1 - f) * (1 - std::min(1.0, decayed / setup.decay_steps));
        case MPT_LR_SCHEDULE_COSINE:
            return f + (1 - f) * 0.5 * (1 + std::cos(3.14159265358979323846 * std::min(1.0, decayed / setup.decay_steps)));
        case MPT_LR_SCHEDULE_STEP: return std::pow(f, std::floor(decayed / setup.decay_steps));
    }
    return -1.0;
}

}  // namespace

TEST_CASE("each learning-rate schedule gives every step the rate of its formula, skipped steps counted, and trains with it") {
    struct Case {
        const char* name;
        mpt_lr_schedule schedule;
        int64_t warmup, decay;
        float factor;
    };
    const Case cases[] = {
        {"constant after a warm-up", MPT_LR_SCHEDULE_CONSTANT, 4, 0, 1.0f},
        {"linear to a quarter", MPT_LR_SCHEDULE_LINEAR, 3, 8, 0.25f},
        {"cosine to zero without warm-up", MPT_LR_SCHEDULE_COSINE, 0, 10, 0.0f},
        {"cosine to a tenth after a warm-up", MPT_LR_SCHEDULE_COSINE, 5, 7, 0.1f},
        {"step: halved every 3 steps", MPT_LR_SCHEDULE_STEP, 2, 3, 0.5f},
    };
    const Task task = make_blobs(256, 4, 3, 1.5, 0.6, 24);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    for (const Case& c : cases) {
        CAPTURE(std::string(c.name));
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16}) {
            CAPTURE(static_cast<int>(precision));
            mpt_context_t* context = new_context(9);
            mpt_model_t* scheduled_model = new_model(context, 4, specs);
            mpt_model_t* manual_model = new_model(context, 4, specs);  // the same seed: the same weights
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_SGD;
            setup.momentum = 0.9f;
            setup.learning_rate = 0.2f;
            if (precision == MPT_PRECISION_MIXED_FP16) {  // 2^24 overflows fp16: the first steps are skipped
                setup.scaling = MPT_LOSS_SCALING_DYNAMIC;
                setup.initial_scale = 16777216.0f;
            }
            TrainerSetup manual_setup = setup;
            setup.schedule = c.schedule;
            setup.warmup_steps = c.warmup;
            setup.decay_steps = c.decay;
            setup.decay_factor = c.factor;
            mpt_trainer_t* scheduled = new_trainer(scheduled_model, setup);
            mpt_trainer_t* manual = new_trainer(manual_model, manual_setup);
            mpt_dataset_t* dataset = labels_dataset(context, task);
            // Rates set by hand before each step train the same weights, bit for bit, up to the
            // first step at rate 0 (which mpt_trainer_set_learning_rate refuses).
            int64_t compared_steps = -1;
            const auto compare_weights = [&](int64_t steps) {
                compared_steps = steps;
                for (int64_t layer = 0; layer < 2; ++layer) {
                    const size_t count = layer == 0 ? 4 * 16 : 16 * 3;
                    std::vector<float> a(count), b(count);
                    const int64_t n = static_cast<int64_t>(count);
                    REQUIRE_OK(mpt_model_get_weights(scheduled_model, layer, a.data(), n, nullptr, 0));
                    REQUIRE_OK(mpt_model_get_weights(manual_model, layer, b.data(), n, nullptr, 0));
                    CHECK(std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0);
                }
            };
            for (int64_t step = 0; step < 20; ++step) {
                CAPTURE(step);
                int64_t steps = -1;
                REQUIRE_OK(mpt_trainer_get_progress(scheduled, &steps, nullptr));
                REQUIRE(steps == step);
                float rate = 0.0f;
                REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(scheduled, &rate));
                CHECK(rate == doctest::Approx(0.2 * schedule_factor(setup, step)).epsilon(1e-6));
                if (rate == 0.0f && compared_steps < 0) compare_weights(step);
                const int64_t first = (step * 16) % 256;
                REQUIRE_OK(mpt_trainer_step(scheduled, dataset, first, 16, nullptr));
                if (compared_steps < 0) {
                    REQUIRE_OK(mpt_trainer_set_learning_rate(manual, rate));
                    REQUIRE_OK(mpt_trainer_step(manual, dataset, first, 16, nullptr));
                }
            }
            if (compared_steps < 0) compare_weights(20);
            CHECK(compared_steps >= 10);
            float base = 0.0f;
            REQUIRE_OK(mpt_trainer_get_learning_rate(scheduled, &base));
            CHECK(base == 0.2f);  // the schedule multiplies the base rate; it does not change it
            int64_t skipped = -1;
            REQUIRE_OK(mpt_trainer_get_loss_scale(scheduled, nullptr, nullptr, &skipped));
            if (precision == MPT_PRECISION_MIXED_FP16) CHECK(skipped > 0);
            else CHECK(skipped == 0);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(scheduled);
            mpt_trainer_destroy(manual);
            mpt_model_destroy(scheduled_model);
            mpt_model_destroy(manual_model);
            mpt_context_destroy(context);
        }
    }
}

// ---- (4) loss scaling ----------------------------------------------------------------------------

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

// ---- (5) determinism -----------------------------------------------------------------------------

TEST_CASE("probabilities outside (eps, 1 - eps) are clipped as Keras does: a finite loss and no gradient") {
    // A linear output read as a probability (binary cross-entropy without a sigmoid): 2.0 and -1.0
    // are clipped to 1 - 1e-7 and 1e-7, so each row's loss is about -log(1e-7) = 16.1, not log of a
    // negative number; the clip's gradient outside the interval is zero, so a step changes nothing.
    mpt_context_t* context = new_context();
    mpt_model_t* model = new_model(context, 1, {{1, MPT_ACTIVATION_LINEAR}});
    const float weight = 1.5f, bias = 0.5f;
    REQUIRE_OK(mpt_model_set_weights(model, 0, &weight, 1, &bias, 1));
    TrainerSetup setup;
    setup.loss = MPT_LOSS_BINARY_CROSSENTROPY;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    const float inputs[2] = {1.0f, -1.0f};  // outputs 2.0 and -1.0
    const float targets[2] = {0.0f, 1.0f};  // each the wrong end
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(context, inputs, 2, 1, targets, 1, 1, &dataset));
    float loss = 0.0f, accuracy = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 2, &loss, &accuracy));
    CHECK(std::isfinite(loss));
    CHECK(loss > 15.5f);   // -log(1.19e-7) = 15.94 with 1 - 1e-7 rounded to float
    CHECK(loss < 16.5f);   // -log(1e-7) = 16.12
    float step_loss = 0.0f;
    REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 2, &step_loss));
    CHECK(step_loss == loss);
    float after_weight = 0.0f, after_bias = 0.0f;
    REQUIRE_OK(mpt_model_get_weights(model, 0, &after_weight, 1, &after_bias, 1));
    CHECK(after_weight == weight);
    CHECK(after_bias == bias);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("initial weights are Glorot-uniform drawn from the context's seed, with zero biases") {
    const std::vector<LayerSpec> specs = {{128, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    auto initial = [&](uint64_t seed) {
        mpt_context_t* context = new_context(seed);
        mpt_model_t* model = new_model(context, 64, specs);
        auto weights = read_weights(model, 64, specs);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return weights;
    };
    const auto first = initial(42), again = initial(42), other = initial(43);
    int64_t fan_in = 64;
    for (size_t layer = 0; layer < specs.size(); ++layer) {
        CAPTURE(layer);
        const std::vector<float>& w = first[layer].first;
        const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + specs[layer].units));
        double sum = 0.0, sum_squares = 0.0, largest = 0.0;
        for (float value : w) {
            sum += value;
            sum_squares += static_cast<double>(value) * value;
            largest = std::max(largest, std::fabs(static_cast<double>(value)));
        }
        const double count = static_cast<double>(w.size());
        CHECK(largest <= limit * (1.0 + 1e-6));  // the library computes the limit in float
        CHECK(largest > 0.95 * limit);  // spread over the whole interval, not a narrower one
        CHECK(std::fabs(sum / count) < 4.0 * limit / std::sqrt(3.0 * count));  // mean 0 within 4 sigma
        CHECK(sum_squares / count == doctest::Approx(limit * limit / 3.0).epsilon(0.1));  // U(-l, l) variance
        for (float bias : first[layer].second) CHECK(bias == 0.0f);
        CHECK(same_bits(w, again[layer].first));
        CHECK_FALSE(same_bits(w, other[layer].first));
        fan_in = specs[layer].units;
    }
}

TEST_CASE("two runs with the same seed and thread count give bit-identical weights; another seed does not") {
    // 64 -> 256 -> 64 -> 10 at batch 128: the first GEMM is large enough to be split across threads.
    const Task task = make_blobs(1024, 64, 10, 0.5, 1.0, 31);
    const std::vector<LayerSpec> specs = {{256, MPT_ACTIVATION_RELU}, {64, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        const std::string precision_label = precision_name(precision);
        CAPTURE(precision_label);
        std::vector<std::vector<float>> runs;
        for (uint64_t seed : {42u, 42u, 43u}) {
            mpt_context_t* context = new_context(seed);
            mpt_model_t* model = new_model(context, 64, specs);
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.001f;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = labels_dataset(context, task);
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 2, 128, 1));  // shuffled from the seed
            runs.push_back(flat_weights(model, 64, specs));
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
        CHECK(same_bits(runs[0], runs[1]));
        CHECK_FALSE(same_bits(runs[0], runs[2]));
    }
}

int record_epoch_loss(int64_t, float loss, float, void* user_data) {
    static_cast<std::vector<float>*>(user_data)->push_back(loss);
    return 0;
}

TEST_CASE("fit without shuffling steps through consecutive batches; with shuffling each epoch visits a permutation of the rows") {
    const Task task = make_blobs(256, 8, 3, 1.0, 1.0, 19);
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    auto train = [&](float learning_rate, const std::function<void(mpt_trainer_t*, mpt_dataset_t*)>& run,
                     std::vector<float>* epoch_losses = nullptr, float* evaluated_loss = nullptr) {
        mpt_context_t* context = new_context(9);
        mpt_model_t* model = new_model(context, 8, specs);
        TrainerSetup setup;
        setup.learning_rate = learning_rate;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, task);
        if (epoch_losses) REQUIRE_OK(mpt_trainer_set_callbacks(trainer, nullptr, record_epoch_loss, epoch_losses));
        run(trainer, dataset);
        float accuracy = 0.0f;
        if (evaluated_loss) REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, evaluated_loss, &accuracy));
        std::vector<float> weights = flat_weights(model, 8, specs);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return weights;
    };
    const auto in_order = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 1, 32, 0)); });
    const auto stepped = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) {
        for (int64_t first = 0; first < 256; first += 32) REQUIRE_OK(mpt_trainer_step(t, d, first, 32, nullptr));
    });
    const auto shuffled = train(0.1f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 1, 32, 1)); });
    CHECK(same_bits(in_order, stepped));
    CHECK_FALSE(same_bits(in_order, shuffled));  // the shuffled order reaches the batches

    // With a learning rate too small to move the weights, an epoch's mean loss is the data set's
    // mean loss exactly when the epoch visits every row once: a repeated or missed row shifts it.
    std::vector<float> epoch_losses;
    float evaluated = 0.0f;
    train(1e-30f, [](mpt_trainer_t* t, mpt_dataset_t* d) { REQUIRE_OK(mpt_trainer_fit(t, d, 3, 32, 1)); }, &epoch_losses,
          &evaluated);
    REQUIRE(epoch_losses.size() == 3);
    for (float loss : epoch_losses) CHECK(loss == doctest::Approx(evaluated).epsilon(1e-5));
}

TEST_CASE("a uint8 data set trains and evaluates bit for bit like the float data set of its bytes * scale + offset") {
    // The normalisation happens where the batch is gathered: a scale or offset dropped or applied
    // twice there would train on other inputs.
    constexpr int64_t kRows = 512, kFeatures = 16, kClasses = 4;
    const float scale = 1.0f / 255.0f, offset = -0.5f;
    TestRng rng(77);
    std::vector<uint8_t> bytes(static_cast<size_t>(kRows * kFeatures));
    std::vector<int32_t> labels(static_cast<size_t>(kRows));
    for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng.uniform() * 256.0);
    for (int64_t r = 0; r < kRows; ++r) {  // a learnable rule: the class of the brightest of four features
        const uint8_t* row = &bytes[static_cast<size_t>(r * kFeatures)];
        labels[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + kClasses) - row);
    }
    std::vector<float> normalised(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) normalised[i] = static_cast<float>(bytes[i]) * scale + offset;

    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {kClasses, MPT_ACTIVATION_SOFTMAX}};
    std::vector<std::vector<float>> weights;
    std::vector<std::pair<float, float>> evaluations;
    for (bool from_bytes : {true, false}) {
        CAPTURE(from_bytes);
        mpt_context_t* context = new_context(5);
        mpt_model_t* model = new_model(context, kFeatures, specs);
        mpt_trainer_t* trainer = new_trainer(model, TrainerSetup{});
        mpt_dataset_t* dataset = nullptr;
        if (from_bytes)
            REQUIRE_OK(mpt_dataset_create_u8(context, bytes.data(), kRows, kFeatures, labels.data(), kClasses, scale,
                                             offset, &dataset));
        else
            REQUIRE_OK(mpt_dataset_create_f32(context, normalised.data(), kRows, kFeatures, labels.data(), kClasses, 1,
                                              &dataset));
        REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 20, 32, 1));
        float loss = 0.0f, accuracy = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &loss, &accuracy));
        weights.push_back(flat_weights(model, kFeatures, specs));
        evaluations.emplace_back(loss, accuracy);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    CHECK(same_bits(weights[0], weights[1]));
    CHECK(evaluations[0].first == evaluations[1].first);
    CHECK(evaluations[0].second == evaluations[1].second);
    CHECK(evaluations[0].second > 0.9f);  // it trained: chance is 0.25
}

// ---- (6) per-layer dtype ---------------------------------------------------------------------------

TEST_CASE("a layer kept in fp32 under mixed-bf16 trains, and its predictions differ from an all-bf16 model's only within bf16 rounding") {
    const Task train = make_blobs(512, 8, 3, 1.5, 0.6, 41), test = make_blobs(256, 8, 3, 1.5, 0.6, 42);
    const std::vector<LayerSpec> specs = {{32, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(5);
    mpt_model_t* mixed = new_model(context, 8, specs);
    REQUIRE_OK(mpt_model_set_layer_dtype(mixed, 0, MPT_DTYPE_FP32));
    mpt_model_t* all_bf16 = new_model(context, 8, specs);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    mpt_trainer_t* mixed_trainer = new_trainer(mixed, setup);
    mpt_trainer_t* bf16_trainer = new_trainer(all_bf16, setup);
    mpt_dataset_t* dataset = labels_dataset(context, train);
    REQUIRE_OK(mpt_trainer_fit(mixed_trainer, dataset, 10, 32, 1));
    const std::vector<float> mixed_predictions = trainer_predict(mixed_trainer, test);
    CHECK(accuracy_of(mixed_predictions, test) >= 0.95);

    // The same weights in the all-bf16 model.
    const auto weights = read_weights(mixed, 8, specs);
    for (size_t i = 0; i < weights.size(); ++i)
        REQUIRE_OK(mpt_model_set_weights(all_bf16, static_cast<int64_t>(i), weights[i].first.data(),
                                         static_cast<int64_t>(weights[i].first.size()), weights[i].second.data(),
                                         static_cast<int64_t>(weights[i].second.size())));
    const std::vector<float> bf16_predictions = trainer_predict(bf16_trainer, test);
    const std::vector<float> exact = model_predict(mixed, test);
    const RefNet net = read_net(mixed, 8, specs);
    CHECK_FALSE(same_bits(mixed_predictions, bf16_predictions));
    // Probabilities from logits with a relative error of a few u: within 8u of each other.
    double largest_difference = 0, mixed_error = 0, bf16_error = 0;
    for (int64_t r = 0; r < test.rows; ++r) {
        const std::vector<double> reference = forward(net, test.x.data() + r * 8).outputs.back();
        for (int64_t c = 0; c < 3; ++c) {
            const size_t i = static_cast<size_t>(r * 3 + c);
            largest_difference = std::max(largest_difference, static_cast<double>(std::fabs(mixed_predictions[i] - bf16_predictions[i])));
            mixed_error += std::fabs(mixed_predictions[i] - reference[static_cast<size_t>(c)]);
            bf16_error += std::fabs(bf16_predictions[i] - reference[static_cast<size_t>(c)]);
            CHECK(exact[i] == doctest::Approx(reference[static_cast<size_t>(c)]).epsilon(1e-5).scale(0.1));
        }
    }
    CHECK(largest_difference > 0);
    CHECK(largest_difference <= 8 * kBf16Roundoff);
    // Keeping the first layer in fp32 removes its rounding: closer to the exact forward pass on average.
    CHECK(mixed_error < bf16_error);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(bf16_trainer);
    mpt_trainer_destroy(mixed_trainer);
    mpt_model_destroy(all_bf16);
    mpt_model_destroy(mixed);
    mpt_context_destroy(context);
}

// ---- (7) predict and evaluate -------------------------------------------------------------------------

TEST_CASE("mixed-bf16 trainer predictions are probabilities summing to 1 and agree with fp32 model predictions within bf16 rounding") {
    const Task test = make_blobs(300, 8, 5, 1.0, 0.8, 51);  // 300 rows: more than one internal batch of 256
    const std::vector<LayerSpec> specs = {{24, MPT_ACTIVATION_TANH}, {5, MPT_ACTIVATION_SOFTMAX}};
    mpt_context_t* context = new_context(6);
    mpt_model_t* model = new_model(context, 8, specs);
    randomise_weights(model, 8, specs, 52, 0.4, 0.2);
    TrainerSetup setup;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    mpt_trainer_t* trainer = new_trainer(model, setup);
    const std::vector<float> low = trainer_predict(trainer, test);
    const std::vector<float> fp32 = model_predict(model, test);
    const RefNet net = read_net(model, 8, specs);
    double largest_difference = 0;
    for (int64_t r = 0; r < test.rows; ++r) {
        CAPTURE(r);
        double sum = 0;
        const std::vector<double> reference = forward(net, test.x.data() + r * 8).outputs.back();
        for (int64_t c = 0; c < 5; ++c) {
            const size_t i = static_cast<size_t>(r * 5 + c);
            CHECK(low[i] >= 0.0f);
            CHECK(low[i] <= 1.0f);
            sum += low[i];
            largest_difference = std::max(largest_difference, static_cast<double>(std::fabs(low[i] - fp32[i])));
            CHECK(fp32[i] == doctest::Approx(reference[static_cast<size_t>(c)]).epsilon(1e-5).scale(0.1));
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));  // the softmax head runs in fp32
    }
    CHECK(largest_difference > 0);  // the trainer really predicts in bf16
    CHECK(largest_difference <= 8 * kBf16Roundoff);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// On a CPU with AMX (where `auto` resolves to mixed-bf16), predictions on up to 4 rows in bf16 (8 in
// fp16) read the weights as 16-bit words once two predictions have met the same weights.
TEST_CASE("predictions on a few rows give the same bits from weight words, which a step or new weights make stale") {
    const Task data = make_blobs(64, 40, 10, 1.0, 0.8, 61);
    const std::vector<LayerSpec> specs = {{64, MPT_ACTIVATION_RELU}, {48, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision_name(precision));
        // Two contexts: one without a budget, one whose budget leaves no room for the words (there
        // predictions only: a training step needs more than the words).
        size_t used_after_first = 0;
        for (bool tight : {false, true}) {
            CAPTURE(tight);
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, tight ? used_after_first + 4096 : 0);
            mpt_precision automatic = MPT_PRECISION_AUTO;
            REQUIRE_OK(mpt_context_resolve_precision(context, MPT_PRECISION_AUTO, &automatic));
            const bool words_expected = automatic == MPT_PRECISION_MIXED_BF16 && !tight;
            mpt_model_t* model = new_model(context, 40, specs);
            randomise_weights(model, 40, specs, 62, 0.3, 0.1);
            int64_t parameters = 0;
            REQUIRE_OK(mpt_model_get_parameter_count(model, &parameters));
            TrainerSetup setup;
            setup.precision = precision;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = labels_dataset(context, data);
            const int64_t rows = 3;
            const auto predict = [&] {
                std::vector<float> out(static_cast<size_t>(rows * 10));
                REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), rows, out.data(), static_cast<int64_t>(out.size())));
                return out;
            };
            const auto allocated = [&] {
                size_t planned = 0, bytes = 0;
                REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &bytes));
                return bytes;
            };
            const std::vector<float> first = predict();
            const size_t allocated_first = allocated();
            if (!tight) REQUIRE_OK(mpt_context_get_memory(context, &used_after_first, nullptr));
            const std::vector<float> second = predict();  // writes the words, then reads them
            const size_t words_bytes = allocated() - allocated_first;
            const std::vector<float> third = predict();
            CHECK(same_bits(first, second));
            CHECK(same_bits(first, third));
            if (words_expected) CHECK(words_bytes >= static_cast<size_t>(parameters) * sizeof(uint16_t));
            else CHECK(words_bytes == 0);
            if (!tight) {
                // A step changes the weights: the next prediction reads them, not the words of the old ones,
                // and the one after writes words of the new ones.
                float loss = 0.0f;
                REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 16, &loss));
                const std::vector<float> after_step = predict();
                const size_t without_words = allocated();
                CHECK_FALSE(same_bits(after_step, first));
                CHECK(same_bits(predict(), after_step));
                CHECK(allocated() == without_words + words_bytes);
                CHECK(same_bits(predict(), after_step));
                // So do new weights: the first prediction on them gives the old words back (nothing
                // reads them again), the second makes words of the new ones.
                randomise_weights(model, 40, specs, 63, 0.3, 0.1);
                const std::vector<float> after_set = predict();
                CHECK_FALSE(same_bits(after_set, after_step));
                CHECK(allocated() == without_words);
                CHECK(same_bits(predict(), after_set));
                CHECK(allocated() == without_words + words_bytes);
                // A step (here of the batch size planned already) gives the words' memory back.
                REQUIRE_OK(mpt_trainer_step(trainer, dataset, 16, 16, &loss));
                CHECK(allocated() == without_words);
                // So does planning for more rows: then the trainer holds what one that never made
                // words holds.
                const std::vector<float> after_second_step = predict();
                CHECK(same_bits(predict(), after_second_step));
                CHECK(allocated() == without_words + words_bytes);
                mpt_trainer_t* other = new_trainer(model, setup);
                std::vector<float> all_rows(static_cast<size_t>(data.rows * 10));
                for (mpt_trainer_t* each : {trainer, other})
                    REQUIRE_OK(mpt_trainer_predict(each, data.x.data(), data.rows, all_rows.data(),
                                                   static_cast<int64_t>(all_rows.size())));
                size_t planned = 0, other_allocated = 0;
                REQUIRE_OK(mpt_trainer_get_memory(other, &planned, &other_allocated));
                CHECK(allocated() == other_allocated);
                mpt_trainer_destroy(other);
            }
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}

// The words hold 2 bytes per parameter of the budget; fit, step and evaluate give them back before
// they allocate, so that predictions never make training fail a budget it fits without them.
TEST_CASE("weight words give their budget back to fit, step and evaluate") {
    if (!amx_resolves_auto()) {
        MESSAGE("weight words not tested: no AMX here");
        return;
    }
    // 2048 rows: each operation's first call allocates more than 4 KiB (a row order of 8 KiB).
    const int64_t features = 64, rows = 2048;
    const Task data = make_blobs(rows, features, 10, 1.0, 0.8, 81);
    const std::vector<LayerSpec> specs = {{2048, MPT_ACTIVATION_RELU}, {2048, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    enum class Operation { fit, step, evaluate };
    // Predictions (with words when `make_words`), then the operation; the context's used bytes after
    // the predictions, and the operation's status.
    struct Outcome {
        size_t used = 0;
        mpt_status status = MPT_STATUS_OK;
    };
    const auto run = [&](size_t budget, bool make_words, Operation operation) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
        mpt_model_t* model = new_model(context, features, specs);
        TrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, data);
        std::vector<float> out(32 * 10);
        REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), 32, out.data(), 320));  // plans 32 rows
        if (make_words)
            for (int i = 0; i < 2; ++i) REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), 1, out.data(), 10));
        Outcome outcome;
        REQUIRE_OK(mpt_context_get_memory(context, &outcome.used, nullptr));
        float loss = 0.0f;
        switch (operation) {
            case Operation::fit: outcome.status = mpt_trainer_fit(trainer, dataset, 1, 32, 0); break;
            case Operation::step: outcome.status = mpt_trainer_step(trainer, dataset, 0, 32, &loss); break;
            case Operation::evaluate: outcome.status = mpt_trainer_evaluate(trainer, dataset, 32, nullptr, nullptr); break;
        }
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return outcome;
    };
    for (Operation operation : {Operation::fit, Operation::step, Operation::evaluate}) {
        CAPTURE(static_cast<int>(operation));
        // The budget: what the predictions leave in use, words included, and 4 KiB. Without the
        // words the operation fits in it with room to spare; with them, only once they are gone.
        const size_t budget = run(0, true, operation).used + 4096;
        CHECK(run(budget, false, operation).status == MPT_STATUS_OK);
        CHECK(run(budget, true, operation).status == MPT_STATUS_OK);
    }
}

// The model of the weight-word budget tests: 64 inputs and two layers of 1024 units (about 2 MiB of
// words, far more than the plans of a few rows), trained in mixed-bf16.
struct WordsModel {
    int64_t features = 64;
    std::vector<LayerSpec> layers = {{1024, MPT_ACTIVATION_RELU}, {1024, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    TrainerSetup setup = [] {
        TrainerSetup bf16;
        bf16.precision = MPT_PRECISION_MIXED_BF16;
        return bf16;
    }();
};

// The words are a cache: other work in the context that fits the budget only without them (another
// trainer's plan, a data set placed for it) takes their memory, and predictions go on reading the
// masters, with the same bits.
TEST_CASE("weight words give their budget back to other work in the context that needs it") {
    if (!amx_resolves_auto()) {
        MESSAGE("weight words not tested: no AMX here");
        return;
    }
    const WordsModel words_model;
    const Task few = make_blobs(3, words_model.features, 10, 1.0, 0.8, 91);
    const Task data = make_blobs(600, words_model.features, 10, 1.0, 0.8, 92);  // 150 KiB of floats
    const auto predict = [&](mpt_trainer_t* trainer) {
        std::vector<float> out(static_cast<size_t>(few.rows * 10));
        REQUIRE_OK(mpt_trainer_predict(trainer, few.x.data(), few.rows, out.data(), static_cast<int64_t>(out.size())));
        return out;
    };
    enum class Work { another_trainer, a_data_set };
    for (Work work : {Work::another_trainer, Work::a_data_set}) {
        CAPTURE(static_cast<int>(work));
        // In a context with `budget`: a trainer that predicted twice on the same weights (so holds
        // words), then the work, done by a second trainer of the same model: predicting on 4 rows,
        // or evaluating a data set (placed in the context's memory then) on 4 rows. What the work
        // took of the context, whether it succeeded, and what became of the first trainer.
        struct Outcome {
            size_t words = 0, work_bytes = 0;
            mpt_status status = MPT_STATUS_OK;
            bool words_kept = false, same_predictions = false;
        };
        const auto run = [&](size_t budget) {
            Outcome outcome;
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
            mpt_model_t* model = new_model(context, words_model.features, words_model.layers);
            mpt_trainer_t* trainer = new_trainer(model, words_model.setup);
            const std::vector<float> first = predict(trainer);
            const size_t without_words = trainer_allocated(trainer);
            CHECK(same_bits(predict(trainer), first));
            outcome.words = trainer_allocated(trainer) - without_words;
            const size_t before = context_used(context);
            mpt_trainer_t* other = new_trainer(model, words_model.setup);
            mpt_dataset_t* dataset = labels_dataset(context, data);
            if (work == Work::another_trainer) {
                std::vector<float> out(static_cast<size_t>(4 * 10));
                outcome.status = mpt_trainer_predict(other, data.x.data(), 4, out.data(), static_cast<int64_t>(out.size()));
            } else {
                outcome.status = mpt_trainer_evaluate(other, dataset, 4, nullptr, nullptr);
            }
            outcome.work_bytes = context_used(context) - before + (trainer_allocated(trainer) == without_words ? outcome.words : 0);
            outcome.words_kept = trainer_allocated(trainer) == without_words + outcome.words;
            outcome.same_predictions = same_bits(predict(trainer), first) && same_bits(predict(trainer), first);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(other);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
            return outcome;
        };
        const Outcome free = run(0);
        REQUIRE(free.status == MPT_STATUS_OK);
        CHECK(free.words >= 2 * static_cast<size_t>(words_model.features * 1024 + 1024 * 1024));
        CHECK(free.words_kept);
        CHECK(free.same_predictions);
        // The work needs more than the 4 KiB the budget leaves beside the words, and less than
        // the words hold.
        REQUIRE(free.work_bytes > 4096);
        REQUIRE(free.work_bytes < free.words);
        size_t with_words = 0;
        {
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, 0);
            mpt_model_t* model = new_model(context, words_model.features, words_model.layers);
            mpt_trainer_t* trainer = new_trainer(model, words_model.setup);
            predict(trainer);
            predict(trainer);
            with_words = context_used(context);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
        const Outcome tight = run(with_words + 4096);
        CHECK(tight.status == MPT_STATUS_OK);
        CHECK(tight.words == free.words);
        CHECK_FALSE(tight.words_kept);
        CHECK(tight.same_predictions);  // from the masters: no room for the words now
    }
}

// Two trainers predicting in turn where the budget has room for one's words: were a cache to take
// another's room, every one-row prediction would rewrite 2 bytes per parameter. One trainer keeps
// its words, the other reads the masters.
TEST_CASE("two trainers predicting in turn do not take each other's weight words") {
    if (!amx_resolves_auto()) {
        MESSAGE("weight words not tested: no AMX here");
        return;
    }
    const WordsModel words_model;
    const Task one = make_blobs(1, words_model.features, 10, 1.0, 0.8, 91);
    const auto predict = [&](mpt_trainer_t* trainer) {
        std::vector<float> out(10);
        REQUIRE_OK(mpt_trainer_predict(trainer, one.x.data(), 1, out.data(), 10));
        return out;
    };
    // Both trainers, and words for the first: with `budget`, what the context then holds.
    struct Pair {
        mpt_context_t* context;
        mpt_model_t* model;
        mpt_trainer_t* first;
        mpt_trainer_t* second;
    };
    const auto open = [&](size_t budget) {
        Pair pair{};
        pair.context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
        pair.model = new_model(pair.context, words_model.features, words_model.layers);
        pair.first = new_trainer(pair.model, words_model.setup);
        pair.second = new_trainer(pair.model, words_model.setup);
        predict(pair.second);
        predict(pair.first);
        predict(pair.first);
        return pair;
    };
    const auto close = [](Pair& pair) {
        mpt_trainer_destroy(pair.second);
        mpt_trainer_destroy(pair.first);
        mpt_model_destroy(pair.model);
        mpt_context_destroy(pair.context);
    };
    size_t one_set = 0;
    {
        Pair pair = open(0);
        REQUIRE_OK(mpt_context_get_memory(pair.context, &one_set, nullptr));
        close(pair);
    }
    Pair pair = open(one_set + 4096);
    const size_t first_with_words = trainer_allocated(pair.first), second_without = trainer_allocated(pair.second);
    const std::vector<float> expected = predict(pair.second);  // the second's second: it wants words too
    for (int round = 0; round < 10; ++round) {
        CHECK(same_bits(predict(round % 2 ? pair.second : pair.first), expected));
        CHECK(trainer_allocated(pair.first) == first_with_words);
        CHECK(trainer_allocated(pair.second) == second_without);
    }
    close(pair);
}

// bf16 layers read weight words on up to 4 rows, fp16 ones on up to 8: predictions on 8 rows make
// words for both, and every later forward on fewer rows (a prediction, the last chunk of a long
// one, a training step) must read the words of its own weights.
TEST_CASE("a model mixing bf16 and fp16 layers predicts and steps the same after predictions made weight words") {
    const Task data = make_blobs(300, 40, 10, 1.0, 0.8, 71);
    const std::vector<LayerSpec> specs = {{64, MPT_ACTIVATION_RELU}, {48, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    struct Run {
        std::vector<float> two_rows, all_rows, weights;
        float loss = 0.0f;
    };
    const auto run = [&](bool make_words) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
        mpt_model_t* model = new_model(context, 40, specs);
        REQUIRE_OK(mpt_model_set_layer_dtype(model, 0, MPT_DTYPE_FP16));
        randomise_weights(model, 40, specs, 72, 0.3, 0.1);
        TrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, data);
        const auto predict = [&](int64_t rows) {
            std::vector<float> out(static_cast<size_t>(rows * 10));
            REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), rows, out.data(), static_cast<int64_t>(out.size())));
            return out;
        };
        Run result;
        if (make_words) {
            predict(300);  // plans 256 rows, so that the later long prediction keeps the words
            predict(8);
            predict(8);
        }
        result.two_rows = predict(2);
        result.all_rows = predict(300);  // 256 rows, then 44
        REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 2, &result.loss));
        result.weights = flat_weights(model, 40, specs);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return result;
    };
    const Run fresh = run(false), after_words = run(true);
    CHECK(same_bits(after_words.two_rows, fresh.two_rows));
    CHECK(same_bits(after_words.all_rows, fresh.all_rows));
    CHECK(after_words.loss == fresh.loss);
    CHECK(same_bits(after_words.weights, fresh.weights));
}

TEST_CASE("evaluate counts every row when the batch size does not divide the dataset (known weights, hand-computed answer)") {
    // Two inputs, two classes, identity weights: the prediction is the larger input. Rows 0..6 are
    // labelled correctly, rows 7..9 (at the end, in the last partial batch) wrongly: accuracy 7/10.
    const float x[10][2] = {{2, 0}, {0, 2}, {3, 1}, {1, 3}, {0.5f, 0}, {0, 0.5f}, {4, -1}, {2, 1}, {1, 2}, {3, 0}};
    const int32_t labels[10] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    mpt_context_t* context = new_context(1);
    mpt_model_t* model = new_model(context, 2, {{2, MPT_ACTIVATION_SOFTMAX}});
    const float identity[4] = {1, 0, 0, 1}, zero[2] = {0, 0};
    REQUIRE_OK(mpt_model_set_weights(model, 0, identity, 4, zero, 2));
    double expected_loss = 0;
    for (int r = 0; r < 10; ++r) {
        const double z0 = x[r][0], z1 = x[r][1];
        const double lse = std::log(std::exp(z0) + std::exp(z1));
        expected_loss += lse - (labels[r] == 0 ? z0 : z1);
    }
    expected_loss /= 10;
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, &x[0][0], 10, 2, labels, 2, 1, &dataset));
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        TrainerSetup setup;
        setup.precision = precision;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        for (int64_t batch : {1, 3, 4, 7, 9, 10, 64, 0}) {
            const std::string precision_label = precision_name(precision);
        CAPTURE(precision_label);
            CAPTURE(batch);
            float loss = -1.0f, accuracy = -1.0f;
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, batch, &loss, &accuracy));
            CHECK(accuracy == doctest::Approx(0.7).epsilon(1e-6));
            // Inputs and identity weights are exact in bf16, so the loss is exact to fp32 rounding.
            CHECK(loss == doctest::Approx(expected_loss).epsilon(1e-5));
        }
        mpt_trainer_destroy(trainer);
    }
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// ---- (8) padding --------------------------------------------------------------------------------------

// Sigmoid and softplus are not 0 at 0, so a padded unit's output would be nonzero if not masked.
TEST_CASE("padded units never leak: 13 sigmoid or softplus hidden units and 10 or 3 outputs match a double-precision forward pass, before and after training") {
    struct Case {
        int64_t outputs;
        mpt_activation head;
        mpt_loss loss;
        mpt_activation hidden;
    };
    const Case cases[] = {
        {10, MPT_ACTIVATION_SOFTMAX, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SOFTMAX, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_LINEAR, MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SIGMOID, MPT_LOSS_BINARY_CROSSENTROPY, MPT_ACTIVATION_SIGMOID},
        {3, MPT_ACTIVATION_SOFTPLUS, MPT_LOSS_MEAN_SQUARED_ERROR, MPT_ACTIVATION_SOFTPLUS},
    };
    for (const Case& c : cases) {
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
            CAPTURE(c.outputs);
            CAPTURE(c.head);
            CAPTURE(c.hidden);
            const std::string precision_label = precision_name(precision);
            CAPTURE(precision_label);
            const int64_t inputs = 11;  // padded to 16
            Task task = make_blobs(200, inputs, c.outputs, 1.0, 0.7, 61);
            if (c.loss != MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
                TestRng rng(62);
                for (int64_t i = 0; i < task.rows * c.outputs; ++i) task.targets.push_back(static_cast<float>(rng.uniform(0.1, 0.9)));
            }
            const std::vector<LayerSpec> specs = {{13, c.hidden}, {c.outputs, c.head}};
            mpt_context_t* context = new_context(8);
            mpt_model_t* model = new_model(context, inputs, specs);
            randomise_weights(model, inputs, specs, 63);
            auto check_against_reference = [&](const char* when) {
                const std::string moment = when;
                CAPTURE(moment);
                const RefNet net = read_net(model, inputs, specs);
                const std::vector<float> predicted = model_predict(model, task);
                double worst = 0;
                for (int64_t r = 0; r < task.rows; ++r) {
                    const std::vector<double> reference = forward(net, task.x.data() + r * inputs).outputs.back();
                    for (int64_t k = 0; k < c.outputs; ++k) {
                        const double expected = reference[static_cast<size_t>(k)];
                        const double error = std::fabs(predicted[static_cast<size_t>(r * c.outputs + k)] - expected) /
                                             std::max(std::fabs(expected), 0.1);
                        worst = std::max(worst, error);
                    }
                }
                CHECK(worst <= 1e-5);
            };
            check_against_reference("initial weights");
            TrainerSetup setup;
            setup.precision = precision;
            setup.loss = c.loss;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.01f;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = dataset_for(context, task, c.loss);
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 3, 20, 1));
            check_against_reference("after training");
            if (precision == MPT_PRECISION_FP32) {
                // The trainer's own forward pass in fp32 matches the reference too.
                const RefNet net = read_net(model, inputs, specs);
                const std::vector<float> predicted = trainer_predict(trainer, task);
                for (int64_t r = 0; r < 20; ++r) {
                    const std::vector<double> reference = forward(net, task.x.data() + r * inputs).outputs.back();
                    for (int64_t k = 0; k < c.outputs; ++k)
                        CHECK(predicted[static_cast<size_t>(r * c.outputs + k)] ==
                              doctest::Approx(reference[static_cast<size_t>(k)]).epsilon(1e-5).scale(0.1));
                }
            }
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}

// Exactly where MPT_PRECISION_AUTO stays fp32 (a CPU without native low-precision GEMMs; ctest
// also runs this file with MPTRAIN_CPU_AMX=0), a mixed trainer says once that its GEMMs are
// emulated; where AUTO picks bf16 (AMX), neither mixed precision is emulated and nothing is said.
TEST_CASE("a mixed-precision trainer warns, once, exactly when the CPU emulates its low-precision GEMMs") {
    std::vector<std::string> warnings;
    const mpt_log_fn collect = [](mpt_log_level level, const char* message, void* user_data) {
        if (level == MPT_LOG_LEVEL_WARNING) static_cast<std::vector<std::string>*>(user_data)->push_back(message);
    };
    mpt_context_options_t* context_options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&context_options));
    REQUIRE_OK(mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU));
    REQUIRE_OK(mpt_context_options_set_log_callback(context_options, collect, &warnings));
    REQUIRE_OK(mpt_context_options_set_log_level(context_options, MPT_LOG_LEVEL_WARNING));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(context_options, &context));
    mpt_context_options_destroy(context_options);
    warnings.clear();  // what the context says of its own set-up is not this case's subject
    mpt_precision automatic = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(context, MPT_PRECISION_AUTO, &automatic));
    const bool emulated = automatic == MPT_PRECISION_FP32;
    struct Expectation {
        mpt_precision precision;
        const char* dtype;
    };
    for (const Expectation& expectation : {Expectation{MPT_PRECISION_FP32, nullptr},
                                           Expectation{MPT_PRECISION_MIXED_BF16, "bf16"},
                                           Expectation{MPT_PRECISION_MIXED_FP16, "fp16"}}) {
        CAPTURE(expectation.precision);
        mpt_model_t* model = new_model(context, 4, {{8, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}});
        TrainerSetup setup;
        setup.precision = expectation.precision;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        if (expectation.dtype && emulated) {
            REQUIRE(warnings.size() == 1);
            CHECK(warnings[0].find(std::string(expectation.dtype) + " GEMMs are emulated in fp32") != std::string::npos);
        } else {
            CHECK(warnings.empty());
        }
        warnings.clear();
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
    }
    mpt_context_destroy(context);
}

namespace {

// Sets every layer of a model to the weights `layers` (as read_weights gives them) from a progress
// callback, at its `at_step`-th call.
struct SetWeightsAt {
    mpt_model_t* model;
    const std::vector<std::pair<std::vector<float>, std::vector<float>>>* layers;
    int64_t at_call;
    int64_t calls = 0;
    mpt_status status = MPT_STATUS_INTERNAL;
};

int set_weights_at(int64_t, int64_t, int64_t, float, float, void* user_data) {
    SetWeightsAt& action = *static_cast<SetWeightsAt*>(user_data);
    if (++action.calls != action.at_call) return 0;
    for (size_t i = 0; i < action.layers->size(); ++i) {
        const auto& [w, b] = (*action.layers)[i];
        action.status = mpt_model_set_weights(action.model, static_cast<int64_t>(i), w.data(), static_cast<int64_t>(w.size()),
                                              b.data(), static_cast<int64_t>(b.size()));
        if (action.status != MPT_STATUS_OK) break;
    }
    return 0;
}

}  // namespace

// A callback may set the model's weights in the middle of fit: the steps after it train from them,
// in every precision, as mpt_trainer_step on the same rows does (the low-precision copies follow the
// new masters, not only at the next epoch).
TEST_CASE("weights set from a progress callback are what fit's next steps train from, in every precision") {
    const std::vector<LayerSpec> specs = {{16, MPT_ACTIVATION_RELU}, {2, MPT_ACTIVATION_SOFTMAX}};
    const Task task = make_xor(96, 31);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision_name(precision));
        TrainerSetup setup;
        setup.precision = precision;
        mpt_context_t* context = new_context(5);
        mpt_dataset_t* dataset = labels_dataset(context, task);
        mpt_model_t* source = new_model(context, task.features, specs);  // other weights, to set (read: built)
        const auto replacement = read_weights(source, task.features, specs);

        mpt_model_t* fitted = new_model(context, task.features, specs);
        mpt_trainer_t* fitting = new_trainer(fitted, setup);
        SetWeightsAt action{fitted, &replacement, 2};
        REQUIRE_OK(mpt_trainer_set_callbacks(fitting, &set_weights_at, nullptr, &action));
        REQUIRE_OK(mpt_trainer_fit(fitting, dataset, 1, 16, 0));  // unshuffled: steps take rows in order
        REQUIRE(action.status == MPT_STATUS_OK);

        mpt_model_t* stepped = new_model(context, task.features, specs);
        mpt_trainer_t* stepping = new_trainer(stepped, setup);
        REQUIRE_OK(mpt_trainer_step(stepping, dataset, 0, 16, nullptr));  // builds the model and its copies
        for (size_t i = 0; i < replacement.size(); ++i)
            REQUIRE_OK(mpt_model_set_weights(stepped, static_cast<int64_t>(i), replacement[i].first.data(),
                                             static_cast<int64_t>(replacement[i].first.size()),
                                             replacement[i].second.data(), static_cast<int64_t>(replacement[i].second.size())));
        for (int64_t first = 32; first < 96; first += 16) REQUIRE_OK(mpt_trainer_step(stepping, dataset, first, 16, nullptr));
        CHECK(same_bits(flat_weights(fitted, task.features, specs), flat_weights(stepped, task.features, specs)));

        mpt_trainer_destroy(stepping);
        mpt_model_destroy(stepped);
        mpt_trainer_destroy(fitting);
        mpt_model_destroy(fitted);
        mpt_model_destroy(source);
        mpt_dataset_destroy(dataset);
        mpt_context_destroy(context);
    }
}

// ---- validation from the epoch-end callback ---------------------------------------------------------

namespace {

// What an epoch-end callback saw and got: the validation set's loss and accuracy after each epoch,
// fit's own epoch means, and the statuses of calls that stay refused there.
struct Validation {
    mpt_trainer_t* trainer = nullptr;
    mpt_dataset_t* validation = nullptr;
    mpt_dataset_t* training = nullptr;
    int64_t batch = 0;
    std::vector<float> losses, accuracies, epoch_losses;
    std::vector<mpt_status> evaluated, refused;
    mpt_status from_progress = MPT_STATUS_OK;
};

int validate_at_epoch_end(int64_t, float loss, float, void* user_data) {
    auto* v = static_cast<Validation*>(user_data);
    v->epoch_losses.push_back(loss);
    float validation_loss = -1.0f, validation_accuracy = -1.0f;
    v->evaluated.push_back(mpt_trainer_evaluate(v->trainer, v->validation, v->batch, &validation_loss, &validation_accuracy));
    v->losses.push_back(validation_loss);
    v->accuracies.push_back(validation_accuracy);
    float out[3];
    const float row[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    v->refused.push_back(mpt_trainer_step(v->trainer, v->training, 0, 16, nullptr));
    v->refused.push_back(mpt_trainer_predict(v->trainer, row, 1, out, 3));
    v->refused.push_back(mpt_trainer_fit(v->trainer, v->training, 1, 16, 1));
    return 0;
}

int evaluate_from_progress(int64_t, int64_t step, int64_t, float, float, void* user_data) {
    auto* v = static_cast<Validation*>(user_data);
    if (step == 2) v->from_progress = mpt_trainer_evaluate(v->trainer, v->validation, 0, nullptr, nullptr);
    return 0;
}

}  // namespace

TEST_CASE("an epoch-end callback may evaluate a validation set: the numbers of an evaluation between fits, the run unchanged") {
    const Task train = make_blobs(160, 4, 3, 1.2, 0.8, 31), held_out = make_blobs(70, 4, 3, 1.2, 0.8, 32);
    const std::vector<LayerSpec> specs = {{12, MPT_ACTIVATION_RELU}, {3, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16}) {
        for (int64_t validation_batch : {int64_t{0}, int64_t{64}}) {  // fit's batch (16), and more than it
            CAPTURE(static_cast<int>(precision));
            CAPTURE(validation_batch);
            TrainerSetup setup;
            setup.precision = precision;
            setup.optimizer = MPT_OPTIMIZER_ADAM;
            setup.learning_rate = 0.01f;
            // The same seed, so the same initial weights and shuffles, for three runs.
            struct Run {
                mpt_context_t* context;
                mpt_model_t* model;
                mpt_trainer_t* trainer;
                mpt_dataset_t* training;
                mpt_dataset_t* validation;
            };
            const auto open = [&]() {
                Run run{};
                run.context = new_context(17);
                run.model = new_model(run.context, 4, specs);
                run.trainer = new_trainer(run.model, setup);
                run.training = labels_dataset(run.context, train);
                run.validation = labels_dataset(run.context, held_out);
                return run;
            };
            const auto close = [](Run& run) {
                mpt_dataset_destroy(run.validation);
                mpt_dataset_destroy(run.training);
                mpt_trainer_destroy(run.trainer);
                mpt_model_destroy(run.model);
                mpt_context_destroy(run.context);
            };

            Run validated = open();
            Validation v;
            v.trainer = validated.trainer;
            v.validation = validated.validation;
            v.training = validated.training;
            v.batch = validation_batch;
            REQUIRE_OK(mpt_trainer_set_callbacks(validated.trainer, evaluate_from_progress, validate_at_epoch_end, &v));
            REQUIRE_OK(mpt_trainer_fit(validated.trainer, validated.training, 3, 16, 1));
            CHECK(v.from_progress == MPT_STATUS_INVALID_STATE);  // mid-epoch: steps are in flight
            REQUIRE(v.evaluated.size() == 3);
            for (mpt_status status : v.evaluated) CHECK(status == MPT_STATUS_OK);
            for (mpt_status status : v.refused) CHECK(status == MPT_STATUS_INVALID_STATE);
            int64_t steps = 0, epochs = 0;
            REQUIRE_OK(mpt_trainer_get_progress(validated.trainer, &steps, &epochs));
            CHECK(steps == 30);
            CHECK(epochs == 3);

            // Evaluations between one-epoch fits give the same numbers, bit for bit.
            Run between = open();
            for (int epoch = 0; epoch < 3; ++epoch) {
                CAPTURE(epoch);
                REQUIRE_OK(mpt_trainer_fit(between.trainer, between.training, 1, 16, 1));
                float loss = 0.0f, accuracy = 0.0f;
                REQUIRE_OK(mpt_trainer_evaluate(between.trainer, between.validation, validation_batch, &loss, &accuracy));
                CHECK(loss == v.losses[static_cast<size_t>(epoch)]);
                CHECK(accuracy == v.accuracies[static_cast<size_t>(epoch)]);
            }
            // A run without evaluations trains the same weights and reports the same epoch means.
            Run plain = open();
            Validation plain_seen;
            REQUIRE_OK(mpt_trainer_set_callbacks(plain.trainer, nullptr,
                                                 [](int64_t, float loss, float, void* user) {
                                                     static_cast<Validation*>(user)->epoch_losses.push_back(loss);
                                                     return 0;
                                                 },
                                                 &plain_seen));
            REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain.training, 3, 16, 1));
            CHECK(plain_seen.epoch_losses == v.epoch_losses);
            const std::vector<float> expected = flat_weights(plain.model, 4, specs);
            CHECK(flat_weights(validated.model, 4, specs) == expected);
            CHECK(flat_weights(between.model, 4, specs) == expected);
            close(plain);
            close(between);
            close(validated);
        }
    }
}

namespace {

struct FailingValidation {
    mpt_trainer_t* trainer;
    mpt_dataset_t* validation;
    std::vector<mpt_status> statuses;
    std::vector<float> epoch_losses;
};

int validate_beyond_the_budget(int64_t, float loss, float, void* user_data) {
    auto* v = static_cast<FailingValidation*>(user_data);
    v->epoch_losses.push_back(loss);
    if (v->validation) v->statuses.push_back(mpt_trainer_evaluate(v->trainer, v->validation, 2048, nullptr, nullptr));
    return 0;
}

}  // namespace

// An evaluation whose larger batch does not fit the memory budget fails inside the callback (its
// step buffers given back for the larger plan), and fit plans its own again for the next epoch.
TEST_CASE("an epoch-end evaluation that runs out of memory fails alone: fit's next epochs train as without it") {
    const Task train = make_blobs(256, 64, 4, 1.0, 0.8, 41), held_out = make_blobs(2048, 64, 4, 1.0, 0.8, 42);
    const std::vector<LayerSpec> specs = {{48, MPT_ACTIVATION_RELU}, {4, MPT_ACTIVATION_SOFTMAX}};
    TrainerSetup setup;
    size_t budget = 0;
    {  // what fit and an evaluation at fit's batch take, both data sets included
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5);
        mpt_model_t* model = new_model(context, 64, specs);
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* training = labels_dataset(context, train);
        mpt_dataset_t* validation = labels_dataset(context, held_out);
        REQUIRE_OK(mpt_trainer_fit(trainer, training, 1, 16, 1));
        REQUIRE_OK(mpt_trainer_evaluate(trainer, validation, 16, nullptr, nullptr));
        REQUIRE_OK(mpt_context_get_memory(context, nullptr, &budget));
        budget += 4096;
        mpt_dataset_destroy(validation);
        mpt_dataset_destroy(training);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    std::vector<std::vector<float>> weights;
    std::vector<std::vector<float>> epoch_losses;
    for (bool evaluating : {true, false}) {
        CAPTURE(evaluating);
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 5, budget);
        mpt_model_t* model = new_model(context, 64, specs);
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* training = labels_dataset(context, train);
        mpt_dataset_t* validation = labels_dataset(context, held_out);
        FailingValidation v{trainer, evaluating ? validation : nullptr, {}, {}};
        REQUIRE_OK(mpt_trainer_set_callbacks(trainer, nullptr, validate_beyond_the_budget, &v));
        REQUIRE_OK(mpt_trainer_fit(trainer, training, 3, 16, 1));
        if (evaluating) {
            REQUIRE(v.statuses.size() == 3);
            for (mpt_status status : v.statuses) CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
        }
        weights.push_back(flat_weights(model, 64, specs));
        epoch_losses.push_back(v.epoch_losses);
        mpt_dataset_destroy(validation);
        mpt_dataset_destroy(training);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    CHECK(epoch_losses[0] == epoch_losses[1]);
    CHECK(weights[0] == weights[1]);
}
