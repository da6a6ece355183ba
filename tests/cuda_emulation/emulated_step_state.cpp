// The step's state kernels (the update decision, finish_step), compiled for emulated threads (emulated_device.h).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_step_state.cu"
