// Model files and training checkpoints through the C API: a saved model predicts bit-identically
// after loading; a run resumed from any checkpoint (inside an epoch, with a moved loss scale, with
// optimizer state) ends with bit-identical weights and scaler state to the uninterrupted run; bad and
// mismatched files are rejected before anything changes.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/edited_header.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

using mpt_test::FileParts;
using mpt_test::float_bits_text;
using mpt_test::kHeaderChecksum;
using mpt_test::split_file;
using mpt_test::with_metadata_field;
using mpt_test::write_parts;

constexpr int64_t kRows = 160, kFeatures = 12, kClasses = 4, kBatch = 16;  // 10 steps per epoch

struct TempDir : mpt_test::TempDir {
    TempDir() : mpt_test::TempDir("mptrain-checkpoint") {}
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Options {
    mpt_precision precision = MPT_PRECISION_MIXED_FP16;
    mpt_optimizer optimizer = MPT_OPTIMIZER_ADAM;
    float initial_scale = 16777216.0f;  // 2^24: the first steps overflow fp16 and the scale moves
    mpt_log_fn log = nullptr;            // the context's log callback, when set
    void* log_user_data = nullptr;
    mpt_log_level log_level = MPT_LOG_LEVEL_WARNING;
    float learning_rate = 0.01f;
    mpt_loss_scaling loss_scaling = MPT_LOSS_SCALING_DEFAULT;
    mpt_lr_schedule schedule = MPT_LR_SCHEDULE_CONSTANT;  // with the next two
    int64_t warmup_steps = 0, decay_steps = 0;
    float label_smoothing = 0.0f;
    std::vector<float> class_weights;  // empty: none
    mpt_loss loss = MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;  // the trainer's (the data set has labels)
    float huber_delta = 1.0f;
};

// Default options but for the precision, the optimizer and the initial loss scale.
Options options_for(mpt_precision precision, mpt_optimizer optimizer, float initial_scale) {
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
            for (int64_t f = 0; f < kFeatures; ++f) samples[r * kFeatures + f] = normal(generator) + 2.0f * (f % kClasses == labels[r]);
        }
        mpt_context_options_t* context_options = nullptr;
        REQUIRE(mpt_context_options_create(&context_options) == MPT_STATUS_OK);
        mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU);
        mpt_context_options_set_threads(context_options, 2);
        if (options.log) {
            REQUIRE(mpt_context_options_set_log_callback(context_options, options.log, options.log_user_data) == MPT_STATUS_OK);
            REQUIRE(mpt_context_options_set_log_level(context_options, options.log_level) == MPT_STATUS_OK);
        }
        REQUIRE(mpt_context_create(context_options, &context) == MPT_STATUS_OK);
        mpt_context_options_destroy(context_options);
        REQUIRE(mpt_model_create(context, kFeatures, &model) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, 20, MPT_ACTIVATION_RELU) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
        REQUIRE(mpt_dataset_create_f32(context, samples.data(), kRows, kFeatures, labels.data(), kClasses, 1, &dataset) ==
                MPT_STATUS_OK);
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
                                                      static_cast<int64_t>(options.class_weights.size())) == MPT_STATUS_OK);
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
            return scale == o.scale && growth == o.growth && skipped == o.skipped && steps == o.steps && epochs == o.epochs;
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
std::string without_header_checksum(std::string header) {
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
void stop_inside_second_epoch(Run& run) {
    auto cancel = [](int64_t epoch, int64_t step, int64_t, float, float, void*) -> int { return epoch == 1 && step == 4; };
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, cancel, nullptr, nullptr) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_CANCELLED);
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, nullptr, nullptr) == MPT_STATUS_OK);
}

struct Refusal {
    mpt_status status;
    std::string message;
};

Refusal load_checkpoint(Run& run, const std::string& path) {
    const mpt_status status = mpt_trainer_load_checkpoint(run.trainer, path.c_str());
    return {status, status == MPT_STATUS_OK ? std::string() : std::string(mpt_last_error())};
}

void check_resume_is_bit_exact(const Options& options) {
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
        REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kBatch, 1) == MPT_STATUS_OK);
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

}  // namespace

TEST_CASE("a mixed-fp16 Adam run resumed from a checkpoint inside an epoch ends bit-identical") {
    check_resume_is_bit_exact(Options{});
}

TEST_CASE("an fp32 Nesterov-momentum run resumed from any checkpoint ends bit-identical") {
    check_resume_is_bit_exact(options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f));
}

TEST_CASE("runs under a learning-rate schedule resume from any checkpoint bit-identical, the schedule where it was") {
    Options cosine;  // mixed-fp16 Adam: skipped steps count toward the schedule
    cosine.schedule = MPT_LR_SCHEDULE_COSINE;
    cosine.warmup_steps = 6;
    cosine.decay_steps = 20;
    SUBCASE("cosine after a warm-up, mixed-fp16 Adam") { check_resume_is_bit_exact(cosine); }
    Options step = options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f);
    step.schedule = MPT_LR_SCHEDULE_STEP;
    step.decay_steps = 8;
    SUBCASE("step decay, fp32 Nesterov momentum") { check_resume_is_bit_exact(step); }
}

TEST_CASE("only a schedule puts lr_schedule among a checkpoint's options; a trainer with another schedule refuses it") {
    TempDir directory;
    const std::string constant_path = (directory.path / "constant.safetensors").string();
    const std::string linear_path = (directory.path / "linear.safetensors").string();
    Options linear;
    linear.schedule = MPT_LR_SCHEDULE_LINEAR;
    linear.warmup_steps = 3;
    linear.decay_steps = 12;
    {
        Run constant_run(Options{}), linear_run(linear);
        REQUIRE(mpt_trainer_save_checkpoint(constant_run.trainer, constant_path.c_str()) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_save_checkpoint(linear_run.trainer, linear_path.c_str()) == MPT_STATUS_OK);
    }
    // Constant-rate files are what they were before schedules existed (JSON inside a JSON string).
    CHECK(split_file(constant_path).header.find("lr_schedule") == std::string::npos);
    const std::string recorded = "\\\"lr_schedule\\\":{\\\"decay_factor\\\":" + float_bits_text(0.25f) +
                                 ",\\\"decay_steps\\\":12,\\\"schedule\\\":1,\\\"warmup_steps\\\":3}";
    CHECK_MESSAGE(split_file(linear_path).header.find(recorded) != std::string::npos, split_file(linear_path).header);

    Run constant_run(Options{});
    const Refusal by_constant = load_checkpoint(constant_run, linear_path);
    CHECK(by_constant.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_constant.message.find("lr_schedule linear (this trainer: constant)") != std::string::npos,
                  by_constant.message);
    CHECK_MESSAGE(by_constant.message.find("lr_schedule factor 0.25 (this trainer: 1)") != std::string::npos,
                  by_constant.message);
    Run linear_run(linear);
    const Refusal by_linear = load_checkpoint(linear_run, constant_path);
    CHECK(by_linear.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_linear.message.find("lr_schedule constant (this trainer: linear)") != std::string::npos,
                  by_linear.message);
    CHECK_MESSAGE(by_linear.message.find("lr_schedule warmup_steps 0 (this trainer: 3)") != std::string::npos,
                  by_linear.message);
    CHECK(by_linear.message.find("not know") == std::string::npos);
    Options cosine = linear;
    cosine.schedule = MPT_LR_SCHEDULE_COSINE;
    Run cosine_run(cosine);
    const Refusal by_cosine = load_checkpoint(cosine_run, linear_path);
    CHECK(by_cosine.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_cosine.message.find("lr_schedule linear (this trainer: cosine)") != std::string::npos, by_cosine.message);
    CHECK_MESSAGE(by_cosine.message.find("decay_steps") == std::string::npos, by_cosine.message);
    // Refusals change nothing: each trainer still loads a file of its own schedule.
    REQUIRE(load_checkpoint(constant_run, constant_path).status == MPT_STATUS_OK);
    REQUIRE(load_checkpoint(linear_run, linear_path).status == MPT_STATUS_OK);
}

