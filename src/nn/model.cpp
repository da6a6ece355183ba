// See model.h.
#include "nn/model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/finite_values.h"
#include "core/float_bits.h"
#include "core/limits.h"
#include "core/rng.h"
#include "nn/dropout.h"

namespace mpt {

Model::Model(std::shared_ptr<Context> context, int64_t input_features)
    : context_(std::move(context)), input_features_(input_features) {
    require(input_features > 0, MPT_STATUS_INVALID_ARGUMENT, "input_features must be positive");
    // Also keeps the padding arithmetic (and every size derived from it) far from overflow.
    require(input_features <= kMaxFeatures, MPT_STATUS_INVALID_ARGUMENT, "input_features must be at most 2^24");
}

void Model::add_dense(int64_t units, Activation activation) {
    require(!built_, MPT_STATUS_INVALID_STATE, "layers cannot be added after the model is built (first use)");
    require(units > 0, MPT_STATUS_INVALID_ARGUMENT, "units must be positive");
    require(units <= kMaxFeatures, MPT_STATUS_INVALID_ARGUMENT, "units must be at most 2^24");
    if (!layers_.empty())
        require(layers_.back().activation != Activation::softmax, MPT_STATUS_INVALID_ARGUMENT,
                "softmax is allowed on the last layer only");
    DenseLayer layer{};
    layer.inputs = layers_.empty() ? input_features_ : layers_.back().units;
    layer.units = units;
    layer.padded_inputs = pad_features(layer.inputs);
    layer.padded_units = pad_features(units);
    layer.activation = activation;
    layers_.push_back(layer);
}

void Model::set_layer_dtype(int64_t layer, std::optional<DType> dtype) {
    require_layer(layer);
    require(!built_, MPT_STATUS_INVALID_STATE, "layer dtypes cannot change after the model is built (first use)");
    layers_[static_cast<size_t>(layer)].dtype_override = dtype;
}

void Model::set_layer_dropout(int64_t layer, float rate) {
    require_layer(layer);
    require(!built_, MPT_STATUS_INVALID_STATE, "layer dropout cannot change after the model is built (first use)");
    require(valid_dropout_rate(rate), MPT_STATUS_INVALID_ARGUMENT, "dropout rate must be in [0, 1)");
    layers_[static_cast<size_t>(layer)].dropout = rate == 0.0f ? 0.0f : rate;  // -0 as 0
}

void Model::set_layer_initializer(int64_t layer, Initializer initializer) {
    require_layer(layer);
    require(!built_, MPT_STATUS_INVALID_STATE,
            "a layer's initializer cannot change after the model is built (first use): its weights are drawn");
    layers_[static_cast<size_t>(layer)].initializer = initializer;
}

void Model::set_layer_trainable(int64_t layer, bool trainable) {
    require_layer(layer);
    layers_[static_cast<size_t>(layer)].trainable = trainable;
}

void Model::require_trainable_layer() const {
    require(std::any_of(layers_.begin(), layers_.end(), [](const DenseLayer& layer) { return layer.trainable; }),
            MPT_STATUS_INVALID_STATE, "every layer of the model is frozen (mpt_model_set_layer_trainable): training would change nothing");
}

void Model::set_input_dropout(float rate) {
    require(!built_, MPT_STATUS_INVALID_STATE, "input dropout cannot change after the model is built (first use)");
    require(valid_dropout_rate(rate), MPT_STATUS_INVALID_ARGUMENT, "dropout rate must be in [0, 1)");
    input_dropout_ = rate == 0.0f ? 0.0f : rate;  // -0 as 0
}

void Model::set_input_standardization(const float* mean, const float* stddev, int64_t count) {
    if (!mean && !stddev && count == 0) {
        set_input_standardization(nullptr);
        return;
    }
    require(mean && stddev, MPT_STATUS_INVALID_ARGUMENT,
            "an input standardization needs both its means and its standard deviations (or neither, with count 0, "
            "to remove it)");
    set_input_standardization(
        FeatureStandardization::make(context_, mean, stddev, count, input_features_, "the model's input standardization"));
}

void Model::set_input_standardization(std::shared_ptr<const FeatureStandardization> standardization) {
    require(fitting_.empty(), MPT_STATUS_INVALID_STATE,
            "the input standardization cannot change while a trainer fits the model (its batches use it)");
    require(!standardization || standardization->features() == input_features_, MPT_STATUS_SHAPE_MISMATCH,
            "an input standardization of another feature count than the model's inputs");
    input_standardization_ = std::move(standardization);
}

bool Model::has_dropout() const {
    if (input_dropout_ > 0.0f) return true;
    return std::any_of(layers_.begin(), layers_.end(), [](const DenseLayer& layer) { return layer.dropout > 0.0f; });
}

void Model::require_layer(int64_t layer) const {
    if (layer < 0 || layer >= static_cast<int64_t>(layers_.size()))
        fail(MPT_STATUS_INVALID_ARGUMENT,
             "layer index " + std::to_string(layer) + " out of range [0, " + std::to_string(layers_.size()) + ")");
}

void Model::require_finite_inputs(const float* inputs, int64_t rows) const {
    require_finite(inputs, rows, input_features_, "input row");
    const FeatureStandardization* standardization = input_standardization_.get();
    if (!standardization) return;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t f = 0; f < input_features_; ++f)
            if (!std::isfinite(standardization->apply(f, inputs[r * input_features_ + f])))
                fail(MPT_STATUS_NON_FINITE, "input row " + std::to_string(r) + ", element " + std::to_string(f) + " (" +
                                                number_text(inputs[r * input_features_ + f]) +
                                                ") is infinite once standardized by the model's mean " +
                                                number_text(standardization->mean()[static_cast<size_t>(f)]) +
                                                " and standard deviation " +
                                                number_text(standardization->stddev()[static_cast<size_t>(f)]));
}

