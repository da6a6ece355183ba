// Thread-block clusters (compute capability 9.0) as the kernels that split a sum across one
// cluster's blocks use them (the small-batch tensor-core kernels, cuda_small_batch_mma.cuh; the last
// layer around its loss head, cuda_head_layer.cu): the grid's x dimension is the cluster, a barrier
// over its blocks, a block's shared memory seen from another, and whether the device can place one.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mpt {

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)  // (emulation: tests/cuda_emulation)
// A barrier over the grid's blocks along x (gridDim.x of them, one cluster; one block: __syncthreads),
// whose shared-memory writes before it the others' reads after it see. Every thread of every block
// must reach it: no thread returns early.
__device__ __forceinline__ void sync_cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (gridDim.x > 1) {
        // The blocks along x are the cluster's (the launch's cluster dimension): a launch without
        // the cluster would read other clusters' ranks.
        if (cooperative_groups::this_cluster().num_blocks() != gridDim.x) __trap();
        cooperative_groups::this_cluster().sync();
        return;
    }
#elif defined(MPT_CUDA_EMULATION)  // the host compiler's, for tests/cuda_emulation
    if (gridDim.x > 1) {
        if (::mpt_emulation::cluster_blocks() != gridDim.x) __trap();
        ::mpt_emulation::sync_cluster();
        return;
    }
#else
    if (gridDim.x > 1) __trap();  // no clusters below 9.0: the launches give one block along x there
#endif
    __syncthreads();
}

// `local` (this block's shared memory) as block `block` of the cluster has it, through distributed
// shared memory; `local` itself without a cluster (one block along x).
template <typename T>
__device__ __forceinline__ T* cluster_block_shared(T* local, int block) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (gridDim.x > 1) return cooperative_groups::this_cluster().map_shared_rank(local, static_cast<unsigned>(block));
#elif defined(MPT_CUDA_EMULATION)
    if (gridDim.x > 1) return static_cast<T*>(::mpt_emulation::map_shared_rank(local, static_cast<unsigned>(block)));
#endif
    return local;
}
#endif

// Whether the device can place a cluster of `blocks` blocks of `threads` threads of `kernel` along x
// (grid y of `rows`): cudaOccupancyMaxActiveClusters (it may not under MPS, a green context or a small
// MIG slice). Clears any error it meets.
inline bool clusters_fit(const void* kernel, int blocks, int64_t rows, int threads) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(blocks);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(rows));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.attrs = &attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return clusters > 0;
}

}  // namespace mpt
