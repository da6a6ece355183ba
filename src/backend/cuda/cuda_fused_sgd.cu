// See cuda_fused_sgd.cuh. A block owns a strip of 128 input columns and walks down a run of
// 32-row tiles of the output rows. The strip's inputs A[r][i0 .. i0 + 127] stay in shared memory
// for the whole run; each tile's dZ[r][o0 .. o0 + 31] is double-buffered beside them. Warp w owns
// the tile's rows 4w .. 4w + 3 and lane l the columns 4l .. 4l + 3, so a thread's 16 masters are 4
// float4 loads and stores (a warp moves 512 contiguous bytes per row), and each batch row costs it
// one broadcast float4 of dZ and one float4 of A from shared memory for 16 FMAs.
// The next tile's masters and dZ are loaded into registers before the current tile's gradient is
// summed, so the master stream (the kernel's floor: 10 bytes a weight) stays in flight while the
// FMAs run; the grid holds as many blocks as fit on the device at once, each with a run of tiles.
// The element type is a template parameter, and dZ and A are staged as raw fp16/bf16 bits: a load
// converted where it is issued (load_element's switch on the dtype) waits for its data before the
// next one starts, and a tile's 8 staged loads then cost 8 round trips to L2 instead of one.
// History on an H200, mixed-bf16 step at batch 32: 162 us with a 64 x 64 tile per block, scalar
// accesses and no prefetch; 155 us with float4 masters prefetched a tile ahead; 129 us once the
// staged loads were raw. A ring of 3 tiles of masters in shared memory filled by cp.async, 2 tiles
// ahead with 80 registers (commit 078ff45), measured 130 us: the masters' latency is not what
// bounds this kernel (ncu: about 70 us a step at 1 TB/s and 38% of the SM's issue rate). Next,
// unmeasured: plain_sgd_update_element instead of the generic optimizer_update_element, whose
// every rule was compiled in around each of a thread's 16 updates (3,992 SASS instructions to 1,800).
// bench/NOTES.md has the numbers.
#include "backend/cuda/cuda_fused_sgd.cuh"

#include <algorithm>

#include "backend/byte_range.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_fused_sgd_launch.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStripColumns = kFusedSgdStripColumns;  // 32 lanes x 4 columns
constexpr int kTileRows = kFusedSgdTileRows;          // 8 warps x 4 rows
constexpr int kRowsPerThread = kTileRows / kWarps;
static_assert(kRowsPerThread == 4, "a warp's rows are one float4 of dZ");

// The thread's 4 masters of row o from column i: one float4 when kVector (in_features a multiple
// of 4 and the masters 16-byte aligned), else one by one with the row's end checked. kChecked false:
// the caller knows row and columns inside the layer (a whole tile).
template <bool kVector, typename T, bool kChecked = true>
__device__ __forceinline__ float4 load_masters(const FusedSgdLaunch& p, int64_t o, int64_t i) {
    if (kChecked && (o >= p.out_features || i >= p.in_features)) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float* row = p.weights + o * p.in_features;
    if constexpr (kVector) {
        return load_master<T>(reinterpret_cast<const float4*>(row + i));
    } else {
        float4 m;
        m.x = load_master<T>(row + i);
        m.y = i + 1 < p.in_features ? load_master<T>(row + i + 1) : 0.0f;
        m.z = i + 2 < p.in_features ? load_master<T>(row + i + 2) : 0.0f;
        m.w = i + 3 < p.in_features ? load_master<T>(row + i + 3) : 0.0f;
        return m;
    }
}

