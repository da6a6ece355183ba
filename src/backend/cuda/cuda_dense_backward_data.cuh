// The input gradient of a dense layer on CUDA: dZ_prev = (dZ · W) ⊙ act'(A_prev) as one cuBLASLt
// GEMM with the DRELU epilogue reading the previous layer's ReLU bit mask; for a ReLU without a valid
// mask (a forward that wrote none: MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, or one run unfused), a GEMM that
// writes dZ_prev in its own dtype and a kernel that zeroes it in place where A_prev is not above 0;
// otherwise (cuBLASLt cannot fuse it, or another activation) a GEMM into fp32 scratch and one kernel
// applying the derivative from A_prev (the CPU's formula). Batches of at most 64 rows can run as one
// tensor-core kernel instead (cuda_small_batch_backward_data.cuh), when the backend asks.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_max_abs.cuh"
#include "backend/cuda/small_batch_forward_layout.h"

namespace mpt {

struct DenseBackwardDataPlan {
    const GemmPlan* gemm = nullptr;  // null on the small-batch kernel
    bool fused = false;              // one kernel writes the input gradient (the GEMM or the small-batch kernel)
    bool small_batch = false;        // the small-batch kernel, in cuBLASLt's place
    small_batch_mma::SplitK small_batch_split;  // its blocks along the output features, chosen when planned
    bool reads_mask = false;
    bool relu_from_output = false;  // the GEMM writes input_grad, then ReLU's derivative from A_prev in place
    // The in-place kernel, or the small-batch kernel, also writes the maxima args asks for
    // (input_grad_max_abs, input_max_abs).
    bool writes_max_abs = false;
    size_t scratch_bytes = 0;
};

// `mask_valid`: args.relu_mask holds the bit mask a fused forward wrote for this [rows, in_features].
// `small_batch`: the small-batch kernel where it applies (the caller has checked the device).
DenseBackwardDataPlan plan_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataArgs& args, bool mask_valid,
                                               bool allow_fused, bool small_batch = false);
// `max_abs_scratch`: the max_abs pass's cells and ticket, which the in-place kernel uses where the plan
// writes maxima (and leaves zero, as the pass does).
void run_dense_backward_data(CudaGemm& gemm, const DenseBackwardDataPlan& plan, const DenseBackwardDataArgs& args,
                             float* scratch, const MaxAbsScratch& max_abs_scratch, cudaStream_t stream);

// The relu_from_output plan's second launch: gradient[i] stays where output[i] > 0 and is +0
// elsewhere (a NaN output is not above 0), `count` elements of `dtype` in each array, both 16-byte
// aligned (Error otherwise).
void run_relu_backward_in_place(void* gradient, const void* output, DType dtype, int64_t count, cudaStream_t stream);
// The same, also writing max |x| of the gradient it leaves and of the output (as max_abs would) to
// the device floats given (each may be null), through `scratch`'s cells 0 and 1 and its ticket (left
// zero, as found): the relu_from_output plan's kernel where the executor asks for the maxima.
void run_relu_backward_in_place(void* gradient, const void* output, DType dtype, int64_t count, float* gradient_max_abs,
                                float* output_max_abs, const MaxAbsScratch& scratch, cudaStream_t stream);

}  // namespace mpt
