// The small-batch forward kernel (tensor cores, K split across a cluster's blocks), compiled for
// emulated threads (emulated_device.h): mma.m16n8k16 by the PTX ISA's layout, the cluster's blocks
// side by side with their shared memory mapped into each other's.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_small_batch_forward.cu"