// Writes the 4 updated masters of row o from column i and their low-precision copies (4 values in
// one store each when kVector).
template <bool kVector, typename T, bool kChecked = true>
__device__ __forceinline__ void store_masters(const FusedSgdLaunch& p, int64_t o, int64_t i, const float (&w)[4]) {
    if (kChecked && (o >= p.out_features || i >= p.in_features)) return;
    const int64_t index = o * p.in_features + i;
    T* low = static_cast<T*>(p.low_weights);
    if constexpr (kVector) {
        store_master<T>(reinterpret_cast<float4*>(p.weights + index), make_float4(w[0], w[1], w[2], w[3]));
        if (low) store_rounded4(low + index, make_float4(w[0], w[1], w[2], w[3]));
    } else {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            if (i + v >= p.in_features) return;
            store_master<T>(p.weights + index + v, w[v]);
            if (low) low[index + v] = from_float<T>(w[v]);
        }
    }
}

// One block's part of layer p's update: its column strip, its run of row tiles. T: the element type
// of dZ, A and the low-precision copies (float, __half or __nv_bfloat16). kRows: 0 for any batch of
// up to kFusedSgdMaxRows rows (p.rows), or the batch's rows when the kernel is compiled for exactly
// that many (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: 32): then the row loops are unrolled whole, shared
// memory and dZ's staging are sized for those rows only, and a whole tile (every row and column
// inside the layer, the common case) loads and stores its masters without the edge checks. The same
// sums in the same order either way.
template <bool kVector, typename T, int kRows>
__device__ __forceinline__ void update_strip(const FusedSgdLaunch& p, int64_t strip, int64_t run) {
    static_assert(kRows >= 0 && kRows <= kFusedSgdMaxRows && kRows * kTileRows % kThreads == 0, "rows a tile");
    constexpr int kMaxRows = kRows > 0 ? kRows : kFusedSgdMaxRows;
    // dZ elements of one tile a thread stages: kMaxRows x kTileRows over the block.
    constexpr int kStagedPerThread = kMaxRows * kTileRows / kThreads;
    __shared__ float4 input[kMaxRows][kStripColumns / 4];       // A[r][i0 + 4c ..]
    __shared__ float4 output_grad[2][kMaxRows][kTileRows / 4];  // dZ[r][o0 + 4w ..], 2 tiles
    const FusedSgdBlockStart start = fused_sgd_block_start(p, run);
    if (!start.active) return;  // no tile, or a skipped step: nothing is written
    const int64_t first_tile = start.first_tile, end_tile = start.end_tile;
    const OptimizerStepScalars& scalars = start.scalars;

    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int64_t i0 = strip * kStripColumns;
    const int64_t i = i0 + 4 * lane;  // this thread's first column
    const int rows = kRows > 0 ? kRows : static_cast<int>(p.rows);
    // Whether the block's strip lies inside the layer's columns (whole tiles are checked per tile).
    const bool whole_strip = kRows > 0 && kVector && i0 + kStripColumns <= p.in_features;

    // This thread's masters of the first tile: in flight while the strip and dZ fill shared memory.
    float4 master[kRowsPerThread];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u)
        master[u] = load_masters<kVector, T>(p, first_tile * kTileRows + warp * kRowsPerThread + u, i);

    // The strip of A, zero past the last column (as is dZ past the last row) so that the sums of
    // the edge tiles read defined values. Loaded in groups of 8 raw elements, then converted.
    const T* input_rows = static_cast<const T*>(p.input);
    const T zero = from_float<T>(0.0f);
    float* input_flat = reinterpret_cast<float*>(input);
    for (int base = 0; base < rows * kStripColumns; base += 8 * kThreads) {
        T raw[8];
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int k = base + g * kThreads + static_cast<int>(threadIdx.x);
            const int r = k / kStripColumns, c = k % kStripColumns;
            raw[g] = k < rows * kStripColumns && i0 + c < p.in_features ? input_rows[r * p.in_features + i0 + c] : zero;
        }
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int k = base + g * kThreads + static_cast<int>(threadIdx.x);
            if (k < rows * kStripColumns) input_flat[k] = to_float(raw[g]);
        }
    }
    // dZ of a tile, kStagedPerThread raw elements per thread (element k: row k / 32, column k % 32),
    // converted when they are stored into shared memory.
    const T* output_grad_rows = static_cast<const T*>(p.output_grad);
    auto load_output_grad = [&](int64_t tile, T (&staged)[kStagedPerThread]) {
#pragma unroll
        for (int s = 0; s < kStagedPerThread; ++s) {
            const int k = static_cast<int>(threadIdx.x) + s * kThreads;
            const int r = k / kTileRows;
            const int64_t o = tile * kTileRows + k % kTileRows;
            staged[s] = r < rows && o < p.out_features ? output_grad_rows[r * p.out_features + o] : zero;
        }
    };
    auto store_output_grad = [&](int buffer, const T (&staged)[kStagedPerThread]) {
        float* flat = reinterpret_cast<float*>(output_grad[buffer]);
#pragma unroll
        for (int s = 0; s < kStagedPerThread; ++s) {
            const int k = static_cast<int>(threadIdx.x) + s * kThreads;
            if (k < rows * kTileRows) flat[k] = to_float(staged[s]);
        }
    };
    T staged[kStagedPerThread];
    load_output_grad(first_tile, staged);
    store_output_grad(0, staged);
    __syncthreads();

    for (int64_t tile = first_tile; tile < end_tile; ++tile) {
        const int buffer = static_cast<int>(tile - first_tile) & 1;
        const bool has_next = tile + 1 < end_tile;
        // The next tile's masters and dZ: loads issued now, used after this tile's sums and stores.
        float4 next_master[kRowsPerThread];
        if (has_next && whole_strip && (tile + 2) * kTileRows <= p.out_features) {  // the next tile is whole
#pragma unroll
            for (int u = 0; u < kRowsPerThread; ++u)
                next_master[u] =
                    load_masters<kVector, T, false>(p, (tile + 1) * kTileRows + warp * kRowsPerThread + u, i);
        } else {
#pragma unroll
            for (int u = 0; u < kRowsPerThread; ++u)
                next_master[u] =
                    has_next ? load_masters<kVector, T>(p, (tile + 1) * kTileRows + warp * kRowsPerThread + u, i)
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (has_next) load_output_grad(tile + 1, staged);

        float gradient[kRowsPerThread][4] = {};
        const auto add_row = [&](int r) {
            const float4 dz = output_grad[buffer][r][warp];  // the same address across the warp: a broadcast
            const float4 a = input[r][lane];
            const float dzs[4] = {dz.x, dz.y, dz.z, dz.w}, as[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int u = 0; u < kRowsPerThread; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) gradient[u][v] = fmaf(dzs[u], as[v], gradient[u][v]);
        };
        if constexpr (kRows > 0) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) add_row(r);
        } else {
            for (int r = 0; r < rows; ++r) add_row(r);
        }
        const bool whole_tile = whole_strip && (tile + 1) * kTileRows <= p.out_features;
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
            const float masters[4] = {master[u].x, master[u].y, master[u].z, master[u].w};
            float updated[4];
