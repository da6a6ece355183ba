// A CPU trainer of a 6-5-3 classifier (relu, then softmax) on a one-thread context of its own, with
// 40 rows it can learn: cheap enough to make afresh for every input of a fuzz target, and shared by
// the internal tests and fuzz targets that load checkpoints into fresh trainers (links the core).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/context.h"
#include "data/dataset.h"
#include "nn/model.h"
#include "nn/trainer.h"

namespace mpt_test {

constexpr int64_t kTinyFeatures = 6, kTinyRows = 40, kTinyBatch = 8;

struct TinyTrainer {
    std::shared_ptr<mpt::Context> context;
    std::shared_ptr<mpt::Dataset> dataset;
    std::unique_ptr<mpt::Trainer> trainer;

    // `hidden_dropout`: the hidden layer's dropout rate; `seed`: the context's.
    explicit TinyTrainer(const mpt::TrainerConfig& config, float hidden_dropout = 0.0f, uint64_t seed = 7) {
        mpt::ContextConfig context_config;
        context_config.backend = MPT_BACKEND_CPU;
        context_config.threads = 1;
        context_config.seed = seed;
        context = std::make_shared<mpt::Context>(context_config);
        std::vector<float> samples(kTinyRows * kTinyFeatures);
        std::vector<int32_t> labels(kTinyRows);
        for (int64_t r = 0; r < kTinyRows; ++r) {
            labels[r] = static_cast<int32_t>(r % 3);
            for (int64_t f = 0; f < kTinyFeatures; ++f)
                samples[r * kTinyFeatures + f] =
                    static_cast<float>((r * 7 + f * 3) % 11) / 11.0f + static_cast<float>(f % 3 == labels[r]);
        }
        dataset = mpt::Dataset::from_f32(context, samples.data(), kTinyRows, kTinyFeatures, labels.data(), 3, true);
        auto model = std::make_shared<mpt::Model>(context, kTinyFeatures);
        model->add_dense(5, mpt::Activation::relu);
        model->add_dense(3, mpt::Activation::softmax);
        model->set_layer_dropout(0, hidden_dropout);
        model->build();
        trainer = std::make_unique<mpt::Trainer>(model, config);
    }

    // The fp32 masters in the padded parameter layout.
    std::vector<float> masters() const {
        std::vector<float> block(static_cast<size_t>(trainer->model()->parameter_block_elements()));
        trainer->model()->read_master_block(block.data());
        return block;
    }
};

}  // namespace mpt_test
