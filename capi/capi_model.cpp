// C API: models. Argument checks and translation only.
#include <algorithm>
#include <string>

#include "capi_internal.h"
#include "core/finite_values.h"
#include "nn/inference.h"
#include "nn/model_file.h"

using mpt::capi::impl_of;
using mpt::capi::require_pointer;
using mpt::fail;
using mpt::require;

namespace {

mpt::Activation to_activation(const mpt_activation& raw) {
    switch (mpt::capi::checked_enum(raw, MPT_ACTIVATION_LINEAR, MPT_ACTIVATION_SOFTSIGN, "activation")) {
        case MPT_ACTIVATION_LINEAR: return mpt::Activation::linear;
        case MPT_ACTIVATION_RELU: return mpt::Activation::relu;
        case MPT_ACTIVATION_SIGMOID: return mpt::Activation::sigmoid;
        case MPT_ACTIVATION_TANH: return mpt::Activation::tanh;
        case MPT_ACTIVATION_SOFTMAX: return mpt::Activation::softmax;
        case MPT_ACTIVATION_LEAKY_RELU: return mpt::Activation::leaky_relu;
        case MPT_ACTIVATION_ELU: return mpt::Activation::elu;
        case MPT_ACTIVATION_SELU: return mpt::Activation::selu;
        case MPT_ACTIVATION_SOFTPLUS: return mpt::Activation::softplus;
        case MPT_ACTIVATION_SOFTSIGN: return mpt::Activation::softsign;
    }
    fail(MPT_STATUS_INVALID_ARGUMENT, "unknown activation");
}

const mpt::DenseLayer& layer_of(const mpt::Model& model, int64_t layer) {
    if (layer < 0 || layer >= static_cast<int64_t>(model.layers().size()))
        fail(MPT_STATUS_INVALID_ARGUMENT, "layer index " + std::to_string(layer) + " out of range [0, " +
                                              std::to_string(model.layers().size()) + ")");
    return model.layers()[static_cast<size_t>(layer)];
}

// The per-layer getters: the model, then the out-parameter, then the layer are checked (so the
// statuses come in that order), and `read` turns the layer into the C value.
template <typename Out, typename Read>
void read_layer(const mpt_model_t* model, int64_t layer, Out* out, Read read) {
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    *out = read(layer_of(impl, layer));
}

mpt_dtype to_c_dtype(const std::optional<mpt::DType>& dtype) {
    if (!dtype) return MPT_DTYPE_DEFAULT;
    switch (*dtype) {
        case mpt::DType::fp32: return MPT_DTYPE_FP32;
        case mpt::DType::fp16: return MPT_DTYPE_FP16;
        case mpt::DType::bf16: return MPT_DTYPE_BF16;
        default: fail(MPT_STATUS_INTERNAL, "a layer dtype the C API has no value for");
    }
}

void require_count(int64_t given, int64_t expected, const char* what) {
    if (given != expected)
        fail(MPT_STATUS_SHAPE_MISMATCH,
             std::string(what) + " count is " + std::to_string(given) + ", expected " + std::to_string(expected));
}

}  // namespace

extern "C" {

mpt_status mpt_model_create(mpt_context_t* context, int64_t input_features, mpt_model_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(out, "out");
    auto model = std::make_shared<mpt::Model>(context->impl, input_features);
    *out = new mpt_model{std::move(model)};
    MPT_API_END
}

void mpt_model_destroy(mpt_model_t* model) {
    mpt::DeviceScope device_scope;  // freeing GPU memory makes the backend's device current
    mpt::capi::destroy_holding_context(model);
}

mpt_status mpt_model_add_dense(mpt_model_t* model, int64_t units, mpt_activation activation) {
    MPT_API_BEGIN
    impl_of(model, "model").add_dense(units, to_activation(activation));
    MPT_API_END
}

mpt_status mpt_model_set_layer_dtype(mpt_model_t* model, int64_t layer, mpt_dtype dtype) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    std::optional<mpt::DType> override;
    switch (mpt::capi::checked_enum(dtype, MPT_DTYPE_DEFAULT, MPT_DTYPE_BF16, "dtype")) {
        case MPT_DTYPE_DEFAULT: break;
        case MPT_DTYPE_FP32: override = mpt::DType::fp32; break;
        case MPT_DTYPE_FP16: override = mpt::DType::fp16; break;
        case MPT_DTYPE_BF16: override = mpt::DType::bf16; break;
        default: fail(MPT_STATUS_INVALID_ARGUMENT, "unknown dtype");
    }
    impl.set_layer_dtype(layer, override);
    MPT_API_END
}

