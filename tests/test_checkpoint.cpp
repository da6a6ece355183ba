// Model files and training checkpoints through the C API: a saved model predicts bit-identically
// after loading; a run resumed from any checkpoint (inside an epoch, with a moved loss scale, with
// optimizer state) ends with bit-identical weights and scaler state to the uninterrupted run; bad and
// mismatched files are rejected before anything changes.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int64_t kRows = 160, kFeatures = 12, kClasses = 4, kBatch = 16;  // 10 steps per epoch

struct TempDir {
    fs::path path;
    TempDir() {
        char pattern[] = "/tmp/mptrain-checkpoint-XXXXXX";
        path = mkdtemp(pattern);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<char> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

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
};

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
        mpt_trainer_options_set_learning_rate(trainer_options, 0.01f);
        if (options.optimizer == MPT_OPTIMIZER_SGD) mpt_trainer_options_set_momentum(trainer_options, 0.9f, 1);
        mpt_trainer_options_set_loss_scaling(trainer_options, MPT_LOSS_SCALING_DEFAULT, options.initial_scale);
        mpt_trainer_options_set_loss_scaler_dynamics(trainer_options, 2.0f, 0.5f, 4, 1.0f, 16777216.0f);
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
    check_resume_is_bit_exact(Options{MPT_PRECISION_FP32, MPT_OPTIMIZER_SGD, 1.0f});
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

TEST_CASE("a model file whose architecture is forged (sizes out of range, overflowing) is corrupt data, not a crash") {
    // The architecture is metadata, which the tensors' checksums do not cover: an edited file reaches
    // the architecture checks, which must hold for any sizes, INT64_MAX included.
    TempDir directory;
    const std::string path = (directory.path / "model.safetensors").string();
    Run run(Options{});
    REQUIRE(mpt_model_save(run.model, path.c_str()) == MPT_STATUS_OK);
    const std::vector<char> file_content = file_bytes(path);
    const std::string bytes(file_content.begin(), file_content.end());
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
        Run run(Options{precision, MPT_OPTIMIZER_SGD, 1024.0f});
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

    const std::vector<char> bytes = file_bytes(path);
    auto write = [&](const std::string& name, const std::vector<char>& content) {
        const std::string file = (directory.path / name).string();
        std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
        return file;
    };
    std::vector<char> truncated(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2));
    std::vector<char> flipped = bytes;
    flipped[flipped.size() - 5] ^= 0x40;  // inside the last tensor: its checksum no longer matches
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("truncated", truncated).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, write("flipped", flipped).c_str()) == MPT_STATUS_CORRUPT_DATA);
    CHECK(std::strlen(mpt_last_error()) > 0);
    CHECK(mpt_trainer_load_checkpoint(run.trainer, (directory.path / "missing").c_str()) == MPT_STATUS_IO_ERROR);

    // Other options, other architecture.
    Run other(Options{MPT_PRECISION_MIXED_BF16, MPT_OPTIMIZER_ADAM, 16777216.0f});
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
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, (directory.path / "no-such-dir").c_str(), 1, 0, 1) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(run.trainer, run.dataset, 1, kBatch, 1) == MPT_STATUS_IO_ERROR);
    REQUIRE(mpt_trainer_set_checkpointing(run.trainer, nullptr, 0, 0, 0) == MPT_STATUS_OK);

    // Nothing above changed the trainer that refused the files... except the one step before the
    // failed automatic checkpoint; reloading the good checkpoint restores it exactly.
    REQUIRE(mpt_trainer_load_checkpoint(run.trainer, path.c_str()) == MPT_STATUS_OK);
    const std::vector<float> after = run.weights();
    CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
    CHECK(run.scaler() == scaler_before);
}
