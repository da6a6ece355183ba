// See checkpoint.h. Floats in the JSON metadata are stored as their bit patterns, so restoring and
// comparing them is exact.
#include "nn/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/float_bits.h"
#include "nn/model_file.h"

namespace mpt {

namespace {

using Json = nlohmann::json;

// The options that must match for a resumed run to be the same run.
Json options_json(const Trainer& trainer) {
    const TrainerConfig& config = trainer.config();
    const OptimizerConfig& optimizer = config.optimizer;
    const LossScalerConfig& scaler = trainer.executor().scaler_config();
    return Json{{"precision", precision_name(trainer.precision())},
                {"loss", loss_name(config.loss)},
                {"optimizer",
                 {{"kind", static_cast<int>(optimizer.kind)},
                  {"learning_rate", float_bits(optimizer.learning_rate)},
                  {"momentum", float_bits(optimizer.momentum)},
                  {"nesterov", optimizer.nesterov},
                  {"beta1", float_bits(optimizer.beta1)},
                  {"beta2", float_bits(optimizer.beta2)},
                  {"epsilon", float_bits(optimizer.epsilon)},
                  {"weight_decay", float_bits(optimizer.weight_decay)}}},
                {"loss_scaler",
                 {{"mode", static_cast<int>(scaler.mode)},
                  {"initial_scale", float_bits(scaler.initial_scale)},
                  {"growth_factor", float_bits(scaler.growth_factor)},
                  {"backoff_factor", float_bits(scaler.backoff_factor)},
                  {"growth_interval", scaler.growth_interval},
                  {"min_scale", float_bits(scaler.min_scale)},
                  {"max_scale", float_bits(scaler.max_scale)}}}};
}

Json progress_json(const TrainerSnapshot& snapshot) {
    const TrainState& state = snapshot.state;
    return Json{{"loss_scale", float_bits(state.loss_scale)},
                {"growth_tracker", state.growth_tracker},
                {"skipped_steps", state.skipped_steps},
                {"applied_steps", state.applied_steps},
                {"steps", state.steps},
                {"epochs_completed", snapshot.epochs_completed},
                {"steps_into_epoch", snapshot.steps_into_epoch},
                {"batch_size", snapshot.batch_size},
                {"dataset_rows", snapshot.dataset_rows},
                {"shuffle", snapshot.shuffle}};
}

std::string optimizer_tensor_name(int array, size_t layer, const char* part) {
    return "optimizer." + std::to_string(array) + ".layers." + std::to_string(layer) + "." + part;
}

const std::string& metadata_value(const SafetensorsReader& reader, const std::string& key) {
    auto it = reader.metadata().find(key);
    if (it == reader.metadata().end()) fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint has no '" + key + "' metadata");
    return it->second;
}

const TensorView& exact_tensor(const SafetensorsReader& reader, const std::string& name, const char* dtype,
                               const std::vector<int64_t>& shape) {
    const TensorView& view = reader.tensor(name);
    if (view.dtype != dtype || view.shape != shape)
        fail(MPT_STATUS_CORRUPT_DATA, "checkpoint tensor '" + name + "' has the wrong dtype or shape");
    return view;
}

}  // namespace

void save_checkpoint(Trainer& trainer, const std::string& path) {
    const TrainerSnapshot snapshot = trainer.snapshot();
    Model& model = *trainer.model();
    Backend& backend = model.context()->backend();
    SafetensorsWriter writer;
    std::vector<float> host_block;
    add_model_to_file(model, writer, "checkpoint", host_block);
    writer.set_metadata("mptrain.precision", precision_name(trainer.precision()));
    writer.set_metadata("mptrain.trainer.options", options_json(trainer).dump());
    writer.set_metadata("mptrain.trainer.progress", progress_json(snapshot).dump());

    const Executor& executor = trainer.executor();
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array) {
        std::vector<float> state(static_cast<size_t>(model.parameter_block_elements()));
        backend.copy_to_host(state.data(), executor.optimizer_state(array), state.size() * sizeof(float));
        for (size_t i = 0; i < model.layers().size(); ++i) {
            const DenseLayer& layer = model.layers()[i];
            const std::vector<float> weights = unpad_weights(layer, state.data());
            writer.add(optimizer_tensor_name(array, i, "weight"), "F32", {layer.units, layer.inputs}, weights.data(),
                       weights.size() * sizeof(float));
            writer.add(optimizer_tensor_name(array, i, "bias"), "F32", {layer.units}, state.data() + layer.bias_offset,
                       static_cast<size_t>(layer.units) * sizeof(float));
        }
    }
    writer.add("trainer.shuffle_rng", "U64", {4}, snapshot.shuffle_rng.data(), sizeof(snapshot.shuffle_rng));
    writer.add("trainer.metrics", "F64", {kMetricsCount}, snapshot.metrics, sizeof(snapshot.metrics));
    if (!snapshot.epoch_order.empty())
        writer.add("trainer.epoch_order", "I32", {static_cast<int64_t>(snapshot.epoch_order.size())},
                   snapshot.epoch_order.data(), snapshot.epoch_order.size() * sizeof(int32_t));
    writer.write(path);
}

