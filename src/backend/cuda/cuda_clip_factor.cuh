// Gradient clipping's factor on CUDA (Backend::clip_factor): the sum of squares of a step's
// gradients in double, then record_global_clip into the step's TrainState in device memory, where
// the update kernels read the factor. Two kernels: per-block partial sums (a fixed grid for a given count), then one block
// that adds them in a fixed order, so the factor is the same bits from run to run.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

constexpr int kClipFactorMaxBlocks = 256;  // partials: kClipFactorMaxBlocks doubles of scratch

void run_clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state, double* partials,
                     cudaStream_t stream);

}  // namespace mpt