mpt_status mpt_model_get_layer_dtype(const mpt_model_t* model, int64_t layer, mpt_dtype* out) {
    MPT_API_BEGIN
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return to_c_dtype(l.dtype_override); });
    MPT_API_END
}

mpt_status mpt_model_set_layer_dropout(mpt_model_t* model, int64_t layer, float rate) {
    MPT_API_BEGIN
    impl_of(model, "model").set_layer_dropout(layer, rate);
    MPT_API_END
}

mpt_status mpt_model_get_layer_dropout(const mpt_model_t* model, int64_t layer, float* out) {
    MPT_API_BEGIN
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return l.dropout; });
    MPT_API_END
}

mpt_status mpt_model_set_layer_trainable(mpt_model_t* model, int64_t layer, int trainable) {
    MPT_API_BEGIN
    impl_of(model, "model").set_layer_trainable(layer, trainable != 0);
    MPT_API_END
}

mpt_status mpt_model_get_layer_trainable(const mpt_model_t* model, int64_t layer, int* out) {
    MPT_API_BEGIN
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return l.trainable ? 1 : 0; });
    MPT_API_END
}

mpt_status mpt_model_get_layer_units(const mpt_model_t* model, int64_t layer, int64_t* out) {
    MPT_API_BEGIN
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return l.units; });
    MPT_API_END
}

mpt_status mpt_model_get_layer_activation(const mpt_model_t* model, int64_t layer, mpt_activation* out) {
    MPT_API_BEGIN
    // The values are the core's (static_asserts below).
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return static_cast<mpt_activation>(l.activation); });
    MPT_API_END
}

mpt_status mpt_model_set_input_dropout(mpt_model_t* model, float rate) {
    MPT_API_BEGIN
    impl_of(model, "model").set_input_dropout(rate);
    MPT_API_END
}

mpt_status mpt_model_get_input_dropout(const mpt_model_t* model, float* out) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    *out = impl.input_dropout();
    MPT_API_END
}

mpt_status mpt_model_set_input_standardization(mpt_model_t* model, const float* mean, const float* stddev,
                                               int64_t count) {
    MPT_API_BEGIN
    impl_of(model, "model").set_input_standardization(mean, stddev, count);
    MPT_API_END
}

mpt_status mpt_model_get_input_standardization(const mpt_model_t* model, float* mean, float* stddev, int64_t count,
                                               int* standardizes) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(standardizes, "standardizes");
    const mpt::FeatureStandardization* standardization = impl.input_standardization().get();
    if (standardization && (mean || stddev)) {
        if (count != impl.input_features())
            mpt::fail(MPT_STATUS_SHAPE_MISMATCH, "the model standardizes " + std::to_string(impl.input_features()) +
                                                     " input features, not " + std::to_string(count));
        if (mean) std::copy(standardization->mean().begin(), standardization->mean().end(), mean);
        if (stddev) std::copy(standardization->stddev().begin(), standardization->stddev().end(), stddev);
    }
    *standardizes = standardization ? 1 : 0;
    MPT_API_END
}

mpt_status mpt_model_set_layer_initializer(mpt_model_t* model, int64_t layer, mpt_initializer initializer) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    const mpt_initializer checked = mpt::capi::checked_enum(initializer, MPT_INITIALIZER_GLOROT_UNIFORM,
                                                            MPT_INITIALIZER_LECUN_NORMAL, "initializer");
    // The C values are the core's (static_asserts below).
    impl.set_layer_initializer(layer, static_cast<mpt::Initializer>(checked));
    MPT_API_END
}

mpt_status mpt_model_get_layer_initializer(const mpt_model_t* model, int64_t layer, mpt_initializer* out) {
    MPT_API_BEGIN
    read_layer(model, layer, out, [](const mpt::DenseLayer& l) { return static_cast<mpt_initializer>(l.initializer); });
    MPT_API_END
}

static_assert(static_cast<int>(mpt::Activation::linear) == MPT_ACTIVATION_LINEAR &&
                  static_cast<int>(mpt::Activation::relu) == MPT_ACTIVATION_RELU &&
                  static_cast<int>(mpt::Activation::sigmoid) == MPT_ACTIVATION_SIGMOID &&
                  static_cast<int>(mpt::Activation::tanh) == MPT_ACTIVATION_TANH &&
                  static_cast<int>(mpt::Activation::softmax) == MPT_ACTIVATION_SOFTMAX &&
                  static_cast<int>(mpt::Activation::leaky_relu) == MPT_ACTIVATION_LEAKY_RELU &&
                  static_cast<int>(mpt::Activation::elu) == MPT_ACTIVATION_ELU &&
                  static_cast<int>(mpt::Activation::selu) == MPT_ACTIVATION_SELU &&
                  static_cast<int>(mpt::Activation::softplus) == MPT_ACTIVATION_SOFTPLUS &&
                  static_cast<int>(mpt::Activation::softsign) == MPT_ACTIVATION_SOFTSIGN,
              "mpt_activation and mpt::Activation share their values");

