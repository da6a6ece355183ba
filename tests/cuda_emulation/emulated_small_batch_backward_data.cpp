// The small-batch input-gradient kernel (as the forward's, emulated_small_batch_forward.cpp).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_small_batch_backward_data.cu"