void Model::require_prediction_rows(int64_t rows) const {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "rows must be positive");
    checked_elements(rows, input_features(), "the inputs (rows * input features)");
    checked_elements(rows, std::max<int64_t>(output_features(), 1), "the outputs (rows * output features)");
}

int64_t Model::output_features() const { return layers_.empty() ? 0 : layers_.back().units; }

int64_t Model::parameter_count() const {
    int64_t count = 0;
    for (const DenseLayer& layer : layers_) count += layer.units * layer.inputs + layer.units;
    return count;
}

static int64_t align_elements(int64_t value) { return (value + kParameterAlignment - 1) / kParameterAlignment * kParameterAlignment; }

void Model::build() {
    if (built_) return;
    require(!layers_.empty(), MPT_STATUS_INVALID_STATE, "the model has no layers");
    require(layers_.back().dropout == 0.0f, MPT_STATUS_INVALID_STATE,
            "the last layer has dropout: only hidden layers' outputs can be dropped (set its rate to 0)");
    int64_t offset = 0;
    for (DenseLayer& layer : layers_) {
        layer.weight_offset = offset;
        offset = align_elements(offset + layer.weight_count());
        layer.bias_offset = offset;
        offset = align_elements(offset + layer.padded_units);
    }
    block_elements_ = offset;
    arena_ = Arena(context_->backend(), context_->memory(), static_cast<size_t>(block_elements_) * sizeof(float));

    // Each layer's initializer (Glorot-uniform unless set), drawn in row-major order of the unpadded
    // matrix from the context's seed; padded entries stay zero. Uniform layers take one number each
    // from a stream shared layer after layer (as mptrain always drew Glorot-uniform). A normal draw
    // takes a varying count (redraws beyond 2 stddev), so a normal layer draws from a stream of its
    // own and the shared one moves on as a uniform layer's would: every layer's weights depend on
    // the seed and its own initializer alone.
    const uint64_t seed = context_->seed();
    Rng shared(seed);
    std::vector<float> host(static_cast<size_t>(block_elements_), 0.0f);
    for (size_t index = 0; index < layers_.size(); ++index) {
        const DenseLayer& layer = layers_[index];
        const WeightDistribution distribution(layer.initializer, layer.inputs, layer.units);
        Rng own(seed ^ (0x9e3779b97f4a7c15ULL * (index + 1)));
        Rng& rng = distribution.normal() ? own : shared;
        for (int64_t unit = 0; unit < layer.units; ++unit)
            for (int64_t input = 0; input < layer.inputs; ++input)
                host[static_cast<size_t>(layer.weight_offset + unit * layer.padded_inputs + input)] =
                    distribution.draw(rng);
        if (distribution.normal())
            for (int64_t skipped = 0; skipped < layer.units * layer.inputs; ++skipped) shared.next_u64();
    }
    context_->backend().copy_to_device(masters(), host.data(), host.size() * sizeof(float));
    built_ = true;
    mark_weights_changed();
}

