// The tensor-core fused SGD kernel's staging and fragment layout (src/backend/cuda/fused_sgd_mma_layout.h),
// checked on the CPU, where every build runs it: each fragment function against the PTX ISA's
// layout for mma.m16n8k16 with .f16/.bf16 operands and .f32 accumulators (section "Matrix
// Fragments for mma.m16n8k16 with floating point type", written out in mma_m16n8k16_reference.h),
// and a whole tile: staged as the kernel stages it, each lane's fragment registers loaded as the
// kernel loads them, the mma emulated by the ISA's layout, and each lane's accumulators placed
// where the kernel updates its masters, against the weight gradient dZ^T A computed directly.
// The kernel itself runs only on a GPU (test_cuda_ops compares it with the CPU backend there).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "backend/cuda/fused_sgd_mma_layout.h"
#include "mma_m16n8k16_reference.h"

using namespace mpt::fused_sgd_mma;
using namespace mma_reference;

TEST_CASE("the fragment functions are the PTX ISA's m16n8k16 layout") {
    for (int lane = 0; lane < 32; ++lane) {
        CAPTURE(lane);
        for (int r = 0; r < 4; ++r)  // register r holds elements 2r (low half) and 2r + 1
            for (int half = 0; half < 2; ++half) {
                const Place p = ptx_a(lane, 2 * r + half);
                CHECK(a_fragment_row(lane, r) == p.row);
                CHECK(a_fragment_k(lane, r) + half == p.col);
            }
        for (int r = 0; r < 2; ++r)
            for (int half = 0; half < 2; ++half) {
                const Place p = ptx_b(lane, 2 * r + half);
                CHECK(b_fragment_k(lane, r) + half == p.row);
                CHECK(b_fragment_column(lane) == p.col);
            }
        for (int c = 0; c < 4; ++c) {
            CHECK(accumulator_row(lane, c) == ptx_c(lane, c).row);
            CHECK(accumulator_column(lane, c) == ptx_c(lane, c).col);
        }
    }
}

// Every staged-row stride the kernel uses: a dZ chunk's, and the strip's for each padded batch.
TEST_CASE("each fragment load's 32 lanes hit 32 distinct shared-memory banks") {
    auto distinct_banks = [](auto index_of) {
        std::set<int> banks;
        bool aligned = true;
        for (int lane = 0; lane < 32; ++lane) {
            const int index = index_of(lane);
            aligned = aligned && index % 2 == 0;  // a 4-byte load
            banks.insert(index / 2 % 32);
        }
        return aligned && banks.size() == 32;
    };
    for (int step = 0; step < kChunkK / 16; ++step)
        for (int warp = 0; warp < kThreads / 32; ++warp)
            for (int r = 0; r < 4; ++r)
                CHECK(distinct_banks([&](int lane) {
                    return staged_index(warp_row0(warp) + a_fragment_row(lane, r), 16 * step + a_fragment_k(lane, r),
                                        kChunkStride);
                }));
    CHECK(kChunkStride == staged_stride(kChunkK));
    for (int padded_k = 16; padded_k <= kMaxK; padded_k += 16) {
        CAPTURE(padded_k);
        const int stride = staged_stride(padded_k);
        for (int step = 0; step < padded_k / 16; ++step)
            for (int warp = 0; warp < kThreads / 32; ++warp)
                for (int j = 0; j < 4; ++j)
                    for (int r = 0; r < 2; ++r)
                        CHECK(distinct_banks([&](int lane) {
                            return staged_index(warp_column0(warp) + 8 * j + b_fragment_column(lane),
                                                16 * step + b_fragment_k(lane, r), stride);
                        }));
    }
}