TEST_CASE("a label-smoothed run resumes from any checkpoint bit-identical") {
    Options smoothed;  // mixed-fp16 Adam with overflowing first steps
    smoothed.label_smoothing = 0.1f;
    check_resume_is_bit_exact(smoothed);
}

TEST_CASE("only label smoothing puts label_smoothing among a checkpoint's options; a trainer without it refuses it") {
    TempDir directory;
    const std::string plain_path = (directory.path / "plain.safetensors").string();
    const std::string smoothed_path = (directory.path / "smoothed.safetensors").string();
    Options smoothed;
    smoothed.label_smoothing = 0.1f;
    {
        Run plain_run(Options{}), smoothed_run(smoothed);
        REQUIRE(mpt_trainer_save_checkpoint(plain_run.trainer, plain_path.c_str()) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_save_checkpoint(smoothed_run.trainer, smoothed_path.c_str()) == MPT_STATUS_OK);
    }
    // Files without smoothing are what they were before it existed (JSON inside a JSON string).
    CHECK(split_file(plain_path).header.find("label_smoothing") == std::string::npos);
    const std::string recorded = "{\\\"label_smoothing\\\":" + float_bits_text(0.1f) + ",\\\"loss\\\":";
    CHECK_MESSAGE(split_file(smoothed_path).header.find(recorded) != std::string::npos, split_file(smoothed_path).header);

    Run plain_run(Options{});
    const Refusal by_plain = load_checkpoint(plain_run, smoothed_path);
    CHECK(by_plain.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_plain.message.find("label_smoothing 0.1 (this trainer: 0)") != std::string::npos, by_plain.message);
    CHECK(by_plain.message.find("not know") == std::string::npos);
    Run smoothed_run(smoothed);
    const Refusal by_smoothed = load_checkpoint(smoothed_run, plain_path);
    CHECK(by_smoothed.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_smoothed.message.find("label_smoothing 0 (this trainer: 0.1)") != std::string::npos,
                  by_smoothed.message);
    Options other = smoothed;
    other.label_smoothing = 0.2f;
    Run other_run(other);
    const Refusal by_other = load_checkpoint(other_run, smoothed_path);
    CHECK(by_other.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_other.message.find("label_smoothing 0.1 (this trainer: 0.2)") != std::string::npos, by_other.message);
    // Refusals change nothing: each trainer still loads a file of its own smoothing.
    REQUIRE(load_checkpoint(plain_run, plain_path).status == MPT_STATUS_OK);
    REQUIRE(load_checkpoint(smoothed_run, smoothed_path).status == MPT_STATUS_OK);
}

TEST_CASE("a class-weighted run resumes from any checkpoint bit-identical") {
    Options weighted;  // mixed-fp16 Adam with overflowing first steps
    weighted.class_weights = {0.5f, 2.0f, 1.0f, 3.0f};
    check_resume_is_bit_exact(weighted);
}

