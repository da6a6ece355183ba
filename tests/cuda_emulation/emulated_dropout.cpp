// The dropout kernel, compiled for emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_dropout.cu"
