// What tests/test_checkpoint.cpp and its cases in tests/checkpoint/ share: a run (context, model,
// data set, trainer) that stops where it is told and resumes from its checkpoints, the options it
// trains under, files edited as a user with a text editor (or a damaged disk) could, and the check
// that a resumed run ends bit-identical to the uninterrupted one.
#pragma once

#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "support/capi_fixture.h"
#include "support/edited_header.h"
#include "support/temp_dir.h"

namespace mpt_test::checkpoint {

namespace fs = std::filesystem;

using mpt_test::FileParts;
using mpt_test::float_bits_text;
using mpt_test::kHeaderChecksum;
using mpt_test::same_bits;  // support/capi_fixture.h
using mpt_test::split_file;
using mpt_test::with_metadata_field;
using mpt_test::write_parts;

inline constexpr int64_t kRows = 160, kFeatures = 12, kClasses = 4, kBatch = 16;  // 10 steps per epoch

struct TempDir : mpt_test::TempDir {
    TempDir() : mpt_test::TempDir("mptrain-checkpoint") {}
};

struct Options {
    mpt_precision precision = MPT_PRECISION_MIXED_FP16;
    mpt_optimizer optimizer = MPT_OPTIMIZER_ADAM;
    float initial_scale = 16777216.0f;  // 2^24: the first steps overflow fp16 and the scale moves
    mpt_log_fn log = nullptr;           // the context's log callback, when set
    void* log_user_data = nullptr;
    mpt_log_level log_level = MPT_LOG_LEVEL_WARNING;
    float learning_rate = 0.01f;
    mpt_loss_scaling loss_scaling = MPT_LOSS_SCALING_DEFAULT;
    mpt_lr_schedule schedule = MPT_LR_SCHEDULE_CONSTANT;  // with the next two
    int64_t warmup_steps = 0, decay_steps = 0;
    float label_smoothing = 0.0f;
    std::vector<float> class_weights;                          // empty: none
    mpt_loss loss = MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;  // the trainer's (the data set has labels)
    float huber_delta = 1.0f;
};

// Default options but for the precision, the optimizer and the initial loss scale.
inline Options options_for(mpt_precision precision, mpt_optimizer optimizer, float initial_scale) {
    Options options;
    options.precision = precision;
    options.optimizer = optimizer;
    options.initial_scale = initial_scale;
    return options;
}

struct Run {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;

    explicit Run(const Options& options) {
        std::mt19937 generator(8);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> samples(kRows * kFeatures);
        std::vector<int32_t> labels(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
            labels[r] = static_cast<int32_t>(r % kClasses);
            for (int64_t f = 0; f < kFeatures; ++f)
                samples[r * kFeatures + f] = normal(generator) + 2.0f * (f % kClasses == labels[r]);
        }
        mpt_context_options_t* context_options = nullptr;
        REQUIRE(mpt_context_options_create(&context_options) == MPT_STATUS_OK);
        mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU);
        mpt_context_options_set_threads(context_options, 2);
        if (options.log) {
            REQUIRE(mpt_context_options_set_log_callback(context_options, options.log, options.log_user_data) ==
                    MPT_STATUS_OK);
            REQUIRE(mpt_context_options_set_log_level(context_options, options.log_level) == MPT_STATUS_OK);
        }
        REQUIRE(mpt_context_create(context_options, &context) == MPT_STATUS_OK);
        mpt_context_options_destroy(context_options);
        REQUIRE(mpt_model_create(context, kFeatures, &model) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, 20, MPT_ACTIVATION_RELU) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
        REQUIRE(mpt_dataset_create_f32(context, samples.data(), kRows, kFeatures, labels.data(), kClasses, 1,
                                       &dataset) == MPT_STATUS_OK);
        mpt_trainer_options_t* trainer_options = nullptr;
        REQUIRE(mpt_trainer_options_create(&trainer_options) == MPT_STATUS_OK);
        mpt_trainer_options_set_precision(trainer_options, options.precision);
        mpt_trainer_options_set_optimizer(trainer_options, options.optimizer);
        mpt_trainer_options_set_learning_rate(trainer_options, options.learning_rate);
        if (options.optimizer == MPT_OPTIMIZER_SGD) mpt_trainer_options_set_momentum(trainer_options, 0.9f, 1);
        mpt_trainer_options_set_loss_scaling(trainer_options, options.loss_scaling, options.initial_scale);
        mpt_trainer_options_set_loss_scaler_dynamics(trainer_options, 2.0f, 0.5f, 4, 1.0f, 16777216.0f);
        const float final_factor = options.schedule == MPT_LR_SCHEDULE_CONSTANT ? 1.0f : 0.25f;
        REQUIRE(mpt_trainer_options_set_lr_schedule(trainer_options, options.schedule, options.warmup_steps,
                                                    options.decay_steps, final_factor) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_label_smoothing(trainer_options, options.label_smoothing) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_loss(trainer_options, options.loss) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_huber_delta(trainer_options, options.huber_delta) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_class_weights(trainer_options, options.class_weights.data(),
                                                      static_cast<int64_t>(options.class_weights.size())) ==
                MPT_STATUS_OK);
        REQUIRE(mpt_trainer_create(model, trainer_options, &trainer) == MPT_STATUS_OK);
        mpt_trainer_options_destroy(trainer_options);
    }
    ~Run() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    std::vector<float> weights() const {
        std::vector<float> all;
        for (int64_t layer = 0; layer < 2; ++layer) {
            const int64_t units = layer == 0 ? 20 : kClasses, inputs = layer == 0 ? kFeatures : 20;
            std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
            REQUIRE(mpt_model_get_weights(model, layer, w.data(), units * inputs, b.data(), units) == MPT_STATUS_OK);
            all.insert(all.end(), w.begin(), w.end());
            all.insert(all.end(), b.begin(), b.end());
        }
        return all;
    }
    struct Scaler {
        float scale;
        int64_t growth, skipped, steps, epochs;
        bool operator==(const Scaler& o) const {
            return scale == o.scale && growth == o.growth && skipped == o.skipped && steps == o.steps &&
                   epochs == o.epochs;
        }
    };
    Scaler scaler() const {
        Scaler s{};
        REQUIRE(mpt_trainer_get_loss_scale(trainer, &s.scale, &s.growth, &s.skipped) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_get_progress(trainer, &s.steps, &s.epochs) == MPT_STATUS_OK);
        return s;
    }
};

