// Conversions between fp32 and the storage dtypes on the device (the low-precision weight copy
// after set_weights, staging of host inputs), rounding to nearest even as round_to does.
#pragma once

#include <cuda_runtime.h>

#include "core/dtype.h"

namespace mpt {

void run_convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count, cudaStream_t stream);
void run_convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count, cudaStream_t stream);

}  // namespace mpt