TEST_CASE("only class weights put class_weights among a checkpoint's options; other weights refuse it, named") {
    TempDir directory;
    const std::string plain_path = (directory.path / "plain.safetensors").string();
    const std::string weighted_path = (directory.path / "weighted.safetensors").string();
    Options weighted;
    weighted.class_weights = {0.5f, 2.0f, 1.0f, 3.0f};
    {
        Run plain_run(Options{}), weighted_run(weighted);
        REQUIRE(mpt_trainer_save_checkpoint(plain_run.trainer, plain_path.c_str()) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_save_checkpoint(weighted_run.trainer, weighted_path.c_str()) == MPT_STATUS_OK);
    }
    CHECK(split_file(plain_path).header.find("class_weights") == std::string::npos);
    // Their count among the options, their values a tensor.
    const std::string recorded = "{\\\"class_weights\\\":4,\\\"loss\\\":";
    CHECK_MESSAGE(split_file(weighted_path).header.find(recorded) != std::string::npos, split_file(weighted_path).header);
    CHECK(split_file(weighted_path).header.find("\"trainer.class_weights\":{\"dtype\":\"F32\",\"shape\":[4]") !=
          std::string::npos);

    Run plain_run(Options{});
    const Refusal by_plain = load_checkpoint(plain_run, weighted_path);
    CHECK(by_plain.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_plain.message.find("class_weights [0.5, 2, 1, 3] (this trainer: none)") != std::string::npos,
                  by_plain.message);
    Run weighted_run(weighted);
    const Refusal by_weighted = load_checkpoint(weighted_run, plain_path);
    CHECK(by_weighted.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_weighted.message.find("class_weights none (this trainer: [0.5, 2, 1, 3])") != std::string::npos,
                  by_weighted.message);
    Options other = weighted;
    other.class_weights[3] = 4.0f;  // the same count, one weight changed
    Run other_run(other);
    const Refusal by_other = load_checkpoint(other_run, weighted_path);
    CHECK(by_other.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(by_other.message.find("class_weights [0.5, 2, 1, 3] (this trainer: [0.5, 2, 1, 4])") != std::string::npos,
                  by_other.message);
    CHECK(by_other.message.find("not know") == std::string::npos);
    REQUIRE(load_checkpoint(plain_run, plain_path).status == MPT_STATUS_OK);
    REQUIRE(load_checkpoint(weighted_run, weighted_path).status == MPT_STATUS_OK);
}

TEST_CASE("a checkpoint's class weights that no mptrain writes are corrupt data, whatever the trainer's") {
    TempDir directory;
    Options weighted;
    weighted.class_weights = {0.5f, 2.0f, 1.0f, 3.0f};
    Run run(weighted);
    const std::string path = (directory.path / "weighted.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const FileParts parts = split_file(path);
    const std::string entry = "\\\"class_weights\\\":4";
    REQUIRE(parts.header.find(entry) != std::string::npos);
    const auto with_value = [&](const std::string& value) {
        std::string header = parts.header;
        header.replace(header.find(entry), entry.size(), "\\\"class_weights\\\":" + value);
        return header;
    };
    REQUIRE(load_checkpoint(run, write_parts(directory.path / "same.safetensors", with_value("4"), parts.data)).status ==
            MPT_STATUS_OK);  // the edit itself breaks nothing
    Run plain_run(Options{});
    // Counts other than the model's outputs, and values that are no count.
    for (const std::string& forged : {std::string("3"), std::string("5"), std::string("0"), std::string("-4"),
                                      std::string("4.0"), std::string("null"), std::string("[4]"),
                                      std::string("\\\"4\\\""), std::string("{}")}) {
        CAPTURE(forged);
        const std::string forged_path = write_parts(directory.path / "forged.safetensors", with_value(forged), parts.data);
        for (Run* trainer : {&run, &plain_run}) {
            const Refusal refusal = load_checkpoint(*trainer, forged_path);
            CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
            CHECK_MESSAGE(refusal.message.find("class_weights") != std::string::npos, refusal.message);
        }
    }
    // A count without the tensor of the weights (the plain run's file, given the weighted options).
    const std::string plain_path = (directory.path / "plain.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(plain_run.trainer, plain_path.c_str()) == MPT_STATUS_OK);
    const FileParts plain_parts = split_file(plain_path);
    std::string without_tensor = plain_parts.header;
    const std::string loss_entry = "{\\\"loss\\\":";
    REQUIRE(without_tensor.find(loss_entry) != std::string::npos);
    without_tensor.replace(without_tensor.find(loss_entry), loss_entry.size(), "{\\\"class_weights\\\":4,\\\"loss\\\":");
    const Refusal missing =
        load_checkpoint(run, write_parts(directory.path / "missing.safetensors", without_tensor, plain_parts.data));
    CHECK(missing.status == MPT_STATUS_CORRUPT_DATA);
    CHECK_MESSAGE(missing.message.find("class_weights") != std::string::npos, missing.message);
    REQUIRE(load_checkpoint(run, path).status == MPT_STATUS_OK);  // the refusals changed nothing
}

TEST_CASE("a model with 300,000 weighted outputs resumes from its checkpoint; a refusal shows a few of its weights") {
    // More weights than the loader parses JSON values of metadata (2^18): they are a tensor.
    constexpr int64_t outputs = 300000;
    TempDir directory;
    auto make = [&](float last_weight, mpt_context_t** context, mpt_model_t** model) {
        mpt_context_options_t* context_options = nullptr;
        REQUIRE(mpt_context_options_create(&context_options) == MPT_STATUS_OK);
        mpt_context_options_set_backend(context_options, MPT_BACKEND_CPU);
        REQUIRE(mpt_context_create(context_options, context) == MPT_STATUS_OK);
        mpt_context_options_destroy(context_options);
        REQUIRE(mpt_model_create(*context, 2, model) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(*model, outputs, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
        std::vector<float> weights(outputs, 1.0f);
        weights.back() = last_weight;
        mpt_trainer_options_t* options = nullptr;
        REQUIRE(mpt_trainer_options_create(&options) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_options_set_class_weights(options, weights.data(), outputs) == MPT_STATUS_OK);
        mpt_trainer_t* trainer = nullptr;
        REQUIRE(mpt_trainer_create(*model, options, &trainer) == MPT_STATUS_OK);
        mpt_trainer_options_destroy(options);
        return trainer;
    };
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_trainer_t* trainer = make(2.0f, &context, &model);
    const std::string path = (directory.path / "wide.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(trainer, path.c_str()) == MPT_STATUS_OK);
    CHECK(mpt_trainer_load_checkpoint(trainer, path.c_str()) == MPT_STATUS_OK);
    mpt_context_t* other_context = nullptr;
    mpt_model_t* other_model = nullptr;
    mpt_trainer_t* other = make(3.0f, &other_context, &other_model);
    CHECK(mpt_trainer_load_checkpoint(other, path.c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    const std::string message = mpt_last_error();
    CHECK(message.size() < 1000);
    CHECK_MESSAGE(message.find("class_weights [1, 1, 1, 1, 1, 1, 1, 1, ... 300000 in all] (this trainer: [1, 1, 1, 1, 1, 1, "
                               "1, 1, ... 300000 in all]; class 299999: 2 against 3)") != std::string::npos,
                  message);
    for (mpt_trainer_t* t : {trainer, other}) mpt_trainer_destroy(t);
    for (mpt_model_t* m : {model, other_model}) mpt_model_destroy(m);
    for (mpt_context_t* c : {context, other_context}) mpt_context_destroy(c);
}

// A checkpoint of a trainer with `options`, whose recorded float option `key` (`value`'s bits) is
// replaced by each of `forged`: corrupt data, named so, for that trainer and one of `other` options,
// and neither trainer is changed by the refusals.
void check_forged_float_option(const Options& options, const Options& other, const std::string& key, float value,
                               const std::vector<std::string>& forged) {
    TempDir directory;
    Run run(options);
    const std::string path = (directory.path / "recorded.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const FileParts parts = split_file(path);
    const std::string entry = "\\\"" + key + "\\\":" + float_bits_text(value);
    REQUIRE(parts.header.find(entry) != std::string::npos);
    const auto with_value = [&](const std::string& text) {
        std::string header = parts.header;
        header.replace(header.find(entry), entry.size(), "\\\"" + key + "\\\":" + text);
        return header;
    };
    const std::string unchanged = write_parts(directory.path / "unchanged.safetensors",
                                              with_value(float_bits_text(value)), parts.data);
    REQUIRE(load_checkpoint(run, unchanged).status == MPT_STATUS_OK);  // the edit itself breaks nothing
    Run other_run(other);
    for (const std::string& text : forged) {
        CAPTURE(text);
        const std::string forged_path = write_parts(directory.path / "forged.safetensors", with_value(text), parts.data);
        for (Run* trainer : {&run, &other_run}) {
            const Refusal refusal = load_checkpoint(*trainer, forged_path);
            CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
            CHECK_MESSAGE(refusal.message.find(key) != std::string::npos, refusal.message);
        }
    }
    REQUIRE(load_checkpoint(run, unchanged).status == MPT_STATUS_OK);  // the refusals changed nothing
}

TEST_CASE("a checkpoint's label smoothing that no mptrain writes is corrupt data, whatever the trainer's") {
    Options smoothed;
    smoothed.label_smoothing = 0.1f;
    check_forged_float_option(smoothed, Options{}, "label_smoothing", 0.1f,
                              {"0.1", "\\\"0.1\\\"", "0", float_bits_text(-0.0f), float_bits_text(1.0f),
                               float_bits_text(std::nanf("")), float_bits_text(-0.1f), "4294967296", "null"});
}

TEST_CASE("a checkpoint's Huber delta that no mptrain writes is corrupt data, and another delta is named in the refusal") {
    Options huber;
    huber.loss = MPT_LOSS_HUBER;
    huber.huber_delta = 0.5f;
    Options other_delta = huber;
    other_delta.huber_delta = 1.0f;
    check_forged_float_option(huber, other_delta, "huber_delta", 0.5f,
                              {"0.5", "\\\"0.5\\\"", "0", float_bits_text(-0.0f), float_bits_text(-0.5f),
                               float_bits_text(std::nanf("")), float_bits_text(INFINITY), "4294967296", "null"});
    // A valid other delta: refused as another trainer's option, shown as the number it is.
    TempDir directory;
    Run run(huber), other_run(other_delta);
    const std::string path = (directory.path / "huber.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const Refusal refusal = load_checkpoint(other_run, path);
    CHECK(refusal.status == MPT_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(refusal.message.find("huber_delta 0.5 (this trainer: 1)") != std::string::npos, refusal.message);
}

TEST_CASE("a fit cancelled inside an epoch continues that epoch and ends like an uninterrupted run") {
    Options options;
    std::vector<float> uninterrupted;
    {
        Run run(options);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
        uninterrupted = run.weights();
    }
    Run run(options);
    int calls = 0;
    auto cancel_at_step_4 = [](int64_t, int64_t step, int64_t, float, float, void* user) -> int {
        ++*static_cast<int*>(user);
        return step == 4;
    };
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, cancel_at_step_4, nullptr, &calls) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_CANCELLED);
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, nullptr, nullptr) == MPT_STATUS_OK);
    float accuracy = 0.0f;
    REQUIRE(mpt_trainer_evaluate(run.trainer, run.dataset, 0, nullptr, &accuracy) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
    const std::vector<float> weights = run.weights();
    CHECK(std::memcmp(weights.data(), uninterrupted.data(), weights.size() * sizeof(float)) == 0);
}

TEST_CASE("fit says in the log, at INFO, that it abandons an interrupted epoch; the log level filters it") {
    using Messages = std::vector<std::pair<mpt_log_level, std::string>>;
    for (mpt_log_level level : {MPT_LOG_LEVEL_INFO, MPT_LOG_LEVEL_WARNING}) {
        CAPTURE(level);
        Messages messages;
        Options options;
        options.log = [](mpt_log_level at, const char* message, void* user) {
            static_cast<Messages*>(user)->emplace_back(at, message);
        };
        options.log_user_data = &messages;
        options.log_level = level;
        Run run(options);
        auto cancel_at_step_4 = [](int64_t, int64_t step, int64_t, float, float, void*) -> int { return step == 4; };
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, cancel_at_step_4, nullptr, nullptr) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_CANCELLED);
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, nullptr, nullptr) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, 2 * kBatch, 1) == MPT_STATUS_OK);  // another batch size
        bool abandoned = false;
        for (const auto& [at, message] : messages) {
            CHECK(at >= level);
            abandoned |= at == MPT_LOG_LEVEL_INFO && message.find("abandoned") != std::string::npos;
        }
        CHECK(abandoned == (level == MPT_LOG_LEVEL_INFO));
    }
}

TEST_CASE("a saved model loads with its architecture and predicts bit-identically") {
    TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_model_set_layer_dtype(run.model, 1, MPT_DTYPE_FP32) == MPT_STATUS_INVALID_STATE);  // built already
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_model_save(run.model, path.c_str()) == MPT_STATUS_OK);
    mpt_model_t* loaded = nullptr;
    REQUIRE(mpt_model_load(run.context, path.c_str(), &loaded) == MPT_STATUS_OK);
    int64_t layers = 0, outputs = 0;
    CHECK(mpt_model_get_layer_count(loaded, &layers) == MPT_STATUS_OK);
    CHECK(mpt_model_get_output_features(loaded, &outputs) == MPT_STATUS_OK);
    CHECK(layers == 2);
    CHECK(outputs == kClasses);
    std::vector<float> inputs(8 * kFeatures);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(i % 7) * 0.3f - 1.0f;
    std::vector<float> original(8 * kClasses), reloaded(8 * kClasses);
    REQUIRE(mpt_model_predict(run.model, inputs.data(), 8, original.data(), 8 * kClasses) == MPT_STATUS_OK);
    REQUIRE(mpt_model_predict(loaded, inputs.data(), 8, reloaded.data(), 8 * kClasses) == MPT_STATUS_OK);
    CHECK(std::memcmp(original.data(), reloaded.data(), original.size() * sizeof(float)) == 0);
    // A checkpoint holds a model too.
    const std::string checkpoint = (directory.path / "checkpoint.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, checkpoint.c_str()) == MPT_STATUS_OK);
    mpt_model_t* from_checkpoint = nullptr;
    REQUIRE(mpt_model_load(run.context, checkpoint.c_str(), &from_checkpoint) == MPT_STATUS_OK);
    REQUIRE(mpt_model_predict(from_checkpoint, inputs.data(), 8, reloaded.data(), 8 * kClasses) == MPT_STATUS_OK);
    CHECK(std::memcmp(original.data(), reloaded.data(), original.size() * sizeof(float)) == 0);
    // But a model file is no checkpoint.
    CHECK(mpt_trainer_load_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    mpt_model_destroy(from_checkpoint);
    mpt_model_destroy(loaded);
}

TEST_CASE("a model file keeps every activation by its Keras name and the dtypes: one hidden layer of each reloads to the same predictions and architecture") {
    TempDir directory;
    const std::string path = (directory.path / "activations.safetensors").string();
    const std::pair<mpt_activation, const char*> hidden[] = {
        {MPT_ACTIVATION_LINEAR, "linear"},   {MPT_ACTIVATION_RELU, "relu"},         {MPT_ACTIVATION_SIGMOID, "sigmoid"},
        {MPT_ACTIVATION_TANH, "tanh"},       {MPT_ACTIVATION_LEAKY_RELU, "leaky_relu"}, {MPT_ACTIVATION_ELU, "elu"},
        {MPT_ACTIVATION_SELU, "selu"},       {MPT_ACTIVATION_SOFTPLUS, "softplus"}, {MPT_ACTIVATION_SOFTSIGN, "softsign"}};
    mpt_context_options_t* options = nullptr;
    REQUIRE(mpt_context_options_create(&options) == MPT_STATUS_OK);
    REQUIRE(mpt_context_options_set_backend(options, MPT_BACKEND_CPU) == MPT_STATUS_OK);
    mpt_context_t* context = nullptr;
    REQUIRE(mpt_context_create(options, &context) == MPT_STATUS_OK);
    mpt_context_options_destroy(options);
    mpt_model_t* model = nullptr;
    REQUIRE(mpt_model_create(context, kFeatures, &model) == MPT_STATUS_OK);
    for (const auto& [activation, name] : hidden) REQUIRE(mpt_model_add_dense(model, 6, activation) == MPT_STATUS_OK);
    REQUIRE(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
    const mpt_dtype dtypes[] = {MPT_DTYPE_FP32, MPT_DTYPE_FP16, MPT_DTYPE_BF16};  // the first layers'; then the policy's
    for (int64_t layer = 0; layer < 3; ++layer)
        REQUIRE(mpt_model_set_layer_dtype(model, layer, dtypes[layer]) == MPT_STATUS_OK);
    REQUIRE(mpt_model_save(model, path.c_str()) == MPT_STATUS_OK);
    // The architecture is JSON inside a metadata string, so its quotes are escaped there.
    for (const auto& [activation, name] : hidden)
        CHECK(mpt_test::file_contains(path, std::string("\\\"activation\\\":\\\"") + name + "\\\""));
    mpt_model_t* loaded = nullptr;
    REQUIRE(mpt_model_load(context, path.c_str(), &loaded) == MPT_STATUS_OK);
    std::vector<float> inputs(8 * kFeatures);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(i % 11) * 0.4f - 2.0f;
    std::vector<float> original(8 * kClasses), reloaded(8 * kClasses);
    REQUIRE(mpt_model_predict(model, inputs.data(), 8, original.data(), 8 * kClasses) == MPT_STATUS_OK);
    REQUIRE(mpt_model_predict(loaded, inputs.data(), 8, reloaded.data(), 8 * kClasses) == MPT_STATUS_OK);
    CHECK(std::memcmp(original.data(), reloaded.data(), original.size() * sizeof(float)) == 0);
    // The loaded architecture reads back layer by layer.
    for (int64_t layer = 0; layer <= static_cast<int64_t>(std::size(hidden)); ++layer) {
        const bool last = layer == static_cast<int64_t>(std::size(hidden));
        int64_t units = 0;
        mpt_activation activation = MPT_ACTIVATION_LINEAR;
        REQUIRE(mpt_model_get_layer_units(loaded, layer, &units) == MPT_STATUS_OK);
        REQUIRE(mpt_model_get_layer_activation(loaded, layer, &activation) == MPT_STATUS_OK);
        CHECK(units == (last ? kClasses : 6));
        CHECK(activation == (last ? MPT_ACTIVATION_SOFTMAX : hidden[layer].first));
        mpt_dtype dtype = MPT_DTYPE_FP32;
        REQUIRE(mpt_model_get_layer_dtype(loaded, layer, &dtype) == MPT_STATUS_OK);
        CHECK(dtype == (layer < 3 ? dtypes[layer] : MPT_DTYPE_DEFAULT));
    }
    int64_t units = -1;
    CHECK(mpt_model_get_layer_units(loaded, static_cast<int64_t>(std::size(hidden)) + 1, &units) ==
          MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_model_get_layer_units(loaded, -1, &units) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(units == -1);
    CHECK(mpt_model_get_layer_units(loaded, 0, nullptr) == MPT_STATUS_INVALID_ARGUMENT);
    mpt_activation activation = MPT_ACTIVATION_SELU;
    mpt_dtype dtype = MPT_DTYPE_FP16;
    CHECK(mpt_model_get_layer_activation(loaded, -1, &activation) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_model_get_layer_dtype(loaded, static_cast<int64_t>(std::size(hidden)) + 1, &dtype) ==
          MPT_STATUS_INVALID_ARGUMENT);
    CHECK(activation == MPT_ACTIVATION_SELU);  // out-parameters are written only on success
    CHECK(dtype == MPT_DTYPE_FP16);
    CHECK(mpt_model_get_layer_activation(loaded, 0, nullptr) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_model_get_layer_dtype(loaded, 0, nullptr) == MPT_STATUS_INVALID_ARGUMENT);
    mpt_model_destroy(loaded);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("a model file whose architecture is forged (sizes out of range, overflowing) is corrupt data, not a crash") {
    // The architecture is metadata, which the tensors' checksums do not cover: an edited file reaches
    // the architecture checks, which must hold for any sizes, INT64_MAX included.
    TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_model_save(run.model, path.c_str()) == MPT_STATUS_OK);
    const std::string bytes = mpt_test::file_bytes(path);
    REQUIRE(bytes.size() > 8);
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    const std::string header = bytes.substr(8, header_length), data = bytes.substr(8 + header_length);
    const std::string field = "\\\"input_features\\\":" + std::to_string(kFeatures);  // inside a JSON string
    REQUIRE(header.find(field) != std::string::npos);
    // The unchanged value, rewritten the same way, loads: the edit itself breaks nothing.
    for (const std::string& forged : {std::to_string(kFeatures), std::string("9223372036854775807"), std::string("16777217"),
                                     std::string("-1"), std::string("0")}) {
        CAPTURE(forged);
        const bool valid = forged == std::to_string(kFeatures);
        std::string edited = header;
        edited.replace(edited.find(field), field.size(), "\\\"input_features\\\":" + forged);
        while (edited.size() % 8) edited += ' ';  // safetensors pads the header with spaces
        std::string file(8, '\0');
        for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>(edited.size() >> (8 * i) & 0xFF);
        file += edited + data;
        const std::string forged_path = (directory.path / "forged.safetensors").string();
        std::ofstream(forged_path, std::ios::binary).write(file.data(), static_cast<std::streamsize>(file.size()));
        mpt_model_t* loaded = nullptr;
        CHECK(mpt_model_load(run.context, forged_path.c_str(), &loaded) == (valid ? MPT_STATUS_OK : MPT_STATUS_CORRUPT_DATA));
        CHECK((loaded != nullptr) == valid);
        mpt_model_destroy(loaded);
    }
}

TEST_CASE("a mixed-precision trainer that has already run predicts with weights loaded from a checkpoint or set on its model") {
    // Mixed precision computes with a low-precision copy of the fp32 masters: whatever replaces the
    // masters after the copy was made must refresh it, or the trainer goes on with the old weights.
    for (mpt_precision precision : {MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision);
        TempDir directory;
        const std::string path = (directory.path / "checkpoint.safetensors").string();
        Run run(options_for(precision, MPT_OPTIMIZER_SGD, 1024.0f));
        std::vector<float> inputs(8 * kFeatures);
        for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(i % 5) * 0.4f - 1.0f;
        auto predict = [&] {
            std::vector<float> out(8 * kClasses);
            REQUIRE(mpt_trainer_predict(run.trainer, inputs.data(), 8, out.data(), 8 * kClasses) == MPT_STATUS_OK);
            return out;
        };
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
        const std::vector<float> saved_weights = run.weights();
        const std::vector<float> saved_predictions = predict();

        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        REQUIRE_FALSE(same_bits(predict(), saved_predictions));
        REQUIRE(mpt_trainer_load_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
        CHECK(same_bits(predict(), saved_predictions));

        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        REQUIRE_FALSE(same_bits(predict(), saved_predictions));
        size_t at = 0;
        for (int64_t layer = 0; layer < 2; ++layer) {
            const int64_t units = layer == 0 ? 20 : kClasses, inputs_per_unit = layer == 0 ? kFeatures : 20;
            const float* weights = saved_weights.data() + at;
            const float* bias = weights + units * inputs_per_unit;
            REQUIRE(mpt_model_set_weights(run.model, layer, weights, units * inputs_per_unit, bias, units) == MPT_STATUS_OK);
            at += static_cast<size_t>(units * inputs_per_unit + units);
        }
        CHECK(same_bits(predict(), saved_predictions));
    }
}

TEST_CASE("automatic checkpoints keep only the newest files") {
    TempDir directory;
    Run run(Options{});
    // Every 5 steps with 10 steps per epoch: steps 5, 10 (an epoch's last step), 15, 20.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 5, 0, 100) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
    auto names_in = [&] {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(directory.path)) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    };
    CHECK(names_in() == std::vector<std::string>{"checkpoint-000000000005.safetensors", "checkpoint-000000000010.safetensors",
                                                 "checkpoint-000000000015.safetensors", "checkpoint-000000000020.safetensors"});
    fs::remove_all(directory.path);
    fs::create_directory(directory.path);
    // Every 3 steps and every epoch, keeping 2: the newest are step 30 (epoch end) and step 27.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 3, 1, 2) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    CHECK(names_in() == std::vector<std::string>{"checkpoint-000000000027.safetensors", "checkpoint-000000000030.safetensors"});
    fs::remove_all(directory.path);
    fs::create_directory(directory.path);
    // Every 2nd epoch of the trainer's life: three are done, so of the next four epochs the 4th and
    // 6th end due, at steps 40 and 60.
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 2, 100) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 4, kBatch, 1) == MPT_STATUS_OK);
    CHECK(names_in() == std::vector<std::string>{"checkpoint-000000000040.safetensors", "checkpoint-000000000060.safetensors"});
    CHECK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 0, 1) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);
}

