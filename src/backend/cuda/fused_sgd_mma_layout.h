// Where the tensor-core fused SGD kernel (cuda_fused_sgd_tensor_cores.cu) keeps its operands and
// finds its results, as plain functions that the kernel calls and a CPU test
// (tests/test_fused_sgd_mma_layout.cpp) checks: against the PTX ISA's fragment layouts for
// mma.m16n8k16 with .f16/.bf16 operands and an .f32 accumulator, and against the weight gradient
// computed directly, by running every lane's loads and an emulated mma on the host.
//
// The product is dW[o][i] = sum_k dZ[k][o] A[k][i] (k: the batch rows). As the mma's D = A_m B_m,
// M is o, N is i and K is k: A_m[o][k] = dZ[k][o] and B_m[k][i] = A[k][i]. The mma takes each
// thread's A_m and B_m elements in pairs adjacent along K, so both operands are staged in shared
// memory transposed, K contiguous: operand_a[o][k] (a tile of 32 output rows) and operand_b[i][k]
// (the block's strip of 128 input columns), each 32-bit fragment register then one shared load.
#pragma once

#include "core/host_device.h"

namespace mpt::fused_sgd_mma {

constexpr int kThreads = 256;       // 8 warps
constexpr int kTileRows = 32;       // output rows (o) of a tile: 2 warps of 16
constexpr int kStripColumns = 128;  // input columns (i) of a strip: 4 warps of 32, each 4 mma tiles of 8
constexpr int kMaxK = 256;          // batch rows at most (kTensorCoreSgdMaxRows)
// dZ is staged a chunk of at most kChunkK batch rows at a time (its staging registers stay few);
// the strip of A holds every batch row for the block's whole run.
constexpr int kChunkK = 64;

// 16-bit elements per staged row for `padded_k` batch rows (a multiple of 16): padded_k / 2 + 4
// 32-bit words, i.e. 4 more than a multiple of 8. A fragment load's 32 lanes read rows r .. r + 7
// (lane / 4) at word offsets 0..3 (lane % 4); a row stride of 8m + 4 words puts row g at bank
// 4 g (2m + 1) mod 32, 8 distinct multiples of 4 (2m + 1 is odd), so the 32 words fall in 32
// distinct banks (a stride of a multiple of 32 words would put 8 lanes on each of 4 banks).
MPT_HOST_DEVICE int staged_stride(int padded_k) { return padded_k + 8; }
constexpr int kChunkStride = kChunkK + 8;  // dZ chunks: staged_stride(kChunkK)

// The element (row, k) of a staged operand whose rows are `stride` elements apart; k even gives a
// 4-byte offset.
MPT_HOST_DEVICE int staged_index(int row, int k, int stride) { return row * stride + k; }

// Staging pair p (0 ..): the elements k and k + 1 of staged row `row`, where the operand has
// `staged_rows` rows. Consecutive p are consecutive rows, so a warp's global loads of one batch
// row are contiguous (rows are o or i: the contiguous dimension of dZ and A).
MPT_HOST_DEVICE int staging_row(int pair, int staged_rows) { return pair % staged_rows; }
MPT_HOST_DEVICE int staging_k(int pair, int staged_rows) { return 2 * (pair / staged_rows); }

// Warp w's part of a 32 x 128 tile: output rows 16 (w % 2) .. + 15 and input columns
// 32 (w / 2) .. + 31, as 4 mma tiles of 16 x 8.
MPT_HOST_DEVICE int warp_row0(int warp) { return 16 * (warp % 2); }
MPT_HOST_DEVICE int warp_column0(int warp) { return 32 * (warp / 2); }

// A fragment register r (0..3) of `lane` holds A_m[row][k] (low half) and A_m[row][k + 1] within
// the 16 x 16 block of one k-step: PTX's a(2r) and a(2r + 1).
MPT_HOST_DEVICE int a_fragment_row(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
MPT_HOST_DEVICE int a_fragment_k(int lane, int r) { return 2 * (lane & 3) + 8 * (r >> 1); }

// B fragment register r (0..1) holds B_m[k][column] (low half) and B_m[k + 1][column] within the
// 16 x 8 block: PTX's b(2r) and b(2r + 1).
MPT_HOST_DEVICE int b_fragment_column(int lane) { return lane >> 2; }
MPT_HOST_DEVICE int b_fragment_k(int lane, int r) { return 2 * (lane & 3) + 8 * r; }

// Accumulator c (0..3) of `lane` is D[row][column] of the 16 x 8 tile: PTX's c(c).
MPT_HOST_DEVICE int accumulator_row(int lane, int c) { return (lane >> 2) + 8 * (c >> 1); }
MPT_HOST_DEVICE int accumulator_column(int lane, int c) { return 2 * (lane & 3) + (c & 1); }

}  // namespace mpt::fused_sgd_mma
