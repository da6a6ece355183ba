// See cuda_bias_gradient.cuh.
#include "backend/cuda/cuda_bias_gradient.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

using namespace bias_gradient_layout;

// A 16-byte vector's values added to `sums`, taken from the loaded words with shifts (a reinterpret
// cast of the vector's address let the compiler load its halves from memory one by one instead).
template <DType kDtype>
__device__ __forceinline__ void add_vector(float (&sums)[per_vector(kDtype)], const uint4& raw) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        if constexpr (kDtype == DType::fp32) {
            sums[w] += __uint_as_float(words[w]);
        } else if constexpr (kDtype == DType::bf16) {  // a bf16's bits are the top half of its float's
            sums[2 * w] += __uint_as_float(words[w] << 16);
            sums[2 * w + 1] += __uint_as_float(words[w] & 0xffff0000u);
        } else {
            sums[2 * w] += __half2float(__ushort_as_half(static_cast<unsigned short>(words[w] & 0xffffu)));
            sums[2 * w + 1] += __half2float(__ushort_as_half(static_cast<unsigned short>(words[w] >> 16)));
        }
    }
}

// Block (tile x, chunk y): thread (vector v, lane l) sums vector v of the tile over the chunk's rows
// l, l + 4, ... in row order; the 4 lanes' sums are added in lane order, then the chunks' in chunk
// order by the tile's last block (with one chunk, the block itself writes the result).
template <DType kDtype>
__global__ void __launch_bounds__(kThreads) bias_gradient_vector_kernel(const BiasGradientArgs args,
                                                                         int64_t rows_per_chunk) {
    start_after_preceding_kernel();
    constexpr int kPerVector = per_vector(kDtype);
    constexpr int kTileColumns = kVectorsPerTile * kPerVector;
    __shared__ float lane_sums[kRowLanes][kTileColumns];
    __shared__ bool last_block;

    const int tile_vector = vector_in_tile(threadIdx.x), lane = row_lane(threadIdx.x);
    const int64_t vectors_per_row = args.columns / kPerVector;
    const int64_t vector = static_cast<int64_t>(blockIdx.x) * kVectorsPerTile + tile_vector;
    const int64_t first_row = chunk_first_row(blockIdx.y, rows_per_chunk);
    const int64_t end_row = chunk_end_row(blockIdx.y, rows_per_chunk, args.rows);
    float sums[kPerVector] = {};
    if (vector < vectors_per_row) {
        const uint4* __restrict__ data = static_cast<const uint4*>(args.output_grad);
        int64_t row = first_row + lane;
        for (; row + (kRowsInFlight - 1) * kRowLanes < end_row; row += kRowsInFlight * kRowLanes) {
            uint4 raw[kRowsInFlight];
#pragma unroll
            for (int u = 0; u < kRowsInFlight; ++u) raw[u] = data[(row + u * kRowLanes) * vectors_per_row + vector];
#pragma unroll
            for (int u = 0; u < kRowsInFlight; ++u) add_vector<kDtype>(sums, raw[u]);
        }
        for (; row < end_row; row += kRowLanes) add_vector<kDtype>(sums, data[row * vectors_per_row + vector]);
    }
#pragma unroll
    for (int k = 0; k < kPerVector; ++k) lane_sums[lane][tile_vector * kPerVector + k] = sums[k];
    __syncthreads();

    const int64_t tile_first = static_cast<int64_t>(blockIdx.x) * kTileColumns;
    const bool chunked = gridDim.y > 1;
    for (int c = threadIdx.x; c < kTileColumns; c += kThreads) {
        if (tile_first + c >= args.columns) break;
        float sum = lane_sums[0][c];
#pragma unroll
        for (int l = 1; l < kRowLanes; ++l) sum += lane_sums[l][c];
        if (chunked) {
            args.partials[partial_index(blockIdx.y, args.columns, tile_first + c)] = sum;
        } else {
            float* out = args.bias_grad + tile_first + c;
            *out = args.accumulate ? *out + sum : sum;
        }
    }
    if (!chunked) return;

    // Every thread's partials are written and fenced before the ticket; the counter wraps to 0 on
    // the last one, ready for the next launch.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicInc(args.counters + blockIdx.x, gridDim.y - 1) == gridDim.y - 1;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    // Read through L2 (__ldcg): the other blocks' partials are not in this SM's L1.
    for (int c = threadIdx.x; c < kTileColumns; c += kThreads) {
        const int64_t column = tile_first + c;
        if (column >= args.columns) break;
        float total = 0.0f;
        // Unrolled so that many loads are in flight; the adds stay in chunk order.
#pragma unroll 16
        for (unsigned chunk = 0; chunk < gridDim.y; ++chunk)
            total += __ldcg(args.partials + partial_index(chunk, args.columns, column));
        float* out = args.bias_grad + column;
        *out = args.accumulate ? *out + total : total;
    }
}

