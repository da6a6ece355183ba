// The max pass's kernel, compiled for emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_max_abs.cu"
