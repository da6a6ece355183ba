// max |x| over a step's tensors on CUDA, for its finiteness proof (decide_update), in one kernel
// (blockIdx.y picks the tensor): NaN and Inf count as +Inf. The results are written to device
// memory, so no value ever travels to the host.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

void validate_max_abs(const MaxAbsInput* inputs, int count, const float* out);
void run_max_abs(const MaxAbsInput* inputs, int count, float* out, int max_blocks, cudaStream_t stream);

}  // namespace mpt
