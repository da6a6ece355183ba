// The ReLU backward in place (with the maxima it takes for the finiteness proof), compiled for
// emulated threads (emulated_device.h). The rest of the file, cuBLASLt's GEMM plans and the
// small-batch path, is compiled but never called here: the linker drops it (--gc-sections).
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_dense_backward_data.cu"
