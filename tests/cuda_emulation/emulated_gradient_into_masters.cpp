// cuda_gradient_into_masters.cu, compiled for emulated threads (emulated_device.h), over the emulated cuBLASLt
// (emulated_cublaslt.cpp).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_gradient_into_masters.cu"