void load_checkpoint(Trainer& trainer, const std::string& path) {
    const SafetensorsReader reader = SafetensorsReader::open(path, true);
    Model& model = *trainer.model();
    if (metadata_value(reader, "mptrain.kind") != "checkpoint")
        fail(MPT_STATUS_INVALID_ARGUMENT, path + " is a model file, not a training checkpoint (use mpt_model_load)");
    const std::vector<float> masters = read_model_block(reader, model);
    TrainerSnapshot snapshot;
    try {
        const Json options = Json::parse(metadata_value(reader, "mptrain.trainer.options"));
        if (options != options_json(trainer))
            fail(MPT_STATUS_INVALID_ARGUMENT, "the checkpoint was written by a trainer with other options: " +
                                                  options.dump() + " here: " + options_json(trainer).dump());
        const Json progress = Json::parse(metadata_value(reader, "mptrain.trainer.progress"));
        snapshot.state.loss_scale = bits_float(progress.at("loss_scale").get<uint32_t>());
        snapshot.state.found_inf = 0;
        snapshot.state.growth_tracker = progress.at("growth_tracker").get<int64_t>();
        snapshot.state.skipped_steps = progress.at("skipped_steps").get<int64_t>();
        snapshot.state.applied_steps = progress.at("applied_steps").get<int64_t>();
        snapshot.state.steps = progress.at("steps").get<int64_t>();
        snapshot.epochs_completed = progress.at("epochs_completed").get<int64_t>();
        snapshot.steps_into_epoch = progress.at("steps_into_epoch").get<int64_t>();
        snapshot.batch_size = progress.at("batch_size").get<int64_t>();
        snapshot.dataset_rows = progress.at("dataset_rows").get<int64_t>();
        snapshot.shuffle = progress.at("shuffle").get<bool>();
    } catch (const Json::exception& error) {
        fail(MPT_STATUS_CORRUPT_DATA, std::string("the checkpoint's trainer metadata is malformed: ") + error.what());
    }
    const TrainState& state = snapshot.state;
    if (!(state.loss_scale > 0.0f) || state.steps < 0 || state.skipped_steps < 0 || state.applied_steps < 0 ||
        state.growth_tracker < 0 || snapshot.epochs_completed < 0 || snapshot.steps_into_epoch < 0 ||
        snapshot.batch_size < 0 || snapshot.dataset_rows < 0 ||
        (snapshot.steps_into_epoch > 0 && (snapshot.batch_size == 0 ||
                                           snapshot.steps_into_epoch > snapshot.dataset_rows / snapshot.batch_size)))
        fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's progress counters are inconsistent");

    std::memcpy(snapshot.shuffle_rng.data(), exact_tensor(reader, "trainer.shuffle_rng", "U64", {4}).data,
                sizeof(snapshot.shuffle_rng));
    std::memcpy(snapshot.metrics, exact_tensor(reader, "trainer.metrics", "F64", {kMetricsCount}).data,
                sizeof(snapshot.metrics));
    if (snapshot.steps_into_epoch > 0) {
        const TensorView& order = exact_tensor(reader, "trainer.epoch_order", "I32", {snapshot.dataset_rows});
        snapshot.epoch_order.resize(static_cast<size_t>(snapshot.dataset_rows));
        std::memcpy(snapshot.epoch_order.data(), order.data, order.bytes);
        std::vector<int32_t> sorted = snapshot.epoch_order;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < sorted.size(); ++i)
            if (sorted[i] != static_cast<int32_t>(i))
                fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's epoch order is not a permutation of the rows");
    }

    const Executor& executor = trainer.executor();
    std::vector<std::vector<float>> states(static_cast<size_t>(executor.optimizer_state_arrays()));
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array) {
        std::vector<float>& block = states[static_cast<size_t>(array)];
        block.assign(static_cast<size_t>(model.parameter_block_elements()), 0.0f);
        for (size_t i = 0; i < model.layers().size(); ++i) {
            const DenseLayer& layer = model.layers()[i];
            const TensorView& weights =
                exact_tensor(reader, optimizer_tensor_name(array, i, "weight"), "F32", {layer.units, layer.inputs});
            const TensorView& bias = exact_tensor(reader, optimizer_tensor_name(array, i, "bias"), "F32", {layer.units});
            std::vector<float> unpadded(static_cast<size_t>(layer.units * layer.inputs));
            std::memcpy(unpadded.data(), weights.data, weights.bytes);
            pad_weights(layer, unpadded.data(), block.data());
            std::memcpy(block.data() + layer.bias_offset, bias.data, bias.bytes);
        }
    }

    // Everything is validated: apply.
    Backend& backend = model.context()->backend();
    backend.scheduler().synchronize();
    model.write_master_block(masters.data());
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array)
        backend.copy_to_device(executor.optimizer_state(array), states[static_cast<size_t>(array)].data(),
                               states[static_cast<size_t>(array)].size() * sizeof(float));
    trainer.restore(snapshot);
}

void write_rotating_checkpoint(Trainer& trainer, const CheckpointPolicy& policy, int64_t step) {
    namespace fs = std::filesystem;
    char name[64];
    std::snprintf(name, sizeof name, "checkpoint-%012lld.safetensors", static_cast<long long>(step));
    save_checkpoint(trainer, (fs::path(policy.directory) / name).string());
    std::vector<fs::path> existing;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(policy.directory, error)) {
        const std::string file = entry.path().filename().string();
        if (file.size() == std::strlen(name) && file.rfind("checkpoint-", 0) == 0 &&
            file.compare(file.size() - 12, 12, ".safetensors") == 0)
            existing.push_back(entry.path());
    }
    std::sort(existing.begin(), existing.end());
    for (size_t i = 0; i + static_cast<size_t>(policy.keep_last) < existing.size(); ++i) fs::remove(existing[i], error);
}

}  // namespace mpt
