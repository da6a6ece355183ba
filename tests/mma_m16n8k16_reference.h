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

// The operands as the matrices the lanes' fragments make up: element i of a lane's A fragment,
// a_element(lane, i), and of its B fragment, b_element(lane, i), put where the ISA says.
template <typename AElement, typename BElement>
void place_operands(AElement a_element, BElement b_element, double (&am)[16][16], double (&bm)[16][8]) {
    for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < 8; ++i) am[ptx_a(lane, i).row][ptx_a(lane, i).col] = a_element(lane, i);
        for (int i = 0; i < 4; ++i) bm[ptx_b(lane, i).row][ptx_b(lane, i).col] = b_element(lane, i);
    }
}

// Element i of a lane's D fragment: its C element c plus A's row times B's column, in doubles.
inline double mma_element(int lane, int i, double c, const double (&am)[16][16], const double (&bm)[16][8]) {
    const Place p = ptx_c(lane, i);
    for (int k = 0; k < 16; ++k) c += am[p.row][k] * bm[k][p.col];
    return c;
}

// One warp's mma.m16n8k16 on the host: a[lane][element], b[lane][element] as the ISA distributes
// the operands; returns d[lane][element] = c + A·B.
using Lanes8 = std::vector<std::vector<double>>;
inline Lanes8 emulated_mma(const Lanes8& a, const Lanes8& b, const Lanes8& c) {
    double am[16][16] = {}, bm[16][8] = {};
    place_operands([&](int lane, int i) { return a[lane][i]; }, [&](int lane, int i) { return b[lane][i]; }, am, bm);
    Lanes8 d = c;
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) d[lane][i] = mma_element(lane, i, c[lane][i], am, bm);
    return d;
}

}  // namespace mma_reference