// ---- files edited as a user with a text editor (or a damaged disk) could ----

// The header as mptrain wrote it before headers had a checksum: the same, without that entry.
inline std::string without_header_checksum(std::string header) {
    const size_t at = header.find(kHeaderChecksum);
    REQUIRE(at != std::string::npos);
    size_t end = at + kHeaderChecksum.size() + 9;  // 8 digits and the closing quote
    if (header[end] == ',') ++end;
    header.erase(at, end - at);
    while (!header.empty() && header.back() == ' ') header.pop_back();
    return header;
}

// A trainer that stopped inside its second epoch: 14 steps, 1 epoch completed, 4 steps into the
// next, shuffled.
inline void stop_inside_second_epoch(Run& run) {
    auto cancel = [](int64_t epoch, int64_t step, int64_t, float, float, void*) -> int {
        return epoch == 1 && step == 4;
    };
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, cancel, nullptr, nullptr) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_CANCELLED);
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, nullptr, nullptr) == MPT_STATUS_OK);
}

struct Refusal {
    mpt_status status;
    std::string message;
};

inline Refusal load_checkpoint(Run& run, const std::string& path) {
    const mpt_status status = mpt_trainer_load_checkpoint(run.trainer, path.c_str());
    return {status, status == MPT_STATUS_OK ? std::string() : std::string(mpt_last_error())};
}

inline void check_resume_is_bit_exact(const Options& options) {
    TempDir directory;
    std::vector<float> uninterrupted;
    Run::Scaler final_scaler{};
    {
        Run run(options);
        REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 0, 100) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_OK);
        uninterrupted = run.weights();
        final_scaler = run.scaler();
    }
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    REQUIRE(checkpoints.size() == 4);  // steps 7, 14, 21, 28 of 30
    bool saw_moved_scale = false;
    for (const fs::path& checkpoint : checkpoints) {
        CAPTURE(checkpoint.string());
        Run resumed(options);
        REQUIRE(mpt_trainer_load_checkpoint(resumed.trainer, checkpoint.c_str()) == MPT_STATUS_OK);
        const Run::Scaler at_checkpoint = resumed.scaler();
        CHECK(at_checkpoint.steps % 7 == 0);
        CHECK(at_checkpoint.steps % 10 != 0);  // inside an epoch
        saw_moved_scale |= at_checkpoint.scale != options.initial_scale && at_checkpoint.scale != 1.0f;
        REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kBatch, 1) ==
                MPT_STATUS_OK);
        const std::vector<float> weights = resumed.weights();
        REQUIRE(weights.size() == uninterrupted.size());
        CHECK(std::memcmp(weights.data(), uninterrupted.data(), weights.size() * sizeof(float)) == 0);
        CHECK(resumed.scaler() == final_scaler);
    }
    if (options.precision == MPT_PRECISION_MIXED_FP16) {
        CHECK(saw_moved_scale);
        CHECK(final_scaler.skipped > 0);
    }
}

}  // namespace mpt_test::checkpoint
