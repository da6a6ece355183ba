// The bias-gradient kernel (the column sums of dZ), compiled for emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_bias_gradient.cu"
