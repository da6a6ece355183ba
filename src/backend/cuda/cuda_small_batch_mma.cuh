// What the two small-batch tensor-core kernels share (cuda_small_batch_forward.cu and
// cuda_small_batch_backward_data.cu, laid out in small_batch_forward_layout.h): their operand
// loads, which give zeros where there is nothing to load, and the sum of their warps' partial
// sums through shared memory in a fixed order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/small_batch_forward_layout.h"
#include "core/dtype.h"

namespace mpt::small_batch_mma {

// Steps whose loads a warp issues together before its mma instructions. The seed MLP's layers give
// fewer blocks than an H200 has SMs (94, 32 and 1 at batch 32, for 132), so a block has its SM to
// itself (launch bounds of 1 block): the registers a second block would take hold loads in flight
// instead, 4 steps (64 KB of W and X per SM per round trip at 4 tiles), 2 at 8 tiles, whose
// accumulators alone take 64 registers.
template <int kTiles>
constexpr int kStepsInFlight = kTiles <= 4 ? 4 : 2;

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

// The whole block's sum for (row, feature) once add_warp_sums has returned.
template <int kTiles>
__device__ __forceinline__ float block_sum(const float* partial, int row, int feature) {
    float sum = partial[partial_index(0, row, feature, 8 * kTiles)];
#pragma unroll
    for (int slot = 1; slot < kSlots; ++slot) sum += partial[partial_index(slot, row, feature, 8 * kTiles)];
    return sum;
}

// The instance of a small-batch kernel template for the compute dtype (fp16 or bf16) and `rows`:
// Instances::get<T, kTiles>() names it (one kernel template per file).
template <typename Instances>
auto small_batch_instance(DType compute, int64_t rows) {
    const bool bf16 = compute == DType::bf16;
    switch (batch_tiles(rows)) {
        case 1: return bf16 ? Instances::template get<__nv_bfloat16, 1>() : Instances::template get<__half, 1>();
        case 2: return bf16 ? Instances::template get<__nv_bfloat16, 2>() : Instances::template get<__half, 2>();
        case 4: return bf16 ? Instances::template get<__nv_bfloat16, 4>() : Instances::template get<__half, 4>();
        default: return bf16 ? Instances::template get<__nv_bfloat16, 8>() : Instances::template get<__half, 8>();
    }
}

}  // namespace mpt::small_batch_mma
