// The batch gather kernels (the general one, and uint8 rows in 16-byte chunks), compiled for
// emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_gather.cu"
