// The input gradient of a dense layer on CUDA: dZ_prev = (dZ · W) ⊙ act'(A_prev) as one cuBLASLt
// GEMM with the DRELU epilogue reading the previous layer's ReLU bit mask, or a GEMM into fp32
// scratch and one kernel applying the derivative from A_prev (the CPU's formula) where cuBLASLt
// cannot fuse it or no valid mask exists. Batches of at most 64 rows can run as one tensor-core
// kernel instead (cuda_small_batch_backward_data.cuh), when the backend asks.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

struct DenseBackwardDataPlan {
    const GemmPlan* gemm = nullptr;  // null on the small-batch kernel
    bool fused = false;              // one kernel writes the input gradient (the GEMM or the small-batch kernel)
    bool small_batch = false;        // the small-batch kernel, in cuBLASLt's place
    bool reads_mask = false;
    size_t scratch_bytes = 0;
};

// `mask_valid`: args.relu_mask holds the bit mask a fused forward wrote for this [rows, in_features].
// `small_batch`: the small-batch kernel where it applies (the caller has checked the device).
DenseBackwardDataPlan plan_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataArgs& args, bool mask_valid,
                                               bool allow_fused, bool small_batch = false);
void run_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataPlan& plan, const DenseBackwardDataArgs& args,
                             float* scratch, cudaStream_t stream);

}  // namespace mpt
