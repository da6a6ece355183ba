// What the two small-batch tensor-core kernels share (cuda_small_batch_forward.cu and
// cuda_small_batch_backward_data.cu, laid out in small_batch_forward_layout.h): their operand
// loads, which give zeros where there is nothing to load; the sum of their warps' partial sums
// through shared memory, then of the blocks that split K through the cluster's shared memory, each
// in a fixed order; their launch.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/small_batch_forward_layout.h"
#include "core/dtype.h"

namespace mpt::small_batch_mma {

template <int kTiles>
constexpr int kStepsInFlight = steps_in_flight(kTiles);

// 8 elements (16 bytes) of `row` from k, or zeros where `present` is false (past K, a feature or the batch).
__device__ __forceinline__ uint4 load_chunk(const uint16_t* row, int64_t k, bool present) {
    if (!present) return make_uint4(0u, 0u, 0u, 0u);
    return __ldg(reinterpret_cast<const uint4*>(row + k));
}

// 4 elements (8 bytes) of `row` from k, or zeros.
__device__ __forceinline__ uint2 load_half_chunk(const uint16_t* row, int64_t k, bool present) {
    if (!present) return make_uint2(0u, 0u);
    return __ldg(reinterpret_cast<const uint2*>(row + k));
}

// A chunk's words, for the layout's register functions.
__device__ __forceinline__ void to_words(uint32_t (&words)[4], const uint4& chunk) {
    words[0] = chunk.x;
    words[1] = chunk.y;
    words[2] = chunk.z;
    words[3] = chunk.w;
}

// The batch rows of the B operand (X in the forward, dZ in the backward: [rows][stride], 16-bit) whose
// chunks a lane loads for each 8-row mma tile j, and whether each exists.
template <int kTiles>
struct BatchOperand {
    const uint16_t* row[kTiles];
    bool present[kTiles];

    __device__ __forceinline__ BatchOperand(const uint16_t* matrix, int64_t rows, int64_t stride, int lane) {
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            const int r = b_row(lane, j);
            present[j] = r < rows;
            row[j] = matrix + (present[j] ? r : 0) * stride;
        }
    }

    // Each tile's chunk at k (zeros past the batch, or where `in_k` is false).
    __device__ __forceinline__ void load(uint32_t (&chunks)[kTiles][4], int64_t k, bool in_k) const {
#pragma unroll
        for (int j = 0; j < kTiles; ++j) to_words(chunks[j], load_chunk(row[j], k, in_k && present[j]));
    }
};

// One mma k-step h (0, 1) of a step for A tile `a_fragment` against every batch tile's chunk.
template <typename T, int kTiles>
__device__ __forceinline__ void mma_batch_tiles(float (&sums)[kTiles][4], const uint32_t (&a_fragment)[4],
                                                const uint32_t (&chunks)[kTiles][4], int h) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        const uint32_t b_fragment[2] = {b_register(chunks[j], h, 0), b_register(chunks[j], h, 1)};
        mma_16x8x16<T>(sums[j], a_fragment, b_fragment);
    }
}

// The block's sums of every warp, in `partial` ([kSlots][8 kTiles][kFeatures] floats): warp
// w + kSlots stores its sums, then warp w adds its own to them. Each place is one lane's of each
// warp (feature_of(lane, m, c) and accumulator_row place the accumulators), so the order of every
// sum is fixed. Called by all the block's threads; the slots are complete when it returns.
template <int kTiles, typename FeatureOf>
__device__ __forceinline__ void add_warp_sums(float* partial, const float (&sums)[kMmaRows][kTiles][4], int warp,
                                              int lane, FeatureOf feature_of) {
    const auto to_partial = [&](bool add) {
#pragma unroll
        for (int m = 0; m < kMmaRows; ++m)
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    float& place = partial[partial_index(warp % kSlots, accumulator_row(lane, j, c),
                                                         feature_of(lane, m, c), 8 * kTiles)];
                    place = add ? sums[m][j][c] + place : sums[m][j][c];
                }
    };
    if (warp >= kSlots) to_partial(false);
    __syncthreads();
    if (warp < kSlots) to_partial(true);
    __syncthreads();
}

