// How the bias-gradient vector kernel (cuda_bias_gradient.cu) splits dZ [rows, columns] among its
// blocks and threads, as plain functions the kernel and the launch call and a CPU test
// (tests/test_bias_gradient_layout.cpp) checks: every element of dZ summed exactly once, the chunks'
// partial sums inside the scratch bias_gradient_partial_bytes() gives, the tiles' ticket counters
// inside the backend's. The kernel itself runs only on a GPU (test_cuda_ops compares it with the CPU).
//
// A block sums a tile of kVectorsPerTile 16-byte vectors across a row (512 bf16 or 256 fp32 columns)
// over a chunk of rows: thread (vector v, lane l) takes rows l, l + kRowLanes, ... of the chunk.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace mpt::bias_gradient_layout {

constexpr int kThreads = 256;
constexpr int kVectorsPerTile = 64;                    // a tile's threads across its vectors
constexpr int kRowLanes = kThreads / kVectorsPerTile;  // and down its rows
constexpr int kRowsInFlight = 4;                       // loads a thread has in flight
constexpr int kTargetBlocks = 512;                     // a few blocks per SM on an H200 (132 SMs)
constexpr int kMaxChunks = 128;    // chunks of rows per tile, so the last block adds at most this many
constexpr int kMinChunkRows = 32;  // fewer, and the partial sums' round trip costs more than it spreads
// Ticket counters, one a tile: layers of more tiles sum each tile in one block (no counters).
constexpr int kCountedTiles = 256;

// Elements in a 16-byte vector.
MPT_HOST_DEVICE constexpr int per_vector(DType dtype) { return dtype == DType::fp32 ? 4 : 8; }

// The vector path's grid for a problem: tiles across the columns, chunks down the rows.
struct VectorLayout {
    bool usable = false;  // rows of whole vectors
    int per_vector = 0;
    int64_t vectors_per_row = 0;
    int64_t tiles = 0;
    int64_t chunks = 0;
    int64_t rows_per_chunk = 0;
};

inline VectorLayout vector_layout(int64_t rows, int64_t columns, DType dtype) {
    VectorLayout layout;
    layout.per_vector = per_vector(dtype);
    if (rows <= 0 || columns <= 0 || columns % layout.per_vector != 0) return layout;
    layout.usable = true;
    layout.vectors_per_row = columns / layout.per_vector;
    layout.tiles = (layout.vectors_per_row + kVectorsPerTile - 1) / kVectorsPerTile;
    int64_t chunks = 1;
    if (layout.tiles <= kCountedTiles) {
        chunks = kTargetBlocks / layout.tiles;
        chunks = chunks < kMaxChunks ? chunks : kMaxChunks;
        const int64_t most = rows / kMinChunkRows;  // so that every chunk has at least kMinChunkRows rows
        chunks = chunks < most ? chunks : most;
        chunks = chunks > 1 ? chunks : 1;
    }
    layout.rows_per_chunk = (rows + chunks - 1) / chunks;
    layout.chunks = (rows + layout.rows_per_chunk - 1) / layout.rows_per_chunk;
    return layout;
}

// Thread `thread` of a block: its vector within the tile, and its lane down the chunk's rows.
MPT_HOST_DEVICE int vector_in_tile(int thread) { return thread % kVectorsPerTile; }
MPT_HOST_DEVICE int row_lane(int thread) { return thread / kVectorsPerTile; }

// The rows [chunk_first_row, chunk_end_row) of chunk `chunk`.
MPT_HOST_DEVICE int64_t chunk_first_row(int64_t chunk, int64_t rows_per_chunk) { return chunk * rows_per_chunk; }
MPT_HOST_DEVICE int64_t chunk_end_row(int64_t chunk, int64_t rows_per_chunk, int64_t rows) {
    const int64_t end = (chunk + 1) * rows_per_chunk;
    return end < rows ? end : rows;
}

// Floats of partial sums the chunks write: chunk c's sums of all columns at [c * columns, ...).
MPT_HOST_DEVICE int64_t partial_index(int64_t chunk, int64_t columns, int64_t column) {
    return chunk * columns + column;
}
inline int64_t partial_floats(const VectorLayout& layout, int64_t columns) {
    return layout.usable && layout.chunks > 1 ? layout.chunks * columns : 0;
}

}  // namespace mpt::bias_gradient_layout