TEST_CASE("bad, mismatched and unwritable checkpoints fail with a clear status and change nothing") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();

    const std::string bytes = mpt_test::file_bytes(path);
    auto write = [&](const std::string& name, const std::string& content) {
        const std::string file = (directory.path / name).string();
        std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
        return file;
    };
    const std::string truncated = bytes.substr(0, bytes.size() / 2);
    std::string flipped = bytes;
    flipped[flipped.size() - 5] ^= 0x40;  // inside the last tensor: its checksum no longer matches
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("truncated", truncated).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("flipped", flipped).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(std::strlen(mpt_last_error()) > 0);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, (directory.path / "missing").c_str()) == MPT_STATUS_IO_ERROR);

    // Other options, other architecture.
    Run other(options_for(MPT_PRECISION_MIXED_BF16, MPT_OPTIMIZER_ADAM, 16777216.0f));
    CHECK(mpt_trainer_load_checkpoint(other.trainer, path.c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    mpt_model_t* wider = nullptr;
    REQUIRE(mpt_model_create(run.context, kFeatures, &wider) == MPT_STATUS_OK);
    mpt_model_add_dense(wider, 21, MPT_ACTIVATION_RELU);
    mpt_model_add_dense(wider, kClasses, MPT_ACTIVATION_SOFTMAX);
    mpt_trainer_t* wider_trainer = nullptr;
    REQUIRE(mpt_trainer_create(wider, nullptr, &wider_trainer) == MPT_STATUS_OK);
    CHECK(mpt_trainer_load_checkpoint(wider_trainer, path.c_str()) == MPT_STATUS_SHAPE_MISMATCH);
    mpt_trainer_destroy(wider_trainer);
    mpt_model_destroy(wider);

    // Unwritable destinations leave the previous checkpoint intact.
    CHECK(mpt_trainer_save_checkpoint(run.trainer, (directory.path / "no-such-dir" / "x.safetensors").c_str()) ==
          MPT_STATUS_IO_ERROR);
    // A checkpoint directory that is missing, or a file, is refused when set; one that goes away
    // after stops fit at its first checkpoint.
    CHECK(mpt_trainer_set_checkpointing(run.trainer, (directory.path / "no-such-dir").c_str(), 1, 0, 1) ==
          MPT_STATUS_IO_ERROR);
    CHECK(mpt_trainer_set_checkpointing(run.trainer, path.c_str(), 1, 0, 1) == MPT_STATUS_IO_ERROR);
    const std::filesystem::path going = directory.path / "going-away";
    std::filesystem::create_directory(going);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, going.c_str(), 1, 0, 1) == MPT_STATUS_OK);
    std::filesystem::remove(going);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_IO_ERROR);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);

    // Nothing above changed the trainer that refused the files... except the one step before the
    // failed automatic checkpoint; reloading the good checkpoint restores it exactly.
    REQUIRE(mpt_trainer_load_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> after = run.weights();
    CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
    CHECK(run.scaler() == scaler_before);
}