// One 32 x 128 tile of dW = dZ^T A through the kernel's staging (the strip of A whole, dZ in chunks
// of kChunkK batch rows), fragment loads and accumulator placement, against the direct sums; every
// weight of the tile is produced exactly once.
TEST_CASE("a tile staged, multiplied and placed as the kernel does is dZ^T A") {
    std::mt19937 random(7);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (int rows : {1, 15, 16, 17, 32, 33, 64, 65, 100, 128, 200, 255, 256}) {
        CAPTURE(rows);
        const int padded_k = (rows + 15) / 16 * 16;
        const int strip_stride = staged_stride(padded_k);
        const int chunks = (padded_k + kChunkK - 1) / kChunkK;
        std::vector<double> dz(static_cast<size_t>(rows) * kTileRows), a(static_cast<size_t>(rows) * kStripColumns);
        for (double& v : dz) v = uniform(random);
        for (double& v : a) v = uniform(random);
        // The strip: pair p covers (i, k) and (i, k + 1); zero past the batch's last row. Poison first.
        std::vector<double> operand_b(static_cast<size_t>(kStripColumns * strip_stride), 1e300);
        for (int pair = 0; pair < kStripColumns * padded_k / 2; ++pair) {
            const int i = staging_row(pair, kStripColumns), k = staging_k(pair, kStripColumns);
            for (int e = 0; e < 2; ++e)
                operand_b[staged_index(i, k + e, strip_stride)] =
                    k + e < rows ? a[static_cast<size_t>((k + e) * kStripColumns + i)] : 0.0;
        }
        // Each warp's 4 mma tiles' accumulators, built up chunk by chunk.
        std::vector<Lanes8> accumulators(kThreads / 32 * 4, Lanes8(32, std::vector<double>(4, 0.0)));
        for (int chunk = 0; chunk < chunks; ++chunk) {
            const int k_base = kChunkK * chunk, chunk_k = std::min(kChunkK, padded_k - k_base);
            std::vector<double> operand_a(kTileRows * kChunkStride, 1e300);
            for (int pair = 0; pair < kTileRows * chunk_k / 2; ++pair) {
                const int o = staging_row(pair, kTileRows), k = k_base + staging_k(pair, kTileRows);
                for (int e = 0; e < 2; ++e)
                    operand_a[staged_index(o, staging_k(pair, kTileRows) + e, kChunkStride)] =
                        k + e < rows ? dz[static_cast<size_t>((k + e) * kTileRows + o)] : 0.0;
            }
            for (int warp = 0; warp < kThreads / 32; ++warp)
                for (int j = 0; j < 4; ++j)
                    for (int step = 0; step < chunk_k / 16; ++step) {
                        Lanes8 fa(32, std::vector<double>(8)), fb(32, std::vector<double>(4));
                        for (int lane = 0; lane < 32; ++lane) {
                            for (int r = 0; r < 4; ++r)
                                for (int half = 0; half < 2; ++half)
                                    fa[lane][2 * r + half] = operand_a[staged_index(
                                        warp_row0(warp) + a_fragment_row(lane, r),
                                        16 * step + a_fragment_k(lane, r) + half, kChunkStride)];
                            for (int r = 0; r < 2; ++r)
                                for (int half = 0; half < 2; ++half)
                                    fb[lane][2 * r + half] = operand_b[staged_index(
                                        warp_column0(warp) + 8 * j + b_fragment_column(lane),
                                        k_base + 16 * step + b_fragment_k(lane, r) + half, strip_stride)];
                        }
                        Lanes8& sums = accumulators[static_cast<size_t>(warp * 4 + j)];
                        sums = emulated_mma(fa, fb, sums);
                    }
        }
        std::vector<int> produced(kTileRows * kStripColumns, 0);
        for (int warp = 0; warp < kThreads / 32; ++warp)
            for (int j = 0; j < 4; ++j)
                for (int lane = 0; lane < 32; ++lane)
                    for (int c = 0; c < 4; ++c) {
                        const int o = warp_row0(warp) + accumulator_row(lane, c);
                        const int i = warp_column0(warp) + 8 * j + accumulator_column(lane, c);
                        REQUIRE(o < kTileRows);
                        REQUIRE(i < kStripColumns);
                        ++produced[static_cast<size_t>(o * kStripColumns + i)];
                        double expected = 0.0;
                        for (int k = 0; k < rows; ++k)
                            expected += dz[static_cast<size_t>(k * kTileRows + o)] * a[static_cast<size_t>(k * kStripColumns + i)];
                        CHECK(std::abs(accumulators[static_cast<size_t>(warp * 4 + j)][lane][c] - expected) <= 1e-11);
                    }
        for (int count : produced) CHECK(count == 1);
    }
}

// The kernel's master pair (o, i), (o, i + 1) of mma tile j and accumulator row h is accumulators
// 2h and 2h + 1: adjacent columns of one row, i even.
TEST_CASE("a lane's accumulator pairs are two adjacent columns of one row") {
    for (int lane = 0; lane < 32; ++lane)
        for (int h = 0; h < 2; ++h) {
            CHECK(accumulator_row(lane, 2 * h) == accumulator_row(lane, 2 * h + 1));
            CHECK(accumulator_column(lane, 2 * h + 1) == accumulator_column(lane, 2 * h) + 1);
            CHECK(accumulator_column(lane, 2 * h) % 2 == 0);
            CHECK(accumulator_column(lane, 0) == accumulator_column(lane, 2 * h));
        }
}
