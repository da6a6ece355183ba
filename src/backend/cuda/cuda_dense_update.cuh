// The update of one dense layer on CUDA: the weight and bias gradients (one cuBLASLt GEMM with the
// BGRADB epilogue) into fp32 scratch, then one kernel that reads the step's TrainState from device
// memory, does nothing when found_inf is set (the step is skipped), and otherwise applies the
// optimizer to the fp32 masters and optimizer state and writes the low-precision copies, in one
// pass. The gradient is not fused into the masters with GEMM beta = 1 because a skipped step must
// leave them untouched and a GEMM cannot skip itself on a device-side flag (but
// MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 makes it add zeros then: cuda_gradient_into_masters.cuh).
// Plain SGD on small batches skips the gradient altogether (cuda_fused_sgd.cuh). In parts (a
// clipped step), the gradient part is the GEMM alone and the apply part the kernel alone, times the
// clip factor.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_gradient_into_masters.cuh"
#include "backend/cuda/cuda_weight_gradient.cuh"

namespace mpt {

struct DenseUpdatePlan {
    bool fused_sgd = false;        // cuda_fused_sgd: no gradient GEMM, no scratch
    bool fused_sgd_three_blocks = false;  // its kernel compiled for 3 blocks an SM (set by the backend)
    bool fused_sgd_exact_rows = false;    // its kernel compiled for the batch's 32 rows (likewise)
    bool fused_sgd_bulk_copy = false;     // its masters by bulk copies, its gradient on tensor cores (likewise)
    bool into_masters = false;            // cuda_gradient_into_masters: one GEMM into the masters, no gradient
    GradientIntoMastersPlan into_masters_plan;
    WeightGradientPlan gradient;   // unused by the apply part
    float* weight_grad = nullptr;  // the args' scratch, or the backend's when the args have none
    float* bias_grad = nullptr;
};

// fp32 scratch dense_update needs from the backend: the gradients' when the args bring none; 0 for
// fused SGD; the scalars and bias gradient of plain SGD into the masters. into_masters: plain SGD's
// whole updates that fused SGD does not take go into the masters (with allow_fused). bulk_copy (null:
// MPTRAIN_CUDA_BULK_COPY_SGD off): the bulk-copy kernel's compilations that run on the device, which
// take plain SGD's whole updates they fit first, up to 256 rows (with allow_fused).
size_t dense_update_scratch_bytes(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer,
                                  bool allow_fused, bool into_masters, const FusedSgdBulkCopyDevice* bulk_copy);
DenseUpdatePlan plan_dense_update(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer,
                                  float* scratch, bool allow_fused, bool into_masters,
                                  const FusedSgdBulkCopyDevice* bulk_copy);
void run_dense_update(CudaGemm& gemm, const DenseUpdatePlan& plan, const DenseUpdateArgs& args,
                      const OptimizerConfig& optimizer, int max_blocks, cudaStream_t stream);

}  // namespace mpt
