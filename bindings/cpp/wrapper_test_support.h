// Helpers shared by the C++ wrapper's tests (test_wrapper_*.cpp, one program: test_cpp_wrapper): a CPU
// context, the usual model and data, weights as bits, the status a call throws and one plain-SGD step.

#pragma once

#include <doctest/doctest.h>

#include <mptrain/mptrain.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace fs = std::filesystem;

constexpr int64_t kFeatures = 4, kClasses = 3;

// The C API suites' temporary directory (tests/support/temp_dir.h), which checks that it was made.
using mpt_test::TempDir;

inline mptrain::Context cpu_context(uint64_t seed = 7) {
    return mptrain::Context(mptrain::ContextOptions().backend(MPT_BACKEND_CPU).threads(1).seed(seed));
}

inline mptrain::Model mlp(const mptrain::Context& context) {
    mptrain::Model model(context, kFeatures);
    model.add_dense(16, MPT_ACTIVATION_RELU).add_dense(8, MPT_ACTIVATION_TANH).add_dense(kClasses, MPT_ACTIVATION_SOFTMAX);
    return model;
}

inline mptrain::TrainerOptions adam() { return std::move(mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_ADAM).learning_rate(0.01f)); }

/** `rows` samples around one of three centres, labels 0..2. */
inline std::vector<float> blob_samples(int64_t rows, unsigned seed, std::vector<int32_t>& labels) {
    std::mt19937 generator(seed);
    std::normal_distribution<float> noise(0.0f, 0.6f);
    std::vector<float> samples;
    labels.clear();
    for (int64_t row = 0; row < rows; ++row) {
        const int32_t label = static_cast<int32_t>(row % kClasses);
        for (int64_t feature = 0; feature < kFeatures; ++feature)
            samples.push_back((feature % kClasses == label ? 2.5f : 0.0f) + noise(generator));
        labels.push_back(label);
    }
    return samples;
}

inline mptrain::Dataset blobs(const mptrain::Context& context, int64_t rows, unsigned seed) {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(rows, seed, labels);
    return mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
}

/** Every layer's weights and biases as bit patterns: equal only when bit-identical. */
inline std::vector<uint32_t> weight_bits(mptrain::Model& model) {
    std::vector<uint32_t> bits;
    for (int64_t layer = 0; layer < model.layer_count(); ++layer) {
        auto [weights, bias] = model.weights(layer);
        for (const auto* values : {&weights, &bias})
            for (float value : *values) {
                uint32_t word;
                std::memcpy(&word, &value, sizeof word);
                bits.push_back(word);
            }
    }
    return bits;
}

inline std::vector<uint32_t> bits_of(const std::vector<float>& values) {
    std::vector<uint32_t> bits(values.size());
    std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
    return bits;
}

template <typename Call>
mpt_status status_of(Call&& call) {
    try {
        call();
    } catch (const mptrain::Error& error) {
        CHECK(!error.message().empty());
        return error.status();
    }
    return MPT_STATUS_OK;
}

// One fp32 plain-SGD step over every row from seed 5, with class weights and row weights (empty:
// none) and a global_clipnorm (0: not set): the weights' bits before and after it, its loss, and the
// trainer's gradient_norm() before and after it.
struct SgdStep {
    std::vector<uint32_t> before, after;
    float loss;
    float gradient_norm_before, gradient_norm;
};
inline SgdStep one_sgd_step(const std::vector<float>& samples, const std::vector<int32_t>& labels, float learning_rate,
                            const std::vector<float>& class_weights, const std::vector<float>& row_weights,
                            float global_clipnorm = 0.0f) {
    auto context = cpu_context(5);
    auto model = mlp(context);
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_FP32).optimizer(MPT_OPTIMIZER_SGD).learning_rate(learning_rate).momentum(0.0f);
    if (!class_weights.empty()) options.class_weights(class_weights);
    if (global_clipnorm != 0.0f) options.global_clipnorm(global_clipnorm);
    mptrain::Trainer trainer(model, options);
    SgdStep step;
    step.before = weight_bits(model);
    step.gradient_norm_before = trainer.gradient_norm();
    const int64_t rows = static_cast<int64_t>(labels.size());
    step.loss = row_weights.empty() ? trainer.step(data, 0, rows) : trainer.step(data.weighted(row_weights), 0, rows);
    step.after = weight_bits(model);
    step.gradient_norm = trainer.gradient_norm();
    return step;
}
