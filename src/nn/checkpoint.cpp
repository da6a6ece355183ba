// See checkpoint.h. Floats in the JSON metadata are stored as their bit patterns, so restoring and
// comparing them is exact.
#include "nn/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/float_bits.h"
#include "io/atomic_file.h"
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

// ---- options that differ, for the message that refuses a checkpoint ----

bool is_float_option(const std::string& name) {
    static const char* const names[] = {"learning_rate", "momentum",      "beta1",          "beta2",
                                        "epsilon",       "weight_decay",  "initial_scale",  "growth_factor",
                                        "backoff_factor", "min_scale",    "max_scale"};
    return std::find_if(std::begin(names), std::end(names), [&](const char* n) { return name == n; }) != std::end(names);
}

// The name an option has in the C API's setters ("kind" and "mode" are the JSON's words for them).
std::string option_name(const std::string& key) {
    if (key == "kind") return "optimizer";
    if (key == "mode") return "loss_scaling";
    return key;
}

// An option's value as the C API spells it: floats as numbers (they are stored as bit patterns, so
// the comparison is exact), enums by name.
std::string option_text(const std::string& key, const Json& value) {
    if (is_float_option(key) && value.is_number_unsigned() && value.get<uint64_t>() <= UINT32_MAX) {
        char text[32];
        const auto result = std::to_chars(text, text + sizeof text, bits_float(value.get<uint32_t>()));
        return std::string(text, result.ptr);
    }
    if (key == "kind" && value.is_number_integer()) {
        static const char* const optimizers[] = {"sgd", "adam", "adamw"};
        const int64_t kind = value.get<int64_t>();
        if (kind >= 0 && kind < 3) return optimizers[kind];
    }
    if (key == "mode" && value.is_number_integer()) {
        switch (value.get<int64_t>()) {
            case static_cast<int64_t>(LossScaling::off): return "off";
            case static_cast<int64_t>(LossScaling::fixed): return "static";
            case static_cast<int64_t>(LossScaling::dynamic): return "dynamic";
            default: break;
        }
    }
    if (value.is_string()) return value.get<std::string>();
    return value.dump();
}

// "precision mixed-bf16 (this trainer: fp32; ...), learning_rate 0.01 (this trainer: 0.05)": only the
// options that differ, the precision first (it decides most others), then in the JSON's key order.
std::string option_differences(const Json& saved, const Json& ours, mpt_precision configured_precision) {
    std::vector<std::string> differences;
    const auto describe = [&](const std::string& key, const Json* saved_value, const Json& our_value) {
        if (saved_value != nullptr && *saved_value == our_value) return;
        std::string text = option_name(key) + " " + (saved_value ? option_text(key, *saved_value) : "(not recorded)") +
                           " (this trainer: " + option_text(key, our_value);
        if (key == "precision" && configured_precision == MPT_PRECISION_AUTO)
            text += "; AUTO resolves per machine: name the precision to resume this checkpoint here";
        differences.push_back(text + ")");
    };
    std::vector<std::string> keys{"precision"};
    for (auto item = ours.begin(); item != ours.end(); ++item)
        if (item.key() != "precision") keys.push_back(item.key());
    for (const std::string& key : keys) {
        if (!ours.contains(key)) continue;
        const auto item = ours.find(key);
        const Json* saved_item = saved.is_object() && saved.contains(item.key()) ? &saved.at(item.key()) : nullptr;
        if (!item.value().is_object()) {
            describe(item.key(), saved_item, item.value());
            continue;
        }
        for (auto field = item.value().begin(); field != item.value().end(); ++field) {
            const Json* saved_field = saved_item != nullptr && saved_item->is_object() && saved_item->contains(field.key())
                                          ? &saved_item->at(field.key())
                                          : nullptr;
            describe(field.key(), saved_field, field.value());
        }
    }
    if (differences.empty()) differences.push_back("options this version does not know: " + saved.dump().substr(0, 300));
    std::string joined;
    for (const std::string& difference : differences) joined += (joined.empty() ? "" : ", ") + difference;
    return joined;
}

