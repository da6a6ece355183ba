// The fused SGD kernel's launch (cuda_fused_sgd.cu): its arguments, the step's scalars read from the
// device's TrainState, the element conversions, and the grid. A block gets a strip of 128 input
// columns and a run of consecutive 32-row tiles of output rows, as many blocks as are resident at once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_step_state.cuh"
#include "backend/cuda/fused_sgd_grid_layout.h"

namespace mpt {

constexpr int kFusedSgdStripColumns = fused_sgd_tiles::kStripColumns;  // input columns a block owns
constexpr int kFusedSgdTileRows = fused_sgd_tiles::kTileRows;          // output rows a block updates at a time

struct FusedSgdLaunch {
    const void* output_grad;  // dZ [rows, out]
    const void* input;        // A [rows, in]
    float* weights;
    float* bias;
    void* low_weights;
    void* low_bias;
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    int64_t tiles_per_block;  // consecutive 32-row tiles a block walks through
    OptimizerConfig optimizer;
    const TrainState* state;
    FusedSgdDecision decision;  // the step's decision, where this launch takes it (max_abs_pairs null: not)
};

// The masters' loads and stores. In a mixed-precision step the masters are read and written once,
// and no kernel reads them again before the next step's update (but weight averaging, right after,
// when it is on), while the low-precision copies written beside them are what the next step's
// forward reads first: the masters go through L2 as streaming data (evict first), so that L2 keeps
// the copies (24.5 MB for the seed MLP; an H200's L2 holds 50). In fp32 (T float: no copy) the
// forward reads the masters themselves: plain accesses.
template <typename T, typename V>
__device__ __forceinline__ V load_master(const V* address) {
    if constexpr (std::is_same_v<T, float>)
        return *address;
    else
        return __ldcs(address);
}
template <typename T, typename V>
__device__ __forceinline__ void store_master(V* address, V value) {
    if constexpr (std::is_same_v<T, float>)
        *address = value;
    else
        __stcs(address, value);
}

// The launch's arguments, tiles_per_block still unset (fused_sgd_grid sets it).
inline FusedSgdLaunch fused_sgd_launch(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    FusedSgdLaunch launch{};
    launch.output_grad = args.output_grad;
    launch.input = args.input;
    launch.weights = args.weights;
    launch.bias = args.bias;
    launch.low_weights = args.low_weights;
    launch.low_bias = args.low_bias;
    launch.rows = args.rows;
    launch.in_features = args.in_features;
    launch.out_features = args.out_features;
    launch.optimizer = optimizer;
    launch.state = args.state;
    return launch;
}

// The layers one launch updates: a step's consecutive fused SGD updates (of one kernel variant) are
// one launch (CudaBackend's grouped SGD), so that no layer waits for the one before it to drain (the
// small last layer's few blocks run beside the large ones), and a single update is a group of one.
// Blocks [first_block[l], first_block[l + 1]) are layer l's, its column strips times runs of tiles.
struct FusedSgdGroup {
    FusedSgdLaunch layers[kFusedSgdMaxLayers];
    unsigned first_block[kFusedSgdMaxLayers + 1];
    int count;
    FusedSgdFinish finish;  // finish.state null: the launch does not finish the step
};

// The step's finish_step in the launch's last block to end (FusedSgdFinish), called by every block
// after its update: each block's thread 0 takes a ticket once all the block's threads are done with
// the state, and the last ticket's thread finishes the step. (No shared memory: the CUDA-core
// kernel's 48 KiB of static shared memory are all taken.)
__device__ __forceinline__ void finish_step_in_last_block(const FusedSgdFinish& finish) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    __threadfence();
    if (atomicInc(finish.counter, gridDim.x - 1) != gridDim.x - 1) return;  // wraps to 0 on the last ticket
    __threadfence();
    finish_step_on_device(finish.state, finish.scaler, finish.metrics, finish.committed_metrics);
}

// This block's layer in its group, and its column strip and run of row tiles in that layer (what a
// launch of one layer took from blockIdx.x and blockIdx.y).
struct FusedSgdBlock {
    int layer;
    int64_t strip, run;
};
__device__ __forceinline__ FusedSgdBlock fused_sgd_block(const FusedSgdGroup& group) {
    FusedSgdBlock block{};
    block.layer = fused_sgd_tiles::block_layer(group.first_block, group.count, blockIdx.x);
    const int64_t local = blockIdx.x - group.first_block[block.layer];
    const int64_t strips = fused_sgd_tiles::strips(group.layers[block.layer].in_features);
    block.strip = fused_sgd_tiles::block_strip(local, strips);
    block.run = fused_sgd_tiles::block_run(local, strips);
    return block;
}

// Calls update(layer, strip, run) with this block's layer of the group, its column strip and its run
// of row tiles. The layer is picked by a switch, so that each case reads its layer's arguments at
// fixed offsets of the kernel's parameters, as instruction operands: read through an index, each
// field took a register (the CUDA-core kernel went from 128 to 143, half the blocks per SM).
// kLayers: 1 for a kernel that launches one layer (the code of a single case, as before groups), or
// kFusedSgdMaxLayers.
template <int kLayers, typename Update>
__device__ __forceinline__ void update_this_blocks_layer(const FusedSgdGroup& group, const Update& update) {
    static_assert(kLayers == 1 || kLayers == kFusedSgdMaxLayers, "one layer, or a group");
    static_assert(kFusedSgdMaxLayers == 4, "a case per layer");
    const FusedSgdBlock block = fused_sgd_block(group);
    if constexpr (kLayers == 1) {
        update(group.layers[0], block.strip, block.run);
        return;
    }
    switch (block.layer) {
        case 0: update(group.layers[0], block.strip, block.run); return;
        case 1: update(group.layers[1], block.strip, block.run); return;
        case 2: update(group.layers[2], block.strip, block.run); return;
        default: update(group.layers[3], block.strip, block.run); return;
    }
}

