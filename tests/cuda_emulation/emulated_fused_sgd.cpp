// Fused SGD's CUDA-core kernel (every compilation: any rows, exactly 32, 3 blocks an SM; one layer or
// a group), compiled for emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_fused_sgd.cu"