void Model::get_weights(int64_t layer_index, float* weights, float* bias) const {
    require_layer(layer_index);
    require(built_, MPT_STATUS_INVALID_STATE, "the model is not built");
    const DenseLayer& layer = layers_[static_cast<size_t>(layer_index)];
    Backend& backend = context_->backend();
    if (weights) {
        std::vector<float> padded(static_cast<size_t>(layer.weight_count()));
        backend.copy_to_host(padded.data(), masters() + layer.weight_offset, padded.size() * sizeof(float));
        for (int64_t unit = 0; unit < layer.units; ++unit)
            for (int64_t input = 0; input < layer.inputs; ++input)
                weights[unit * layer.inputs + input] = padded[static_cast<size_t>(unit * layer.padded_inputs + input)];
    }
    if (bias) backend.copy_to_host(bias, masters() + layer.bias_offset, static_cast<size_t>(layer.units) * sizeof(float));
}

void Model::set_weights(int64_t layer_index, const float* weights, const float* bias) {
    require_layer(layer_index);
    require(built_, MPT_STATUS_INVALID_STATE, "the model is not built");
    const DenseLayer& layer = layers_[static_cast<size_t>(layer_index)];
    Backend& backend = context_->backend();
    if (weights) {
        std::vector<float> padded(static_cast<size_t>(layer.weight_count()), 0.0f);
        for (int64_t unit = 0; unit < layer.units; ++unit)
            for (int64_t input = 0; input < layer.inputs; ++input)
                padded[static_cast<size_t>(unit * layer.padded_inputs + input)] = weights[unit * layer.inputs + input];
        backend.copy_to_device(masters() + layer.weight_offset, padded.data(), padded.size() * sizeof(float));
    }
    if (bias) backend.copy_to_device(masters() + layer.bias_offset, bias, static_cast<size_t>(layer.units) * sizeof(float));
    mark_weights_changed();
}

void Model::read_master_block(float* destination) const {
    require(built_, MPT_STATUS_INVALID_STATE, "the model is not built");
    context_->backend().copy_to_host(destination, masters(), static_cast<size_t>(block_elements_) * sizeof(float));
}

void Model::write_master_block(const float* source) {
    require(built_, MPT_STATUS_INVALID_STATE, "the model is not built");
    context_->backend().copy_to_device(masters(), source, static_cast<size_t>(block_elements_) * sizeof(float));
    mark_weights_changed();
}

void Model::end_fit(const void* trainer) {
    const auto found = std::find(fitting_.rbegin(), fitting_.rend(), trainer);
    if (found != fitting_.rend()) fitting_.erase(std::next(found).base());
}

bool Model::fitted_by_another_than(const void* trainer) const {
    return std::any_of(fitting_.begin(), fitting_.end(), [&](const void* fitting) { return fitting != trainer; });
}

}  // namespace mpt
