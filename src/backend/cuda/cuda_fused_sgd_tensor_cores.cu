// See cuda_fused_sgd_tensor_cores.cuh; where the operands are staged and the fragments found is
// fused_sgd_mma_layout.h. A block stages its strip of 128 input columns of A once (transposed,
// batch rows contiguous, in dynamic shared memory: 66 KiB at 256 rows) and walks a run of 32-row
// tiles of dZ, each in chunks of 64 batch rows, double-buffered. Per chunk, each warp's 16 x 32
// part of the weight gradient is 4 mma tiles per k-step of 16 batch rows (8 mma instructions at
// batch 32), summed in fp32 registers; after a tile's last chunk each thread updates the 16 masters
// its accumulators cover: rows g and g + 8 of its warp's part (g = lane / 4), the column pair
// 2t, 2t + 1 (t = lane % 4) of each of the 4 mma tiles, as float2 loads and stores and one 32-bit
// store of the two low-precision copies. The next tile's masters and dZ are loaded before the
// current tile is summed, as in the CUDA-core kernel. Unmeasured: no GPU has run it yet.
#include "backend/cuda/cuda_fused_sgd_tensor_cores.cuh"

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_launch.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/fused_sgd_mma_layout.h"

namespace mpt {

namespace {

using namespace fused_sgd_mma;

static_assert(kTileRows == kFusedSgdTileRows && kStripColumns == kFusedSgdStripColumns, "the grid's tiles");
static_assert(kMaxK == kTensorCoreSgdMaxRows, "the batch rows a block stages");

constexpr int kMmaTiles = 4;  // 8-column mma tiles of a warp
constexpr int kWarps = kThreads / 32;
// A dZ chunk's staging pairs per thread at most: kTileRows x kChunkK / 2 over the block.
constexpr int kChunkPairsPerThread = kTileRows * kChunkK / 2 / kThreads;
// The strip's pairs a thread loads before it stores any, so that its loads are in flight together.
constexpr int kStripPairsInFlight = 8;
static_assert(kChunkPairsPerThread * kThreads == kTileRows * kChunkK / 2, "whole staging rounds");

// A 16-bit element's bits as a float.
template <typename T>
__device__ __forceinline__ float bits_to_float(uint16_t bits) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __uint_as_float(static_cast<uint32_t>(bits) << 16);
    } else {
        return __half2float(__ushort_as_half(bits));
    }
}

// Two floats as two elements of T in 32 bits, the first in the low half; rounded to nearest even.
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float first, float second) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(first, second);
        return *reinterpret_cast<const uint32_t*>(&pair);
    } else {
        const __half2 pair = __floats2half2_rn(first, second);
        return *reinterpret_cast<const uint32_t*>(&pair);
    }
}

__device__ __forceinline__ uint32_t shared_pair(const uint16_t* staged, int index) {
    return *reinterpret_cast<const uint32_t*>(staged + index);
}

// The masters (o, i) and (o, i + 1), 0 past the matrix's edge: one float2 when kVector (in_features
// even, the masters 8-byte aligned).
template <bool kVector, typename T, bool kKeep>
__device__ __forceinline__ float2 load_master_pair(const FusedSgdLaunch& p, int64_t o, int64_t i) {
    if (o >= p.out_features || i >= p.in_features) return make_float2(0.0f, 0.0f);
    const float* row = p.weights + o * p.in_features;
    if constexpr (kVector) {
        return load_master<T, kKeep>(p, reinterpret_cast<const float2*>(row + i));
    } else {
        return make_float2(load_master<T, kKeep>(p, row + i),
                           i + 1 < p.in_features ? load_master<T, kKeep>(p, row + i + 1) : 0.0f);
    }
}

template <bool kVector, typename T, bool kKeep>
__device__ __forceinline__ void store_master_pair(const FusedSgdLaunch& p, int64_t o, int64_t i, float first,
                                                  float second) {
    if (o >= p.out_features || i >= p.in_features) return;
    const int64_t index = o * p.in_features + i;
    uint16_t* low = static_cast<uint16_t*>(p.low_weights);
    if constexpr (kVector) {
        store_master<T, kKeep>(p, reinterpret_cast<float2*>(p.weights + index), make_float2(first, second));
        if (low) *reinterpret_cast<uint32_t*>(low + index) = pack_pair<T>(first, second);
    } else {
        const uint32_t pair = pack_pair<T>(first, second);
        store_master<T, kKeep>(p, p.weights + index, first);
        if (low) low[index] = static_cast<uint16_t>(pair & 0xffffu);
        if (i + 1 >= p.in_features) return;
        store_master<T, kKeep>(p, p.weights + index + 1, second);
        if (low) low[index + 1] = static_cast<uint16_t>(pair >> 16);
    }
}

