// The autocast policy: which dtype each op runs in (DESIGN.md, "Precision rules"). GEMMs of a layer
// run in the layer's compute dtype (policy dtype unless overridden) with fp32 accumulation; the last
// layer writes fp32 logits; head, loss, metrics, masters and the update are always fp32.
#pragma once

#include <vector>

#include "amp/loss_scaler.h"
#include "core/dtype.h"
#include "mptrain/mptrain.h"

namespace mpt {

class Backend;
class Model;

struct PrecisionPolicy {
    mpt_precision precision;  // resolved: never AUTO
    DType compute_dtype;      // fp32, fp16 or bf16
};

// Resolves AUTO for `backend` (CPU: bf16 with AMX, else fp32; CUDA: bf16 on cc >= 8.0, fp16 on 7.x).
PrecisionPolicy resolve_precision(mpt_precision requested, const Backend& backend);
const char* precision_name(mpt_precision precision);

// Per-layer compute dtypes of `model` under `policy` (overrides applied).
std::vector<DType> layer_compute_dtypes(const Model& model, const PrecisionPolicy& policy);

// DEFAULT loss scaling: dynamic when any layer computes in fp16 (its range needs it), else off.
LossScaling default_loss_scaling(const std::vector<DType>& layer_dtypes);

}  // namespace mpt
