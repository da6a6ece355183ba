// Dropout inside the core: the masks' statistics, training steps through dropout layers against a
// double-precision reference that draws the same masks (nn/dropout.h is the specification), the
// masks' seed across a checkpoint, and what model files and checkpoints with dropout may hold.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/float_bits.h"
#include "data/dataset.h"
#include "nn/checkpoint.h"
#include "nn/dropout.h"
#include "nn/model.h"
#include "nn/model_file.h"
#include "nn/trainer.h"
#include "support/rewritten_file.h"
#include "support/temp_dir.h"
#include "support/tiny_trainer.h"

namespace {

using mpt_test::kTinyBatch;

// |share - expected| within 6 standard deviations of a binomial share over `count` draws.
void check_share(int64_t hits, int64_t count, double expected) {
    const double share = static_cast<double>(hits) / static_cast<double>(count);
    CHECK_MESSAGE(std::abs(share - expected) < 6.0 * std::sqrt(expected * (1.0 - expected) / static_cast<double>(count)),
                  share << " against " << expected);
}

// The share of `count` indices that two keys' masks treat alike (both kept or both dropped).
int64_t agreements(uint64_t first_key, uint64_t second_key, uint32_t threshold, int64_t count, int64_t shift = 0) {
    int64_t same = 0;
    for (int64_t i = 0; i < count; ++i)
        same += mpt::dropout_keeps(first_key, threshold, i) == mpt::dropout_keeps(second_key, threshold, i + shift);
    return same;
}

// A 4-6-5-7-3 classifier on its own one-thread CPU context, every hidden layer with dropout (tanh,
// sigmoid, relu: each activation's derivative through a dropped output), in fp32 with plain SGD;
// the inputs dropped at `input_rate`.
struct DropoutNetwork {
    static constexpr int64_t kInputs = 4, kRows = 8, kClasses = 3;
    const std::vector<int64_t> units{6, 5, 7, 3};
    const std::vector<mpt::Activation> activations{mpt::Activation::tanh, mpt::Activation::sigmoid,
                                                   mpt::Activation::relu, mpt::Activation::softmax};
    const std::vector<float> rates{0.5f, 0.3f, 0.2f, 0.0f};
    static constexpr float kLearningRate = 0.5f;

    std::shared_ptr<mpt::Context> context;
    std::shared_ptr<mpt::Model> model;
    std::shared_ptr<mpt::Dataset> dataset;
    std::unique_ptr<mpt::Trainer> trainer;
    std::vector<float> samples;
    std::vector<int32_t> labels;
    float input_rate = 0.0f;

    explicit DropoutNetwork(float input_dropout = 0.0f) : input_rate(input_dropout) {
        mpt::ContextConfig context_config;
        context_config.backend = MPT_BACKEND_CPU;
        context_config.threads = 1;
        context_config.seed = 11;
        context = std::make_shared<mpt::Context>(context_config);
        model = std::make_shared<mpt::Model>(context, kInputs);
        for (size_t l = 0; l < units.size(); ++l) {
            model->add_dense(units[l], activations[l]);
            model->set_layer_dropout(static_cast<int64_t>(l), rates[l]);
        }
        model->set_input_dropout(input_rate);
        model->build();
        for (int64_t r = 0; r < kRows; ++r) {
            labels.push_back(static_cast<int32_t>(r % kClasses));
            for (int64_t f = 0; f < kInputs; ++f) samples.push_back(std::sin(static_cast<float>(3 * r + 7 * f + 1)));
        }
        dataset = mpt::Dataset::from_f32(context, samples.data(), kRows, kInputs, labels.data(), kClasses, true);
        mpt::TrainerConfig config;
        config.precision = MPT_PRECISION_FP32;
        config.optimizer.learning_rate = kLearningRate;
        trainer = std::make_unique<mpt::Trainer>(model, config);
    }