// One block's part of layer p's update: its column strip, its run of row tiles. T: the element type
// of dZ, A and the low-precision copies (__half or __nv_bfloat16). Dynamic shared memory: the strip
// of A, kStripColumns rows of staged_stride(padded_k) elements.
template <bool kVector, typename T, bool kKeep>
__device__ __forceinline__ void update_strip_on_tensor_cores(const FusedSgdLaunch& p, int64_t strip, int64_t run) {
    extern __shared__ __align__(16) uint16_t operand_b[];                     // A^T: [i][k]
    __shared__ __align__(16) uint16_t operand_a[2][kTileRows * kChunkStride];  // dZ^T: [o][k], 2 chunks
    const FusedSgdBlockStart start = fused_sgd_block_start(p, run);
    if (!start.active) return;  // no tile, or a skipped step: nothing is written
    const int64_t first_tile = start.first_tile, end_tile = start.end_tile;
    const OptimizerStepScalars& scalars = start.scalars;

    const int thread = static_cast<int>(threadIdx.x);
    const int lane = thread & 31, warp = thread >> 5;
    const int row0 = warp_row0(warp), column0 = warp_column0(warp);
    const int64_t i0 = strip * kStripColumns;
    const int rows = static_cast<int>(p.rows);
    const int padded_k = (rows + 15) / 16 * 16;
    const int strip_stride = staged_stride(padded_k);
    const int chunks = (padded_k + kChunkK - 1) / kChunkK;  // dZ chunks a tile takes

    // This thread's masters in tile `tile`: [mma tile j][h], h = 0 the accumulators' row g, 1 row g + 8.
    auto master_row = [&](int64_t tile, int h) { return tile * kTileRows + row0 + accumulator_row(lane, 2 * h); };
    auto master_column = [&](int j) { return i0 + column0 + 8 * j + accumulator_column(lane, 0); };
    float2 master[kMmaTiles][2];
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            master[j][h] = load_master_pair<kVector, T, kKeep>(p, master_row(first_tile, h), master_column(j));

    // The strip of A, transposed, zero past the last column and the last batch row.
    const uint16_t* input = static_cast<const uint16_t*>(p.input);
    const int strip_pairs = kStripColumns * padded_k / 2;
    for (int base = 0; base < strip_pairs; base += kStripPairsInFlight * kThreads) {
        uint16_t raw[kStripPairsInFlight][2];
#pragma unroll
        for (int g = 0; g < kStripPairsInFlight; ++g) {
            const int pair = base + g * kThreads + thread;
            const int c = staging_row(pair, kStripColumns), k = staging_k(pair, kStripColumns);
            const bool column = pair < strip_pairs && i0 + c < p.in_features;
            raw[g][0] = column && k < rows ? input[k * p.in_features + i0 + c] : uint16_t{0};
            raw[g][1] = column && k + 1 < rows ? input[(k + 1) * p.in_features + i0 + c] : uint16_t{0};
        }
#pragma unroll
        for (int g = 0; g < kStripPairsInFlight; ++g) {
            const int pair = base + g * kThreads + thread;
            if (pair >= strip_pairs) break;
            *reinterpret_cast<uint32_t*>(operand_b + staged_index(staging_row(pair, kStripColumns),
                                                                  staging_k(pair, kStripColumns), strip_stride)) =
                raw[g][0] | static_cast<uint32_t>(raw[g][1]) << 16;
        }
    }
    // Chunk `chunk` of a tile of dZ, transposed: batch rows 64 chunk .. + 63 (fewer in the last),
    // raw bits loaded into registers, stored into shared memory later.
    const uint16_t* output_grad = static_cast<const uint16_t*>(p.output_grad);
    auto chunk_pairs = [&](int chunk) { return kTileRows * min(kChunkK, padded_k - kChunkK * chunk) / 2; };
    auto load_chunk = [&](int64_t tile, int chunk, uint16_t (&staged)[kChunkPairsPerThread][2]) {
        const int pairs = chunk_pairs(chunk);
#pragma unroll
        for (int s = 0; s < kChunkPairsPerThread; ++s) {
            const int pair = thread + s * kThreads;
            const int k = kChunkK * chunk + staging_k(pair, kTileRows);
            const int64_t o = tile * kTileRows + staging_row(pair, kTileRows);
            const bool row = pair < pairs && o < p.out_features;
            staged[s][0] = row && k < rows ? output_grad[k * p.out_features + o] : uint16_t{0};
            staged[s][1] = row && k + 1 < rows ? output_grad[(k + 1) * p.out_features + o] : uint16_t{0};
        }
    };
    auto store_chunk = [&](int buffer, int chunk, const uint16_t (&staged)[kChunkPairsPerThread][2]) {
        const int pairs = chunk_pairs(chunk);
#pragma unroll
        for (int s = 0; s < kChunkPairsPerThread; ++s) {
            const int pair = thread + s * kThreads;
            if (pair >= pairs) break;
            *reinterpret_cast<uint32_t*>(operand_a[buffer] + staged_index(staging_row(pair, kTileRows),
                                                                          staging_k(pair, kTileRows), kChunkStride)) =
                staged[s][0] | static_cast<uint32_t>(staged[s][1]) << 16;
        }
    };
    uint16_t staged[kChunkPairsPerThread][2];
    load_chunk(first_tile, 0, staged);
    store_chunk(0, 0, staged);
    __syncthreads();

    // Stage s: chunk s % chunks of tile first_tile + s / chunks. A tile's sums build up over its
    // chunks; its masters are updated after the last.
    const int64_t stages = (end_tile - first_tile) * chunks;
    float gradient[kMmaTiles][4];
    float2 next_master[kMmaTiles][2];
    float bias_sum = 0.0f;  // a bias row's gradient, summed chunk by chunk (the first strip's blocks)
    for (int64_t stage = 0; stage < stages; ++stage) {
        const int64_t tile = first_tile + stage / chunks;
        const int chunk = static_cast<int>(stage % chunks);
        const int buffer = static_cast<int>(stage & 1);
        const bool has_next_stage = stage + 1 < stages;
        if (chunk == 0) {
            // The next tile's masters: loads issued now, used after this tile's last chunk.
            const bool has_next_tile = tile + 1 < end_tile;
#pragma unroll
            for (int j = 0; j < kMmaTiles; ++j) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    next_master[j][h] = has_next_tile ? load_master_pair<kVector, T, kKeep>(p, master_row(tile + 1, h),
                                                                                            master_column(j))
                                                      : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int c = 0; c < 4; ++c) gradient[j][c] = 0.0f;
            }
            bias_sum = 0.0f;
        }
        // The next stage's dZ chunk: loads issued now, stored after this chunk's sums.
        if (has_next_stage) {
            const int64_t next_stage = stage + 1;
            load_chunk(first_tile + next_stage / chunks, static_cast<int>(next_stage % chunks), staged);
        }

        const uint16_t* chunk_a = operand_a[buffer];
        const int k_base = kChunkK * chunk;  // the chunk's first batch row, in the strip
        const int k_steps = min(kChunkK, padded_k - k_base) / 16;
        for (int step = 0; step < k_steps; ++step) {
            const int k0 = 16 * step;
            uint32_t a[4];
#pragma unroll
            for (int r = 0; r < 4; ++r)
                a[r] = shared_pair(chunk_a, staged_index(row0 + a_fragment_row(lane, r), k0 + a_fragment_k(lane, r),
                                                         kChunkStride));
#pragma unroll
            for (int j = 0; j < kMmaTiles; ++j) {
                uint32_t b[2];
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    b[r] = shared_pair(operand_b, staged_index(column0 + 8 * j + b_fragment_column(lane),
                                                               k_base + k0 + b_fragment_k(lane, r), strip_stride));
                mma_16x8x16<T>(gradient[j], a, b);
            }
        }
        // The bias gradient is the column sum of dZ (a row of the staged chunk): the first strip's
        // blocks own the bias. Warp w sums rows 4w .. 4w + 3, its lanes a chunk's batch rows in
        // turn, then a butterfly (a fixed order); lane u keeps row 4w + u.
        const bool owns_bias = strip == 0;
        if (owns_bias) {
            const int valid_k = min(kChunkK, rows - k_base);
#pragma unroll
            for (int u = 0; u < kTileRows / kWarps; ++u) {
                float part = 0.0f;
                for (int k = lane; k < valid_k; k += 32)
                    part += bits_to_float<T>(chunk_a[staged_index(kTileRows / kWarps * warp + u, k, kChunkStride)]);
                for (int offset = 16; offset > 0; offset >>= 1) part += __shfl_xor_sync(0xffffffffu, part, offset);
                if (lane == u) bias_sum += part;
            }
        }
        if (chunk == chunks - 1) {
#pragma unroll
            for (int j = 0; j < kMmaTiles; ++j) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const float first =
                        plain_sgd_update_element(p.optimizer, scalars, master[j][h].x, gradient[j][2 * h]);
                    const float second =
                        plain_sgd_update_element(p.optimizer, scalars, master[j][h].y, gradient[j][2 * h + 1]);
                    store_master_pair<kVector, T, kKeep>(p, master_row(tile, h), master_column(j), first, second);
                    master[j][h] = next_master[j][h];
                }
            }
            const int64_t o = tile * kTileRows + kTileRows / kWarps * warp + lane;
            if (owns_bias && lane < kTileRows / kWarps && o < p.out_features) {
                const float bias = plain_sgd_update_element(p.optimizer, scalars, p.bias[o], bias_sum);
                p.bias[o] = bias;
                if (p.low_bias) static_cast<uint16_t*>(p.low_bias)[o] = static_cast<uint16_t>(pack_pair<T>(bias, 0.0f));
            }
        }
        if (has_next_stage) {
            const int64_t next_stage = stage + 1;
            store_chunk(buffer ^ 1, static_cast<int>(next_stage % chunks), staged);
        }
        // The next stage reads the buffer just written; the one after overwrites the buffer read here.
        __syncthreads();
    }
}

