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
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/float_bits.h"
#include "io/atomic_file.h"
#include "io/flat_json.h"
#include "io/json_writer.h"
#include "nn/model_file.h"
#include "nn/option_checks.h"

namespace mpt {

namespace {

// The "lr_schedule" member of the options.
void write_schedule(JsonWriter& json, const LrSchedule& schedule) {
    json.key("lr_schedule").begin_object()
        .key("decay_factor").unsigned_integer(float_bits(schedule.decay_factor))
        .key("decay_steps").integer(schedule.decay_steps)
        .key("schedule").integer(static_cast<int>(schedule.kind))
        .key("warmup_steps").integer(schedule.warmup_steps)
    .end_object();
}

// The options that must match for a resumed run to be the same run. Keys in alphabetical order, as
// files written with nlohmann::json (a sorted map) have them. The base learning rate is not one of
// them: a callback may change it during the run, so it is saved with the progress and restored.
// `precision` and `scaler` as the trainer resolved them.
std::string options_json(const TrainerConfig& config, mpt_precision precision, const LossScalerConfig& scaler) {
    const OptimizerConfig& optimizer = config.optimizer;
    JsonWriter json;
    json.begin_object();
    // Class weights, weight averaging, clipping, label smoothing and centered RMSprop are written only when set, so that files of runs without
    // them are what they were before they existed, and load into trainers without them as before.
    // Class weights are recorded by their count (the model's outputs); their values are the tensor
    // trainer.class_weights, as a JSON array of a wide model's weights would outgrow what the
    // loader parses of the metadata.
    if (!config.loss.class_weights.empty())
        json.key("class_weights").integer(static_cast<int64_t>(config.loss.class_weights.size()));
    if (averages_weights(optimizer))
        json.key("ema_momentum").unsigned_integer(float_bits(optimizer.ema_momentum));
    if (clips_gradients(optimizer))
        json.key("global_clipnorm").unsigned_integer(float_bits(optimizer.global_clipnorm));
    // Huber's delta, for the Huber loss only (other losses read none).
    if (config.loss.kind == LossKind::huber)
        json.key("huber_delta").unsigned_integer(float_bits(config.loss.huber_delta));
    if (config.loss.label_smoothing != 0.0f)
        json.key("label_smoothing").unsigned_integer(float_bits(config.loss.label_smoothing));
    json.key("loss").string(loss_name(config.loss.kind))
        .key("loss_scaler").begin_object()
            .key("backoff_factor").unsigned_integer(float_bits(scaler.backoff_factor))
            .key("growth_factor").unsigned_integer(float_bits(scaler.growth_factor))
            .key("growth_interval").integer(scaler.growth_interval)
            .key("initial_scale").unsigned_integer(float_bits(scaler.initial_scale))
            .key("max_scale").unsigned_integer(float_bits(scaler.max_scale))
            .key("min_scale").unsigned_integer(float_bits(scaler.min_scale))
            .key("mode").integer(static_cast<int>(scaler.mode))
        .end_object();
    // Written only for a schedule, so that files of constant-rate runs are what they were before
    // schedules existed, and load into constant-rate trainers as before.
    if (!is_constant(optimizer.schedule)) write_schedule(json, optimizer.schedule);
    json.key("optimizer").begin_object()
            .key("beta1").unsigned_integer(float_bits(optimizer.beta1))
            .key("beta2").unsigned_integer(float_bits(optimizer.beta2))
            .key("epsilon").unsigned_integer(float_bits(optimizer.epsilon))
            .key("kind").integer(static_cast<int>(optimizer.kind))
            .key("momentum").unsigned_integer(float_bits(optimizer.momentum))
            .key("nesterov").boolean(optimizer.nesterov);
    // RMSprop's rho, written only for RMSprop, so that other optimizers' files are what they were.
    if (optimizer.kind == OptimizerKind::rmsprop) json.key("rho").unsigned_integer(float_bits(optimizer.rho));
    json.key("weight_decay").unsigned_integer(float_bits(optimizer.weight_decay))
        .end_object()
        .key("precision").string(precision_name(precision));
    // Centered RMSprop, written only then (as the options above written only when set).
    if (optimizer.kind == OptimizerKind::rmsprop && optimizer.centered) json.key("rmsprop_centered").boolean(true);
    json.end_object();
    return json.take();
}

std::string options_json(const Trainer& trainer) {
    return options_json(trainer.config(), trainer.precision(), trainer.executor().scaler_config());
}

// `dropout`: the model drops outputs, so its masks' seed is part of the run (written only then).
std::string progress_json(const TrainerSnapshot& snapshot, bool dropout) {
    const TrainState& state = snapshot.state;
    JsonWriter json;
    json.begin_object()
        .key("applied_steps").integer(state.applied_steps)
        .key("batch_size").integer(snapshot.batch_size)
        .key("dataset_rows").integer(snapshot.dataset_rows);
    if (dropout) json.key("dropout_seed").unsigned_integer(snapshot.dropout_seed);
    json.key("epochs_completed").integer(snapshot.epochs_completed)
        .key("growth_tracker").integer(state.growth_tracker)
        .key("learning_rate").unsigned_integer(float_bits(snapshot.learning_rate))
        .key("loss_scale").unsigned_integer(float_bits(state.loss_scale))
        .key("shuffle").boolean(snapshot.shuffle)
        .key("skipped_steps").integer(state.skipped_steps)
        .key("steps").integer(state.steps)
        .key("steps_into_epoch").integer(snapshot.steps_into_epoch)
        .end_object();
    return json.take();
}

std::string optimizer_tensor_prefix(int array) { return "optimizer." + std::to_string(array); }
// The weight averages' tensors (OptimizerConfig::ema_momentum).
constexpr const char* kAveragesPrefix = "averages";

std::string parameter_tensor_name(const std::string& prefix, size_t layer, const char* part) {
    return prefix + ".layers." + std::to_string(layer) + "." + part;
}

// A block in the padded parameter layout (host memory) as one F32 tensor per layer's weights and
// one per its bias, unpadded: "<prefix>.layers.<i>.weight" [units, inputs] and ".bias" [units].
void add_parameter_tensors(SafetensorsWriter& writer, const Model& model, const std::string& prefix,
                           const float* block) {
    for (size_t i = 0; i < model.layers().size(); ++i) {
        const DenseLayer& layer = model.layers()[i];
        const std::vector<float> weights = unpad_weights(layer, block);
        writer.add(parameter_tensor_name(prefix, i, "weight"), "F32", {layer.units, layer.inputs}, weights.data(),
                   weights.size() * sizeof(float));
        writer.add(parameter_tensor_name(prefix, i, "bias"), "F32", {layer.units}, block + layer.bias_offset,
                   static_cast<size_t>(layer.units) * sizeof(float));
    }
}

// ---- options that differ, for the message that refuses a checkpoint ----

bool is_float_option(const std::string& name) {
    static const char* const names[] = {"momentum",      "beta1",         "beta2",     "epsilon",
                                        "weight_decay",  "initial_scale", "growth_factor", "backoff_factor",
                                        "min_scale",     "max_scale",     "decay_factor",  "label_smoothing",
                                        "global_clipnorm", "ema_momentum", "rho", "huber_delta"};
    return std::find_if(std::begin(names), std::end(names), [&](const char* n) { return name == n; }) != std::end(names);
}

// The name an option has in the C API's setters ("kind" and "mode" are the JSON's words for them).
std::string option_name(const std::string& key) {
    if (key == "kind") return "optimizer";
    if (key == "mode") return "loss_scaling";
    if (key == "schedule") return "lr_schedule";
    // The schedule's numbers as mpt_trainer_options_set_lr_schedule names them.
    if (key == "decay_factor") return "lr_schedule factor";
    if (key == "decay_steps" || key == "warmup_steps") return "lr_schedule " + key;
    return key;
}

// An option's value as the C API spells it: floats as numbers (they are stored as bit patterns, so
// the comparison is exact), enums by name.
std::string option_text(const std::string& key, const JsonValue& value) {
    // Every non-negative integer reads as unsigned; the enums and floats are never negative.
    const bool small_integer = value.type == JsonType::unsigned_integer && value.unsigned_integer <= UINT32_MAX;
    if (is_float_option(key) && small_integer) {
        char text[32];
        const auto result =
            std::to_chars(text, text + sizeof text, bits_float(static_cast<uint32_t>(value.unsigned_integer)));
        return std::string(text, result.ptr);
    }
    if (key == "kind" && small_integer) {
        static const char* const optimizers[] = {"sgd", "adam", "adamw", "rmsprop", "lion"};
        if (value.unsigned_integer < std::size(optimizers)) return optimizers[value.unsigned_integer];
    }
    if (key == "schedule" && small_integer) {
        static const char* const schedules[] = {"constant", "linear", "cosine", "step"};
        if (value.unsigned_integer < 4) return schedules[value.unsigned_integer];
    }
    if (key == "mode" && small_integer) {
        switch (static_cast<int64_t>(value.unsigned_integer)) {
            case static_cast<int64_t>(LossScaling::off): return "off";
            case static_cast<int64_t>(LossScaling::fixed): return "static";
            case static_cast<int64_t>(LossScaling::dynamic): return "dynamic";
            default: break;
        }
    }
    return json_value_text(value);  // strings as themselves, other scalars as JSON
}

// "precision mixed-bf16 (this trainer: fp32; ...), momentum 0.9 (this trainer: 0.5)": only the
// options that differ, the precision first (it decides most others), then in the JSON's key order.
// `saved_text` is what `saved` was read from, for a difference in options this version does not know.
std::string option_differences(const FlatJson& saved, const std::string& saved_text, const FlatJson& ours,
                               mpt_precision configured_precision) {
    std::vector<std::string> differences;
    const auto describe = [&](const std::string& key, const JsonValue* saved_value, const JsonValue& our_value) {
        if (saved_value != nullptr && *saved_value == our_value) return;
        std::string text = option_name(key) + " " + (saved_value ? option_text(key, *saved_value) : "(not recorded)") +
                           " (this trainer: " + option_text(key, our_value);
        if (key == "precision" && configured_precision == MPT_PRECISION_AUTO)
            text += "; AUTO resolves per machine: name the precision to resume this checkpoint here";
        differences.push_back(text + ")");
    };
    // Options written only when they differ from their defaults (a schedule, label smoothing,
    // clipping, weight averaging): either side without one compares as the default, so that "cosine" shows against
    // "constant" and 0.1 against 0. A member missing inside a written one is not defaulted: it
    // shows as not recorded.
    JsonWriter defaults_text;
    defaults_text.begin_object()
        .key("ema_momentum").unsigned_integer(float_bits(0.0f))
        .key("global_clipnorm").unsigned_integer(float_bits(0.0f))
        .key("label_smoothing").unsigned_integer(float_bits(0.0f))
        .key("rmsprop_centered").boolean(false);
    write_schedule(defaults_text, LrSchedule{});
    const FlatJson defaults = FlatJson::parse(defaults_text.end_object().take());
    const auto top_level = [](const std::string& pointer) { return pointer.substr(0, pointer.find('/', 1)); };
    const auto find = [&](const FlatJson& options, const std::string& pointer) -> const JsonValue* {
        const JsonValue* value = options.find(pointer);
        return value == nullptr && options.find(top_level(pointer)) == nullptr ? defaults.find(pointer) : value;
    };

    // A member of the saved options, when the saved options are an object that has it.
    const auto saved_member = [&](const std::string& object, const std::string& key) -> const JsonValue* {
        const JsonValue* parent = find(saved, object);
        return parent != nullptr && parent->type == JsonType::object ? find(saved, json_pointer(object, key)) : nullptr;
    };
    std::vector<std::string> keys{"precision"};
    for (const std::string& key : ours.member_names(""))
        if (key != "precision") keys.push_back(key);
    for (const std::string& key : defaults.member_names(""))
        if (ours.find(json_pointer("", key)) == nullptr) keys.push_back(key);
    for (const std::string& key : keys) {
        const std::string item = json_pointer("", key);
        const JsonValue* our_item = find(ours, item);
        if (our_item == nullptr) continue;
        if (our_item->type != JsonType::object) {
            describe(key, saved_member("", key), *our_item);
            continue;
        }
        const JsonValue* saved_item = saved_member("", key);
        const FlatJson& our_source = ours.find(item) != nullptr ? ours : defaults;
        for (const std::string& field : our_source.member_names(item)) {
            describe(field, saved_item != nullptr ? saved_member(item, field) : nullptr,
                     *our_source.find(json_pointer(item, field)));
        }
    }
    if (differences.empty()) differences.push_back("options this version does not know: " + saved_text.substr(0, 300));
    std::string joined;
    for (const std::string& difference : differences) joined += (joined.empty() ? "" : ", ") + difference;
    return joined;
}

// ---- progress that a trainer with this configuration can have reached ----

[[noreturn]] void impossible_progress(const std::string& what) {
    fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's progress is impossible: " + what);
}

// Every restored counter against the others and against the loss scaler the options match. The
// invariants are advance_loss_scaler's (loss_scaler.h) and the trainer's epoch bookkeeping.
void check_progress(const TrainerSnapshot& snapshot, const LossScalerConfig& scaler) {
    const TrainState& state = snapshot.state;
    if (!(std::isfinite(snapshot.learning_rate) && snapshot.learning_rate > 0.0f))
        impossible_progress("learning_rate " + number_text(snapshot.learning_rate) + " (a rate is finite and positive)");
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
    // A bound no run reaches (2^62 steps), which keeps every count and the schedule's arithmetic on
    // them far from overflow.
    if (state.steps > (int64_t{1} << 62))
        impossible_progress("steps " + std::to_string(state.steps) + " (more than 2^62 steps cannot have run)");
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

// The class weights of a file whose options record `count` of them; weights no trainer accepts
// (negative, not finite, all 0) are corrupt data.
std::vector<float> read_class_weights(const SafetensorsReader& reader, int64_t count) {
    const TensorView& view = exact_tensor(reader, "trainer.class_weights", "F32", {count});
    std::vector<float> weights(static_cast<size_t>(count));
    std::memcpy(weights.data(), view.data, weights.size() * sizeof(float));
    for (float& weight : weights) weight = weight == 0.0f ? 0.0f : weight;  // -0 as 0, as the setter takes it
    if (!valid_class_weights(weights.data(), count))
        fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint's class weights are not all finite and >= 0, or all 0");
    return weights;
}

// Up to 8 weights as the C API takes them: "none", "[0.5, 2, 1]", "[1, 1, ..., 300000 in all]".
std::string class_weights_text(const std::vector<float>& weights) {
    if (weights.empty()) return "none";
    constexpr size_t kShown = 8;
    std::string text = "[";
    for (size_t i = 0; i < weights.size() && i < kShown; ++i) text += (i ? ", " : "") + number_text(weights[i]);
    if (weights.size() > kShown) text += ", ... " + std::to_string(weights.size()) + " in all";
    return text + "]";
}

// Empty when the two are the same bits; else "class_weights [...] (this trainer: [...])", with the
// first class that differs when the weights shown do not tell.
std::string class_weights_difference(const std::vector<float>& saved, const std::vector<float>& ours) {
    // (Empty vectors may hold null pointers, which memcmp must not be given even for 0 bytes.)
    if (saved.size() == ours.size() &&
        (saved.empty() || std::memcmp(saved.data(), ours.data(), saved.size() * sizeof(float)) == 0))
        return {};
    const std::string saved_text = class_weights_text(saved), our_text = class_weights_text(ours);
    std::string text = "class_weights " + saved_text + " (this trainer: " + our_text;
    if (saved_text == our_text) {
        size_t i = 0;
        while (std::memcmp(&saved[i], &ours[i], sizeof(float)) == 0) ++i;
        text += "; class " + std::to_string(i) + ": " + number_text(saved[i]) + " against " + number_text(ours[i]);
    }
    return text + ")";
}

// The base rate of the run's next step: in the progress, or among the options in files written
// before the learning rate became the run's (mptrain 0.1.0 until 2026-12-02).
float recorded_learning_rate(const std::optional<JsonValue>& options_rate, const FlatJson& progress) {
    if (!options_rate) return bits_float(progress.uint32("/learning_rate"));
    if (progress.find("/learning_rate") != nullptr)
        throw JsonFormatError("learning_rate is both among the options and in the progress (no mptrain writes both)");
    if (options_rate->type == JsonType::unsigned_integer && options_rate->unsigned_integer <= UINT32_MAX)
        return bits_float(static_cast<uint32_t>(options_rate->unsigned_integer));
    throw JsonFormatError("the options' learning_rate must be a float's bit pattern, not " + json_value_text(*options_rate));
}

// A file's options with -0 read as 0 where the setters take -0 as 0 (mptrain wrote a -0 schedule
// factor before they did), so that such a file compares with, and reads as, options of 0.
void read_negative_zeros_as_zero(FlatJson& options) {
    static const char* const pointers[] = {"/optimizer/momentum", "/optimizer/beta1",       "/optimizer/beta2",
                                           "/optimizer/rho",      "/optimizer/weight_decay", "/lr_schedule/decay_factor",
                                           "/label_smoothing",    "/global_clipnorm",        "/ema_momentum"};
    JsonValue zero;
    zero.type = JsonType::unsigned_integer;
    zero.unsigned_integer = float_bits(0.0f);
    for (const char* pointer : pointers) {
        const JsonValue* value = options.find(pointer);
        if (value != nullptr && value->type == JsonType::unsigned_integer &&
            value->unsigned_integer == float_bits(-0.0f))
            options.replace_scalar(pointer, zero);
    }
}

// The file at `path`, checked whole, when it is a training checkpoint.
SafetensorsReader open_checkpoint(const std::string& path) {
    SafetensorsReader reader = SafetensorsReader::open(path, true);
    check_header_integrity(reader);
    if (metadata_value(reader, "mptrain.kind") != "checkpoint")
        fail(MPT_STATUS_INVALID_ARGUMENT, path + " is a model file, not a training checkpoint (use mpt_model_load)");
    return reader;
}

// add_parameter_tensors' tensors back into a block in the padded parameter layout (gaps and padding 0).
std::vector<float> read_parameter_tensors(const SafetensorsReader& reader, const Model& model, const std::string& prefix) {
    std::vector<float> block(static_cast<size_t>(model.parameter_block_elements()), 0.0f);
    for (size_t i = 0; i < model.layers().size(); ++i) {
        const DenseLayer& layer = model.layers()[i];
        const TensorView& weights =
            exact_tensor(reader, parameter_tensor_name(prefix, i, "weight"), "F32", {layer.units, layer.inputs});
        const TensorView& bias = exact_tensor(reader, parameter_tensor_name(prefix, i, "bias"), "F32", {layer.units});
        std::vector<float> unpadded(static_cast<size_t>(layer.units * layer.inputs));
        std::memcpy(unpadded.data(), weights.data, weights.bytes);
        pad_weights(layer, unpadded.data(), block.data());
        std::memcpy(block.data() + layer.bias_offset, bias.data, bias.bytes);
    }
    return block;
}

}  // namespace

void save_checkpoint(Trainer& trainer, const std::string& path) {
    trainer.require_trained_weights("save a checkpoint");
    const TrainerSnapshot snapshot = trainer.snapshot();
    Model& model = *trainer.model();
    Backend& backend = model.context()->backend();
    SafetensorsWriter writer;
    std::vector<float> host_block;
    add_model_to_file(model, writer, "checkpoint", host_block);
    writer.set_metadata("mptrain.precision", precision_name(trainer.precision()));
    writer.set_metadata("mptrain.trainer.options", options_json(trainer));
    writer.set_metadata("mptrain.trainer.progress", progress_json(snapshot, model.has_dropout()));

    const Executor& executor = trainer.executor();
    std::vector<float> block(static_cast<size_t>(model.parameter_block_elements()));
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array) {
        backend.copy_to_host(block.data(), executor.optimizer_state(array), block.size() * sizeof(float));
        add_parameter_tensors(writer, model, optimizer_tensor_prefix(array), block.data());
    }
    if (executor.averages()) {
        // Before the first applied step the averages are the weights themselves (host_block).
        if (snapshot.state.applied_steps > 0)
            backend.copy_to_host(block.data(), executor.averages(), block.size() * sizeof(float));
        add_parameter_tensors(writer, model, kAveragesPrefix, snapshot.state.applied_steps > 0 ? block.data() : host_block.data());
    }
    writer.add("trainer.shuffle_rng", "U64", {4}, snapshot.shuffle_rng.data(), sizeof(snapshot.shuffle_rng));
    writer.add("trainer.metrics", "F64", {kMetricsCount}, snapshot.metrics, sizeof(snapshot.metrics));
    const std::vector<float>& class_weights = trainer.config().loss.class_weights;
    if (!class_weights.empty())
        writer.add("trainer.class_weights", "F32", {static_cast<int64_t>(class_weights.size())}, class_weights.data(),
                   class_weights.size() * sizeof(float));
    if (!snapshot.epoch_order.empty())
        writer.add("trainer.epoch_order", "I32", {static_cast<int64_t>(snapshot.epoch_order.size())},
                   snapshot.epoch_order.data(), snapshot.epoch_order.size() * sizeof(int32_t));
    writer.write(path);
}

void load_checkpoint(Trainer& trainer, const std::string& path) {
    trainer.require_trained_weights("load a checkpoint");
    const SafetensorsReader reader = open_checkpoint(path);
    Model& model = *trainer.model();
    const ModelState model_state = read_model_state(reader, model);
    TrainerSnapshot snapshot;
    try {
        const std::string& options_text = metadata_value(reader, "mptrain.trainer.options");
        FlatJson options = FlatJson::parse(options_text);
        read_negative_zeros_as_zero(options);
        // Files written before the learning rate became the run's (mptrain 0.1.0 until 2026-12-02)
        // keep it among these options and not with the progress: it is read from there instead.
        const std::optional<JsonValue> options_rate = options.take_scalar_member("/optimizer", "learning_rate");
        // Class weights, recorded only when set: their count is the model's outputs (anything else no
        // mptrain writes), their values the tensor trainer.class_weights. Compared apart from the
        // other options, so that a refusal shows the weights rather than their counts.
        std::vector<float> saved_weights;
        if (const std::optional<JsonValue> count = options.take_scalar_member("", "class_weights")) {
            if (!(count->type == JsonType::unsigned_integer &&
                  count->unsigned_integer == static_cast<uint64_t>(model.output_features())))
                throw JsonFormatError("class_weights " + json_value_text(*count) + " (recorded as the model's " +
                                      std::to_string(model.output_features()) + " outputs)");
            saved_weights = read_class_weights(reader, model.output_features());
        } else if (options.find("/class_weights") != nullptr) {
            throw JsonFormatError("class_weights is not a count");
        }
        const std::string weights_difference =
            class_weights_difference(saved_weights, trainer.config().loss.class_weights);
        // Label smoothing, written only when not 0, is a float's bit pattern in (0, 1): anything else
        // (a JSON float, a string, an explicit 0, NaN's bits) no mptrain writes, so the file is corrupt.
        if (options.find("/label_smoothing") != nullptr) {
            const float smoothing = bits_float(options.uint32("/label_smoothing"));
            if (!(smoothing > 0.0f && smoothing < 1.0f))
                throw JsonFormatError("label_smoothing " + number_text(smoothing) +
                                      " (a recorded smoothing is a float's bits in (0, 1))");
        }
        // Likewise global_clipnorm, written only when clipping: a float's bits, finite and positive.
        if (options.find("/global_clipnorm") != nullptr) {
            const float clipnorm = bits_float(options.uint32("/global_clipnorm"));
            if (!(std::isfinite(clipnorm) && clipnorm > 0.0f))
                throw JsonFormatError("global_clipnorm " + number_text(clipnorm) +
                                      " (a recorded clipnorm is a float's bits, finite and positive)");
        }
        // Likewise huber_delta, written only for the Huber loss: a float's bits, finite and positive.
        if (options.find("/huber_delta") != nullptr) {
            const float delta = bits_float(options.uint32("/huber_delta"));
            if (!valid_huber_delta(delta))
                throw JsonFormatError("huber_delta " + number_text(delta) +
                                      " (a recorded delta is a float's bits, finite and positive)");
        }
        // Likewise ema_momentum, written only when averaging: a float's bits in (0, 1).
        if (options.find("/ema_momentum") != nullptr) {
            const float momentum = bits_float(options.uint32("/ema_momentum"));
            if (!(momentum > 0.0f && momentum < 1.0f))
                throw JsonFormatError("ema_momentum " + number_text(momentum) +
                                      " (a recorded momentum is a float's bits in (0, 1))");
        }
        // Likewise rmsprop_centered, written only when true, and only for RMSprop: under another
        // optimizer no mptrain records it, and its arrays would not be the ones the file holds.
        if (const JsonValue* centered = options.find("/rmsprop_centered")) {
            if (!(centered->type == JsonType::boolean && centered->boolean))
                throw JsonFormatError("rmsprop_centered " + json_value_text(*centered) +
                                      " (recorded only as true, for a centered RMSprop)");
            const int64_t kind = options.int64("/optimizer/kind");
            if (kind != static_cast<int64_t>(OptimizerKind::rmsprop))
                throw JsonFormatError("rmsprop_centered recorded for optimizer kind " + std::to_string(kind) +
                                      " (recorded only for RMSprop, kind " +
                                      std::to_string(static_cast<int>(OptimizerKind::rmsprop)) + ")");
        }
        // Ours read back from the text we would write, so that both sides compare alike.
        FlatJson our_options = FlatJson::parse(options_json(trainer));
        our_options.take_scalar_member("", "class_weights");
        if (options != our_options || !weights_difference.empty()) {
            std::string differences;
            if (options != our_options)
                differences = option_differences(options, options_text, our_options, trainer.config().precision);
            if (!weights_difference.empty()) differences += (differences.empty() ? "" : ", ") + weights_difference;
            fail(MPT_STATUS_INVALID_ARGUMENT, "the checkpoint was written by a trainer with other options: " + differences);
        }
        const FlatJson progress = FlatJson::parse(metadata_value(reader, "mptrain.trainer.progress"));
        progress.require_object("");
        snapshot.state.loss_scale = bits_float(progress.uint32("/loss_scale"));
        snapshot.learning_rate = recorded_learning_rate(options_rate, progress);
        snapshot.state.found_inf = 0;
        snapshot.state.gradient_norm = NAN;  // an observation of the last step, not kept
        snapshot.state.clip_factor = 1.0f;
        snapshot.state.growth_tracker = progress.int64("/growth_tracker");
        snapshot.state.skipped_steps = progress.int64("/skipped_steps");
        snapshot.state.applied_steps = progress.int64("/applied_steps");
        snapshot.state.steps = progress.int64("/steps");
        snapshot.epochs_completed = progress.int64("/epochs_completed");
        snapshot.steps_into_epoch = progress.int64("/steps_into_epoch");
        snapshot.batch_size = progress.int64("/batch_size");
        snapshot.dataset_rows = progress.int64("/dataset_rows");
        snapshot.shuffle = progress.boolean("/shuffle");
        // The masks' seed, recorded exactly when the model drops outputs (its architecture, which
        // read_model_state found equal to ours, says whether it does).
        const JsonValue* dropout_seed = progress.find("/dropout_seed");
        if (model.has_dropout()) {
            if (dropout_seed == nullptr || dropout_seed->type != JsonType::unsigned_integer)
                throw JsonFormatError("the model has dropout, but the progress has no dropout_seed (an unsigned integer)");
            snapshot.dropout_seed = dropout_seed->unsigned_integer;
        } else if (dropout_seed != nullptr) {
            throw JsonFormatError("dropout_seed for a model without dropout (no mptrain writes it)");
        } else {
            snapshot.dropout_seed = trainer.dropout_seed();
        }
    } catch (const JsonFormatError& error) {
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
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array)
        states[static_cast<size_t>(array)] = read_parameter_tensors(reader, model, optimizer_tensor_prefix(array));
    std::vector<float> averages;
    if (executor.averages()) averages = read_parameter_tensors(reader, model, kAveragesPrefix);
    // Optimizer state and averages are exactly the arrays these options keep: any other such tensor
    // (a state array or averages the options have none of, a layer the model lacks) no mptrain writes.
    std::vector<std::string> prefixes;
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array)
        prefixes.push_back(optimizer_tensor_prefix(array));
    if (executor.averages()) prefixes.push_back(kAveragesPrefix);
    for (const auto& tensor : reader.tensors()) {
        const std::string& name = tensor.first;
        if (name.compare(0, 10, "optimizer.") != 0 && name.compare(0, 9, "averages.") != 0) continue;
        bool expected = false;
        for (const std::string& prefix : prefixes)
            for (size_t i = 0; i < model.layers().size() && !expected; ++i)
                expected = name == parameter_tensor_name(prefix, i, "weight") || name == parameter_tensor_name(prefix, i, "bias");
        if (!expected)
            fail(MPT_STATUS_CORRUPT_DATA, "the checkpoint holds " + name + ", which a trainer with its options and "
                                          "this architecture does not keep");
    }

