// The weight and bias gradients of a dense layer on CUDA, for the update: dW = dZ^T · A_prev in fp32
// with the bias gradient (column sums of dZ) fused into the same cuBLASLt GEMM (BGRADB epilogue),
// or a plain GEMM and the backend's column-sum kernel (cuda_bias_gradient.cuh) where cuBLASLt cannot
// fuse it.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

struct WeightGradientArgs {
    const void* output_grad;   // dZ [rows, out_features], compute dtype
    const void* input;         // A_prev [rows, in_features], compute dtype
    float* weight_grad;        // [out_features, in_features]
    float* bias_grad;          // [out_features]
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    DType compute_dtype;
    GemmWorkspace workspace;
    // Adds dW and db to weight_grad and bias_grad instead of writing them (UpdatePart::accumulate):
    // the GEMM with beta 1, never fused (cuBLASLt's BGRADB writes the bias gradient).
    bool accumulate = false;
};

struct WeightGradientPlan {
    const GemmPlan* gemm = nullptr;
    bool fused = false;
};

WeightGradientPlan plan_weight_gradient(CudaGemm& gemm, const WeightGradientArgs& args, bool allow_fused);
void run_weight_gradient(CudaGemm& gemm, const WeightGradientPlan& plan,
                                const WeightGradientArgs& args, cudaStream_t stream);

}  // namespace mpt