namespace {

// Loads copies of the file at `path` with each bit of its header (length included) flipped in turn,
// through `load` (a path -> status); returns how many were not refused as CORRUPT_DATA, printing
// the first few.
template <typename Load>
int header_flips_not_refused(const std::string& path, const std::filesystem::path& directory, Load load) {
    const std::string good = mpt_test::file_bytes(path);
    const size_t header_end = 8 + split_file(path).header.size();
    const std::string damaged_path = (directory / "damaged.safetensors").string();
    int accepted = 0;
    for (size_t position = 0; position < header_end; ++position) {
        for (int bit = 0; bit < 8; ++bit) {
            std::string damaged = good;
            damaged[position] = static_cast<char>(damaged[position] ^ (1 << bit));
            std::ofstream(damaged_path, std::ios::binary).write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
            const mpt_status status = load(damaged_path);
            if (status != MPT_STATUS_CORRUPT_DATA && ++accepted <= 5) MESSAGE("position ", position, " bit ", bit, ": ", status);
        }
    }
    return accepted;
}

}  // namespace

TEST_CASE("an epoch whose end-of-epoch checkpoint fails still gets its epoch-end callback; fit returns the failure") {
    TempDir directory;
    Run run(Options{});
    struct EpochEnds {
        std::vector<int64_t> epochs;
    } ends;
    REQUIRE(mpt_trainer_set_callbacks(
                run.trainer, nullptr,
                [](int64_t epoch, float, float, void* user_data) {
                    static_cast<EpochEnds*>(user_data)->epochs.push_back(epoch);
                    return 0;
                },
                &ends) == MPT_STATUS_OK);
    const fs::path going = directory.path / "going-away";
    fs::create_directory(going);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, going.c_str(), 0, 1, 1) == MPT_STATUS_OK);  // at epoch ends
    fs::remove(going);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_IO_ERROR);
    CHECK(ends.epochs == std::vector<int64_t>{0});
    int64_t epochs = 0;
    REQUIRE(mpt_trainer_get_progress(run.trainer, nullptr, &epochs) == MPT_STATUS_OK);
    CHECK(epochs == 1);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 2, kBatch, 1) == MPT_STATUS_OK);
    CHECK(ends.epochs == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("a checkpoint with any one bit of its header flipped (metadata, tensor table, length) is refused and changes nothing") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    stop_inside_second_epoch(run);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();
    CHECK(header_flips_not_refused(path, directory.path, [&](const std::string& damaged) {
              return mpt_trainer_load_checkpoint(run.trainer, damaged.c_str());
          }) == 0);
    CHECK(same_bits(run.weights(), before));
    CHECK(run.scaler() == scaler_before);
}

