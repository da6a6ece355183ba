// Dropout on CUDA (Backend::dropout): one elementwise kernel that draws nn/dropout.h's mask from the
// step count in device memory, so a step's graph replays with a new mask every step.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace mpt {

void run_dropout(const DropoutArgs& args, cudaStream_t stream);

}  // namespace mpt
