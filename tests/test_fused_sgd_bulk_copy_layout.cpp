// The bulk-copy fused SGD kernel's shared-memory layout and fragments
// (src/backend/cuda/fused_sgd_bulk_copy_layout.h), checked on the CPU, where every build runs it: a
// whole tile's weight gradient dZ^T A computed as the kernel computes it. dZ and the strip of A are
// staged at the layout's strides (batch rows past the batch zero, as the kernel zeroes them), each
// lane hands ldmatrix.x4.trans the addresses the layout gives, ldmatrix is emulated as the PTX ISA
// defines it (register q of lane l: elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4) of
// matrix q, whose row j lane 8q + j addresses), the mma by the ISA's fragment layout
// (mma_m16n8k16_reference.h), and each accumulator is placed where the layout says, against the
// sums computed directly. Also: every output of the tile written once, the shared-memory reads free
// of bank conflicts, every address the copies and ldmatrix take 16-byte aligned, the blocks an SM
// the kernel's launch bounds promise fitting an H100's or H200's shared memory, and each row a tile
// copies copied once, by warps that share the copies evenly. The kernel itself runs only on a GPU
// (test_cuda_ops compares it with the CPU backend there).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/fused_sgd_bulk_copy_layout.h"
#include "mma_m16n8k16_reference.h"

using namespace mpt::fused_sgd_bulk;
using namespace mma_reference;