TEST_CASE("a model file with any one bit of its header flipped is refused as corrupt") {
    TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_model_save(run.model, path.c_str()) == MPT_STATUS_OK);
    CHECK(header_flips_not_refused(path, directory.path, [&](const std::string& damaged) {
              mpt_model_t* loaded = nullptr;
              const mpt_status status = mpt_model_load(run.context, damaged.c_str(), &loaded);
              mpt_model_destroy(loaded);
              return status;
          }) == 0);
}

TEST_CASE("files written before headers had a checksum still load, unless their header holds an entry mptrain never wrote") {
    TempDir directory;
    Run run(Options{});
    stop_inside_second_epoch(run);
    const std::string checkpoint = (directory.path / "checkpoint.safetensors").string();
    const std::string model = (directory.path / "model.safetensors").string();
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, checkpoint.c_str()) == MPT_STATUS_OK);
    REQUIRE(mpt_model_save(run.model, model.c_str()) == MPT_STATUS_OK);
    const std::vector<float> saved = run.weights();
    const Run::Scaler saved_scaler = run.scaler();

    const FileParts checkpoint_parts = split_file(checkpoint), model_parts = split_file(model);
    const std::string old_checkpoint =
        write_parts(directory.path / "old-checkpoint.safetensors", without_header_checksum(checkpoint_parts.header),
                    checkpoint_parts.data);
    const std::string old_model =
        write_parts(directory.path / "old-model.safetensors", without_header_checksum(model_parts.header), model_parts.data);

    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, old_checkpoint).status == MPT_STATUS_OK);
    CHECK(same_bits(resumed.weights(), saved));
    CHECK(resumed.scaler() == saved_scaler);
    mpt_model_t* loaded = nullptr;
    REQUIRE(mpt_model_load(run.context, old_model.c_str(), &loaded) == MPT_STATUS_OK);
    mpt_model_destroy(loaded);

    // A damaged key in an old file (or in the new one's checksum key, which makes it look old).
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"\"mptrain.precision\"", "\"mptrain.precisiom\""}, {"\"mptrain.crc32c.__metadata__\"", "\"mptrain.crc32b.__metadata__\""}}) {
        CAPTURE(to);
        std::string header = to.find("crc32b") != std::string::npos ? checkpoint_parts.header
                                                                     : without_header_checksum(checkpoint_parts.header);
        const size_t at = header.find(from);
        REQUIRE(at != std::string::npos);
        header.replace(at, from.size(), to);
        const std::string edited = write_parts(directory.path / "edited.safetensors", header, checkpoint_parts.data);
        const Refusal refusal = load_checkpoint(resumed, edited);
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find("no checksum") != std::string::npos);
        CHECK(mpt_model_load(run.context, edited.c_str(), &loaded) == MPT_STATUS_CORRUPT_DATA);
    }
}