static_assert(static_cast<int>(mpt::Initializer::glorot_uniform) == MPT_INITIALIZER_GLOROT_UNIFORM &&
                  static_cast<int>(mpt::Initializer::glorot_normal) == MPT_INITIALIZER_GLOROT_NORMAL &&
                  static_cast<int>(mpt::Initializer::he_uniform) == MPT_INITIALIZER_HE_UNIFORM &&
                  static_cast<int>(mpt::Initializer::he_normal) == MPT_INITIALIZER_HE_NORMAL &&
                  static_cast<int>(mpt::Initializer::lecun_uniform) == MPT_INITIALIZER_LECUN_UNIFORM &&
                  static_cast<int>(mpt::Initializer::lecun_normal) == MPT_INITIALIZER_LECUN_NORMAL,
              "mpt_initializer and mpt::Initializer share their values");

mpt_status mpt_model_get_layer_count(const mpt_model_t* model, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    *out = static_cast<int64_t>(impl.layers().size());
    MPT_API_END
}

mpt_status mpt_model_get_input_features(const mpt_model_t* model, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    *out = impl.input_features();
    MPT_API_END
}

mpt_status mpt_model_get_output_features(const mpt_model_t* model, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    require(!impl.layers().empty(), MPT_STATUS_INVALID_STATE, "the model has no layers");
    *out = impl.output_features();
    MPT_API_END
}

mpt_status mpt_model_get_parameter_count(const mpt_model_t* model, int64_t* out) {
    MPT_API_BEGIN
    const mpt::Model& impl = impl_of(model, "model");
    require_pointer(out, "out");
    *out = impl.parameter_count();
    MPT_API_END
}

mpt_status mpt_model_get_weights(mpt_model_t* model, int64_t layer, float* weights, int64_t weight_count, float* bias,
                                 int64_t bias_count) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    const mpt::DenseLayer& spec = layer_of(impl, layer);
    if (weights) require_count(weight_count, spec.units * spec.inputs, "weight");
    if (bias) require_count(bias_count, spec.units, "bias");
    impl.build();
    impl.get_weights(layer, weights, bias);
    MPT_API_END
}

mpt_status mpt_model_set_weights(mpt_model_t* model, int64_t layer, const float* weights, int64_t weight_count,
                                 const float* bias, int64_t bias_count) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    const mpt::DenseLayer& spec = layer_of(impl, layer);
    if (weights) require_count(weight_count, spec.units * spec.inputs, "weight");
    if (bias) require_count(bias_count, spec.units, "bias");
    // Refused, not stored: every prediction and step after it would be NaN.
    if (weights) mpt::require_finite(weights, spec.units, spec.inputs, "weight row");
    if (bias) mpt::require_finite(bias, 1, spec.units, "bias row");
    impl.build();
    impl.set_weights(layer, weights, bias);
    MPT_API_END
}

mpt_status mpt_model_predict(mpt_model_t* model, const float* inputs, int64_t rows, float* out, int64_t out_count) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    require_pointer(inputs, "inputs");
    require_pointer(out, "out");
    impl.require_prediction_rows(rows);
    require(!impl.layers().empty(), MPT_STATUS_INVALID_STATE, "the model has no layers");
    require_count(out_count, rows * impl.output_features(), "output");
    impl.require_finite_inputs(inputs, rows);
    mpt::predict_fp32(impl, inputs, rows, out);
    MPT_API_END
}

mpt_status mpt_model_save(mpt_model_t* model, const char* path) {
    MPT_API_BEGIN
    mpt::Model& impl = impl_of(model, "model");
    require_pointer(path, "path");
    require(!impl.layers().empty(), MPT_STATUS_INVALID_STATE, "the model has no layers");
    mpt::save_model(impl, path, "fp32");
    MPT_API_END
}

mpt_status mpt_model_load(mpt_context_t* context, const char* path, mpt_model_t** out) {
    MPT_API_BEGIN
    impl_of(context, "context");
    require_pointer(path, "path");
    require_pointer(out, "out");
    auto model = mpt::load_model(context->impl, path);
    *out = new mpt_model{std::move(model)};
    MPT_API_END
}

}  // extern "C"
