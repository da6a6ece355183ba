// cuda_backend_signature.cu, compiled for the emulated device (emulated_device.h): the backend as a whole runs there.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_backend_signature.cu"