TEST_CASE("a checkpoint whose loss scale or growth tracker the trainer's loss scaler cannot reach is refused, naming the field") {
    struct Edit {
        const char* field;
        std::string value;
    };
    struct Setup {
        Options options;
        std::vector<Edit> edits;
    };
    const float inf = std::numeric_limits<float>::infinity();
    Options static_scaling;
    static_scaling.loss_scaling = MPT_LOSS_SCALING_STATIC;
    static_scaling.initial_scale = 1024.0f;
    const std::vector<Setup> setups = {
        // mixed-fp16: dynamic between min_scale 1 and max_scale 2^24, growth_interval 4.
        {Options{}, {{"loss_scale", float_bits_text(inf)}, {"loss_scale", float_bits_text(std::nanf(""))},
                     {"loss_scale", float_bits_text(33554432.0f)}, {"loss_scale", float_bits_text(0.5f)},
                     {"loss_scale", float_bits_text(-2.0f)}, {"growth_tracker", "4"}, {"growth_tracker", "99999"}}},
        // fp32: scaling off, the scale stays 1 and the tracker 0.
        {options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f), {{"loss_scale", float_bits_text(2.0f)}, {"growth_tracker", "1"}}},
        // static: the scale stays what it was set to.
        {static_scaling, {{"loss_scale", float_bits_text(2048.0f)}, {"growth_tracker", "1"}}},
    };
    for (const Setup& setup : setups) {
        CAPTURE(setup.options.precision);
        TempDir directory;
        const std::string path = (directory.path / "good.safetensors").string();
        Run run(setup.options);
        stop_inside_second_epoch(run);
        REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
        const std::vector<float> before = run.weights();
        const Run::Scaler scaler_before = run.scaler();
        const FileParts parts = split_file(path);
        // The edit itself breaks nothing: the values as saved, written back the same way, load.
        const std::string same = write_parts(directory.path / "same.safetensors",
                                             with_metadata_field(parts.header, "loss_scale", float_bits_text(scaler_before.scale)),
                                             parts.data);
        REQUIRE(load_checkpoint(run, same).status == MPT_STATUS_OK);
        for (const Edit& edit : setup.edits) {
            INFO(edit.field, " := ", edit.value);
            const std::string edited =
                write_parts(directory.path / "edited.safetensors", with_metadata_field(parts.header, edit.field, edit.value), parts.data);
            const Refusal refusal = load_checkpoint(run, edited);
            CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
            CHECK(refusal.message.find(edit.field) != std::string::npos);
        }
        CHECK(same_bits(run.weights(), before));
        CHECK(run.scaler() == scaler_before);
    }
}

TEST_CASE("a checkpoint whose step, epoch and data counters contradict each other is refused, naming the field") {
    TempDir directory;
    const std::string path = (directory.path / "good.safetensors").string();
    Run run(Options{});
    stop_inside_second_epoch(run);  // 14 steps, 1 epoch, 4 steps into the next of 10, batch 16 of 160 rows
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> before = run.weights();
    const Run::Scaler scaler_before = run.scaler();
    REQUIRE(scaler_before.steps == 14);
    const FileParts parts = split_file(path);
    const struct {
        const char* field;
        std::string value;
        const char* named;
    } edits[] = {
        {"applied_steps", "1000000", "applied_steps"},
        {"skipped_steps", std::to_string(scaler_before.skipped + 1), "skipped_steps"},
        {"steps", "15", "steps"},
        {"steps", "-1", "steps"},
        {"epochs_completed", "11", "epochs_completed"},  // 11 epochs and 4 steps need 15 steps
        {"steps_into_epoch", "11", "steps_into_epoch"},  // an epoch of 160 rows at 16 has 10 steps
        {"batch_size", "0", "batch_size"},
        {"batch_size", "64", "steps_into_epoch"},  // 4 steps into an epoch of 2
        {"dataset_rows", "656", "dataset_rows"},
        {"shuffle", "false", "shuffle"},  // the saved order is shuffled
        {"learning_rate", "0", "learning_rate"},
        {"learning_rate", float_bits_text(-0.01f), "learning_rate"},
        {"learning_rate", float_bits_text(std::numeric_limits<float>::quiet_NaN()), "learning_rate"},
        {"learning_rate", float_bits_text(std::numeric_limits<float>::infinity()), "learning_rate"},
        {"learning_rate", "4294967296", "learning_rate"},  // no float's bit pattern
    };
    for (const auto& edit : edits) {
        INFO(edit.field, " := ", edit.value);
        const std::string edited =
            write_parts(directory.path / "edited.safetensors", with_metadata_field(parts.header, edit.field, edit.value), parts.data);
        const Refusal refusal = load_checkpoint(run, edited);
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find(edit.named) != std::string::npos);
    }
    {  // counts that agree with each other but no run reaches (a step more would overflow them)
        const int64_t steps = (int64_t{1} << 62) + 14;
        const std::string header =
            with_metadata_field(with_metadata_field(parts.header, "steps", std::to_string(steps)), "applied_steps",
                          std::to_string(steps - scaler_before.skipped));
        const Refusal refusal = load_checkpoint(run, write_parts(directory.path / "edited.safetensors", header, parts.data));
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK_MESSAGE(refusal.message.find("more than 2^62 steps") != std::string::npos, refusal.message);
    }
    CHECK(same_bits(run.weights(), before));
    CHECK(run.scaler() == scaler_before);
    REQUIRE(load_checkpoint(run, path).status == MPT_STATUS_OK);
}

TEST_CASE("a checkpoint refused for other options names only the options that differ, with floats as numbers") {
    TempDir directory;
    const std::string path = (directory.path / "fp16.safetensors").string();
    {
        Run saved(Options{});
        REQUIRE(mpt_trainer_save_checkpoint(saved.trainer, path.c_str()) == MPT_STATUS_OK);
    }
    Options other;
    other.precision = MPT_PRECISION_MIXED_BF16;
    other.initial_scale = 0.5f;
    other.learning_rate = 0.05f;  // not an option that must match: the run's, restored by a load
    Run run(other);
    const Refusal refusal = load_checkpoint(run, path);
    CHECK(refusal.status == MPT_STATUS_INVALID_ARGUMENT);
    INFO(refusal.message);
    CHECK(refusal.message.find("precision mixed-fp16 (this trainer: mixed-bf16)") != std::string::npos);
    CHECK(refusal.message.find("initial_scale 16777216 (this trainer: 0.5)") != std::string::npos);
    CHECK(refusal.message.find("loss_scaling dynamic (this trainer: off)") != std::string::npos);  // DEFAULT, resolved
    for (const char* same : {"beta1", "epsilon", "optimizer", "growth_interval", "learning_rate", "loss "})
        CHECK(refusal.message.find(same) == std::string::npos);
    CHECK(refusal.message.find(std::to_string(1266679808)) == std::string::npos);  // 2^24's bit pattern
    CHECK(refusal.message.size() < 300);
}

TEST_CASE("a checkpoint refused by a trainer whose AUTO precision resolved otherwise says that AUTO resolves per machine") {
    // No machine resolves AUTO to mixed-fp16 on the CPU (bf16 with AMX, else fp32), so a checkpoint of
    // a mixed-fp16 trainer always meets a different precision here.
    TempDir directory;
    const std::string path = (directory.path / "fp16.safetensors").string();
    {
        Run saved(Options{});
        REQUIRE(mpt_trainer_save_checkpoint(saved.trainer, path.c_str()) == MPT_STATUS_OK);
    }
    Options automatic;
    automatic.precision = MPT_PRECISION_AUTO;
    Run run(automatic);
    const Refusal refusal = load_checkpoint(run, path);
    CHECK(refusal.status == MPT_STATUS_INVALID_ARGUMENT);
    INFO(refusal.message);
    CHECK(refusal.message.find("precision mixed-fp16 (this trainer: ") != std::string::npos);
    CHECK(refusal.message.find("AUTO resolves per machine") != std::string::npos);
}

// ---- the learning rate: the run's, changed by a schedule, saved and restored ----

namespace {

float learning_rate_of(const Run& run) {
    float rate = 0.0f;
    REQUIRE(mpt_trainer_get_learning_rate(run.trainer, &rate) == MPT_STATUS_OK);
    return rate;
}

// Halves the rate at every epoch's end: 0.01, 0.005, 0.0025, ... (exact in binary).
int halve_rate_at_epoch_end(int64_t, float, float, void* user) {
    mpt_trainer_t* trainer = static_cast<mpt_trainer_t*>(user);
    float rate = 0.0f;
    return mpt_trainer_get_learning_rate(trainer, &rate) != MPT_STATUS_OK ||
           mpt_trainer_set_learning_rate(trainer, rate / 2) != MPT_STATUS_OK;
}

float halved_rate(int64_t epochs_completed) { return std::ldexp(0.01f, -static_cast<int>(epochs_completed)); }

}  // namespace