namespace {

// A staged operand: 16-bit elements at the layout's offsets, as values.
using Staged = std::vector<double>;

// ldmatrix.x4.trans over `staged`: lane 8q + j hands the element offset of row j of matrix q.
// Returns [lane][register q][half] (half 0: the low 16 bits).
std::vector<std::vector<std::vector<double>>> emulated_ldmatrix_x4_trans(const Staged& staged,
                                                                         const std::vector<int>& row_offset) {
    std::vector<std::vector<std::vector<double>>> registers(32, std::vector<std::vector<double>>(4, {0.0, 0.0}));
    for (int lane = 0; lane < 32; ++lane)
        for (int q = 0; q < 4; ++q)
            for (int half = 0; half < 2; ++half) {
                const int row = 2 * (lane % 4) + half, column = lane / 4;
                const int offset = row_offset[8 * q + row] + column;
                REQUIRE(offset >= 0);
                REQUIRE(offset < static_cast<int>(staged.size()));
                registers[lane][q][half] = staged[offset];
            }
    return registers;
}

struct Tile {
    int rows, padded;
    std::vector<double> dz, a;  // [rows][kTileRows], [rows][kStripColumns]
};

Tile random_tile(int rows, unsigned seed) {
    std::mt19937 random(seed);
    std::uniform_int_distribution<int> small(-4, 4);  // exact in doubles, whatever the order of sums
    Tile tile{rows, padded_rows(rows), {}, {}};
    tile.dz.resize(static_cast<size_t>(rows) * kTileRows);
    tile.a.resize(static_cast<size_t>(rows) * kStripColumns);
    for (double& v : tile.dz) v = small(random);
    for (double& v : tile.a) v = small(random);
    return tile;
}

// The tile's weight gradient as the kernel computes it: [output row][strip column], each written once.
std::vector<double> kernel_gradient(const Tile& tile) {
    // Staged as the kernel stages them: dZ by its bulk copies (the rows past the batch zeroed), A by
    // its threads (likewise); the padding columns hold a marker that must never be read.
    constexpr double kPaddingMarker = 1e300;
    Staged dz(static_cast<size_t>(output_grad_bytes(tile.padded) / 2), kPaddingMarker);
    Staged a(static_cast<size_t>(input_bytes(tile.padded) / 2), kPaddingMarker);
    for (int r = 0; r < tile.padded; ++r) {
        for (int o = 0; o < kTileRows; ++o)
            dz[r * kOutputGradStride + o] = r < tile.rows ? tile.dz[r * kTileRows + o] : 0.0;
        for (int i = 0; i < kStripColumns; ++i)
            a[r * kInputStride + i] = r < tile.rows ? tile.a[r * kStripColumns + i] : 0.0;
    }
    std::vector<double> gradient(static_cast<size_t>(kTileRows) * kStripColumns, 0.0);
    std::vector<int> writes(gradient.size(), 0);
    for (int warp = 0; warp < kWarps; ++warp) {
        std::vector<std::vector<Lanes8>> sums(kMmaRowTiles,
                                              std::vector<Lanes8>(kMmaColumnTiles, Lanes8(32, std::vector<double>(4))));
        for (int ks = 0; ks < k_steps(tile.padded); ++ks) {
            std::vector<int> b_rows(32);
            for (int lane = 0; lane < 32; ++lane) b_rows[lane] = input_element(lane, warp, ks);
            const auto b_registers = emulated_ldmatrix_x4_trans(a, b_rows);
            for (int m = 0; m < kMmaRowTiles; ++m) {
                std::vector<int> a_rows(32);
                for (int lane = 0; lane < 32; ++lane) a_rows[lane] = output_grad_element(lane, m, ks);
                const auto a_registers = emulated_ldmatrix_x4_trans(dz, a_rows);
                for (int n = 0; n < kMmaColumnTiles; ++n) {
                    // The kernel's operands: a[4] = the 4 registers; b = registers 2n, 2n + 1.
                    Lanes8 a_elements(32, std::vector<double>(8)), b_elements(32, std::vector<double>(4));
                    for (int lane = 0; lane < 32; ++lane) {
                        for (int e = 0; e < 8; ++e) a_elements[lane][e] = a_registers[lane][e / 2][e % 2];
                        for (int e = 0; e < 4; ++e) b_elements[lane][e] = b_registers[lane][2 * n + e / 2][e % 2];
                    }
                    sums[m][n] = emulated_mma(a_elements, b_elements, sums[m][n]);
                }
            }
        }
        for (int lane = 0; lane < 32; ++lane)
            for (int m = 0; m < kMmaRowTiles; ++m)
                for (int n = 0; n < kMmaColumnTiles; ++n)
                    for (int c = 0; c < 4; ++c) {
                        const int row = accumulator_row(lane, m, c), column = accumulator_column(lane, warp, n, c);
                        REQUIRE(row >= 0);
                        REQUIRE(row < kTileRows);
                        REQUIRE(column >= 0);
                        REQUIRE(column < kStripColumns);
                        // The kernel reads a pair's masters at master_element: c's own place.
                        REQUIRE(master_element(lane, warp, m, n, c / 2) + c % 2 == row * kMasterStride + column);
                        gradient[row * kStripColumns + column] = sums[m][n][lane][c];
                        ++writes[row * kStripColumns + column];
                    }
    }
    for (int count : writes) REQUIRE(count == 1);
    return gradient;
}

// The 16-byte row (of an 8 x 8 matrix) starting at `byte` goes through banks 4 (byte / 16 % 8) ..
// + 3: the 8 rows of a matrix, read in one phase, must fall in 8 distinct such groups.
void require_conflict_free_rows(const std::vector<int>& row_bytes) {
    for (int q = 0; q < 4; ++q) {
        std::set<int> groups;
        for (int j = 0; j < 8; ++j) {
            REQUIRE(row_bytes[8 * q + j] % 16 == 0);
            groups.insert(row_bytes[8 * q + j] / 16 % 8);
        }
        CHECK(groups.size() == 8);
    }
}

}  // namespace

TEST_CASE("the bulk-copy fused SGD's fragments compute dZ^T A over every batch size it takes") {
    for (int rows : {1, 2, 7, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 128, 200, 255, 256}) {
        CAPTURE(rows);
        const Tile tile = random_tile(rows, 1000u + static_cast<unsigned>(rows));
        const std::vector<double> gradient = kernel_gradient(tile);
        for (int o = 0; o < kTileRows; ++o)
            for (int i = 0; i < kStripColumns; ++i) {
                double expected = 0.0;
                for (int r = 0; r < rows; ++r) expected += tile.dz[r * kTileRows + o] * tile.a[r * kStripColumns + i];
                REQUIRE(gradient[o * kStripColumns + i] == expected);
            }
    }
}

