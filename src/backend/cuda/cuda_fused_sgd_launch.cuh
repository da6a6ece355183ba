// What the two fused SGD kernels share (cuda_fused_sgd.cu on CUDA cores, cuda_fused_sgd_tensor_cores.cu
// on tensor cores): the launch's arguments, the step's scalars read from the device's TrainState, the
// element conversions, and the grid. Both give a block a strip of 128 input columns and a run of
// consecutive 32-row tiles of output rows, as many blocks as are resident at once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.cuh"

namespace mpt {

constexpr int kFusedSgdStripColumns = 128;  // input columns a block owns
constexpr int kFusedSgdTileRows = 32;       // output rows a block updates at a time

struct FusedSgdLaunch {
    const void* output_grad;  // dZ [rows, out]
    const void* input;        // A [rows, in]
    float* weights;
    float* bias;
    void* low_weights;
    void* low_bias;
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    int64_t tiles_per_block;  // consecutive 32-row tiles a block walks through
    OptimizerConfig optimizer;
    const TrainState* state;
};

// The masters' loads and stores. In a mixed-precision step the masters are read and written once,
// and no kernel reads them again before the next step's update (but weight averaging, right after,
// when it is on), while the low-precision copies written beside them are what the next step's
// forward reads first: the masters go through L2 as streaming data (evict first), so that L2 keeps
// the copies (24.5 MB for the seed MLP; an H200's L2 holds 50). In fp32 (T float: no copy) the
// forward reads the masters themselves: plain accesses.
template <typename T, typename V>
__device__ __forceinline__ V load_master(const V* address) {
    if constexpr (std::is_same_v<T, float>)
        return *address;
    else
        return __ldcs(address);
}
template <typename T, typename V>
__device__ __forceinline__ void store_master(V* address, V value) {
    if constexpr (std::is_same_v<T, float>)
        *address = value;
    else
        __stcs(address, value);
}

// The launch's arguments, tiles_per_block still unset (fused_sgd_grid sets it).
inline FusedSgdLaunch fused_sgd_launch(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    FusedSgdLaunch launch{};
    launch.output_grad = args.output_grad;
    launch.input = args.input;
    launch.weights = args.weights;
    launch.bias = args.bias;
    launch.low_weights = args.low_weights;
    launch.low_bias = args.low_bias;
    launch.rows = args.rows;
    launch.in_features = args.in_features;
    launch.out_features = args.out_features;
    launch.optimizer = optimizer;
    launch.state = args.state;
    return launch;
}

// What a block of either kernel starts from: the consecutive row tiles it walks (from blockIdx.y;
// none past the last) and the step's scalars. active false: the block writes nothing, because it
// has no tile or the step is skipped (found_inf); the same for every thread, so a kernel returns on
// it before any barrier.
struct FusedSgdBlockStart {
    int64_t first_tile, end_tile;
    OptimizerStepScalars scalars;
    bool active;
};
__device__ __forceinline__ FusedSgdBlockStart fused_sgd_block_start(const FusedSgdLaunch& p) {
    FusedSgdBlockStart start{};
    const int64_t tiles = (p.out_features + kFusedSgdTileRows - 1) / kFusedSgdTileRows;
    start.first_tile = static_cast<int64_t>(blockIdx.y) * p.tiles_per_block;
    start.end_tile = min(tiles, start.first_tile + p.tiles_per_block);
    if (start.first_tile >= start.end_tile) return start;
    const TrainState state = *p.state;
    if (state.found_inf) return start;
    start.scalars = plain_step_scalars(p.optimizer, state.loss_scale, state.steps);
    start.active = true;
    return start;
}

template <typename T>
__device__ __forceinline__ float to_float(T value) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __bfloat162float(value);
    } else if constexpr (std::is_same_v<T, __half>) {
        return __half2float(value);
    } else {
        return value;
    }
}

// Rounded to nearest even, as store_element rounds.
template <typename T>
__device__ __forceinline__ T from_float(float value) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __float2bfloat16_rn(value);
    } else if constexpr (std::is_same_v<T, __half>) {
        return __float2half_rn(value);
    } else {
        return value;
    }
}

// The grid for `kernel` (blocks of `threads` with `dynamic_shared` bytes of dynamic shared memory):
// the column strips times runs of row tiles, as many blocks as are resident at once (at least one
// run per strip); sets launch.tiles_per_block.
inline dim3 fused_sgd_grid(const void* kernel, int threads, size_t dynamic_shared, FusedSgdLaunch& launch) {
    int device = 0, multiprocessors = 1, per_multiprocessor = 1;
    MPT_CUDA_CHECK(cudaGetDevice(&device));
    MPT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, dynamic_shared) !=
            cudaSuccess ||
        per_multiprocessor < 1) {
        cudaGetLastError();  // (not sticky) a grid of one block per multiprocessor is still right, if slower
        per_multiprocessor = 1;
    }
    const int64_t strips = (launch.in_features + kFusedSgdStripColumns - 1) / kFusedSgdStripColumns;
    const int64_t tiles = (launch.out_features + kFusedSgdTileRows - 1) / kFusedSgdTileRows;
    const int64_t resident = static_cast<int64_t>(multiprocessors) * per_multiprocessor;
    const int64_t runs_per_strip = std::max<int64_t>(1, std::min<int64_t>(tiles, resident / strips));
    launch.tiles_per_block = (tiles + runs_per_strip - 1) / runs_per_strip;
    const int64_t runs = (tiles + launch.tiles_per_block - 1) / launch.tiles_per_block;
    require(strips <= 0x7fffffff && runs <= 65535, MPT_STATUS_UNSUPPORTED, "cuda backend: a layer too large for fused SGD");
    return dim3(static_cast<unsigned>(strips), static_cast<unsigned>(runs));
}

inline bool fused_sgd_aligned(const void* pointer, size_t bytes) {
    return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

}  // namespace mpt