    // Everything is validated: apply.
    Backend& backend = model.context()->backend();
    backend.scheduler().synchronize();
    model_state.apply_to(model);
    for (int array = 0; array < executor.optimizer_state_arrays(); ++array)
        backend.copy_to_device(executor.optimizer_state(array), states[static_cast<size_t>(array)].data(),
                               states[static_cast<size_t>(array)].size() * sizeof(float));
    if (executor.averages())
        backend.copy_to_device(executor.averages(), averages.data(), averages.size() * sizeof(float));
    trainer.restore(snapshot);
}

TrainerConfig read_checkpoint_options(const std::string& path) {
    const SafetensorsReader reader = open_checkpoint(path);
    check_version(reader);
    TrainerConfig config;
    try {
        FlatJson options = FlatJson::parse(metadata_value(reader, "mptrain.trainer.options"));
        read_negative_zeros_as_zero(options);
        const std::optional<JsonValue> options_rate = options.take_scalar_member("/optimizer", "learning_rate");
        const FlatJson progress = FlatJson::parse(metadata_value(reader, "mptrain.trainer.progress"));
        const auto real = [&options](const std::string& pointer) { return bits_float(options.uint32(pointer)); };
        const auto optional_real = [&](const std::string& pointer, float otherwise) {
            return options.find(pointer) != nullptr ? real(pointer) : otherwise;
        };
        // An enumerator by the name or number the file gives it: one the writer could have written.
        const auto enumerator = [](int64_t value, int64_t first, int64_t last, const char* what) {
            if (value < first || value > last) throw JsonFormatError(std::string(what) + " " + std::to_string(value));
            return value;
        };

        const std::string& precision = options.string("/precision");
        config.precision = MPT_PRECISION_AUTO;  // never recorded: the precision run is
        for (mpt_precision known : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16})
            if (precision == precision_name(known)) config.precision = known;
        if (config.precision == MPT_PRECISION_AUTO) throw JsonFormatError("precision " + precision);
        const std::string& loss = options.string("/loss");
        bool loss_known = false;
        for (int kind = 0; kind <= static_cast<int>(LossKind::huber) && !loss_known; ++kind) {
            config.loss.kind = static_cast<LossKind>(kind);
            loss_known = loss == loss_name(config.loss.kind);
        }
        if (!loss_known) throw JsonFormatError("loss " + loss);
        config.loss.huber_delta = optional_real("/huber_delta", config.loss.huber_delta);
        config.loss.label_smoothing = optional_real("/label_smoothing", 0.0f);
        if (const std::optional<JsonValue> count = options.take_scalar_member("", "class_weights")) {
            if (!(count->type == JsonType::unsigned_integer && count->unsigned_integer >= 1 &&
                  count->unsigned_integer <= static_cast<uint64_t>(kMaxFeatures)))
                throw JsonFormatError("class_weights " + json_value_text(*count) + " (a count of outputs)");
            config.loss.class_weights = read_class_weights(reader, static_cast<int64_t>(count->unsigned_integer));
        }

        OptimizerConfig& optimizer = config.optimizer;
        optimizer.kind = static_cast<OptimizerKind>(enumerator(options.int64("/optimizer/kind"), 0,
                                                               static_cast<int64_t>(OptimizerKind::lion), "optimizer kind"));
        optimizer.learning_rate = recorded_learning_rate(options_rate, progress);
        optimizer.momentum = real("/optimizer/momentum");
        optimizer.nesterov = options.boolean("/optimizer/nesterov");
        optimizer.beta1 = real("/optimizer/beta1");
        optimizer.beta2 = real("/optimizer/beta2");
        optimizer.epsilon = real("/optimizer/epsilon");
        optimizer.rho = optional_real("/optimizer/rho", optimizer.rho);
        optimizer.centered = options.find("/rmsprop_centered") != nullptr && options.boolean("/rmsprop_centered");
        optimizer.weight_decay = real("/optimizer/weight_decay");
        optimizer.global_clipnorm = optional_real("/global_clipnorm", 0.0f);
        optimizer.ema_momentum = optional_real("/ema_momentum", 0.0f);
        if (options.find("/lr_schedule") != nullptr) {
            optimizer.schedule.kind = static_cast<LrScheduleKind>(enumerator(
                options.int64("/lr_schedule/schedule"), 0, static_cast<int64_t>(LrScheduleKind::step), "lr_schedule"));
            optimizer.schedule.warmup_steps = options.int64("/lr_schedule/warmup_steps");
            optimizer.schedule.decay_steps = options.int64("/lr_schedule/decay_steps");
            optimizer.schedule.decay_factor = real("/lr_schedule/decay_factor");
        }

        config.scaler.mode = static_cast<LossScaling>(
            enumerator(options.int64("/loss_scaler/mode"), static_cast<int64_t>(LossScaling::off),
                       static_cast<int64_t>(LossScaling::dynamic), "loss scaler mode"));
        config.loss_scaling = config.scaler.mode == LossScaling::off     ? MPT_LOSS_SCALING_OFF
                              : config.scaler.mode == LossScaling::fixed ? MPT_LOSS_SCALING_STATIC
                                                                         : MPT_LOSS_SCALING_DYNAMIC;
        config.scaler.initial_scale = real("/loss_scaler/initial_scale");
        config.scaler.growth_factor = real("/loss_scaler/growth_factor");
        config.scaler.backoff_factor = real("/loss_scaler/backoff_factor");
        config.scaler.growth_interval = options.int64("/loss_scaler/growth_interval");
        config.scaler.min_scale = real("/loss_scaler/min_scale");
        config.scaler.max_scale = real("/loss_scaler/max_scale");

        // These options written again must be the file's, member for member: a member this version
        // does not read, or one written where no trainer writes it, is not an option it can give.
        FlatJson written = FlatJson::parse(options_json(config, config.precision, config.scaler));
        written.take_scalar_member("", "class_weights");
        if (written != options) throw JsonFormatError("options this version does not record so");
    } catch (const JsonFormatError& error) {
        fail(MPT_STATUS_CORRUPT_DATA, std::string("the checkpoint's trainer options are malformed: ") + error.what());
    }
    try {
        check_trainer_config(config);
    } catch (const Error& error) {
        fail(MPT_STATUS_CORRUPT_DATA, std::string("the checkpoint records options no trainer takes: ") + error.what());
    }
    return config;
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
