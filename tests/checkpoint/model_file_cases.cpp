// test_checkpoint: model files: a saved model loads with its architecture and predicts
// bit-identically, every activation and dtype kept by name, a forged architecture refused as corrupt
// data, and a trainer that has run predicting with weights loaded from a checkpoint.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/harness.h"
#include "support/file_contents.h"
#include "support/temp_dir.h"

using namespace mpt_test::checkpoint;

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
