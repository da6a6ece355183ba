// The PTX ISA's fragment layout for mma.m16n8k16 with .f16/.bf16 operands and .f32 accumulators
// (section "Matrix Fragments for mma.m16n8k16 with floating point type"), written out in the ISA's
// own terms, and one warp's mma emulated on the host by it: the reference the CPU tests of the
// hand-written tensor-core kernels check their layouts against (test_small_batch_mma_layout.cpp).
#pragma once

#include <vector>

namespace mma_reference {

// The PTX ISA's layout, by element number as the ISA numbers them (a0..a7, b0..b3, c0..c3),
// with groupID = laneid >> 2 and threadID_in_group = laneid % 4.
struct Place {
    int row, col;
};
inline Place ptx_a(int lane, int i) {
    const int group = lane >> 2, in_group = lane % 4;
    const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
    const int col = i < 4 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8;
    return {row, col};
}
inline Place ptx_b(int lane, int i) {
    const int group = lane >> 2, in_group = lane % 4;
    const int row = i < 2 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8;
    return {row, group};
}
inline Place ptx_c(int lane, int i) {
    const int group = lane >> 2, in_group = lane % 4;
    return {i < 2 ? group : group + 8, in_group * 2 + (i & 1)};
}

// One warp's mma.m16n8k16 on the host: a[lane][element], b[lane][element] as the ISA distributes
// the operands; returns d[lane][element] = c + A·B.
using Lanes8 = std::vector<std::vector<double>>;
inline Lanes8 emulated_mma(const Lanes8& a, const Lanes8& b, const Lanes8& c) {
    double am[16][16] = {}, bm[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < 8; ++i) am[ptx_a(lane, i).row][ptx_a(lane, i).col] = a[lane][i];
        for (int i = 0; i < 4; ++i) bm[ptx_b(lane, i).row][ptx_b(lane, i).col] = b[lane][i];
    }
    Lanes8 d = c;
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
            const Place p = ptx_c(lane, i);
            for (int k = 0; k < 16; ++k) d[lane][i] += am[p.row][k] * bm[k][p.col];
        }
    return d;
}

}  // namespace mma_reference