// The whole block's sums, once add_warp_sums has returned, folded into slot 0: each place by the
// thread that reads its slots (slot 0 first, then the others in order). The block's own sums are
// ready for split_sum after the next sync_split_blocks().
template <int kTiles>
__device__ __forceinline__ void fold_slots(float* partial) {
    constexpr int kPlaces = 8 * kTiles * kFeatures;
    for (int place = static_cast<int>(threadIdx.x); place < kPlaces; place += kThreads) {
        const int row = place / kFeatures, feature = place % kFeatures;
        float sum = partial[partial_index(0, row, feature, 8 * kTiles)];
#pragma unroll
        for (int slot = 1; slot < kSlots; ++slot) sum += partial[partial_index(slot, row, feature, 8 * kTiles)];
        partial[partial_index(0, row, feature, 8 * kTiles)] = sum;
    }
}

// A barrier over the blocks that split K (gridDim.x of them, one cluster; one block: __syncthreads),
// whose shared-memory writes before it the others' reads after it see (sync_cluster_blocks). Every
// thread of every block must reach it: no thread returns early.
__device__ __forceinline__ void sync_split_blocks() { sync_cluster_blocks(); }

// Block `split`'s folded sums (its `partial`, through distributed shared memory; this block's own
// where K is not split). Below compute capability 9.0 split_k gives one split.
__device__ __forceinline__ const float* split_partials(float* partial, int split) {
    return cluster_block_shared(partial, split);
}

// The cluster's sum for (row, feature) after fold_slots and sync_split_blocks: split 0's, then
// each next split's added in order, whichever block asks (the sums are deterministic).
template <int kTiles>
__device__ __forceinline__ float split_sum(float* partial, int row, int feature) {
    const int place = partial_index(0, row, feature, 8 * kTiles);
    float sum = split_partials(partial, 0)[place];
    for (int split = 1; split < static_cast<int>(gridDim.x); ++split) sum += split_partials(partial, split)[place];
    return sum;
}

// The instance of a small-batch kernel template for the compute dtype (fp16 or bf16) and `rows`:
// Instances::get<T, kTiles>() names it (one kernel template per file).
template <typename Instances>
auto small_batch_instance(DType compute, int64_t rows) {
    const bool bf16 = compute == DType::bf16;
    switch (batch_tiles(rows)) {
        case 1:
            return bf16 ? Instances::template get<__nv_bfloat16, 1>() : Instances::template get<__half, 1>();
        case 2:
            return bf16 ? Instances::template get<__nv_bfloat16, 2>() : Instances::template get<__half, 2>();
        case 4:
            return bf16 ? Instances::template get<__nv_bfloat16, 4>() : Instances::template get<__half, 4>();
        default:
            return bf16 ? Instances::template get<__nv_bfloat16, 8>() : Instances::template get<__half, 8>();
    }
}

// Whether `Instances`' kernels run here (mma.m16n8k16: compute capability 8.0 and up, and their code
// for it), asked of one instance: every instance is compiled for the same architectures.
template <typename Instances>
bool instances_run_on_current_device() {
    return mma_runs_on_current_device(reinterpret_cast<const void*>(Instances::template get<__nv_bfloat16, 4>()));
}

// The split of K for `Instances`' kernel of `compute` and `rows` over `feature_tiles` blocks, on the
// current device: split_k, with clusters where the kernel's code and the device have them and can
// place them. Asked when an op is planned; launch_small_batch takes it.
template <typename Instances>
SplitK instance_split(DType compute, int64_t rows, int64_t k_total, int64_t feature_tiles) {
    const void* kernel = reinterpret_cast<const void*>(small_batch_instance<Instances>(compute, rows));
    int device = 0, multiprocessors = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        cudaGetLastError();
        multiprocessors = 0;  // one block a tile
    }
    const int tiles = batch_tiles(rows);
    const SplitK split =
        split_k(k_total, feature_tiles, multiprocessors, cluster_launch_runs_on_current_device(kernel), tiles);
    if (split.splits == 1 || clusters_fit(kernel, split.splits, feature_tiles, kThreads)) return split;
    return split_k(k_total, feature_tiles, multiprocessors, false, tiles);
}

// Launches `Instances`' kernel for `compute` and `rows` as (args, k per block): grid (splits,
// feature tiles), one cluster of the splits along x.
template <typename Instances, typename Args>
void launch_small_batch(const char* name, DType compute, int64_t rows, const SplitK& split, int64_t feature_tiles,
                        cudaStream_t stream, const Args& args) {
    launch_kernel_in_clusters(name, static_cast<unsigned>(split.splits), small_batch_instance<Instances>(compute, rows),
                              dim3(static_cast<unsigned>(split.splits), static_cast<unsigned>(feature_tiles)),
                              dim3(kThreads), 0, stream, args, split.k_per_block);
}

}  // namespace mpt::small_batch_mma
