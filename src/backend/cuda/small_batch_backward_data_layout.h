// Where the small-batch backward-data kernel (cuda_small_batch_backward_data.cu) loads its operands
// and puts its sums, as plain functions that the kernel calls and a CPU test
// (tests/test_small_batch_mma_layout.cpp) checks against the PTX ISA's mma.m16n8k16 layout.
// The block and warp structure, the dZ operand, the sums' slots and the epilogue's lanes are the
// small-batch forward kernel's (small_batch_forward_layout.h); what differs is W, read transposed.
//
// The product is G[r][i] = sum_o dZ[r][o] W[o][i] (r: batch rows, i: the layer's input features,
// o: its output features). As the mma's D = A_m B_m, M is i, N is r and K is o: A_m[i][o] = W[o][i],
// B_m[o][r] = dZ[r][o]. B_m's element pairs (adjacent along o) are adjacent in dZ, loaded as the
// forward loads X. A_m's are not: W[o][i] and W[o + 1][i] are a row apart. Each lane loads 4
// consecutive features (8 bytes) of each of 8 consecutive rows of W and pairs the rows' elements
// with byte permutes. Which 16 features an mma tile's rows are is as free as which k its columns
// are, as long as the epilogue writes each sum where its feature is: the tile's row g is feature
// 4g + 2m (m: the tile) and row g + 8 is 4g + 2m + 1, so that a lane's 4 features feed both tiles.
#pragma once

#include "backend/cuda/small_batch_forward_layout.h"

namespace mpt::small_batch_mma {

// Each lane's features of W: 4 from the block's feature w_feature0(lane) (8 bytes), in every row.
constexpr int kDgradFeaturesPerLoad = 4;
MPT_HOST_DEVICE int w_feature0(int lane) { return kDgradFeaturesPerLoad * (lane >> 2); }

// The block's feature whose sums the mma tile m's row g (half 0) or g + 8 (half 1) holds.
MPT_HOST_DEVICE int dgrad_feature(int lane, int m, int half) { return w_feature0(lane) + 2 * m + half; }

// A register r (0..3) of the step's mma h (0, 1): its low half is W[o + u][feature], its high half
// W[o + u + 1][feature], where o = chunk_k(step, warp, lane) (the lane's 8 rows from there),
// u = dgrad_row(h, r) and the feature is dgrad_feature(lane, m, r & 1): the ISA's registers 0 and
// 1 are the k pair 2t, registers 2 and 3 the pair 2t + 8, mapped to the rows the lane's dZ words
// b_word(h, 0) and b_word(h, 1) hold.
MPT_HOST_DEVICE int dgrad_row(int h, int r) { return 4 * h + 2 * (r >> 1); }

// Which 32-bit word of a row's 8 bytes holds tile m's two features (rows g and g + 8), and the
// __byte_perm selector that pairs row u's and row u + 1's element of the one register r wants:
// bytes 0-1 of each word (selector 0x5410: the first word's low element, then the second's) for
// row g, bytes 2-3 (0x7632) for row g + 8.
MPT_HOST_DEVICE int dgrad_word(int m) { return m; }
MPT_HOST_DEVICE unsigned dgrad_selector(int r) { return (r & 1) ? 0x7632u : 0x5410u; }

// __byte_perm(x, y, selector): result byte n is byte (selector >> 4n) & 7 of the 8 bytes y:x (x's
// bytes 0-3, then y's); on the host as the CUDA documentation defines it, for the CPU test.
MPT_HOST_DEVICE uint32_t byte_perm(uint32_t x, uint32_t y, unsigned selector) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, selector);
#else
    const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
    uint32_t result = 0;
    for (int n = 0; n < 4; ++n)
        result |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * n)) & 7))) & 0xffu) << (8 * n);
    return result;
#endif
}

// A register r of the step's mma h for tile m, from the lane's 8 rows of W (2 words each: features
// 4g, 4g + 1 and 4g + 2, 4g + 3): the kernel and the CPU test both build the fragment with it.
MPT_HOST_DEVICE uint32_t dgrad_a_register(const uint32_t (&rows)[kElementsPerLoad][2], int h, int m, int r) {
    const int u = dgrad_row(h, r);
    return byte_perm(rows[u][dgrad_word(m)], rows[u + 1][dgrad_word(m)], dgrad_selector(r));
}

// Accumulator c (0..3) of mma tiles (m, j) holds G for this feature of the block (its batch row is
// accumulator_row(lane, j, c), as in the forward).
MPT_HOST_DEVICE int dgrad_accumulator_feature(int lane, int m, int c) { return dgrad_feature(lane, m, c >> 1); }

}  // namespace mpt::small_batch_mma