TEST_CASE("a mutated fragment map fails the bulk-copy layout's check") {
    // The check above has teeth: A's batch rows and outputs swapped in the dZ fragment (a map that
    // is self-consistent but not the ISA's) gives other sums. Emulated directly: a0 taken from the
    // matrix of a1 for one lane changes that lane's sums.
    const Tile tile = random_tile(32, 7u);
    Staged dz(static_cast<size_t>(output_grad_bytes(32) / 2), 0.0);
    for (int r = 0; r < 32; ++r)
        for (int o = 0; o < kTileRows; ++o) dz[r * kOutputGradStride + o] = tile.dz[r * kTileRows + o];
    std::vector<int> right(32), swapped(32);
    for (int lane = 0; lane < 32; ++lane) {
        right[lane] = output_grad_element(lane, 0, 0);
        // Matrices 1 and 2 exchanged: outputs +8 and batch rows +8 confused.
        const int q = lane / 8, j = lane % 8, other = q == 1 ? 2 : q == 2 ? 1 : q;
        swapped[lane] = output_grad_element(8 * other + j, 0, 0);
    }
    CHECK(emulated_ldmatrix_x4_trans(dz, right) != emulated_ldmatrix_x4_trans(dz, swapped));
}

TEST_CASE("the bulk-copy kernel's shared-memory reads are free of bank conflicts") {
    for (int padded : {32, 64, 256}) {
        CAPTURE(padded);
        for (int ks = 0; ks < k_steps(padded); ++ks) {
            for (int m = 0; m < kMmaRowTiles; ++m) {
                std::vector<int> bytes(32);
                for (int lane = 0; lane < 32; ++lane)
                    bytes[lane] = static_cast<int>(stage_offset(padded, 1) + master_bytes()) +
                                  2 * output_grad_element(lane, m, ks);
                require_conflict_free_rows(bytes);
            }
            for (int warp = 0; warp < kWarps; ++warp) {
                std::vector<int> bytes(32);
                for (int lane = 0; lane < 32; ++lane)
                    bytes[lane] = static_cast<int>(input_offset()) + 2 * input_element(lane, warp, ks);
                require_conflict_free_rows(bytes);
            }
        }
    }
    // The masters' 8-byte reads: a warp's are served in two phases of 16 lanes, each lane's two words
    // in two banks; within a phase, 32 distinct banks.
    for (int warp = 0; warp < kWarps; ++warp)
        for (int m = 0; m < kMmaRowTiles; ++m)
            for (int n = 0; n < kMmaColumnTiles; ++n)
                for (int pair = 0; pair < 2; ++pair)
                    for (int phase = 0; phase < 2; ++phase) {
                        std::set<int> banks;
                        for (int lane = 16 * phase; lane < 16 * phase + 16; ++lane) {
                            const int element = master_element(lane, warp, m, n, pair);
                            REQUIRE(element % 2 == 0);  // 8-byte aligned
                            banks.insert(element % 32);
                            banks.insert((element + 1) % 32);
                        }
                        CHECK(banks.size() == 32);
                    }
}