#pragma unroll
            for (int v = 0; v < 4; ++v)
                updated[v] = plain_sgd_update_element(p.optimizer, scalars, masters[v], gradient[u][v]);
            const int64_t o = tile * kTileRows + warp * kRowsPerThread + u;
            if (whole_tile)
                store_masters<kVector, T, false>(p, o, i, updated);
            else
                store_masters<kVector, T>(p, o, i, updated);
        }
        // The bias gradient is the column sum of dZ: the first strip's blocks own the bias.
        if (strip == 0 && threadIdx.x < kTileRows) {
            const int64_t o = tile * kTileRows + threadIdx.x;
            if (o < p.out_features) {
                const float* column = reinterpret_cast<const float*>(output_grad[buffer]) + threadIdx.x;
                float sum = 0.0f;
                for (int r = 0; r < rows; ++r) sum += column[r * kTileRows];
                const float bias = plain_sgd_update_element(p.optimizer, scalars, p.bias[o], sum);
                p.bias[o] = bias;
                if (p.low_bias) static_cast<T*>(p.low_bias)[o] = from_float<T>(bias);
            }
        }
        if (has_next) store_output_grad(buffer ^ 1, staged);
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) master[u] = next_master[u];
        // The next tile reads the buffer just written; the one after overwrites the buffer read here.
        __syncthreads();
    }
}

