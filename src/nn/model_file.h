// Models as .safetensors files: the architecture (JSON) and mptrain's version in __metadata__, one
// F32 tensor per layer weight ("layers.<i>.weight", [units, inputs]) and bias ("layers.<i>.bias"),
// unpadded, so the weights open in Python's safetensors or numpy as they are, and for a model that
// standardizes its inputs its means ("input.mean", [input features]) and deviations ("input.stddev").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/model.h"

namespace mpt {

// Writes `model` (built on demand) to `path` atomically. `precision` names the policy it was trained
// with ("fp32", "mixed-bf16", ...), recorded for the reader.
void save_model(Model& model, const std::string& path, const std::string& precision);
// Reads a model file (or the model inside a checkpoint) onto `context`.
std::shared_ptr<Model> load_model(std::shared_ptr<Context> context, const std::string& path);

// ---- shared with checkpoints ----
// Checks that the header of an mptrain file is intact before any of it is used: its checksum passed
// (the reader verified it), or, for a file written before headers had one, it holds only the entries
// mptrain wrote then, so that a damaged key cannot pass for an old file. Throws MPT_STATUS_CORRUPT_DATA.
void check_header_integrity(const SafetensorsReader& reader);
// Throws MPT_STATUS_UNSUPPORTED for a file of another major version.
void check_version(const SafetensorsReader& reader);
// Adds the architecture, version and kind metadata and every layer's master weights.
void add_model_to_file(Model& model, SafetensorsWriter& writer, const char* kind, std::vector<float>& host_block);
// What a file holds of a model beyond its architecture, checked and ready to apply.
struct ModelState {
    std::vector<float> masters;  // the padded master block
    std::shared_ptr<const FeatureStandardization> input_standardization;  // null: none
    // Writes both into `model` (of the architecture they were read for; not while it is fitted).
    void apply_to(Model& model) const;
};
// Checks version and kind, and that the file's architecture is exactly `model`'s (or throws
// MPT_STATUS_SHAPE_MISMATCH), then reads what the file holds of it.
ModelState read_model_state(const SafetensorsReader& reader, const Model& model);
// Copies one layer's tensor between the padded parameter layout and the unpadded file layout.
std::vector<float> unpad_weights(const DenseLayer& layer, const float* block);
void pad_weights(const DenseLayer& layer, const float* unpadded, float* block);

}  // namespace mpt
