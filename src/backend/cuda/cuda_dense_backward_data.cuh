// The input gradient of a dense layer on CUDA: dZ_prev = (dZ · W) ⊙ act'(A_prev) as one cuBLASLt
// GEMM with the DRELU epilogue reading the previous layer's ReLU bit mask, or a GEMM into fp32
// scratch and one kernel applying the derivative from A_prev (the CPU's formula) where cuBLASLt
// cannot fuse it or no valid mask exists.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

struct DenseBackwardDataPlan {
    const GemmPlan* gemm = nullptr;
    bool fused = false;
    bool reads_mask = false;
    size_t scratch_bytes = 0;
};

// `mask_valid`: args.relu_mask holds the bit mask a fused forward wrote for this [rows, in_features].
DenseBackwardDataPlan plan_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataArgs& args, bool mask_valid,
                                               bool allow_fused);
void run_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataPlan& plan, const DenseBackwardDataArgs& args,
                             float* scratch, cudaStream_t stream);

}  // namespace mpt