constexpr int kScalarColumns = 32;
constexpr int kScalarRowSlices = 8;

// Any shape: 32 columns per block, 8 row slices per column summed in shared memory in slice order.
__global__ void bias_gradient_scalar_kernel(const BiasGradientArgs args) {
    start_after_preceding_kernel();
    __shared__ float partial[kScalarRowSlices][kScalarColumns];
    const int64_t column = blockIdx.x * static_cast<int64_t>(kScalarColumns) + threadIdx.x;
    float sum = 0.0f;
    if (column < args.columns)
        for (int64_t row = threadIdx.y; row < args.rows; row += kScalarRowSlices)
            sum += load_element(args.output_grad, args.dtype, row * args.columns + column);
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < args.columns) {
        float total = 0.0f;
        for (int slice = 0; slice < kScalarRowSlices; ++slice) total += partial[slice][threadIdx.x];
        args.bias_grad[column] = args.accumulate ? args.bias_grad[column] + total : total;
    }
}

}  // namespace

size_t bias_gradient_partial_bytes(int64_t rows, int64_t columns, DType dtype) {
    const int64_t floats = partial_floats(vector_layout(rows, columns, dtype), columns);
    return floats ? round_up_256(static_cast<size_t>(floats) * sizeof(float)) : 0;
}

bool bias_gradient_vector_shape(int64_t rows, int64_t columns, DType dtype) {
    return vector_layout(rows, columns, dtype).usable;
}

void run_bias_gradient(const BiasGradientArgs& args, cudaStream_t stream) {
    if (args.rows <= 0 || args.columns <= 0) return;
    const VectorLayout layout = vector_layout(args.rows, args.columns, args.dtype);
    const bool aligned = (reinterpret_cast<uintptr_t>(args.output_grad) & 15u) == 0;
    if (args.vectorised && layout.usable && aligned) {
        require(layout.chunks == 1 || (args.partials && args.counters), MPT_STATUS_INTERNAL,
                "cuda backend: the bias gradient's chunks have no scratch");
        const dim3 grid(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.chunks));
        void (*kernel)(BiasGradientArgs, int64_t) = args.dtype == DType::fp32   ? bias_gradient_vector_kernel<DType::fp32>
                                                    : args.dtype == DType::bf16 ? bias_gradient_vector_kernel<DType::bf16>
                                                                                : bias_gradient_vector_kernel<DType::fp16>;
        launch_kernel("bias_gradient_vector_kernel", kernel, grid, kThreads, 0, stream, args, layout.rows_per_chunk);
        return;
    }
    const dim3 block(kScalarColumns, kScalarRowSlices);
    const unsigned blocks = static_cast<unsigned>((args.columns + kScalarColumns - 1) / kScalarColumns);
    launch_kernel("bias_gradient_scalar_kernel", bias_gradient_scalar_kernel, blocks, block, 0, stream, args);
}

}  // namespace mpt
