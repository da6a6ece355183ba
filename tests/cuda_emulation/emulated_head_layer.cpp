// The last layer around its loss head in one launch (K split across a cluster's blocks), compiled
// for emulated threads (emulated_device.h): the cluster's blocks side by side with their shared memory
// mapped into each other's.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_head_layer.cu"