// ---- progress that a trainer with this configuration can have reached ----

[[noreturn]] void impossible_progress(const std::string& what) {
    fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's progress is impossible: " + what);
}

std::string number_text(float value) {
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, value);
    return std::string(text, result.ptr);
}

// Every restored counter against the others and against the loss scaler the options match. The
// invariants are advance_loss_scaler's (loss_scaler.h) and the trainer's epoch bookkeeping.
void check_progress(const TrainerSnapshot& snapshot, const LossScalerConfig& scaler) {
    const TrainState& state = snapshot.state;
    const float scale = state.loss_scale;
    switch (scaler.mode) {
        case LossScaling::off:
            if (scale != 1.0f) impossible_progress("loss_scale " + number_text(scale) + " with loss scaling off (it stays 1)");
            break;
        case LossScaling::fixed:
            if (scale != scaler.initial_scale)
                impossible_progress("loss_scale " + number_text(scale) + " with static loss scaling at " +
                                    number_text(scaler.initial_scale));
            break;
        case LossScaling::dynamic: {
            // It starts at initial_scale, backs off to no less than min_scale and grows to no more than
            // max_scale, so it stays between the smaller and the larger of each pair.
            const float lowest = std::min(scaler.min_scale, scaler.initial_scale);
            const float highest = std::max(scaler.max_scale, scaler.initial_scale);
            if (!std::isfinite(scale) || !(scale >= lowest && scale <= highest))
                impossible_progress("loss_scale " + number_text(scale) + " outside the dynamic loss scaler's range [" +
                                    number_text(lowest) + ", " + number_text(highest) + "]");
            break;
        }
    }
    if (scaler.mode == LossScaling::dynamic) {
        if (state.growth_tracker < 0 || state.growth_tracker >= scaler.growth_interval)
            impossible_progress("growth_tracker " + std::to_string(state.growth_tracker) + " outside [0, growth_interval " +
                                std::to_string(scaler.growth_interval) + ")");
    } else if (state.growth_tracker != 0) {
        impossible_progress("growth_tracker " + std::to_string(state.growth_tracker) +
                            " without dynamic loss scaling (it stays 0)");
    }
    if (state.steps < 0 || state.applied_steps < 0 || state.skipped_steps < 0 || state.applied_steps > state.steps ||
        state.steps - state.applied_steps != state.skipped_steps)
        impossible_progress("applied_steps " + std::to_string(state.applied_steps) + " + skipped_steps " +
                            std::to_string(state.skipped_steps) + " is not steps " + std::to_string(state.steps) +
                            " (every step is applied or skipped)");
    // Every completed epoch took at least one step, and so did each step into the current one.
    if (snapshot.epochs_completed < 0 || snapshot.steps_into_epoch < 0 || snapshot.epochs_completed > state.steps ||
        snapshot.steps_into_epoch > state.steps - snapshot.epochs_completed)
        impossible_progress("epochs_completed " + std::to_string(snapshot.epochs_completed) + " and steps_into_epoch " +
                            std::to_string(snapshot.steps_into_epoch) + " need more steps than the " +
                            std::to_string(state.steps) + " taken");
    if (snapshot.batch_size < 0 || (state.steps > 0 && snapshot.batch_size == 0))
        impossible_progress("batch_size " + std::to_string(snapshot.batch_size) + " after " + std::to_string(state.steps) +
                            " steps");
    if (snapshot.dataset_rows < 0 || (snapshot.epochs_completed > 0 && snapshot.dataset_rows == 0))
        impossible_progress("dataset_rows " + std::to_string(snapshot.dataset_rows) + " after " +
                            std::to_string(snapshot.epochs_completed) + " epochs");
    // An open epoch has a step left: one whose steps have all run is saved as booked (Trainer::snapshot).
    if (snapshot.steps_into_epoch > 0 &&
        (snapshot.batch_size == 0 || snapshot.steps_into_epoch >= snapshot.dataset_rows / snapshot.batch_size))
        impossible_progress("steps_into_epoch " + std::to_string(snapshot.steps_into_epoch) + " in an epoch of " +
                            std::to_string(snapshot.dataset_rows) + " dataset_rows at batch_size " +
                            std::to_string(snapshot.batch_size));
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
    check_header_integrity(reader);
    Model& model = *trainer.model();
    if (metadata_value(reader, "mptrain.kind") != "checkpoint")
        fail(MPT_STATUS_INVALID_ARGUMENT, path + " is a model file, not a training checkpoint (use mpt_model_load)");
    const std::vector<float> masters = read_model_block(reader, model);
    TrainerSnapshot snapshot;
    try {
        const Json options = Json::parse(metadata_value(reader, "mptrain.trainer.options"));
        const Json our_options = options_json(trainer);
        if (options != our_options)
            fail(MPT_STATUS_INVALID_ARGUMENT, "the checkpoint was written by a trainer with other options: " +
                                                  option_differences(options, our_options, trainer.config().precision));
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
    check_progress(snapshot, trainer.executor().scaler_config());

    std::memcpy(snapshot.shuffle_rng.data(), exact_tensor(reader, "trainer.shuffle_rng", "U64", {4}).data,
                sizeof(snapshot.shuffle_rng));
    if (std::all_of(snapshot.shuffle_rng.begin(), snapshot.shuffle_rng.end(), [](uint64_t word) { return word == 0; }))
        fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's shuffle generator state is all zeros, which xoshiro never reaches");
    std::memcpy(snapshot.metrics, exact_tensor(reader, "trainer.metrics", "F64", {kMetricsCount}).data,
                sizeof(snapshot.metrics));
    if (snapshot.steps_into_epoch > 0) {
        const TensorView& order = reader.tensor("trainer.epoch_order");
        if (order.dtype != "I32" || order.shape != std::vector<int64_t>{snapshot.dataset_rows})
            fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's epoch order is not " + std::to_string(snapshot.dataset_rows) +
                                              " I32 rows, as its progress's dataset_rows says");
        snapshot.epoch_order.resize(static_cast<size_t>(snapshot.dataset_rows));
        std::memcpy(snapshot.epoch_order.data(), order.data, order.bytes);
        std::vector<int32_t> sorted = snapshot.epoch_order;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < sorted.size(); ++i)
            if (sorted[i] != static_cast<int32_t>(i))
                fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's epoch order is not a permutation of the rows");
        if (!snapshot.shuffle && snapshot.epoch_order != sorted)  // an unshuffled epoch takes the rows in order
            fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's epoch order is shuffled, but its progress says shuffle false");
    } else if (reader.has("trainer.epoch_order")) {
        fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint holds an epoch order, but its progress says it is between epochs");
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
    char name[64];
    std::snprintf(name, sizeof name, "checkpoint-%012lld.safetensors", static_cast<long long>(step));
    const std::string directory = policy.directory.empty() || policy.directory.back() == '/' ? policy.directory
                                                                                            : policy.directory + '/';
    save_checkpoint(trainer, directory + name);
    std::vector<std::string> existing;
    try {
        existing = list_directory(policy.directory);
    } catch (const Error&) {
        return;  // the new checkpoint is written; older ones stay until a listing works
    }
    existing.erase(std::remove_if(existing.begin(), existing.end(),
                                  [&](const std::string& file) {
                                      return !(file.size() == std::strlen(name) && file.rfind("checkpoint-", 0) == 0 &&
                                               file.compare(file.size() - 12, 12, ".safetensors") == 0);
                                  }),
                   existing.end());
    std::sort(existing.begin(), existing.end());
    for (size_t i = 0; i + static_cast<size_t>(policy.keep_last) < existing.size(); ++i)
        ::unlink((directory + existing[i]).c_str());
}

}  // namespace mpt
