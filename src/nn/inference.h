// Plain fp32 inference straight from a model's masters (mpt_model_predict), without a trainer.
#pragma once

#include <cstdint>

#include "nn/model.h"

namespace mpt {

// Writes the last layer's activation outputs ([rows, output_features]) for fp32 inputs.
void predict_fp32(Model& model, const float* inputs, int64_t rows, float* outputs);

}  // namespace mpt
