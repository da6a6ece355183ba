// Model files and training checkpoints through the C API: a saved model predicts bit-identically
// after loading; a run resumed from any checkpoint (inside an epoch, with a moved loss scale, with
// optimizer state) ends with bit-identical weights and scaler state to the uninterrupted run; bad and
// mismatched files are rejected before anything changes. This file: resumption bit-identical under
// each option that changes what a checkpoint holds, and fits cancelled inside an epoch; the same
// program's other cases, by subject, are in tests/checkpoint/ (model files, refused files, automatic
// checkpoints, the learning rate).
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/harness.h"
#include "support/edited_header.h"
#include "support/temp_dir.h"

using namespace mpt_test::checkpoint;

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