template <bool kVector, typename T, int kLayers, int kRows>
__device__ __forceinline__ void update_layers(const FusedSgdGroup& group) {
    update_this_blocks_layer<kLayers>(group, [](const FusedSgdLaunch& p, int64_t strip, int64_t run) {
        update_strip<kVector, T, kRows>(p, strip, run);
    });
    if (group.finish.state) finish_step_in_last_block(group.finish);
}

// The default: registers as ptxas chooses them (128 for the vector kernels on sm_90, with the
// 48 KiB of static shared memory: 2 blocks an SM). A minimum of 1 block an SM is not the same:
// ptxas then took 147.
template <bool kVector, typename T, int kLayers, int kRows>
__global__ void __launch_bounds__(kThreads) fused_sgd_kernel(const FusedSgdGroup group) {
    start_after_preceding_kernel();
    update_layers<kVector, T, kLayers, kRows>(group);
}

// MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1: the same code held to 3 blocks an SM (80 registers on
// sm_90; a layer's kernel spills 60 bytes, reloaded from L1 once a tile outside the row loop, a
// group's 240 to 256), 24 warps instead of 16 to hide its latencies (ncu at batch 32 on an H200: an
// instruction issued in 64% of cycles, 1.36 of 4 warps eligible), with the shared-memory carveout
// for three (prepare_fused_sgd_three_blocks). The arithmetic is the default's, the numbers bit for bit.
constexpr int kThreeBlocks = 3;
template <bool kVector, typename T, int kLayers, int kRows>
__global__ void __launch_bounds__(kThreads, kThreeBlocks) fused_sgd_three_blocks_kernel(const FusedSgdGroup group) {
    start_after_preceding_kernel();
    update_layers<kVector, T, kLayers, kRows>(group);
}

// A kernel's two compilations (one layer, a group).
template <bool kVector, typename T, int kRows, bool kThreeBlocks>
FusedSgdVariant kernels_for() {
    FusedSgdVariant variant{};
    if constexpr (kThreeBlocks) {
        variant.single = fused_sgd_three_blocks_kernel<kVector, T, 1, kRows>;
        variant.group = fused_sgd_three_blocks_kernel<kVector, T, kFusedSgdMaxLayers, kRows>;
    } else {
        variant.single = fused_sgd_kernel<kVector, T, 1, kRows>;
        variant.group = fused_sgd_kernel<kVector, T, kFusedSgdMaxLayers, kRows>;
    }
    return variant;
}

// The compilations of `choice` on the vector path (the scalar path's layers are not the ones whose
// time counts: its one compilation takes any choice). exact_rows: the caller has checked the rows.
template <bool kVector, typename T>
FusedSgdVariant cuda_core_kernels(FusedSgdKernelChoice choice) {
    if constexpr (kVector) {
        constexpr int kExact = static_cast<int>(kFusedSgdExactRows);
        if (choice.exact_rows)
            return choice.three_blocks ? kernels_for<kVector, T, kExact, true>()
                                       : kernels_for<kVector, T, kExact, false>();
        if (choice.three_blocks) return kernels_for<kVector, T, 0, true>();
    }
    return kernels_for<kVector, T, 0, false>();
}

// Whether the CUDA-core kernel takes whole float4s of masters, and of their copies (8 bytes of
// fp16/bf16, 16 of fp32).
bool cuda_core_vector_path(const DenseUpdateArgs& args) {
    const size_t low_bytes = args.compute_dtype == DType::fp32 ? 16 : 8;
    return args.in_features % 4 == 0 && is_aligned(args.weights, 16) &&
           (args.low_weights == nullptr || is_aligned(args.low_weights, low_bytes));
}

