// The bias-gradient vector kernel's split of dZ (src/backend/cuda/bias_gradient_layout.h), checked
// on the CPU, where every build runs it: each block's threads walk their rows as the kernel's two
// loops walk them (4 rows' loads in flight, then one at a time), and every element of dZ must be
// summed exactly once, every partial sum land inside the scratch the plan reserves and every ticket
// counter inside the backend's. The kernel's sums themselves run only on a GPU (test_cuda_ops
// compares them with the CPU backend there).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/bias_gradient_layout.h"

using namespace mpt;
using namespace mpt::bias_gradient_layout;

namespace {

// Runs the kernel's grid for a [rows, columns] dZ over an index space and returns how often each
// vector (row, vector of the row) was read; counts the writes out of their places on the way.
std::vector<int> vector_reads(int64_t rows, int64_t columns, DType dtype, int64_t& misplaced) {
    const VectorLayout layout = vector_layout(rows, columns, dtype);
    REQUIRE(layout.usable);
    const int64_t tile_columns = static_cast<int64_t>(kVectorsPerTile) * layout.per_vector;
    const int64_t partials = partial_floats(layout, columns);
    std::vector<int> reads(static_cast<size_t>(rows * layout.vectors_per_row), 0);
    for (int64_t tile = 0; tile < layout.tiles; ++tile) {
        if (layout.chunks > 1) misplaced += tile >= kCountedTiles;  // its ticket counter
        for (int64_t chunk = 0; chunk < layout.chunks; ++chunk) {
            const int64_t first = chunk_first_row(chunk, layout.rows_per_chunk);
            const int64_t end = chunk_end_row(chunk, layout.rows_per_chunk, rows);
            REQUIRE(first < end);  // no block without rows
            for (int thread = 0; thread < kThreads; ++thread) {
                const int64_t vector = tile * kVectorsPerTile + vector_in_tile(thread);
                misplaced += (vector_in_tile(thread) + 1) * layout.per_vector > tile_columns;  // its lane sums
                if (vector >= layout.vectors_per_row) continue;
                int64_t row = first + row_lane(thread);
                for (; row + (kRowsInFlight - 1) * kRowLanes < end; row += kRowsInFlight * kRowLanes)
                    for (int u = 0; u < kRowsInFlight; ++u)
                        ++reads[(row + u * kRowLanes) * layout.vectors_per_row + vector];
                for (; row < end; row += kRowLanes) ++reads[row * layout.vectors_per_row + vector];
            }
            if (layout.chunks == 1) continue;
            for (int64_t c = 0; c < tile_columns && tile * tile_columns + c < columns; ++c) {
                const int64_t place = partial_index(chunk, columns, tile * tile_columns + c);
                misplaced += place < 0 || place >= partials;
            }
        }
    }
    return reads;
}

void check_layout(int64_t rows, int64_t columns, DType dtype) {
    CAPTURE(rows);
    CAPTURE(columns);
    CAPTURE(static_cast<int>(dtype));
    const VectorLayout layout = vector_layout(rows, columns, dtype);
    CHECK(layout.chunks >= 1);
    CHECK(layout.chunks <= kMaxChunks);
    if (layout.chunks > 1) {
        CHECK(layout.rows_per_chunk >= kMinChunkRows);
        CHECK(layout.tiles * layout.chunks <= kTargetBlocks);
        CHECK(layout.tiles <= kCountedTiles);
    }
    // The partials of every shape fit the ~1 MB the header promises (512 blocks' tiles of 512 floats).
    CHECK(partial_floats(layout, columns) <= static_cast<int64_t>(kTargetBlocks) * kVectorsPerTile * 8);
    int64_t misplaced = 0;
    const std::vector<int> reads = vector_reads(rows, columns, dtype, misplaced);
    CHECK(misplaced == 0);
    int64_t wrong = 0;
    for (int count : reads) wrong += count != 1;
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("the bias-gradient kernel's blocks read every vector of dZ once, for the shapes the GPU tests use") {
    // The seed MLP's layers at batch 32, 256 and 4096, and test_cuda_ops' bias-gradient shapes.
    for (int64_t rows : {32, 256, 4096})
        for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
            check_layout(rows, 3000, dtype);
            check_layout(rows, 1000, dtype);
            check_layout(rows, 16, dtype);
        }
    check_layout(300, 1000, DType::fp16);
    check_layout(500, 16, DType::fp32);
    check_layout(3, 1040, DType::bf16);
    check_layout(257, 1032, DType::bf16);
    check_layout(512, 48, DType::bf16);
    check_layout(512, 40, DType::bf16);
}

TEST_CASE("the bias-gradient kernel's layout holds at the edges: one row, one vector, very wide, very tall") {
    check_layout(1, 8, DType::bf16);
    check_layout(1, 4, DType::fp32);
    check_layout(31, 8, DType::bf16);  // under one chunk's least rows
    check_layout(63, 8, DType::bf16);  // one chunk still
    check_layout(64, 8, DType::bf16);  // two of 32
    check_layout(100000, 8, DType::bf16);
    check_layout(5, 524288, DType::bf16);  // more tiles than counters: one chunk a tile
    check_layout(40, 4096 * 64 + 8, DType::fp32);
    CHECK(vector_layout(5, 524288, DType::bf16).chunks == 1);
    CHECK(vector_layout(63, 8, DType::bf16).chunks == 1);
    CHECK(vector_layout(64, 8, DType::bf16).chunks == 2);
    CHECK(vector_layout(4096, 3000, DType::bf16).tiles * vector_layout(4096, 3000, DType::bf16).chunks == 504);
}

TEST_CASE("the bias-gradient kernel's layout for random shapes") {
    std::mt19937 random(20261205);
    std::uniform_int_distribution<int64_t> row_count(1, 3000), vector_count(1, 700);
    for (int i = 0; i < 60; ++i) {
        const DType dtype = i % 3 == 0 ? DType::fp32 : i % 3 == 1 ? DType::bf16 : DType::fp16;
        check_layout(row_count(random), vector_count(random) * per_vector(dtype), dtype);
    }
}

TEST_CASE("the bias-gradient kernel's vector path refuses rows of part vectors") {
    CHECK_FALSE(vector_layout(32, 13, DType::bf16).usable);
    CHECK_FALSE(vector_layout(32, 45, DType::fp32).usable);
    CHECK_FALSE(vector_layout(32, 12, DType::fp16).usable);
    CHECK(vector_layout(32, 12, DType::fp32).usable);
    CHECK_FALSE(vector_layout(0, 8, DType::bf16).usable);
    CHECK(partial_floats(vector_layout(32, 13, DType::bf16), 13) == 0);
}
