// See model_file.h. Every check happens before anything is built, so a bad file never leaves a
// half-made model behind.
#include "nn/model_file.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "core/error.h"
#include "core/float_bits.h"
#include "core/version.h"
#include "io/flat_json.h"
#include "io/json_writer.h"

namespace mpt {

namespace {

const char* dtype_override_name(const std::optional<DType>& dtype) { return dtype ? dtype_name(*dtype) : "default"; }

std::optional<DType> parse_dtype_override(const std::string& name) {
    if (name == "default") return std::nullopt;
    if (name == "fp32") return DType::fp32;
    if (name == "fp16") return DType::fp16;
    if (name == "bf16") return DType::bf16;
    fail(MPT_STATUS_CORRUPT_DATA, "unknown layer dtype '" + name + "' in the architecture");
}

Activation parse_activation(const std::string& name) {
    for (Activation activation : kActivations)
        if (name == activation_name(activation)) return activation;
    fail(MPT_STATUS_CORRUPT_DATA, "unknown activation '" + name + "' in the architecture");
}

// A layer's dropout: absent for none, else a float's bits in (0, 1) (anything else no mptrain writes).
float parse_dropout(const FlatJson& json, const std::string& pointer) {
    if (json.find(pointer) == nullptr) return 0.0f;
    const float rate = bits_float(json.uint32(pointer));
    if (!(rate > 0.0f && rate < 1.0f))
        throw JsonFormatError("dropout " + number_text(rate) + " (a recorded rate is a float's bits in (0, 1))");
    return rate;
}

// A layer's trainable flag: absent for a trainable layer, else false (true is not written).
bool parse_trainable(const FlatJson& json, const std::string& pointer) {
    if (json.find(pointer) == nullptr) return true;
    if (json.boolean(pointer)) throw JsonFormatError("trainable true (only a frozen layer records it, as false)");
    return false;
}

// Keys in alphabetical order, as files written with nlohmann::json (a sorted map) have them.
std::string architecture_json(const Model& model) {
    JsonWriter json;
    json.begin_object();
    // Written only when set, as a layer's dropout: files without it stay as they were.
    if (model.input_dropout() > 0.0f) json.key("input_dropout").unsigned_integer(float_bits(model.input_dropout()));
    json.key("input_features").integer(model.input_features());
    // Written only when set: its values are the tensors input.mean and input.stddev.
    if (model.input_standardization()) json.key("input_standardization").boolean(true);
    json.key("layers").begin_array();
    for (const DenseLayer& layer : model.layers()) {
        json.begin_object().key("activation").string(activation_name(layer.activation));
        // Written only when set (a float's bits), so that files without dropout stay as they were.
        if (layer.dropout > 0.0f) json.key("dropout").unsigned_integer(float_bits(layer.dropout));
        json.key("dtype").string(dtype_override_name(layer.dtype_override));
        // Written only for a frozen layer, so that other files stay as they were.
        if (!layer.trainable) json.key("trainable").boolean(false);
        json.key("type").string("dense")
            .key("units").integer(layer.units)
            .end_object();
    }
    return json.end_array().end_object().take();
}

const std::string& metadata_value(const SafetensorsReader& reader, const std::string& key) {
    auto it = reader.metadata().find(key);
    if (it == reader.metadata().end()) fail(MPT_STATUS_CORRUPT_DATA, "the file has no '" + key + "' metadata: not an mptrain file");
    return it->second;
}

}  // namespace

void check_header_integrity(const SafetensorsReader& reader) {
    if (reader.header_checksummed()) return;
    // Files from before the header checksum (mptrain 0.1.0 wrote them too, so the version cannot tell
    // them apart) still load: they are users' saved work. Their tensors have checksums (the reader
    // requires them and has checked them) and their metadata keys are exactly these, so a flipped
    // bit in the header checksum's own key, which makes a new file look old, leaves a key outside them.
    static const char* const legacy_keys[] = {"mptrain.version",         "mptrain.kind",
                                              "mptrain.architecture",    "mptrain.precision",
                                              "mptrain.trainer.options", "mptrain.trainer.progress"};
    const std::string tensor_checksum_prefix = safetensors_checksum_key("");
    for (const auto& [key, value] : reader.metadata()) {
        if (key.compare(0, tensor_checksum_prefix.size(), tensor_checksum_prefix) == 0) continue;  // checked
        if (std::find(std::begin(legacy_keys), std::end(legacy_keys), key) == std::end(legacy_keys))
            fail(MPT_STATUS_CORRUPT_DATA, "the file's header has no checksum and an entry '" + key.substr(0, 80) +
                                              "' that mptrain does not write: the header is damaged");
    }
}

void check_version(const SafetensorsReader& reader) {
    const std::string& version = metadata_value(reader, "mptrain.version");
    const std::string major = version.substr(0, version.find('.'));
    if (major != std::to_string(MPT_VERSION_MAJOR))
        fail(MPT_STATUS_UNSUPPORTED, "the file was written by mptrain " + version + "; this is mptrain " + kVersionString +
                                         " (major versions must match)");
}

namespace {

struct Architecture {
    int64_t input_features;
    float input_dropout;
    bool input_standardization;
    struct Layer {
        int64_t units;
        Activation activation;
        std::optional<DType> dtype;
        float dropout;
        bool trainable;
    };
    std::vector<Layer> layers;
};

Architecture parse_architecture(const SafetensorsReader& reader) {
    Architecture architecture;
    try {
        const FlatJson json = FlatJson::parse(metadata_value(reader, "mptrain.architecture"));
        json.require_object("");
        architecture.input_features = json.int64("/input_features");
        architecture.input_dropout = parse_dropout(json, "/input_dropout");
        architecture.input_standardization = json.find("/input_standardization") != nullptr;
        if (architecture.input_standardization && !json.boolean("/input_standardization"))
            throw JsonFormatError("input_standardization false (only a model that standardizes records it, as true)");
        const size_t layers = json.array_size("/layers");
        for (size_t i = 0; i < layers; ++i) {
            const std::string layer = json_pointer("/layers", i);
            json.require_object(layer);
            if (json.string(json_pointer(layer, "type")) != "dense")
                fail(MPT_STATUS_CORRUPT_DATA, "unknown layer type in the architecture");
            architecture.layers.push_back({json.int64(json_pointer(layer, "units")),
                                           parse_activation(json.string(json_pointer(layer, "activation"))),
                                           parse_dtype_override(json.string(json_pointer(layer, "dtype"))),
                                           parse_dropout(json, json_pointer(layer, "dropout")),
                                           parse_trainable(json, json_pointer(layer, "trainable"))});
        }
    } catch (const JsonFormatError& error) {
        fail(MPT_STATUS_CORRUPT_DATA, std::string("the architecture metadata is malformed: ") + error.what());
    }
    if (architecture.input_features <= 0 || architecture.layers.empty())
        fail(MPT_STATUS_CORRUPT_DATA, "the architecture has no inputs or no layers");
    return architecture;
}

const TensorView& f32_tensor(const SafetensorsReader& reader, const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView& view = reader.tensor(name);
    if (view.dtype != "F32" || view.shape != shape)
        fail(MPT_STATUS_CORRUPT_DATA, "tensor '" + name + "' has the wrong dtype or shape for this architecture");
    return view;
}

// The file's input.mean and input.stddev, checked as mpt_model_set_input_standardization checks
// them, when the model standardizes (read_model_state has compared that with the file); else null,
// and a file holding either without recording a standardization is corrupt (read as plain, the
// model would predict from unstandardized inputs).
std::shared_ptr<const FeatureStandardization> read_input_standardization(const SafetensorsReader& reader,
                                                                         const Model& model) {
    if (!model.input_standardization()) {
        for (const char* name : {"input.mean", "input.stddev"})
            if (reader.tensors().count(name) != 0)
                fail(MPT_STATUS_CORRUPT_DATA, std::string("the file holds ") + name +
                                                  " but its architecture records no input standardization");
        return nullptr;
    }
    const int64_t features = model.input_features();
    const TensorView& mean = f32_tensor(reader, "input.mean", {features});
    const TensorView& stddev = f32_tensor(reader, "input.stddev", {features});
    std::vector<float> means(static_cast<size_t>(features)), deviations(static_cast<size_t>(features));
    std::memcpy(means.data(), mean.data, mean.bytes);
    std::memcpy(deviations.data(), stddev.data, stddev.bytes);
    std::shared_ptr<const FeatureStandardization> standardization;
    try {
        standardization = FeatureStandardization::make(model.context(), means.data(), deviations.data(), features,
                                                       features, "the file's input standardization");
    } catch (const Error& error) {
        fail(MPT_STATUS_CORRUPT_DATA, error.what());
    }
    // Checked here, before anything is applied: a fit's batches are gathered with the model's.
    if (model.being_fitted() && !standardization->same_values(*model.input_standardization()))
        fail(MPT_STATUS_INVALID_STATE, "the file's input standardization differs from the model's, which cannot "
                                       "change while a trainer fits the model");
    return standardization;
}

}  // namespace

std::vector<float> unpad_weights(const DenseLayer& layer, const float* block) {
    std::vector<float> unpadded(static_cast<size_t>(layer.units * layer.inputs));
    for (int64_t unit = 0; unit < layer.units; ++unit)
        std::memcpy(unpadded.data() + unit * layer.inputs, block + layer.weight_offset + unit * layer.padded_inputs,
                    static_cast<size_t>(layer.inputs) * sizeof(float));
    return unpadded;
}

void pad_weights(const DenseLayer& layer, const float* unpadded, float* block) {
    for (int64_t unit = 0; unit < layer.units; ++unit)
        std::memcpy(block + layer.weight_offset + unit * layer.padded_inputs, unpadded + unit * layer.inputs,
                    static_cast<size_t>(layer.inputs) * sizeof(float));
}

void add_model_to_file(Model& model, SafetensorsWriter& writer, const char* kind, std::vector<float>& host_block) {
    model.build();
    writer.set_metadata("mptrain.version", kVersionString);
    writer.set_metadata("mptrain.kind", kind);
    writer.set_metadata("mptrain.architecture", architecture_json(model));
    host_block.assign(static_cast<size_t>(model.parameter_block_elements()), 0.0f);
    model.read_master_block(host_block.data());
    for (size_t i = 0; i < model.layers().size(); ++i) {
        const DenseLayer& layer = model.layers()[i];
        const std::string prefix = "layers." + std::to_string(i);
        const std::vector<float> weights = unpad_weights(layer, host_block.data());
        writer.add(prefix + ".weight", "F32", {layer.units, layer.inputs}, weights.data(), weights.size() * sizeof(float));
        writer.add(prefix + ".bias", "F32", {layer.units}, host_block.data() + layer.bias_offset,
                   static_cast<size_t>(layer.units) * sizeof(float));
    }
    if (const FeatureStandardization* standardization = model.input_standardization().get()) {
        const int64_t features = standardization->features();
        writer.add("input.mean", "F32", {features}, standardization->mean().data(), static_cast<size_t>(features) * sizeof(float));
        writer.add("input.stddev", "F32", {features}, standardization->stddev().data(),
                   static_cast<size_t>(features) * sizeof(float));
    }
}

ModelState read_model_state(const SafetensorsReader& reader, const Model& model) {
    check_version(reader);
    const Architecture architecture = parse_architecture(reader);
    // Which layers train is no part of the architecture: a checkpoint loads whatever the model's
    // flags are now (a run that froze layers and then let them train resumes from either phase).
    // Whether the model standardizes its inputs is; the file's means and deviations are state.
    bool same = architecture.input_features == model.input_features() &&
                architecture.input_dropout == model.input_dropout() &&
                architecture.input_standardization == (model.input_standardization() != nullptr) &&
                architecture.layers.size() == model.layers().size();
    for (size_t i = 0; same && i < architecture.layers.size(); ++i) {
        const DenseLayer& layer = model.layers()[i];
        same = architecture.layers[i].units == layer.units && architecture.layers[i].activation == layer.activation &&
               architecture.layers[i].dtype == layer.dtype_override && architecture.layers[i].dropout == layer.dropout;
    }
    if (!same)
        fail(MPT_STATUS_SHAPE_MISMATCH, "the file's architecture " + metadata_value(reader, "mptrain.architecture") +
                                            " differs from the model's");
    ModelState state;
    state.input_standardization = read_input_standardization(reader, model);
    std::vector<float>& block = state.masters;
    block.assign(static_cast<size_t>(model.parameter_block_elements()), 0.0f);
    for (size_t i = 0; i < model.layers().size(); ++i) {
        const DenseLayer& layer = model.layers()[i];
        const std::string prefix = "layers." + std::to_string(i);
        const TensorView& weights = f32_tensor(reader, prefix + ".weight", {layer.units, layer.inputs});
        const TensorView& bias = f32_tensor(reader, prefix + ".bias", {layer.units});
        std::vector<float> unpadded(static_cast<size_t>(layer.units * layer.inputs));
        std::memcpy(unpadded.data(), weights.data, weights.bytes);
        pad_weights(layer, unpadded.data(), block.data());
        std::memcpy(block.data() + layer.bias_offset, bias.data, bias.bytes);
    }
    return state;
}

void ModelState::apply_to(Model& model) const {
    // The file's architecture is the model's, so both standardize or neither does. Equal values
    // keep the model's own (a fit of another trainer may be gathering with them: read_model_state
    // refused other values then). First, as it is the step that could refuse.
    const auto& current = model.input_standardization();
    if (input_standardization && !(current && current->same_values(*input_standardization)))
        model.set_input_standardization(input_standardization);
    model.write_master_block(masters.data());
}

void save_model(Model& model, const std::string& path, const std::string& precision) {
    SafetensorsWriter writer;
    std::vector<float> host_block;
    add_model_to_file(model, writer, "model", host_block);
    writer.set_metadata("mptrain.precision", precision);
    writer.write(path);
}

std::shared_ptr<Model> load_model(std::shared_ptr<Context> context, const std::string& path) {
    const SafetensorsReader reader = SafetensorsReader::open(path, true);
    check_header_integrity(reader);
    check_version(reader);
    const Architecture architecture = parse_architecture(reader);
    std::shared_ptr<Model> model;
    try {
        model = std::make_shared<Model>(std::move(context), architecture.input_features);
        model->set_input_dropout(architecture.input_dropout);
        for (const Architecture::Layer& layer : architecture.layers) model->add_dense(layer.units, layer.activation);
        for (size_t i = 0; i < architecture.layers.size(); ++i) {
            model->set_layer_dtype(static_cast<int64_t>(i), architecture.layers[i].dtype);
            model->set_layer_dropout(static_cast<int64_t>(i), architecture.layers[i].dropout);
            model->set_layer_trainable(static_cast<int64_t>(i), architecture.layers[i].trainable);
        }
        require(architecture.layers.back().dropout == 0.0f, MPT_STATUS_INVALID_ARGUMENT, "the last layer has dropout");
        // A placeholder, so that read_model_state finds the architecture the same and reads the
        // file's values into its place.
        if (architecture.input_standardization) {
            const std::vector<float> zero(static_cast<size_t>(architecture.input_features), 0.0f);
            model->set_input_standardization(zero.data(), zero.data(), architecture.input_features);
        }
    } catch (const Error& error) {
        fail(MPT_STATUS_CORRUPT_DATA, std::string("the file's architecture is invalid: ") + error.what());
    }
    model->build();
    read_model_state(reader, *model).apply_to(*model);
    return model;
}

}  // namespace mpt
