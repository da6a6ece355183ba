// Gather + normalise on CUDA: one kernel copies a batch's rows, in the epoch's order, from the
// device-resident dataset (uint8 or fp32) into the compute dtype, x * scale + offset rounded once
// as on the CPU (then, for a standardized dataset, (value - mean) / divisor per feature, each
// operation rounded as on the CPU), zero-padded to the model's padded width, with the labels or
// targets alongside.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

void validate_gather(const GatherArgs& args);
void run_gather(const GatherArgs& args, cudaStream_t stream);

}  // namespace mpt
