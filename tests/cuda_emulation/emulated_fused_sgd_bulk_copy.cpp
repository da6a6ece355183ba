// Fused SGD's bulk-copy kernel's host side (the CUDA-core kernel's file chooses between them); its
// device code is sm_90's (bulk copies, mbarriers, tensor cores), which the emulation leaves out.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cu"