TEST_CASE("a run whose epoch-end callback halves the rate resumes bit-identically from checkpoints that restore it") {
    TempDir directory;
    const Options options;  // learning rate 0.01
    std::vector<float> uninterrupted;
    {
        Run run(options);
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_rate_at_epoch_end, run.trainer) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 1, 100) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == halved_rate(3));
        uninterrupted = run.weights();
    }
    {  // the schedule changed the run: the same fit at a constant rate ends elsewhere
        Run constant(options);
        REQUIRE(mpt_trainer_fit(constant.trainer, constant.dataset, 3, kBatch, 1) == MPT_STATUS_OK);
        CHECK_FALSE(same_bits(constant.weights(), uninterrupted));
    }
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    // Steps 7, 14, 21, 28 inside epochs 0, 1, 2, 2; 10, 20, 30 at the ends of epochs 0, 1, 2.
    REQUIRE(checkpoints.size() == 7);
    for (const fs::path& checkpoint : checkpoints) {
        CAPTURE(checkpoint.string());
        Options other = options;
        other.learning_rate = 0.5f;  // the checkpoint's rate replaces the options'
        Run resumed(other);
        REQUIRE(load_checkpoint(resumed, checkpoint.string()).status == MPT_STATUS_OK);
        const Run::Scaler at = resumed.scaler();
        CHECK(learning_rate_of(resumed) == halved_rate(at.epochs));
        REQUIRE(mpt_trainer_set_callbacks(resumed.trainer, nullptr, halve_rate_at_epoch_end, resumed.trainer) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at.epochs, kBatch, 1) == MPT_STATUS_OK);
        CHECK(same_bits(resumed.weights(), uninterrupted));
    }
}

TEST_CASE("a rate set between fits or from a progress callback trains as a trainer created with it") {
    // fp32 SGD with momentum: every step is applied (no fp16 overflow skips the first ones).
    const Options sgd = options_for(MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f);
    std::vector<float> created_fast;
    {
        Options fast = sgd;
        fast.learning_rate = 0.04f;
        Run run(fast);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        created_fast = run.weights();
    }
    {
        Run run(sgd);
        REQUIRE(mpt_trainer_set_learning_rate(run.trainer, 0.04f) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == 0.04f);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK(same_bits(run.weights(), created_fast));
    }
    {  // a warm-up from the progress callback: 0.04 from the first step's report on, so from step 2
        Run run(sgd);
        auto warm_up = [](int64_t, int64_t step, int64_t, float, float, void* user) -> int {
            return step == 1 && mpt_trainer_set_learning_rate(static_cast<mpt_trainer_t*>(user), 0.04f) != MPT_STATUS_OK;
        };
        REQUIRE(mpt_trainer_set_callbacks(run.trainer, warm_up, nullptr, run.trainer) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK(learning_rate_of(run) == 0.04f);
        const std::vector<float> warmed = run.weights();
        CHECK_FALSE(same_bits(warmed, created_fast));  // its first step ran at 0.01
        Run slow(sgd);
        REQUIRE(mpt_trainer_fit(slow.trainer, slow.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
        CHECK_FALSE(same_bits(warmed, slow.weights()));
    }
    Run run(sgd);
    for (float bad : {0.0f, -0.01f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        CHECK(mpt_trainer_set_learning_rate(run.trainer, bad) == MPT_STATUS_INVALID_ARGUMENT);
        CHECK(learning_rate_of(run) == 0.01f);
    }
    CHECK(mpt_trainer_set_learning_rate(nullptr, 0.1f) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(mpt_trainer_get_learning_rate(run.trainer, nullptr) == MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("an end-of-epoch checkpoint is written after the epoch-end callback, also when it stops fit") {
    TempDir directory;
    Run run(Options{});
    struct Seen {
        mpt_trainer_t* trainer;
        fs::path directory;
        bool file_seen = false;
    } seen{run.trainer, directory.path};
    auto halve_and_stop = [](int64_t, float, float, void* user) -> int {
        auto* state = static_cast<Seen*>(user);
        state->file_seen = !fs::is_empty(state->directory);
        return halve_rate_at_epoch_end(0, 0, 0, state->trainer) == 0 ? 1 : 2;  // stop
    };
    REQUIRE(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_and_stop, &seen) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 0, 1, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 3, kBatch, 1) == MPT_STATUS_CANCELLED);
    CHECK_FALSE(seen.file_seen);  // the callback came first
    CHECK(learning_rate_of(run) == halved_rate(1));
    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, (directory.path / "checkpoint-000000000010.safetensors").string()).status ==
            MPT_STATUS_OK);
    CHECK(learning_rate_of(resumed) == halved_rate(1));  // the rate the callback set for epoch 1
    CHECK(resumed.scaler() == run.scaler());
    CHECK(same_bits(resumed.weights(), run.weights()));
}

TEST_CASE("a checkpoint written when the learning rate was one of the options loads with that rate") {
    TempDir directory;
    const std::string path = (directory.path / "new.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_trainer_set_learning_rate(run.trainer, 0.25f) == MPT_STATUS_OK);
    stop_inside_second_epoch(run);
    REQUIRE(mpt_trainer_save_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const FileParts parts = split_file(path);
    // The older layout: the rate among the optimizer's options (in key order, after "kind"), none in
    // the progress.
    const std::string rate_entry = "\\\"learning_rate\\\":" + float_bits_text(0.25f) + ",";
    std::string older = parts.header;
    const size_t in_progress = older.find(rate_entry);
    REQUIRE(in_progress != std::string::npos);
    older.erase(in_progress, rate_entry.size());
    const std::string kind = "\\\"kind\\\":1,";  // Adam
    const size_t in_options = older.find(kind);
    REQUIRE(in_options != std::string::npos);
    older.insert(in_options + kind.size(), rate_entry);
    const std::string older_path = write_parts(directory.path / "older.safetensors", older, parts.data);

    Run resumed(Options{});
    REQUIRE(load_checkpoint(resumed, older_path).status == MPT_STATUS_OK);
    CHECK(learning_rate_of(resumed) == 0.25f);
    CHECK(resumed.scaler() == run.scaler());
    REQUIRE(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, 1, kBatch, 1) == MPT_STATUS_OK);
    CHECK(same_bits(resumed.weights(), run.weights()));

    // Neither layout (the rate missing), both at once, or an options' rate that is no float's bits.
    std::string neither = parts.header;
    neither.erase(neither.find(rate_entry), rate_entry.size());
    std::string both = parts.header;
    both.insert(both.find(kind) + kind.size(), rate_entry);
    std::string null_rate = neither;
    null_rate.insert(null_rate.find(kind) + kind.size(), "\\\"learning_rate\\\":null,");
    Run refused(Options{});
    for (const auto& [name, header, named] :
         {std::make_tuple("neither", neither, "'/learning_rate' is missing"),
          std::make_tuple("both", both, "learning_rate is both among the options and in the progress"),
          std::make_tuple("null", null_rate, "the options' learning_rate must be a float's bit pattern, not null")}) {
        CAPTURE(name);
        const Refusal refusal =
            load_checkpoint(refused, write_parts(directory.path / (std::string(name) + ".safetensors"), header, parts.data));
        CHECK(refusal.status == MPT_STATUS_CORRUPT_DATA);
        CHECK(refusal.message.find(named) != std::string::npos);
        CHECK(learning_rate_of(refused) == 0.01f);
    }
}
