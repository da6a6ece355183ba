// Shared by the internal tests that train small models on one backend or another: a context, the
// small MLP, learnable synthetic uint8 data and the master weights read back to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/context.h"
#include "data/dataset.h"
#include "nn/model.h"

namespace mpt::testing {

inline std::shared_ptr<Context> make_context(mpt_backend backend, uint64_t seed = 7,
                                             size_t dataset_device_budget = SIZE_MAX) {
    ContextConfig config;
    config.backend = backend;
    config.threads = 2;
    config.seed = seed;
    config.dataset_device_budget = dataset_device_budget;
    return std::make_shared<Context>(config);
}

// `before_build` (optional) sets what must be set before the model is built (dropout, say).
inline std::shared_ptr<Model> make_mlp(const std::shared_ptr<Context>& context, int64_t inputs,
                                       const std::function<void(Model&)>& before_build = nullptr) {
    auto model = std::make_shared<Model>(context, inputs);
    model->add_dense(48, Activation::relu);
    model->add_dense(40, Activation::relu);
    model->add_dense(10, Activation::softmax);
    if (before_build) before_build(*model);
    model->build();
    return model;
}

// One hidden layer of `units` ReLU units into 10 classes.
inline std::shared_ptr<Model> make_one_hidden_layer_mlp(const std::shared_ptr<Context>& context, int64_t inputs,
                                                        int64_t units) {
    auto model = std::make_shared<Model>(context, inputs);
    model->add_dense(units, Activation::relu);
    model->add_dense(10, Activation::softmax);
    model->build();
    return model;
}

// The seed MLP's shapes (3072 -> 3000 relu -> 1000 relu -> 10 softmax).
inline std::shared_ptr<Model> make_seed_mlp(const std::shared_ptr<Context>& context) {
    auto model = std::make_shared<Model>(context, 3072);
    model->add_dense(3000, Activation::relu);
    model->add_dense(1000, Activation::relu);
    model->add_dense(10, Activation::softmax);
    model->build();
    return model;
}

struct SyntheticData {
    std::vector<uint8_t> samples;
    std::vector<int32_t> labels;
    int64_t rows, features;
};

// Learnable: the label decides which band of features is bright.
inline SyntheticData synthetic_data(int64_t rows, int64_t features, uint32_t seed) {
    std::mt19937 engine(seed);
    std::uniform_int_distribution<int> noise(0, 90), label(0, 9);
    SyntheticData data{std::vector<uint8_t>(static_cast<size_t>(rows * features)),
                       std::vector<int32_t>(static_cast<size_t>(rows)), rows, features};
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t y = label(engine);
        data.labels[static_cast<size_t>(r)] = y;
        for (int64_t f = 0; f < features; ++f) {
            int value = noise(engine);
            if (f % 10 == y) value += 150;
            data.samples[static_cast<size_t>(r * features + f)] = static_cast<uint8_t>(value);
        }
    }
    return data;
}

inline std::shared_ptr<Dataset> to_dataset(const std::shared_ptr<Context>& context, const SyntheticData& data) {
    return Dataset::from_u8(context, data.samples.data(), data.rows, data.features, data.labels.data(), 10,
                            1.0f / 255.0f, 0.0f);
}

inline std::vector<float> master_block(const Model& model) {
    std::vector<float> block(static_cast<size_t>(model.parameter_block_elements()));
    model.read_master_block(block.data());
    return block;
}

}  // namespace mpt::testing