    std::vector<std::vector<double>> weights() const {  // per layer: unpadded weights, then the bias
        std::vector<std::vector<double>> all;
        for (size_t l = 0; l < units.size(); ++l) {
            const mpt::DenseLayer& layer = model->layers()[l];
            std::vector<float> w(static_cast<size_t>(layer.units * layer.inputs)), b(static_cast<size_t>(layer.units));
            model->get_weights(static_cast<int64_t>(l), w.data(), b.data());
            std::vector<double> both(w.begin(), w.end());
            both.insert(both.end(), b.begin(), b.end());
            all.push_back(both);
        }
        return all;
    }
};

double activate(mpt::Activation activation, double z) {
    switch (activation) {
        case mpt::Activation::tanh: return std::tanh(z);
        case mpt::Activation::sigmoid: return 1.0 / (1.0 + std::exp(-z));
        case mpt::Activation::relu: return z > 0.0 ? z : 0.0;
        default: return z;
    }
}

double derivative(mpt::Activation activation, double z) {
    switch (activation) {
        case mpt::Activation::tanh: return 1.0 - std::tanh(z) * std::tanh(z);
        case mpt::Activation::sigmoid: return activate(activation, z) * (1.0 - activate(activation, z));
        case mpt::Activation::relu: return z > 0.0 ? 1.0 : 0.0;
        default: return 1.0;
    }
}

// One SGD step of `network` at step count `step`, in double, on `weights` (DropoutNetwork::weights'
// layout); returns the batch's mean loss. The masks are nn/dropout.h's, over each layer's output as
// the executor lays it out: [rows, padded units]. Not `training`: the loss of every output, no step.
double reference_step(const DropoutNetwork& network, std::vector<std::vector<double>>& weights, int64_t step,
                      bool training = true) {
    const size_t layers = network.units.size();
    const int64_t rows = DropoutNetwork::kRows;
    std::vector<std::vector<double>> inputs(layers + 1), pre(layers), keep(layers);  // keep: 0 or the scale
    inputs[0].assign(network.samples.begin(), network.samples.end());
    if (training && network.input_rate > 0.0f) {  // the inputs' mask, over [rows, padded inputs]
        const int64_t padded = network.model->layers()[0].padded_inputs;
        const mpt::DropoutDraw draw = mpt::dropout_draw(network.trainer->dropout_seed(),
                                                        mpt::input_dropout_layer(static_cast<int64_t>(layers)),
                                                        network.input_rate);
        const uint64_t key = mpt::dropout_key(draw.seed, step, draw.layer);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < DropoutNetwork::kInputs; ++i)
                inputs[0][static_cast<size_t>(r * DropoutNetwork::kInputs + i)] *=
                    mpt::dropout_keeps(key, draw.threshold, r * padded + i) ? draw.scale : 0.0;
    }
    for (size_t l = 0; l < layers; ++l) {
        const mpt::DenseLayer& layer = network.model->layers()[l];
        const mpt::DropoutDraw draw = mpt::dropout_draw(network.trainer->dropout_seed(), static_cast<int64_t>(l),
                                                        network.rates[l]);
        const uint64_t key = mpt::dropout_key(draw.seed, step, draw.layer);
        pre[l].assign(static_cast<size_t>(rows * layer.units), 0.0);
        keep[l].assign(pre[l].size(), 1.0);
        inputs[l + 1].assign(pre[l].size(), 0.0);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t u = 0; u < layer.units; ++u) {
                const size_t k = static_cast<size_t>(r * layer.units + u);
                double z = weights[l][static_cast<size_t>(layer.units * layer.inputs + u)];
                for (int64_t i = 0; i < layer.inputs; ++i)
                    z += weights[l][static_cast<size_t>(u * layer.inputs + i)] * inputs[l][static_cast<size_t>(r * layer.inputs + i)];
                pre[l][k] = z;
                if (training && network.rates[l] > 0.0f)
                    keep[l][k] = mpt::dropout_keeps(key, draw.threshold, r * layer.padded_units + u) ? draw.scale : 0.0;
                inputs[l + 1][k] = activate(network.activations[l], z) * keep[l][k];
            }
    }
    // Softmax cross-entropy: dz = (p - onehot) / rows.
    std::vector<std::vector<double>> dz(layers);
    dz[layers - 1].assign(static_cast<size_t>(rows * DropoutNetwork::kClasses), 0.0);
    double loss = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const double* z = &pre[layers - 1][static_cast<size_t>(r * DropoutNetwork::kClasses)];
        double top = z[0], sum = 0.0;
        for (int64_t c = 1; c < DropoutNetwork::kClasses; ++c) top = std::max(top, z[c]);
        for (int64_t c = 0; c < DropoutNetwork::kClasses; ++c) sum += std::exp(z[c] - top);
        const int32_t label = network.labels[static_cast<size_t>(r)];
        loss -= (z[label] - top - std::log(sum)) / static_cast<double>(rows);
        for (int64_t c = 0; c < DropoutNetwork::kClasses; ++c)
            dz[layers - 1][static_cast<size_t>(r * DropoutNetwork::kClasses + c)] =
                (std::exp(z[c] - top) / sum - (c == label ? 1.0 : 0.0)) / static_cast<double>(rows);
    }
    if (!training) return loss;
    // Backward through each layer's mask and activation, every gradient before any update.
    for (size_t l = layers - 1; l > 0; --l) {
        const mpt::DenseLayer& layer = network.model->layers()[l];
        dz[l - 1].assign(static_cast<size_t>(rows * layer.inputs), 0.0);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < layer.inputs; ++i) {
                double g = 0.0;
                for (int64_t u = 0; u < layer.units; ++u)
                    g += dz[l][static_cast<size_t>(r * layer.units + u)] * weights[l][static_cast<size_t>(u * layer.inputs + i)];
                const size_t k = static_cast<size_t>(r * layer.inputs + i);
                dz[l - 1][k] = g * keep[l - 1][k] * derivative(network.activations[l - 1], pre[l - 1][k]);
            }
    }
    for (size_t l = 0; l < layers; ++l) {
        const mpt::DenseLayer& layer = network.model->layers()[l];
        for (int64_t u = 0; u < layer.units; ++u) {
            double bias_gradient = 0.0;
            for (int64_t r = 0; r < rows; ++r) {
                const double g = dz[l][static_cast<size_t>(r * layer.units + u)];
                bias_gradient += g;
                for (int64_t i = 0; i < layer.inputs; ++i)
                    weights[l][static_cast<size_t>(u * layer.inputs + i)] -=
                        DropoutNetwork::kLearningRate * g * inputs[l][static_cast<size_t>(r * layer.inputs + i)];
            }
            weights[l][static_cast<size_t>(layer.units * layer.inputs + u)] -= DropoutNetwork::kLearningRate * bias_gradient;
        }
    }
    return loss;
}