TEST_CASE("the bulk copies' destinations are 16-byte aligned and the blocks an SM fit") {
    for (int padded : {32, 64, 256}) {
        CAPTURE(padded);
        CHECK(input_offset() % 128 == 0);
        for (int stage = 0; stage <= kStages; ++stage) CHECK(stage_offset(padded, stage) % 128 == 0);
        CHECK(master_bytes() % 16 == 0);
        CHECK(kMasterStride * 4 % 16 == 0);      // each master row's copy
        CHECK(kOutputGradStride * 2 % 16 == 0);  // each dZ row's copy
        CHECK(kInputStride * 2 % 16 == 0);       // each row of A an ldmatrix reads
        CHECK(kBarrierBytes >= kStages * 8);
        CHECK(shared_bytes(padded) == stage_offset(padded, kStages));
    }
    // H100 and H200: 228 KiB of shared memory an SM, 227 KiB a block at most, 1 KiB reserved a block.
    constexpr int64_t kPerMultiprocessor = 228 * 1024, kPerBlock = 227 * 1024, kReserved = 1024;
    for (int padded : {32, 64, 256}) {
        CAPTURE(padded);
        CHECK(shared_bytes(padded) <= kPerBlock);
        // As many blocks an SM as the compilation's __launch_bounds__ promise: 3, 2 and 1.
        CHECK(blocks_per_multiprocessor(padded) * (shared_bytes(padded) + kReserved) <= kPerMultiprocessor);
    }
    CHECK(blocks_per_multiprocessor(32) == 3);
    CHECK(padded_rows(1) == 32);
    CHECK(padded_rows(32) == 32);
    CHECK(padded_rows(33) == 64);
    CHECK(padded_rows(64) == 64);
    CHECK(padded_rows(65) == 256);
    CHECK(padded_rows(kMaxRows) == 256);
    for (int rows = 1; rows <= kMaxRows; ++rows) {
        CAPTURE(rows);
        CHECK(compilation_index(rows) == (padded_rows(rows) == 32 ? 0 : padded_rows(rows) == 64 ? 1 : 2));
    }
}

TEST_CASE("each master row and batch row of dZ of a tile is copied once, the copies dealt evenly round the warps") {
    CHECK(kMaxCopiesPerLane * kThreads >= kTileRows + kMaxRows);
    // A tile's rows: out_features is a multiple of 8 (fused_sgd_bulk_copy_shapes_fit), so a layer's
    // last tile has 8, 16, 24 or 32.
    for (int tile_rows = 8; tile_rows <= kTileRows; tile_rows += 8)
        for (int rows = 1; rows <= kMaxRows; ++rows) {
            CAPTURE(tile_rows);
            CAPTURE(rows);
            // As the kernel's issue(): a lane's copies k = 0 .. kMaxCopiesPerLane - 1, master rows
            // first, then dZ rows, none past the tile's copies.
            const int total = tile_rows + rows;
            std::vector<int> masters(static_cast<size_t>(tile_rows), 0), grads(static_cast<size_t>(rows), 0);
            int busiest_warp = 0, outside = 0;
            for (int warp = 0; warp < kWarps; ++warp) {
                int warp_copies = 0;
                for (int lane = 0; lane < 32; ++lane)
                    for (int k = 0; k < kMaxCopiesPerLane; ++k) {
                        const int copy = tile_copy(lane, warp, k);
                        if (copy < 0) ++outside;
                        if (copy < 0 || copy >= total) continue;
                        ++warp_copies;
                        if (copy < tile_rows)
                            ++masters[static_cast<size_t>(copy)];
                        else
                            ++grads[static_cast<size_t>(copy - tile_rows)];
                    }
                busiest_warp = std::max(busiest_warp, warp_copies);
            }
            CHECK(outside == 0);
            for (int count : masters) CHECK(count == 1);
            for (int count : grads) CHECK(count == 1);
            CHECK(busiest_warp == (total + kWarps - 1) / kWarps);  // as even as 8 warps can be
            // The kernel's early return: a thread whose first copy is past the tile's has no other.
            for (int warp = 0; warp < kWarps; ++warp)
                for (int lane = 0; lane < 32; ++lane)
                    if (tile_copy(lane, warp, 0) >= total)
                        for (int k = 1; k < kMaxCopiesPerLane; ++k) CHECK(tile_copy(lane, warp, k) >= total);
        }
    CHECK((kTileRows + 32 + kWarps - 1) / kWarps == 8);  // batch 32: 8 copies a warp, where warp 0 had 64
}