// The CUDA-core kernel for one layer's update: the compilation for exactly kFusedSgdExactRows rows
// only where the batch has them.
FusedSgdVariant cuda_core_variant(const DenseUpdateArgs& args, FusedSgdKernelChoice choice) {
    const bool vector = cuda_core_vector_path(args);
    choice.exact_rows = choice.exact_rows && args.rows == kFusedSgdExactRows;
    switch (args.compute_dtype) {
        case DType::fp32:
            return vector ? cuda_core_kernels<true, float>(choice) : cuda_core_kernels<false, float>(choice);
        case DType::fp16:
            return vector ? cuda_core_kernels<true, __half>(choice) : cuda_core_kernels<false, __half>(choice);
        case DType::bf16:
            return vector ? cuda_core_kernels<true, __nv_bfloat16>(choice)
                          : cuda_core_kernels<false, __nv_bfloat16>(choice);
    }
    fail(MPT_STATUS_INTERNAL, "cuda backend: fused SGD for an unknown dtype");
}

// Launches the group's layers as one kernel (the variant's single-layer code for a group of one).
void launch_fused_sgd(const FusedSgdVariant& variant, FusedSgdGroup& group, cudaStream_t stream) {
    void (*const kernel)(FusedSgdGroup) = group.count == 1 ? variant.single : variant.group;
    const unsigned blocks =
        fused_sgd_grid(reinterpret_cast<const void*>(kernel), kThreads, group, variant.dynamic_shared);
    launch_kernel(variant.dynamic_shared ? "fused_sgd_bulk_copy_kernel" : "fused_sgd_kernel", kernel, dim3(blocks),
                  kThreads, static_cast<size_t>(variant.dynamic_shared), stream, group);
}

}  // namespace

int run_fused_sgd_layers(const DenseUpdateArgs* const* layers, const OptimizerConfig* const* optimizers, int count,
                         const FusedSgdFinish* finish, FusedSgdKernelChoice choice, cudaStream_t stream,
                         const FusedSgdDecision* decision) {
    require(!finish || (finish->state && finish->counter), MPT_STATUS_INTERNAL,
            "cuda backend: fused SGD's finish_step needs the state and a counter");
    require(!decision || (decision->max_abs_pairs && decision->state && decision->layer_count > 0 &&
                          2 * decision->layer_count <= kMaxAbsInputs && decision->empty_entries >> kMaxAbsInputs == 0),
            MPT_STATUS_INTERNAL, "cuda backend: fused SGD's decision needs the pass's pairs and the state");
    require(layers != nullptr && optimizers != nullptr && count >= 1 && count <= kFusedSgdMaxLayers,
            MPT_STATUS_INTERNAL, "cuda backend: fused SGD takes 1 to 4 layers a launch");
    FusedSgdGroup group{};
    FusedSgdVariant variant{};
    int shared = 0;  // layers launched with others
    const auto launch = [&] {
        if (group.count > 1) shared += group.count;
        launch_fused_sgd(variant, group, stream);
        group = FusedSgdGroup{};
    };
    for (int l = 0; l < count; ++l) {
        const DenseUpdateArgs& args = *layers[l];
        const OptimizerConfig& optimizer = *optimizers[l];
        const bool bulk_copy = (choice.bulk_copy_layers >> l & 1u) != 0;
        require(bulk_copy ? fused_sgd_rule_applies(args, optimizer) : fused_sgd_applies(args, optimizer),
                MPT_STATUS_INTERNAL, "cuda backend: fused SGD called outside its case");
        const FusedSgdVariant layer_variant =
            bulk_copy ? fused_sgd_bulk_copy_variant(args) : cuda_core_variant(args, choice);
        if (group.count > 0 && !(layer_variant == variant)) launch();
        variant = layer_variant;
        require(!decision || decision->state == args.state, MPT_STATUS_INTERNAL,
                "cuda backend: fused SGD decides for the state its updates read");
        group.layers[group.count] = fused_sgd_launch(args, optimizer);
        if (decision) group.layers[group.count].decision = *decision;
        ++group.count;
    }
    if (finish) group.finish = *finish;  // the last launch: every update before it has run
    launch();
    return shared;
}