// A checkpoint of the tiny trainer (dropout `rate` on its hidden layer) after three steps.
std::string tiny_checkpoint(const mpt_test::TempDir& directory, const std::string& name, float rate) {
    mpt_test::TinyTrainer tiny(mpt::TrainerConfig{}, rate);
    for (int step = 0; step < 3; ++step) tiny.trainer->step(*tiny.dataset, kTinyBatch * step, kTinyBatch);
    const std::string path = directory.file(name);
    mpt::save_checkpoint(*tiny.trainer, path);
    return path;
}

// Loading `path` into a fresh tiny trainer (dropout `rate`) fails with `status` and `expected` in its
// message, and leaves the trainer's weights as they were.
void check_refused(const std::string& path, float rate, mpt_status status, const std::string& expected) {
    mpt_test::TinyTrainer fresh(mpt::TrainerConfig{}, rate);
    const std::vector<float> before = fresh.masters();
    try {
        mpt::load_checkpoint(*fresh.trainer, path);
        FAIL("loaded " << path);
    } catch (const mpt::Error& error) {
        CHECK(error.status() == status);
        CHECK_MESSAGE(std::string(error.what()).find(expected) != std::string::npos, error.what());
    }
    CHECK(before == fresh.masters());
}

// `text` with `pattern`'s first match replaced by `replacement`; the match must be there.
std::string replaced(const std::string& text, const std::string& pattern, const std::string& replacement) {
    const std::regex expression(pattern);
    REQUIRE_MESSAGE(std::regex_search(text, expression), pattern << " in " << text);
    return std::regex_replace(text, expression, replacement, std::regex_constants::format_first_only);
}

