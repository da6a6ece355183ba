// Dense forward on CUDA: one cuBLASLt GEMM with bias and ReLU fused in its epilogue
// (RELU_AUX_BIAS keeps the ReLU bit mask for backward, unless the mask is not wanted: then
// RELU_BIAS, and the backward takes ReLU's derivative from the output), or, where cuBLASLt cannot fuse the
// combination (sigmoid/tanh, an output dtype other than the inputs' or fp32), a GEMM into fp32
// scratch followed by one epilogue kernel with the CPU's numerics.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

// Leading dimension, in bits, of the ReLU bit mask of a [rows, features] activation.
inline int64_t relu_mask_ld_bits(int64_t features) { return (features + 127) / 128 * 128; }
inline size_t relu_mask_size(int64_t rows, int64_t features) {
    return static_cast<size_t>(relu_mask_ld_bits(features) / 8 * rows);
}

struct DenseForwardPlan {
    const GemmPlan* gemm = nullptr;
    bool fused = false;        // the GEMM writes the output itself
    bool writes_mask = false;  // the GEMM writes args.relu_mask in cuBLASLt's bit-mask format
    size_t scratch_bytes = 0;  // fp32 scratch the fallback needs
};

// Throws Error for misaligned operands; `allow_fused` false forces the fallback (tests). `mask_wanted`
// false: args.relu_mask is left unwritten (MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, cuda_backend.cu).
DenseForwardPlan plan_dense_forward(CudaGemm& gemm, const DenseForwardArgs& args, bool allow_fused,
                                    bool mask_wanted = true);
void run_dense_forward(CudaGemm& gemm, const DenseForwardPlan& plan, const DenseForwardArgs& args, float* scratch,
                       cudaStream_t stream);

}  // namespace mpt
