// See precision_policy.h.
#include "amp/precision_policy.h"

#include "backend/backend.h"
#include "core/error.h"
#include "nn/model.h"

namespace mpt {

PrecisionPolicy resolve_precision(mpt_precision requested, const Backend& backend) {
    switch (requested) {
        case MPT_PRECISION_FP32: return {MPT_PRECISION_FP32, DType::fp32};
        case MPT_PRECISION_MIXED_FP16: return {MPT_PRECISION_MIXED_FP16, DType::fp16};
        case MPT_PRECISION_MIXED_BF16: return {MPT_PRECISION_MIXED_BF16, DType::bf16};
        case MPT_PRECISION_AUTO:
            switch (backend.preferred_compute_dtype()) {
                case DType::fp16: return {MPT_PRECISION_MIXED_FP16, DType::fp16};
                case DType::bf16: return {MPT_PRECISION_MIXED_BF16, DType::bf16};
                case DType::fp32: return {MPT_PRECISION_FP32, DType::fp32};
            }
    }
    fail(MPT_STATUS_INVALID_ARGUMENT, "unknown precision");
}

const char* precision_name(mpt_precision precision) {
    switch (precision) {
        case MPT_PRECISION_FP32: return "fp32";
        case MPT_PRECISION_MIXED_FP16: return "mixed-fp16";
        case MPT_PRECISION_MIXED_BF16: return "mixed-bf16";
        case MPT_PRECISION_AUTO: return "auto";
    }
    return "unknown";
}

std::vector<DType> layer_compute_dtypes(const Model& model, const PrecisionPolicy& policy) {
    std::vector<DType> dtypes;
    for (const DenseLayer& layer : model.layers()) dtypes.push_back(layer.dtype_override.value_or(policy.compute_dtype));
    return dtypes;
}

LossScaling default_loss_scaling(const std::vector<DType>& layer_dtypes) {
    for (DType dtype : layer_dtypes)
        if (dtype == DType::fp16) return LossScaling::dynamic;
    return LossScaling::off;
}

}  // namespace mpt
