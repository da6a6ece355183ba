// Where the small-batch forward kernel (cuda_small_batch_forward.cu) loads its operands and puts
// its sums, as plain functions that the kernel calls and a CPU test
// (tests/test_small_batch_mma_layout.cpp) checks: every lane's loads and an emulated
// mma.m16n8k16 (the PTX ISA's fragment layout) against the product computed directly.
//
// The product is Z[r][f] = sum_k X[r][k] W[f][k] (r: batch rows, f: output features, k: input
// features). As the mma's D = A_m B_m, M is f, N is r and K is k: A_m[f][k] = W[f][k] and
// B_m[k][r] = X[r][k], both contiguous along k in memory, as the mma wants its element pairs.
//
// A sum's terms can be added in any order, so the mma's k need not be memory's k, as long as A_m and
// B_m agree. The ISA gives lane (g = lane / 4, t = lane % 4) the k pairs 2t and 2t + 8 of each
// 16-wide k-step; here the lane loads 8 consecutive elements (16 bytes) of each of its rows of W and
// X at k = 8t of a 32-wide step, and hands words 0 and 1 to the step's first mma, words 2 and 3 to
// its second: every operand straight from global memory in 16-byte loads, no shared-memory staging.
// Loads out of range (past K, past the layer's features, past the batch) are zeros.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host_device.h"