// Whether the step's decision taken in this launch skips the update: decide_update's proof over the
// pairs, an empty input's entry as 0 (FusedSgdDecision). False where the launch takes none.
__device__ __forceinline__ bool fused_sgd_decision_skips(const FusedSgdDecision& decision) {
    if (!decision.max_abs_pairs) return false;
    for (int layer = 0; layer < decision.layer_count; ++layer) {
        const int entry = 2 * layer;
        const float output_grad = (decision.empty_entries >> entry & 1u) ? 0.0f : decision.max_abs_pairs[entry];
        const float input = (decision.empty_entries >> (entry + 1) & 1u) ? 0.0f : decision.max_abs_pairs[entry + 1];
        if (!gradient_bound_finite(output_grad, input, decision.rows)) return true;
    }
    return false;
}

// What a block starts from: the consecutive row tiles of its run (none past the last) and the
// step's scalars. active false: the block writes nothing, because it has no tile or the step is
// skipped (found_inf); the same for every thread, so a kernel returns on it before any barrier.
struct FusedSgdBlockStart {
    int64_t first_tile, end_tile;
    OptimizerStepScalars scalars;
    bool active;
};
__device__ __forceinline__ FusedSgdBlockStart fused_sgd_block_start(const FusedSgdLaunch& p, int64_t run) {
    FusedSgdBlockStart start{};
    // The step's decision where this launch takes it: every block finds the same, and block 0 (before
    // it returns, tile or not) also leaves it in found_inf for what runs after the launch, and the
    // pass's 0s where its inputs were empty. Another thread reading found_inf meanwhile finds 0 or 1,
    // and the same answer either way; the write and the reads are atomics, so that they are no data
    // race (the race check, tests/cuda_emulation/race_check.h, found the plain ones).
    const bool decided_skip = fused_sgd_decision_skips(p.decision);
    if (p.decision.max_abs_pairs && blockIdx.x == 0 && threadIdx.x == 0) {
        if (decided_skip) atomicExch(&p.decision.state->found_inf, 1);
        for (int entry = 0; entry < kMaxAbsInputs; ++entry)
            if (p.decision.empty_entries >> entry & 1u) p.decision.max_abs_pairs[entry] = 0.0f;
    }
    start.first_tile = fused_sgd_tiles::run_first_tile(run, p.tiles_per_block);
    start.end_tile = fused_sgd_tiles::run_end_tile(run, p.tiles_per_block, p.out_features);
    if (start.first_tile >= start.end_tile) return start;
    if (load_relaxed(&p.state->found_inf) || decided_skip) return start;
    start.scalars = plain_step_scalars(p.optimizer, p.state->loss_scale, p.state->steps);
    start.active = true;
    return start;
}

// The grid for `kernel` (blocks of `threads`, each with `dynamic_shared` bytes of dynamic shared
// memory): as many blocks as are resident at once, shared among
// the group's layers in proportion to their weights, each layer's its column strips times runs of
// row tiles (at least one run per strip); sets each layer's tiles_per_block and the group's
// first_block. A group of one gets the grid a launch of its layer alone had.
inline unsigned fused_sgd_grid(const void* kernel, int threads, FusedSgdGroup& group, int dynamic_shared = 0) {
    int device = 0, multiprocessors = 1, per_multiprocessor = 1;
    MPT_CUDA_CHECK(cudaGetDevice(&device));
    MPT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads,
                                                      static_cast<size_t>(dynamic_shared)) != cudaSuccess ||
        per_multiprocessor < 1) {
        cudaGetLastError();  // (not sticky) a grid of one block per multiprocessor is still right, if slower
        per_multiprocessor = 1;
    }
    const int64_t resident = static_cast<int64_t>(multiprocessors) * per_multiprocessor;
    fused_sgd_tiles::LayerShape shapes[kFusedSgdMaxLayers];
    for (int l = 0; l < group.count; ++l) shapes[l] = {group.layers[l].in_features, group.layers[l].out_features};
    const fused_sgd_tiles::Grid grid = fused_sgd_tiles::plan(shapes, group.count, resident);
    require(grid.blocks <= 0x7fffffff, MPT_STATUS_UNSUPPORTED, "cuda backend: layers too large for fused SGD");
    for (int l = 0; l < group.count; ++l) group.layers[l].tiles_per_block = grid.tiles_per_block[l];
    for (int l = 0; l <= group.count; ++l) group.first_block[l] = static_cast<unsigned>(grid.first_block[l]);
    return static_cast<unsigned>(grid.blocks);
}

// One of the kernels, as the layers it can update in one launch: those of equal variants share one.
// Each variant is compiled twice: for one layer (single) and for a group of up to
// kFusedSgdMaxLayers (group), whose four cases are 3.8 times the code. dynamic_shared: the bytes of
// dynamic shared memory a block takes (the bulk-copy kernel's; 0 for the CUDA-core kernel's).
struct FusedSgdVariant {
    void (*single)(FusedSgdGroup);
    void (*group)(FusedSgdGroup);
    int dynamic_shared;
    bool operator==(const FusedSgdVariant& other) const {
        return group == other.group && dynamic_shared == other.dynamic_shared;
    }
};

}  // namespace mpt
