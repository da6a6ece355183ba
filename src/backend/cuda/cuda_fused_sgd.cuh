// Plain SGD for small batches without a weight gradient in memory. With K = rows <= 64 the weight
// gradient dZ^T·A is cheap to compute on CUDA cores, while GEMM-then-update would write it in fp32
// and read it back: one kernel computes 32 x 128 tiles of it in registers from the batch held in
// shared memory and applies the element rule (w -= lr · g / loss_scale, after weight decay's
// w -= lr · decay · w when set) to the fp32 masters, writing the low-precision
// copy in the same pass (per weight: one read, two writes). Bias rows are updated by the first column
// strip's blocks. It reads the step's TrainState from device memory and leaves every byte untouched when
// found_inf is set, so the skip needs no host and no graph conditional.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/fused_sgd_grid_layout.h"

namespace mpt {

constexpr int64_t kFusedSgdMaxRows = 64;

// Plain SGD (no momentum) on a whole, unclipped batch: the update the fused kernels compute (they take
// no gradient factor; this backend clips from the gradients, in parts).
inline bool fused_sgd_rule_applies(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    return is_plain_sgd(optimizer) && args.rows > 0 && args.part == UpdatePart::whole &&
           args.gradient_factor == nullptr;
}

// ... on a batch of at most kFusedSgdMaxRows rows: the CUDA-core kernel's (the bulk-copy kernel,
// cuda_fused_sgd_bulk_copy.cuh, takes up to 256 where it applies).
inline bool fused_sgd_applies(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    return fused_sgd_rule_applies(args, optimizer) && args.rows <= kFusedSgdMaxRows;
}

// Which compilation of the kernel runs; each computes the same numbers. three_blocks: held to 3
// blocks an SM (MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1), else ptxas's own register count (2 blocks an
// SM on sm_90). exact_rows: for batches of exactly kFusedSgdExactRows rows, the seed recipe's
// (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1; other batches take the kernel for any rows): the row loops
// unrolled whole, shared memory and dZ's staging for those rows alone (24 KiB instead of 48), and
// whole tiles' masters loaded and stored without edge checks: about 30% fewer instructions a
// tile in the sm_90 code, where ncu found the kernel issuing in 64% of cycles at batch 32.
// bulk_copy_layers: bit l set, layer l of the call takes the bulk-copy kernel instead (its plan chose
// it: MPTRAIN_CUDA_BULK_COPY_SGD=1, cuda_fused_sgd_bulk_copy.cuh; the weight gradient summed in another
// order); the others take the CUDA-core kernel as the other two choose.
struct FusedSgdKernelChoice {
    bool three_blocks = false;
    bool exact_rows = false;
    unsigned bulk_copy_layers = 0;
};
// A step's decide_update taken by its first update launch (CudaBackend's fold, where the step's
// max_abs pass has nothing to read: every maximum was taken as its tensor was written, so the pass
// would be a launch for one thread's arithmetic). Every block of the launch reads the pairs and
// decides for itself before it writes anything, the same way as decide_update and the others;
// block 0 also sets found_inf for what runs after the launch (later updates, finish_step, or a
// grouped launch's last block, whose ticket comes after block 0's). max_abs_pairs null: none.
struct FusedSgdDecision {
    float* max_abs_pairs = nullptr;  // decide_update's (max|dZ_i|, max|A_prev_i|) per layer: the pass's results
    int layer_count = 0;             // 1 to kMaxAbsInputs / 2
    int64_t rows = 0;
    TrainState* state = nullptr;  // the state the updates read
    // Bit k: the pass's input k was empty (a batch whose values decide as none): entry k counts as 0,
    // the pass's result there, and block 0 writes that 0 as the pass would have (no block reads it).
    unsigned empty_entries = 0;
};

constexpr int64_t kFusedSgdExactRows = 32;

// Whether an update takes the exact-rows compilation under exact_rows: kFusedSgdExactRows rows and
// the vector path (in_features a multiple of 4, the masters and copies aligned).
bool fused_sgd_exact_rows_applies(const DenseUpdateArgs& args);

void run_fused_sgd(const DenseUpdateArgs& args, const OptimizerConfig& optimizer, FusedSgdKernelChoice choice,
                   cudaStream_t stream, const FusedSgdDecision* decision = nullptr);

// Three blocks of the kernel's 48 KiB of static shared memory need more of an SM's unified L1 and
// shared memory than the driver picks for two (132 KiB on an H200): this asks each 3-blocks kernel
// for the least carveout that holds three (164 KiB there), not the largest, since the rest is L1,
// which holds the kernel's spills. Once per device, before the kernels run (CudaBackend's
// constructor under MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1); errors leave the driver's choice.
void prepare_fused_sgd_three_blocks();

// Blocks of the vector kernel in `dtype` (single: for one layer, else for a group) resident on an
// SM of the current device (tests).
int fused_sgd_blocks_per_multiprocessor(DType dtype, FusedSgdKernelChoice choice, bool single);

// The most layers one launch updates (the seed MLP has 3).
constexpr int kFusedSgdMaxLayers = fused_sgd_tiles::kMaxLayers;

// Whether two updates may run side by side: neither writes a byte (masters, bias, low-precision
// copies) that the other reads (dZ, A) or writes. A trainer's layers always are; a direct user of
// the backend may hand it anything.
bool fused_sgd_updates_independent(const DenseUpdateArgs& first, const DenseUpdateArgs& second);

// A step's finish_step taken by its last update launch (CudaBackend's grouped SGD): the launch's last
// block to end advances the loss scaler and commits the metrics, once every block has read the
// state it updates by (a ticket counter that wraps itself back to 0). state null: none.
struct FusedSgdFinish {
    TrainState* state = nullptr;
    LossScalerConfig scaler;
    const double* metrics = nullptr;
    double* committed_metrics = nullptr;
    unsigned* counter = nullptr;  // 0 between launches, in a 256-byte sector of its own
};

// `count` (1 to kFusedSgdMaxLayers) updates, layers[l] by optimizers[l], that each
// fused_sgd_applies, of distinct layers (nothing one writes is read or written by another): one
// launch for each run of consecutive layers that share a kernel (dtype, alignment, batch rows), in
// which they are updated side by side; so the seed MLP's three layers in mixed precision are one
// launch instead of three. Each layer is updated as run_fused_sgd updates it, bit for bit. With
// `finish`, the last launch also finishes the step; with `decision`, each launch also takes the step's
// decision (the first decides; the others then find found_inf as it left it). Returns how many layers
// shared a launch with others.
int run_fused_sgd_layers(const DenseUpdateArgs* const* layers, const OptimizerConfig* const* optimizers, int count,
                         const FusedSgdFinish* finish, FusedSgdKernelChoice choice, cudaStream_t stream,
                         const FusedSgdDecision* decision = nullptr);

}  // namespace mpt