namespace mpt::small_batch_mma {

constexpr int kThreads = 256;  // 8 warps, each a share of K
constexpr int kWarps = kThreads / 32;
constexpr int kMmaRows = 2;               // 16-feature mma tiles (M) of a warp
constexpr int kFeatures = 16 * kMmaRows;  // output features of a block
constexpr int kStepK = 32;                // k of a warp's step: 4 lanes of 8 elements, 2 mma k-steps
constexpr int kBlockStepK = kWarps * kStepK;
constexpr int kMaxRows = 64;                 // batch rows at most: 8 mma tiles (N) of 8
constexpr int kElementsPerLoad = 8;          // 16 bytes of 16-bit elements
constexpr int64_t kMaxFeatureTiles = 65535;  // blocks of kFeatures: gridDim.y's limit
// Partial sums the block adds across its warps, in shared memory: warps w and w + kSlots share
// slot w (the second adds its sums to the first's), so the slots take half the warps' space.
constexpr int kSlots = kWarps / 2;

// The batch's 8-row mma tiles (N) a kernel instance covers for `rows` rows (1 to kMaxRows): 1, 2, 4
// or 8, so that four instances serve every batch.
MPT_HOST_DEVICE int batch_tiles(int64_t rows) { return rows <= 8 ? 1 : rows <= 16 ? 2 : rows <= 32 ? 4 : 8; }

// The first k of the 16-byte chunk that `lane` of `warp` loads in step `step` (0 ..): the block's
// 8 warps cover 256 consecutive k per step, so its loads of one row are contiguous.
MPT_HOST_DEVICE int64_t chunk_k(int64_t step, int warp, int lane) {
    return (step * kWarps + warp) * kStepK + kElementsPerLoad * (lane & 3);
}

// The block's feature (0 .. kFeatures - 1) whose row of W `lane` loads for mma tile `m`: row g
// (half 0) and row g + 8 (half 1) of the tile, as the ISA places A_m's rows.
MPT_HOST_DEVICE int a_feature(int lane, int m, int half) { return 16 * m + (lane >> 2) + 8 * half; }

// A register r (0..3) of the step's mma h (0, 1) is word a_word(h, r) of the lane's chunk of the row
// a_feature(lane, m, r & 1): the ISA's registers 0 and 1 are rows g and g + 8 at k pair 2t,
// registers 2 and 3 the same rows at k pair 2t + 8.
MPT_HOST_DEVICE int a_word(int h, int r) { return 2 * h + (r >> 1); }

// A register r of the step's mma h, from the lane's chunks of its two rows of W in mma tile m (row
// g's 4 words, then row g + 8's): the kernel and the CPU test both build the fragment with it.
MPT_HOST_DEVICE uint32_t a_register(const uint32_t (&rows)[2][4], int h, int r) { return rows[r & 1][a_word(h, r)]; }

// The batch row whose X chunk `lane` loads for mma tile `j` (N): the tile's column g.
MPT_HOST_DEVICE int b_row(int lane, int j) { return 8 * j + (lane >> 2); }

// B register r (0, 1) of mma h is word b_word(h, r) of that chunk: k pair 2t, then 2t + 8.
MPT_HOST_DEVICE int b_word(int h, int r) { return 2 * h + r; }
MPT_HOST_DEVICE uint32_t b_register(const uint32_t (&chunk)[4], int h, int r) { return chunk[b_word(h, r)]; }

// Accumulator c (0..3) of mma tiles (m, j) holds Z for this feature and batch row (the ISA's c(c)).
MPT_HOST_DEVICE int accumulator_feature(int lane, int m, int c) { return 16 * m + (lane >> 2) + 8 * (c >> 1); }
MPT_HOST_DEVICE int accumulator_row(int lane, int j, int c) { return 8 * j + 2 * (lane & 3) + (c & 1); }

// A partial sum's place in shared memory: [slot][batch row][feature], `padded_rows` rows a slot.
MPT_HOST_DEVICE int partial_index(int slot, int row, int feature, int padded_rows) {
    return (slot * padded_rows + row) * kFeatures + feature;
}

// Steps (kBlockStepK each) whose loads a warp issues together before its mma instructions, for
// `tiles` batch tiles: 2 up to 4 tiles, 1 at 8, whose accumulators alone take 64 registers; so that
// the kernels stay under 128 registers and 2 blocks share an SM (kBlocksPerMultiprocessor).
MPT_HOST_DEVICE constexpr int steps_in_flight(int tiles) { return tiles <= 4 ? 2 : 1; }
constexpr int kBlocksPerMultiprocessor = 2;

// K split across the blocks of a thread-block cluster (compute capability 9.0). Why: with one block
// per 32 output features, the seed MLP's layers at batch 32 were 94, 32 and 1 blocks on an H200's
// 132 SMs, each alone on its SM: 13.2, 11.7 and 6.1 us for 18 MB, 6 MB and 32 KB of weights (ncu,
// 2026-12-05), about 15 GB/s a block, 3 rounds of loads in a row in each. Split, a block has fewer
// rounds and a layer fills more of the SMs; the cluster's blocks add their sums through each
// other's shared memory, in split order.
constexpr int kMaxSplits = 8;           // the portable cluster size
constexpr int kMinSplitK = 4 * kStepK;  // the least K of a split on average: half the block's warps a step

struct SplitK {
    int splits = 1;                // blocks along K, one cluster (gridDim.x)
    int64_t k_per_block = kStepK;  // a multiple of kStepK; the last block's share may be shorter
};

// The first k of block `split`'s share, and the end of it (K a multiple of 8, so is the end).
MPT_HOST_DEVICE int64_t split_k_begin(int split, int64_t k_per_block) { return split * k_per_block; }
MPT_HOST_DEVICE int64_t split_k_end(int split, int64_t k_per_block, int64_t k_total) {
    const int64_t end = split_k_begin(split, k_per_block) + k_per_block;
    return end < k_total ? end : k_total;
}
// The block steps that cover a share from k_begin to k_end (every warp takes its 32 k of each).
MPT_HOST_DEVICE int64_t split_steps(int64_t k_begin, int64_t k_end) {
    return (k_end - k_begin + kBlockStepK - 1) / kBlockStepK;
}

// What a split costs, in rounds of loads a block waits for one after another, times the waves of
// blocks the launch takes: a block's share in groups of `steps_in_flight` steps, plus one round for
// its fixed work (the launch, the barriers, the epilogue), for each wave of `capacity` blocks. A
// model, not a measurement: at batch 32 the first kernel took about 4 us a round (13.2 us, 3
// rounds); its ranking of the splits is what the profile checks.
inline int64_t split_rounds(int64_t k_total, int64_t splits, int64_t feature_tiles, int64_t capacity,
                            int steps_at_once) {
    const auto divide_up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    const int64_t share = divide_up(divide_up(k_total, splits), kStepK) * kStepK;
    const int64_t waves = divide_up(splits * feature_tiles, capacity);
    return waves * (divide_up(split_steps(0, share), steps_at_once) + 1);
}

// The split of `k_total` (the product's K, a multiple of 8) for `feature_tiles` blocks of kFeatures
// on `multiprocessors` SMs of kBlocksPerMultiprocessor blocks, for a kernel of `batch_tile_count`
// batch tiles: the fewest rounds (split_rounds), the fewer blocks where two tie; one block per tile
// where the device has no clusters.
inline SplitK split_k(int64_t k_total, int64_t feature_tiles, int multiprocessors, bool clusters,
                      int batch_tile_count = 4) {
    const auto divide_up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    SplitK split;
    if (k_total <= 0) return split;
    int64_t splits = 1;
    const int64_t capacity = int64_t{multiprocessors} * kBlocksPerMultiprocessor;
    if (clusters && feature_tiles > 0 && capacity > 0) {
        const int64_t most = std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, divide_up(k_total, kMinSplitK)));
        const int steps_at_once = steps_in_flight(batch_tile_count);
        for (int64_t candidate = 2; candidate <= most; ++candidate)
            if (split_rounds(k_total, candidate, feature_tiles, capacity, steps_at_once) <
                split_rounds(k_total, splits, feature_tiles, capacity, steps_at_once))
                splits = candidate;
    }
    split.k_per_block = divide_up(divide_up(k_total, splits), kStepK) * kStepK;
    split.splits = static_cast<int>(divide_up(k_total, split.k_per_block));  // none empty
    return split;
}

// The batch rows whose outputs block `split` of `splits` writes, a warp per row: from
// epilogue_first_row, every epilogue_row_stride (each row by one warp of one block of the cluster).
MPT_HOST_DEVICE int64_t epilogue_first_row(int split, int splits, int warp) {
    return split + static_cast<int64_t>(splits) * warp;
}
MPT_HOST_DEVICE int64_t epilogue_row_stride(int splits) { return static_cast<int64_t>(splits) * kWarps; }

// The epilogue: a warp per batch row, a lane per feature (kFeatures == 32), so a row's outputs are
// one contiguous store and its ReLU mask bits one 32-bit ballot.
static_assert(kFeatures == 32, "a lane per feature in the epilogue");

// The bit of cuBLASLt's ReLU mask for (feature, row): a column-major bit matrix of the transposed
// output [features, rows], `ld_bits` (a multiple of 128) bits per batch row. A block's 32 features
// start at a multiple of 32, so its bits of one row are one aligned 32-bit word, feature f0 + i at
// bit i.
MPT_HOST_DEVICE int64_t mask_bit(int64_t feature, int64_t row, int64_t ld_bits) { return row * ld_bits + feature; }

}  // namespace mpt::small_batch_mma
