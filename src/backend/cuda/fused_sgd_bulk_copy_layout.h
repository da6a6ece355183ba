// Where the bulk-copy fused SGD kernel (cuda_fused_sgd_bulk_copy.cu) keeps its operands in shared
// memory and which of them each lane's ldmatrix addresses and mma accumulators stand for: host and
// device code, so that tests/test_fused_sgd_bulk_copy_layout.cpp checks on the CPU what the kernel
// computes with these functions (ldmatrix and mma emulated by the PTX ISA's layouts).
//
// A block owns a strip of kStripColumns input columns and walks a run of kTileRows-row tiles of
// the output rows (fused_sgd_grid_layout.h, as the CUDA-core kernel). Shared memory, in order:
//   - kStages mbarriers, one a stage, each completed by the bulk copies of its stage;
//   - the strip of A: padded_rows(rows) batch rows of kInputStride 16-bit elements (the strip's 128
//     columns, then 8 of padding), rows past the batch zero;
//   - kStages stages, each the tile's fp32 masters (kTileRows rows of kMasterStride floats: 128
//     columns, then 8 of padding) followed by the tile's dZ (padded_rows(rows) batch rows of
//     kOutputGradStride 16-bit elements: the tile's 32 outputs, then 8 of padding).
// The weight gradient of a tile is dZ^T A (M = the tile's 32 outputs, N = the strip's 128 columns,
// K = the batch rows), on mma.m16n8k16: warp w computes all 32 outputs of the strip's columns
// 16w .. 16w + 15, two 16-row mma tiles by two 8-column ones. Both operands are read with
// ldmatrix.trans from their batch-row-major staging: dZ as the A operand (A[m][k] = dZ[k][m]), the
// strip of A as the B operand (B[k][n] = A[k][n]); a warp's B fragments stay in registers for the
// whole run. The paddings put the 8 rows of each 8 x 8 matrix an ldmatrix reads, and the masters a
// warp reads at once, in distinct banks.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)  // (emulation: tests/cuda_emulation)
#define MPT_BULK_LAYOUT_FN __host__ __device__ __forceinline__
#else
#define MPT_BULK_LAYOUT_FN inline
#endif

