// A dense layer's bias gradient on CUDA: the column sums of dZ [rows, columns] in fp32, in a fixed
// order (the same bits every run). Where cuBLASLt's BGRADB epilogue does not do it in the
// weight-gradient GEMM: fused epilogues off or refused, gradient accumulation (BGRADB writes, never
// adds), and MPTRAIN_CUDA_OWN_BIAS_GRADIENT=1, which leaves BGRADB out to compare (at batch 4096 on
// an H200 cuBLASLt ran it as a kernel of its own, 24 us a step for 33 MB of dZ, 2026-12-04).
//
// Rows of whole 16-byte vectors (columns a multiple of 8 in fp16/bf16, of 4 in fp32; dZ 16-byte
// aligned) take the vector path: a block sums a tile of 512 columns (bf16) over a chunk of rows,
// 64 threads across the tile's vectors and 4 down its rows, each with 4 rows' loads in flight; the
// chunks' sums meet in the last block of each tile (a ticket counter that wraps to 0 for the next
// launch), added in chunk order. Other shapes take a column-per-thread kernel, as do all shapes
// unless MPTRAIN_CUDA_OWN_BIAS_GRADIENT=1 (BiasGradientArgs::vectorised).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/bias_gradient_layout.h"
#include "core/dtype.h"

namespace mpt {

// Ticket counters for the vector path's tiles (a tile is 256 to 512 columns; bias_gradient_layout.h).
// Every layer's launch uses the same counters and leaves them at 0: two launches must never overlap
// (they run on the compute stream, a GEMM between them; a dependent launch waits for the whole
// preceding grid).
constexpr size_t bias_gradient_counter_bytes() { return bias_gradient_layout::kCountedTiles * sizeof(unsigned); }

// Scratch the vector path needs for the chunks' partial sums (0: none): at most 512 blocks' tiles of
// 512 floats, ~1 MB.
size_t bias_gradient_partial_bytes(int64_t rows, int64_t columns, DType dtype);
// Whether the vector path takes this shape (given a 16-byte aligned dZ, as arenas give).
bool bias_gradient_vector_shape(int64_t rows, int64_t columns, DType dtype);

struct BiasGradientArgs {
    const void* output_grad;  // dZ [rows, columns]
    DType dtype;
    float* bias_grad;         // [columns]
    int64_t rows;
    int64_t columns;
    bool accumulate;          // adds the sums to bias_grad's values
    float* partials;          // bias_gradient_partial_bytes() of scratch (may be null when that is 0)
    unsigned* counters;       // bias_gradient_counter_bytes(), zero before the first launch
    // The vector path where the shape allows it; else (the default until a GPU has measured it) the
    // column-per-thread kernel for every shape, as before MPTRAIN_CUDA_OWN_BIAS_GRADIENT existed.
    bool vectorised;
};

void run_bias_gradient(const BiasGradientArgs& args, cudaStream_t stream);

}  // namespace mpt