template <bool kVector, typename T, int kLayers, bool kKeep>
__global__ void __launch_bounds__(kThreads, 2) fused_sgd_tensor_core_kernel(const FusedSgdGroup group) {
    start_after_preceding_kernel();
    update_this_blocks_layer<kLayers>(group, [](const FusedSgdLaunch& p, int64_t strip, int64_t run) {
        update_strip_on_tensor_cores<kVector, T, kKeep>(p, strip, run);
    });
    if (group.finish.state) finish_step_in_last_block(group.finish);
}

template <bool kVector, typename T>
FusedSgdVariant tensor_core_kernels() {
    FusedSgdVariant variant{fused_sgd_tensor_core_kernel<kVector, T, 1, false>,
                            fused_sgd_tensor_core_kernel<kVector, T, kFusedSgdMaxLayers, false>,
                            nullptr,
                            nullptr,
                            0,
                            "fused_sgd_tensor_core_kernel"};
    if constexpr (kVector) {
        variant.kept_single = fused_sgd_tensor_core_kernel<kVector, T, 1, true>;
        variant.kept_group = fused_sgd_tensor_core_kernel<kVector, T, kFusedSgdMaxLayers, true>;
    }
    return variant;
}

}  // namespace

bool fused_sgd_tensor_cores_available() {
    if (!mma_runs_on_current_device(
            reinterpret_cast<const void*>(fused_sgd_tensor_core_kernel<true, __nv_bfloat16, 1, false>)))
        return false;
    // The strip of A at 256 rows is past the 48 KiB of shared memory a block gets unasked: asked
    // for here, once per device, not while a step's launches are being captured.
    const int strip_bytes = static_cast<int>(kStripColumns * staged_stride(kMaxK) * sizeof(uint16_t));
    for (const FusedSgdVariant& variant :
         {tensor_core_kernels<true, __nv_bfloat16>(), tensor_core_kernels<false, __nv_bfloat16>(),
          tensor_core_kernels<true, __half>(), tensor_core_kernels<false, __half>()}) {
        for (void (*kernel)(FusedSgdGroup) : {variant.single, variant.group, variant.kept_single, variant.kept_group}) {
            if (!kernel) continue;  // (no kept kernels off the vector path)
            if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, strip_bytes) != cudaSuccess) {
                cudaGetLastError();
                return false;
            }
        }
    }
    return true;
}

