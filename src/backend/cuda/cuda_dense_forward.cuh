// Dense forward on CUDA: one cuBLASLt GEMM with bias and ReLU fused in its epilogue
// (RELU_AUX_BIAS keeps the ReLU bit mask for backward, unless the mask is not wanted: then
// RELU_BIAS, and the backward takes ReLU's derivative from the output), or, where cuBLASLt cannot fuse the
// combination (sigmoid/tanh, an output dtype other than the inputs' or fp32), a GEMM into fp32
// scratch followed by one epilogue kernel with the CPU's numerics. Batches of at most 64 rows can
// run as one tensor-core kernel instead (cuda_small_batch_forward.cuh), when the backend asks.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/small_batch_forward_layout.h"

namespace mpt {

// Leading dimension, in bits, of the ReLU bit mask of a [rows, features] activation.
__host__ __device__ inline int64_t relu_mask_ld_bits(int64_t features) { return (features + 127) / 128 * 128; }
inline size_t relu_mask_size(int64_t rows, int64_t features) {
    return static_cast<size_t>(relu_mask_ld_bits(features) / 8 * rows);
}

struct DenseForwardPlan {
    const GemmPlan* gemm = nullptr;  // null on the small-batch kernel
    bool fused = false;              // one kernel writes the output itself (the GEMM or the small-batch kernel)
    bool small_batch = false;        // the small-batch kernel (cuda_small_batch_forward.cuh), in cuBLASLt's place
    small_batch_mma::SplitK small_batch_split;  // its blocks along K, chosen for the device when planned
    bool writes_mask = false;        // args.relu_mask is written, in cuBLASLt's bit-mask format
    size_t scratch_bytes = 0;  // fp32 scratch the fallback needs
};

// Throws Error for misaligned operands; `allow_fused` false forces the fallback (tests). `mask_wanted`
// false: args.relu_mask is left unwritten (MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, cuda_backend.cu).
// `small_batch`: the small-batch kernel where it applies (the caller has checked the device).
DenseForwardPlan plan_dense_forward(CudaGemm& gemm, const DenseForwardArgs& args, bool allow_fused,
                                    bool mask_wanted = true, bool small_batch = false);
void run_dense_forward(CudaGemm& gemm, const DenseForwardPlan& plan, const DenseForwardArgs& args, float* scratch,
                       cudaStream_t stream);

}  // namespace mpt
