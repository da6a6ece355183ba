// cuda_dense_update.cu, compiled for emulated threads (emulated_device.h), over the emulated cuBLASLt
// (emulated_cublaslt.cpp).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_dense_update.cu"
