// Plain SGD's whole update of a dense layer as one cuBLASLt GEMM into its fp32 masters
// (MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1, off by default until a GPU has measured it), where the
// default path writes the fp32 weight gradient and a kernel reads it back:
//
//   W = keep * W + step * dZ^T · A_prev,  step = -rate / loss_scale, keep = 1 - rate * decay
//
// the CPU backend's arithmetic (cpu_backend.cpp), with C = D = the masters and alpha = step, beta =
// keep read from device memory (CUBLASLT_POINTER_MODE_DEVICE), so that the rate's schedule, the loss
// scale and the skip need no host. Per weight the default moves 18 bytes at batches over 64 rows
// (the gradient written, then read with the master, the master and its copy written); this moves
// 14 (the master read and written by the GEMM, then read again to write the copy), and the GEMM of
// a large batch reads its C under its arithmetic. No weight-gradient scratch either (37 MB for the
// seed MLP's first layer).
//
// Three launches: a start kernel writes alpha and beta from the step's TrainState; the GEMM, with
// the bias gradient from cuBLASLt's BGRADB epilogue (the column sums of dZ, which cuBLASLt does not
// scale by alpha) or, where it refuses that, the backend's column-sum kernel; then a finish kernel
// updates the bias (keep * b + step * db, as the CPU) and writes the low-precision copies from the
// new masters.
//
// A skipped step (found_inf) must leave the masters as they were, but a GEMM cannot skip itself on
// a device flag, and alpha = 0 does not make it a no-op: 0 * inf is NaN. So on a skipped step the
// start kernel writes alpha = -0 and beta = 1, sets dZ to zeros and A_prev's non-finite values to 0
// (the backend interface lets a skipped update overwrite them: nothing reads them later in the step,
// which is dropped, and a trainer's next step writes them anew), and the GEMM then adds -0 to each
// master, which leaves every value as it was (a master of -0 could come out +0 if the tensor cores
// summed the zero products to -0; the finish kernel writes nothing). Where found_inf is clear, the
// start kernel writes its two scalars and every block returns.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"

namespace mpt {

// Whether the update runs so: plain SGD, a whole update without a clip factor (this backend clips
// in parts), masters aligned for cuBLASLt's widest accesses (a direct user of the backend may hand
// it others), and a cuBLASLt algorithm for the GEMM with device scalars (the plain plan, cached). The
// others take the default path.
bool gradient_into_masters_applies(CudaGemm& gemm, const DenseUpdateArgs& args, const OptimizerConfig& optimizer);

// Backend scratch it needs for a layer of `out_features`: alpha and beta (256 bytes), then the fp32
// bias gradient.
size_t gradient_into_masters_scratch_bytes(int64_t out_features);

struct GradientIntoMastersPlan {
    const GemmPlan* gemm = nullptr;
    bool bias_fused = false;   // the bias gradient in the GEMM (BGRADB), else the column-sum kernel
    float* scalars = nullptr;  // alpha, beta: device memory, written every step by the start kernel
    float* bias_grad = nullptr;
};

GradientIntoMastersPlan plan_gradient_into_masters(CudaGemm& gemm, const DenseUpdateArgs& args, float* scratch);
void run_gradient_into_masters(CudaGemm& gemm, const GradientIntoMastersPlan& plan, const DenseUpdateArgs& args,
                               const OptimizerConfig& optimizer, int max_blocks, cudaStream_t stream);

}  // namespace mpt