// A one-thread CPU context of seed 3 and an empty model on it taking two inputs.
std::shared_ptr<mpt::Model> two_input_model() {
    mpt::ContextConfig context_config;
    context_config.backend = MPT_BACKEND_CPU;
    context_config.threads = 1;
    context_config.seed = 3;
    return std::make_shared<mpt::Model>(std::make_shared<mpt::Context>(context_config), 2);
}

// One mixed-fp16 SGD step of `model` (built, 3 classes) over the 8 rows `x` is skipped, and leaves
// every master weight finite.
void check_fp16_step_skipped(const std::shared_ptr<mpt::Model>& model, const std::vector<float>& x) {
    std::vector<int32_t> labels{0, 1, 2, 0, 1, 2, 0, 1};
    auto dataset = mpt::Dataset::from_f32(model->context(), x.data(), 8, 2, labels.data(), 3, true);
    mpt::TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;
    config.optimizer.learning_rate = 0.1f;
    mpt::Trainer trainer(model, config);
    trainer.step(*dataset, 0, 8);
    std::vector<float> block(static_cast<size_t>(model->parameter_block_elements()));
    model->read_master_block(block.data());
    bool finite = true;
    for (float value : block) finite = finite && std::isfinite(value);
    CHECK(trainer.state().skipped_steps == 1);
    CHECK(finite);
}

}  // namespace

TEST_CASE("a dropout draw drops at its rate, with the scale that keeps the expected value") {
    const mpt::DropoutDraw quarter = mpt::dropout_draw(5, 2, 0.25f);
    CHECK(quarter.threshold == uint32_t{1} << 30);
    CHECK(quarter.scale == 4.0f / 3.0f);
    CHECK(quarter.seed == 5);
    CHECK(quarter.layer == 2);
    CHECK(mpt::dropout_draw(5, 2, 0.5f).threshold == uint32_t{1} << 31);
    CHECK(mpt::dropout_draw(5, 2, 0.5f).scale == 2.0f);
    CHECK(mpt::valid_dropout_rate(0.0f));
    CHECK(mpt::valid_dropout_rate(0.999f));
    CHECK_FALSE(mpt::valid_dropout_rate(1.0f));
    CHECK_FALSE(mpt::valid_dropout_rate(-0.1f));
    CHECK_FALSE(mpt::valid_dropout_rate(NAN));
}

TEST_CASE("dropout masks keep 1 - rate of the values, independently across steps, layers, seeds and positions") {
    constexpr int64_t kCount = 200000;
    for (float rate : {0.1f, 0.5f, 0.9f}) {
        CAPTURE(rate);
        const mpt::DropoutDraw draw = mpt::dropout_draw(42, 0, rate);
        for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{1} << 40}) {
            const uint64_t key = mpt::dropout_key(42, step, 0);
            int64_t kept = 0;
            for (int64_t i = 0; i < kCount; ++i) kept += mpt::dropout_keeps(key, draw.threshold, i);
            check_share(kept, kCount, 1.0 - rate);
        }
    }
    // Two independent masks of rate 1/2 agree on half the values; the same mask on all of them.
    const uint32_t half = mpt::dropout_draw(42, 0, 0.5f).threshold;
    const uint64_t key = mpt::dropout_key(42, 7, 1);
    CHECK(agreements(key, key, half, kCount) == kCount);
    check_share(agreements(key, mpt::dropout_key(42, 8, 1), half, kCount), kCount, 0.5);  // the next step
    check_share(agreements(key, mpt::dropout_key(42, 7, 2), half, kCount), kCount, 0.5);  // another layer
    check_share(agreements(key, mpt::dropout_key(43, 7, 1), half, kCount), kCount, 0.5);  // another seed
    check_share(agreements(key, key, half, kCount, 1), kCount, 0.5);                      // the next value
    check_share(agreements(key, key, half, kCount, 3000), kCount, 0.5);                   // the next row
    // A model's inputs draw apart from every one of its layers (here a model of 3 layers).
    for (int64_t layer = 0; layer < 3; ++layer)
        check_share(agreements(mpt::dropout_key(42, 7, mpt::input_dropout_layer(3)), mpt::dropout_key(42, 7, layer),
                               half, kCount),
                    kCount, 0.5);
}