namespace {

// What an update writes (masters, bias, their copies) and reads besides (dZ, A); empty ranges for
// absent copies.
void update_ranges(const DenseUpdateArgs& args, ByteRange (&written)[4], ByteRange (&read)[2]) {
    const size_t low = args.compute_dtype == DType::fp32 ? 4 : 2;
    const int64_t weights = args.out_features * args.in_features;
    written[0] = bytes_of(args.weights, weights, sizeof(float));
    written[1] = bytes_of(args.bias, args.out_features, sizeof(float));
    written[2] = bytes_of(args.low_weights, weights, low);
    written[3] = bytes_of(args.low_bias, args.out_features, low);
    read[0] = bytes_of(args.output_grad, args.rows * args.out_features, low);
    read[1] = bytes_of(args.input, args.rows * args.in_features, low);
}

}  // namespace

bool fused_sgd_updates_independent(const DenseUpdateArgs& first, const DenseUpdateArgs& second) {
    ByteRange written[2][4], read[2][2];
    update_ranges(first, written[0], read[0]);
    update_ranges(second, written[1], read[1]);
    for (int side = 0; side < 2; ++side)
        for (const ByteRange& write : written[side]) {
            for (const ByteRange& other : written[1 - side])
                if (write.overlaps(other)) return false;
            for (const ByteRange& other : read[1 - side])
                if (write.overlaps(other)) return false;
        }
    return true;
}

void run_fused_sgd(const DenseUpdateArgs& args, const OptimizerConfig& optimizer, FusedSgdKernelChoice choice,
                   cudaStream_t stream, const FusedSgdDecision* decision) {
    const DenseUpdateArgs* const layer = &args;
    const OptimizerConfig* const rule = &optimizer;
    run_fused_sgd_layers(&layer, &rule, 1, nullptr, choice, stream, decision);
}

bool fused_sgd_exact_rows_applies(const DenseUpdateArgs& args) {
    return args.rows == kFusedSgdExactRows && cuda_core_vector_path(args);
}

namespace {

// The vector path's kernel for `dtype` (single: for one layer, else for a group).
const void* vector_kernel(DType dtype, FusedSgdKernelChoice choice, bool single) {
    DenseUpdateArgs vector_layer{};
    vector_layer.compute_dtype = dtype;
    vector_layer.in_features = 4;  // a null weights pointer is aligned: the vector kernel
    vector_layer.rows = kFusedSgdExactRows;
    const FusedSgdVariant variant = cuda_core_variant(vector_layer, choice);
    return reinterpret_cast<const void*>(single ? variant.single : variant.group);
}

}  // namespace

void prepare_fused_sgd_three_blocks() {
    int device = 0, shared_per_multiprocessor = 0, reserved_per_block = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&shared_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&reserved_per_block, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess ||
        shared_per_multiprocessor <= 0) {
        cudaGetLastError();  // (not sticky) without the preference the grid counts what fits
        return;
    }
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16})
        for (bool exact_rows : {false, true})
            for (bool single : {true, false}) {
                const void* kernel = vector_kernel(dtype, FusedSgdKernelChoice{true, exact_rows}, single);
                cudaFuncAttributes attributes{};
                if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
                    cudaGetLastError();
                    continue;
                }
                const int64_t needed =
                    int64_t{kThreeBlocks} * (static_cast<int64_t>(attributes.sharedSizeBytes) + reserved_per_block);
                const int64_t percent =
                    std::min<int64_t>(100, (100 * needed + shared_per_multiprocessor - 1) / shared_per_multiprocessor);
                if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         static_cast<int>(percent)) != cudaSuccess)
                    cudaGetLastError();
            }
}

int fused_sgd_blocks_per_multiprocessor(DType dtype, FusedSgdKernelChoice choice, bool single) {
    int blocks = 0;
    MPT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vector_kernel(dtype, choice, single), kThreads, 0));
    return blocks;
}

}  // namespace mpt