bool fused_sgd_tensor_core_vector_path(const DenseUpdateArgs& args) {
    // Whole float2s of masters and 32-bit pairs of their copies.
    return args.in_features % 2 == 0 && fused_sgd_aligned(args.weights, 8) &&
           (args.low_weights == nullptr || fused_sgd_aligned(args.low_weights, 4));
}

FusedSgdVariant fused_sgd_tensor_core_variant(const DenseUpdateArgs& args) {
    require(args.compute_dtype != DType::fp32 && args.rows > 0 && args.rows <= kTensorCoreSgdMaxRows,
            MPT_STATUS_INTERNAL, "cuda backend: tensor-core fused SGD called outside its case");
    const bool vector = fused_sgd_tensor_core_vector_path(args);
    FusedSgdVariant variant =
        args.compute_dtype == DType::bf16
            ? (vector ? tensor_core_kernels<true, __nv_bfloat16>() : tensor_core_kernels<false, __nv_bfloat16>())
            : (vector ? tensor_core_kernels<true, __half>() : tensor_core_kernels<false, __half>());
    // The strip of A in dynamic shared memory (fused_sgd_tensor_cores_available raised the limit).
    const int padded_k = static_cast<int>((args.rows + 15) / 16 * 16);
    variant.dynamic_shared = static_cast<size_t>(kStripColumns) * staged_stride(padded_k) * sizeof(uint16_t);
    for (void (*kernel)(FusedSgdGroup) : {variant.single, variant.group, variant.kept_single, variant.kept_group}) {
        if (!kernel) continue;
        cudaFuncAttributes attributes{};
        MPT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
        require(variant.dynamic_shared <= static_cast<size_t>(attributes.maxDynamicSharedSizeBytes),
                MPT_STATUS_INTERNAL,
                "cuda backend: tensor-core fused SGD run on a device where fused_sgd_tensor_cores_available was not "
                "asked");
    }
    return variant;
}

}  // namespace mpt