// The steps of `network` (3 of them) against reference_step, then an evaluation that drops nothing.
void check_steps_against_reference(DropoutNetwork& network) {
    std::vector<std::vector<double>> expected = network.weights();
    for (int64_t step = 0; step < 3; ++step) {
        CAPTURE(step);
        const double expected_loss = reference_step(network, expected, step);
        const float loss = network.trainer->step(*network.dataset, 0, DropoutNetwork::kRows);
        CHECK(loss == doctest::Approx(expected_loss).epsilon(1e-5));
        const std::vector<std::vector<double>> actual = network.weights();
        for (size_t l = 0; l < actual.size(); ++l) {
            CAPTURE(l);
            double worst = 0.0;
            for (size_t k = 0; k < actual[l].size(); ++k) worst = std::max(worst, std::abs(actual[l][k] - expected[l][k]));
            CHECK(worst < 2e-6);
        }
    }
    // Evaluation uses every output.
    std::vector<std::vector<double>> trained = network.weights();
    const double unmasked_loss = reference_step(network, trained, 3, false);
    CHECK(network.trainer->evaluate(*network.dataset, DropoutNetwork::kRows).loss ==
          doctest::Approx(unmasked_loss).epsilon(1e-5));
}

TEST_CASE("training steps through tanh, sigmoid and relu layers with dropout match a double-precision reference") {
    DropoutNetwork network;
    check_steps_against_reference(network);
}

// The first layer's forward and its weights' gradient both see the dropped inputs; evaluation none.
TEST_CASE("input dropout, with dropout after every hidden layer, matches the reference that drops the inputs too") {
    DropoutNetwork network(0.25f);
    check_steps_against_reference(network);
}