namespace mpt {
namespace fused_sgd_bulk {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 32;                     // output rows a tile (fused_sgd_tiles::kTileRows)
constexpr int kStripColumns = 128;                // input columns a block's strip (fused_sgd_tiles::kStripColumns)
constexpr int kStages = 3;                        // tiles in shared memory at once: the one summed and two ahead
constexpr int kMasterStride = kStripColumns + 8;  // floats a staged master row
constexpr int kInputStride = kStripColumns + 8;   // 16-bit elements a staged row of A
constexpr int kOutputGradStride = kTileRows + 8;  // 16-bit elements a staged row of dZ (80 bytes)
constexpr int kWarpColumns = 16;                  // a warp's columns of the strip: two 8-column mma tiles
constexpr int kMmaRowTiles = kTileRows / 16;      // 16-row mma tiles a warp covers: all the tile's outputs
constexpr int kMmaColumnTiles = kWarpColumns / 8;
constexpr int kMaxRows = 256;  // the batch rows the kernel takes (past kFusedSgdMaxRows, the CUDA-core kernel's)
static_assert(kWarps * kWarpColumns == kStripColumns, "the warps cover the strip");

// The batch rows as the mma's K: the kernel is compiled for 32 (batches up to 32 rows), 64 and 256.
MPT_BULK_LAYOUT_FN int padded_rows(int rows) { return rows <= 32 ? 32 : rows <= 64 ? 64 : 256; }
// A compilation's index (FusedSgdBulkCopyDevice::runs): 0, 1, 2 for 32, 64, 256 rows.
MPT_BULK_LAYOUT_FN int compilation_index(int rows) { return rows <= 32 ? 0 : rows <= 64 ? 1 : 2; }
// Blocks an SM each compilation is compiled for (its launch bounds), as its shared memory allows on an
// H100 or H200 (shared_bytes: 67, 83 and 179 KiB).
MPT_BULK_LAYOUT_FN constexpr int blocks_per_multiprocessor(int padded) {
    return padded == 32 ? 3 : padded == 64 ? 2 : 1;
}

// The copies of a tile, one a row: its tile_rows master rows, then the batch's dZ rows, numbered
// 0 .. tile_rows + rows - 1 and dealt round the warps (copy c is warp c % kWarps's, lane
// (c / kWarps) % 32's, that lane's (c / (32 kWarps))-th). A warp issues its copies one lane at a
// time, so what bounds a tile's issue is the busiest warp's count: 8 at batch 32 (warp 0 alone
// issued all 64 until 2026-12-07, while the others waited at the tile's barrier), 36 at 256.
constexpr int kMaxCopiesPerLane = (kTileRows + kMaxRows + kThreads - 1) / kThreads;  // 2
MPT_BULK_LAYOUT_FN int tile_copy(int lane, int warp, int k) { return (k * 32 + lane) * kWarps + warp; }
// k-steps of 16 batch rows.
MPT_BULK_LAYOUT_FN int k_steps(int padded) { return padded / 16; }

constexpr int kBarrierBytes = 128;  // the stages' mbarriers (8 bytes each), the rest alignment
MPT_BULK_LAYOUT_FN int64_t input_bytes(int padded) { return static_cast<int64_t>(padded) * kInputStride * 2; }
MPT_BULK_LAYOUT_FN int64_t master_bytes() { return static_cast<int64_t>(kTileRows) * kMasterStride * 4; }
MPT_BULK_LAYOUT_FN int64_t output_grad_bytes(int padded) {
    return static_cast<int64_t>(padded) * kOutputGradStride * 2;
}
MPT_BULK_LAYOUT_FN int64_t stage_bytes(int padded) { return master_bytes() + output_grad_bytes(padded); }
MPT_BULK_LAYOUT_FN int64_t input_offset() { return kBarrierBytes; }
MPT_BULK_LAYOUT_FN int64_t stage_offset(int padded, int stage) {
    return kBarrierBytes + input_bytes(padded) + stage * stage_bytes(padded);
}
// The dynamic shared memory a block takes for batches that pad to `padded` rows.
MPT_BULK_LAYOUT_FN int64_t shared_bytes(int padded) { return stage_offset(padded, kStages); }

// The element of the staged dZ (batch row r, output o of the tile) whose 16-byte row lane `lane`
// hands ldmatrix.x4.trans for the A fragment of mma row tile `m` and k-step `ks`: matrices 0..3 are
// a0..a3 (outputs +8 for a1 and a3, batch rows +8 for a2 and a3), lane 8q + j addressing row j of
// matrix q.
MPT_BULK_LAYOUT_FN int output_grad_row(int lane, int ks) { return ks * 16 + ((lane >> 3) >> 1) * 8 + (lane & 7); }
MPT_BULK_LAYOUT_FN int output_grad_column(int lane, int m) { return m * 16 + ((lane >> 3) & 1) * 8; }
MPT_BULK_LAYOUT_FN int output_grad_element(int lane, int m, int ks) {
    return output_grad_row(lane, ks) * kOutputGradStride + output_grad_column(lane, m);
}

// Likewise for the staged strip of A and warp `warp`'s B fragments of k-step `ks`: matrices 0..3 are
// b0 and b1 of its first 8-column tile, then b0 and b1 of its second (batch rows +8 for each b1).
MPT_BULK_LAYOUT_FN int input_row(int lane, int ks) { return ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7); }
MPT_BULK_LAYOUT_FN int input_column(int lane, int warp) { return warp * kWarpColumns + ((lane >> 3) >> 1) * 8; }
MPT_BULK_LAYOUT_FN int input_element(int lane, int warp, int ks) {
    return input_row(lane, ks) * kInputStride + input_column(lane, warp);
}

// The tile's output row and the strip's column of accumulator c (0..3) of mma tile (m, n) of lane
// `lane` in warp `warp`: the ISA's c0, c1 at (group, 2 * in_group + {0, 1}), c2, c3 eight rows down.
MPT_BULK_LAYOUT_FN int accumulator_row(int lane, int m, int c) { return m * 16 + (c >> 1) * 8 + (lane >> 2); }
MPT_BULK_LAYOUT_FN int accumulator_column(int lane, int warp, int n, int c) {
    return warp * kWarpColumns + n * 8 + (lane & 3) * 2 + (c & 1);
}
// A pair (c = 0, 1 or c = 2, 3) is two adjacent masters: one 8-byte shared-memory read, one 8-byte
// global store, and its two copies one 4-byte store.
MPT_BULK_LAYOUT_FN int master_element(int lane, int warp, int m, int n, int pair) {
    return accumulator_row(lane, m, 2 * pair) * kMasterStride + accumulator_column(lane, warp, n, 2 * pair);
}

}  // namespace fused_sgd_bulk
}  // namespace mpt

#undef MPT_BULK_LAYOUT_FN
