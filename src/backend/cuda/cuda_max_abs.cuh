// max |x| over a tensor on CUDA, for the step's finiteness proof (decide_update): NaN and Inf count
// as +Inf. The result is written to device memory, so no value ever travels to the host.
#pragma once

#include <cuda_runtime.h>

#include "core/dtype.h"

namespace mpt {

void run_max_abs(const void* values, DType dtype, int64_t count, float* out, int max_blocks, cudaStream_t stream);

}  // namespace mpt