TEST_CASE("in bf16 a dropout layer's derivative comes from its outputs as stored before the dropout") {
    // Saturated tanh units (|z| >= 3, y within 0.5% of +-1), whose derivative 1 - y^2 is small next
    // to y: taken from the dropped and rescaled outputs (rounded twice, at the scale's coarser bf16
    // step), it would be off by tens of percent or change sign.
    constexpr int64_t kInputs = 4, kUnits = 8, kClasses = 3, kRows = 8;
    constexpr float kRate = 0.3f;
    mpt::ContextConfig context_config;
    context_config.backend = MPT_BACKEND_CPU;
    context_config.threads = 1;
    context_config.seed = 5;
    auto context = std::make_shared<mpt::Context>(context_config);
    auto model = std::make_shared<mpt::Model>(context, kInputs);
    model->add_dense(kUnits, mpt::Activation::tanh);
    model->add_dense(kClasses, mpt::Activation::softmax);
    model->set_layer_dropout(0, kRate);
    model->build();
    std::vector<float> w0(kUnits * kInputs), b0(kUnits, 0.0f), w1(kClasses * kUnits), b1(kClasses);
    for (int64_t u = 0; u < kUnits; ++u)
        for (int64_t f = 0; f < kInputs; ++f)  // |z| = 4 +- 0.5 +- 0.25 +- 0.125 >= 3.125 for inputs of +-1
            w0[static_cast<size_t>(u * kInputs + f)] = ((u + f) % 3 == 0 ? -4.0f : 4.0f) / static_cast<float>(f == 0 ? 1 : 4 << f);
    model->set_weights(0, w0.data(), b0.data());
    model->get_weights(1, w1.data(), b1.data());
    std::vector<float> samples;
    std::vector<int32_t> labels;
    for (int64_t r = 0; r < kRows; ++r) {
        labels.push_back(static_cast<int32_t>(r % kClasses));
        for (int64_t f = 0; f < kInputs; ++f) samples.push_back(((r >> (f % 3)) + f) % 2 ? 1.0f : -1.0f);
    }
    auto dataset = mpt::Dataset::from_f32(context, samples.data(), kRows, kInputs, labels.data(), kClasses, true);
    mpt::TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.optimizer.learning_rate = 1.0f;
    mpt::Trainer trainer(model, config);
    trainer.step(*dataset, 0, kRows);
    std::vector<float> trained(w0.size()), unused(kUnits);
    model->get_weights(0, trained.data(), unused.data());

    // The reference in double, rounding to bf16 where the step stores: the outputs (act' is taken
    // from them), the dropped outputs, the second layer's weights and the logits' gradient.
    const auto bf16 = [](double value) { return static_cast<double>(mpt::round_to(mpt::DType::bf16, static_cast<float>(value))); };
    const mpt::DropoutDraw draw = mpt::dropout_draw(trainer.dropout_seed(), 0, kRate);
    const uint64_t key = mpt::dropout_key(draw.seed, 0, 0);
    const int64_t padded = model->layers()[0].padded_units;
    std::vector<double> stored(kRows * kUnits), keep(kRows * kUnits), dropped(kRows * kUnits), dz1(kRows * kClasses);
    double smallest_input = 1e9;
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t u = 0; u < kUnits; ++u) {
            double z = 0.0;
            for (int64_t f = 0; f < kInputs; ++f) z += w0[static_cast<size_t>(u * kInputs + f)] * samples[static_cast<size_t>(r * kInputs + f)];
            smallest_input = std::min(smallest_input, std::abs(z));
            const size_t k = static_cast<size_t>(r * kUnits + u);
            stored[k] = bf16(std::tanh(z));
            keep[k] = mpt::dropout_keeps(key, draw.threshold, r * padded + u) ? draw.scale : 0.0;
            dropped[k] = bf16(stored[k] * keep[k]);
        }
    REQUIRE(smallest_input >= 3.0);
    for (int64_t r = 0; r < kRows; ++r) {
        double logits[kClasses], top = -1e300, sum = 0.0;
        for (int64_t c = 0; c < kClasses; ++c) {
            logits[c] = b1[static_cast<size_t>(c)];
            for (int64_t u = 0; u < kUnits; ++u)
                logits[c] += bf16(w1[static_cast<size_t>(c * kUnits + u)]) * dropped[static_cast<size_t>(r * kUnits + u)];
            top = std::max(top, logits[c]);
        }
        for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(logits[c] - top);
        for (int64_t c = 0; c < kClasses; ++c)
            dz1[static_cast<size_t>(r * kClasses + c)] =
                bf16((std::exp(logits[c] - top) / sum - (c == labels[static_cast<size_t>(r)] ? 1.0 : 0.0)) / kRows);
    }
    double worst = 0.0, largest = 0.0;
    for (int64_t u = 0; u < kUnits; ++u)
        for (int64_t f = 0; f < kInputs; ++f) {
            double gradient = 0.0;
            for (int64_t r = 0; r < kRows; ++r) {
                const size_t k = static_cast<size_t>(r * kUnits + u);
                double g = 0.0;
                for (int64_t c = 0; c < kClasses; ++c)
                    g += dz1[static_cast<size_t>(r * kClasses + c)] * bf16(w1[static_cast<size_t>(c * kUnits + u)]);
                gradient += g * keep[k] * (1.0 - stored[k] * stored[k]) * samples[static_cast<size_t>(r * kInputs + f)];
            }
            const size_t k = static_cast<size_t>(u * kInputs + f);
            largest = std::max(largest, std::abs(gradient));
            worst = std::max(worst, std::abs((w0[k] - trained[k]) - gradient));  // the learning rate is 1
        }
    REQUIRE(largest > 0.0);
    CHECK_MESSAGE(worst <= 0.03 * largest, worst << " against gradients up to " << largest);
}

