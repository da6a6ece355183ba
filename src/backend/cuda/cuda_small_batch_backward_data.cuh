// A layer's input gradient for batches of at most 64 rows on the tensor cores, in one kernel:
// dZ_prev = (dZ · W) ⊙ act'(A_prev), with ReLU's derivative from the bit mask the forward wrote
// (cuBLASLt's format, as its DRELU epilogue reads it) or from A_prev. The small-batch forward
// kernel's structure (cuda_small_batch_forward.cuh): a block owns 32 of the layer's input features
// and a share of the output features (a cluster's blocks split them on compute capability 9.0), its
// 8 warps split the share, sums in fp32 through shared memory in a fixed order; W is
// read transposed, paired row by row in registers (small_batch_backward_data_layout.h). Why: at
// batch 32 it is the seed MLP's 32 x 1000 x 3000 product and a 32 x 16 x 1000 one, which cuBLASLt
// runs as general GEMMs (split K where it chose). Chosen by MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 (or
// the backend's setter) until a GPU has measured it.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_max_abs.cuh"
#include "backend/cuda/small_batch_forward_layout.h"

namespace mpt {

// Whether the current device can run it (as small_batch_forward_available()).
bool small_batch_backward_data_available();

// Whether the kernel covers `args`: 1 to 64 rows, a fp16/bf16 compute dtype, both feature counts
// multiples of 8 (16-byte rows of dZ, 8-byte pieces of W's). Any input-gradient dtype; every
// activation of A_prev but softmax.
bool small_batch_backward_data_applies(const DenseBackwardDataArgs& args);

// The kernel's arguments: the op's, and the max_abs pass's cells and ticket for the maxima it takes
// (args' input_grad_max_abs and input_max_abs; both null: none), which it leaves zero as the pass does.
struct SmallBatchBackwardDataLaunch {
    DenseBackwardDataArgs data;
    MaxAbsScratch scratch;
};

// args as small_batch_backward_data_applies says, operands 16-byte aligned (dense_backward_data's
// checks), `split` as small_batch_backward_data_split gave it. `read_mask`: ReLU's derivative from args.relu_mask,
// which the forward wrote for exactly these rows and features; otherwise from args.input. `take_maxima`:
// also writes the maxima args asks for (as max_abs would), through `max_abs_scratch`.
void run_small_batch_backward_data(const DenseBackwardDataArgs& args, const small_batch_mma::SplitK& split,
                                   bool read_mask, bool take_maxima, const MaxAbsScratch& max_abs_scratch,
                                   cudaStream_t stream);

// The blocks along the output features (one cluster) for `args` on the current device, as
// small_batch_forward_split: asked when the op is planned.
small_batch_mma::SplitK small_batch_backward_data_split(const DenseBackwardDataArgs& args);

}  // namespace mpt
