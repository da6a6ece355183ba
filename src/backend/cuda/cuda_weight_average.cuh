// Weight averaging on CUDA (Backend::average_weights, swap_values): one elementwise kernel over the
// whole parameter block after a step's updates, reading the step's TrainState in device memory so
// that a skipped step leaves the averages without the host knowing; and the exchange of two arrays.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

void run_average_weights(const float* masters, float* averages, int64_t count, float momentum, const TrainState* state,
                         cudaStream_t stream);
void run_swap_values(float* first, float* second, int64_t count, cudaStream_t stream);

}  // namespace mpt