TEST_CASE("in fp16 an output finite before its dropout but not after skips the step: the finiteness check reads the dropped input") {
    auto model = two_input_model();
    model->add_dense(4, mpt::Activation::linear);
    model->add_dense(4, mpt::Activation::relu);
    model->add_dense(3, mpt::Activation::softmax);
    model->set_layer_dropout(0, 0.5f);
    model->build();
    // Unit 0 of layer 0 outputs 40000 (finite in fp16), 80000 once kept and scaled by 2 (Inf); every
    // unit of layer 1 weighs it negatively, so ReLU turns the Inf into 0 and the logits stay finite.
    const std::vector<float> w0{20000, 20000, 0.1f, 0.2f, -0.3f, 0.1f, 0.2f, 0.2f}, b0(4, 0.0f);
    const std::vector<float> w1{-1, 0.5f, 0.1f, 0.2f, -1, 0.3f, 0.2f, 0.1f, -1, 0.1f, 0.4f, 0.3f, -1, 0.2f, 0.2f, 0.2f},
        b1{0.5f, 0.5f, 0.5f, 0.5f};
    model->set_weights(0, w0.data(), b0.data());
    model->set_weights(1, w1.data(), b1.data());
    check_fp16_step_skipped(model, std::vector<float>(16, 1.0f));
}

// The inputs' version: 40000 is finite in fp16, 80000 once kept at rate 0.5 is not. Every hidden unit
// weighs that input negatively, so ReLU turns the -Inf into 0 and the loss stays finite, while the
// first layer's weight gradient (0 * Inf) is not: only the check on the dropped batch skips the step.
TEST_CASE("in fp16 an input finite before its dropout but not after skips the step: the check reads the dropped batch") {
    auto model = two_input_model();
    model->add_dense(4, mpt::Activation::relu);
    model->add_dense(3, mpt::Activation::softmax);
    model->set_input_dropout(0.5f);
    model->build();
    const std::vector<float> w0{-1, 0.5f, -1, 0.2f, -1, 0.3f, -1, 0.1f}, b0{0.5f, 0.5f, 0.5f, 0.5f};
    model->set_weights(0, w0.data(), b0.data());
    std::vector<float> x;
    for (int r = 0; r < 8; ++r) x.insert(x.end(), {40000.0f, 1.0f});
    check_fp16_step_skipped(model, x);
}

TEST_CASE("a checkpoint carries the masks' seed: a resume under another context seed drops what the run would have") {
    const mpt_test::TempDir directory("mptrain-dropout-resume");
    mpt::TrainerConfig config;
    config.optimizer.learning_rate = 0.1f;
    mpt_test::TinyTrainer straight(config, 0.5f);
    straight.trainer->fit(*straight.dataset, 2, kTinyBatch, true);

    mpt_test::TinyTrainer first_half(config, 0.5f);
    first_half.trainer->fit(*first_half.dataset, 1, kTinyBatch, true);
    const std::string path = directory.file("half");
    mpt::save_checkpoint(*first_half.trainer, path);
    mpt_test::TinyTrainer resumed(config, 0.5f, 99);  // another seed: other weights, another masks' seed
    CHECK(resumed.trainer->dropout_seed() != first_half.trainer->dropout_seed());
    mpt::load_checkpoint(*resumed.trainer, path);
    CHECK(resumed.trainer->dropout_seed() == first_half.trainer->dropout_seed());
    resumed.trainer->fit(*resumed.dataset, 1, kTinyBatch, true);
    CHECK(resumed.masters() == straight.masters());

    // Dropout changes the run (the comparison above is not one of two plain runs).
    mpt_test::TinyTrainer plain(config, 0.0f);
    plain.trainer->fit(*plain.dataset, 2, kTinyBatch, true);
    CHECK(plain.masters() != straight.masters());
}

TEST_CASE("a model file keeps its layers' dropout, and a checkpoint loads only into a model of the same dropout") {
    const mpt_test::TempDir directory("mptrain-dropout-files");
    mpt_test::TinyTrainer tiny(mpt::TrainerConfig{}, 0.3f);
    const std::string model_path = directory.file("model");
    mpt::save_model(*tiny.trainer->model(), model_path, "fp32");
    const std::shared_ptr<mpt::Model> loaded = mpt::load_model(tiny.context, model_path);
    CHECK(loaded->layers()[0].dropout == 0.3f);
    CHECK(loaded->layers()[1].dropout == 0.0f);

    const std::string with_dropout = tiny_checkpoint(directory, "with", 0.3f);
    check_refused(with_dropout, 0.0f, MPT_STATUS_SHAPE_MISMATCH, "differs from the model's");
    check_refused(with_dropout, 0.5f, MPT_STATUS_SHAPE_MISMATCH, "differs from the model's");
    mpt_test::TinyTrainer same(mpt::TrainerConfig{}, 0.3f);
    mpt::load_checkpoint(*same.trainer, with_dropout);
}

TEST_CASE("files whose dropout no mptrain writes are corrupt data") {
    const mpt_test::TempDir directory("mptrain-dropout-corrupt");
    const std::string with_dropout = tiny_checkpoint(directory, "with", 0.3f);
    const std::string without = tiny_checkpoint(directory, "without", 0.0f);
    const auto edit_key = [](const std::string& key, const std::string& pattern, const std::string& replacement) {
        return [=](const std::string& name, const std::string& value) {
            return name == key ? replaced(value, pattern, replacement) : value;
        };
    };

    // The progress holds the masks' seed exactly when the model has dropout.
    const std::string no_seed = directory.file("no-seed");
    mpt_test::rewrite_file(with_dropout, no_seed, mpt_test::all_tensors, {},
                           edit_key("mptrain.trainer.progress", "\"dropout_seed\":[0-9]+,", ""));
    check_refused(no_seed, 0.3f, MPT_STATUS_CORRUPT_DATA, "dropout_seed");
    const std::string signed_seed = directory.file("signed-seed");
    mpt_test::rewrite_file(with_dropout, signed_seed, mpt_test::all_tensors, {},
                           edit_key("mptrain.trainer.progress", "\"dropout_seed\":[0-9]+", "\"dropout_seed\":-5"));
    check_refused(signed_seed, 0.3f, MPT_STATUS_CORRUPT_DATA, "dropout_seed");
    const std::string stray_seed = directory.file("stray-seed");
    mpt_test::rewrite_file(without, stray_seed, mpt_test::all_tensors, {},
                           edit_key("mptrain.trainer.progress", "\"dataset_rows\":", "\"dropout_seed\":5,\"dataset_rows\":"));
    check_refused(stray_seed, 0.0f, MPT_STATUS_CORRUPT_DATA, "dropout_seed");

    // A recorded rate is a float's bits in (0, 1).
    for (float rate : {1.0f, 0.0f, -0.5f, NAN}) {
        CAPTURE(rate);
        const std::string bad_rate = directory.file("bad-rate");
        mpt_test::rewrite_file(with_dropout, bad_rate, mpt_test::all_tensors, {},
                               edit_key("mptrain.architecture", "\"dropout\":[0-9]+",
                                        "\"dropout\":" + std::to_string(mpt::float_bits(rate))));
        check_refused(bad_rate, 0.3f, MPT_STATUS_CORRUPT_DATA, "dropout");
    }

    // A model file whose last layer drops its outputs.
    mpt_test::TinyTrainer tiny(mpt::TrainerConfig{}, 0.0f);
    const std::string model_path = directory.file("model");
    mpt::save_model(*tiny.trainer->model(), model_path, "fp32");
    const std::string last = directory.file("last");
    mpt_test::rewrite_file(model_path, last, mpt_test::all_tensors, {},
                           edit_key("mptrain.architecture", "\"activation\":\"softmax\",",
                                    "\"activation\":\"softmax\",\"dropout\":" + std::to_string(mpt::float_bits(0.5f)) + ","));
    try {
        mpt::load_model(tiny.context, last);
        FAIL("loaded a model whose last layer has dropout");
    } catch (const mpt::Error& error) {
        CHECK(error.status() == MPT_STATUS_CORRUPT_DATA);
        CHECK_MESSAGE(std::string(error.what()).find("last layer has dropout") != std::string::npos, error.what());
    }
}
