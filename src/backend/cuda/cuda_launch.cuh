// How the backend launches its own kernels: every one through launch_kernel() (or
// launch_kernel_in_clusters(), its form for thread-block clusters), and every one starts with
// start_after_preceding_kernel() before it touches memory (tests/test_kernel_launches.sh checks both
// rules over src/backend/cuda).
//
// Why: at small batches a step is a chain of a dozen short kernels, and each one's launch (a graph
// node's scheduling, its blocks' placement) otherwise begins only after the kernel before it has
// drained. With programmatic dependent launch (compute capability 9.0; MPTRAIN_CUDA_DEPENDENT_LAUNCH=1,
// off by default: 0.98x on an H200 at batch 32) a kernel goes out with the launch attribute that lets
// it start while the one before it in the stream still runs; its blocks wait in
// start_after_preceding_kernel() (griddepcontrol.wait) until that kernel has finished and its writes
// are visible, then let the next kernel launch in turn (griddepcontrol.launch_dependents). Nothing is
// read or written before the wait, so every kernel sees what stream order gives it: the same numbers
// either way. Without the attribute (the default, and every launch outside a backend op) the wait
// returns at once, and the instructions exist only in code compiled for 9.0 and up:
// dependent_launch_runs_on_current_device() says whether the code that runs here has them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

// Whether kernels launched by this thread go out with the dependent-launch attribute: set by the
// backend around each op it executes (CudaBackend::execute), off elsewhere. While on, each such
// launch is counted in the counter the scope names (the backend's, for its tests).
uint64_t* dependent_launch_counter() noexcept;

class DependentLaunchScope {
public:
    // `counter` null: launches without the attribute.
    explicit DependentLaunchScope(uint64_t* counter) noexcept;
    ~DependentLaunchScope();
    DependentLaunchScope(const DependentLaunchScope&) = delete;
    DependentLaunchScope& operator=(const DependentLaunchScope&) = delete;

private:
    uint64_t* saved_;
};

// Compute capability 9.0 and up, and the kernels that run here compiled for it (a build without 90
// in its architectures runs on a Hopper from PTX without the wait, where the attribute would let
// kernels overlap). Clears any error it meets.
bool dependent_launch_runs_on_current_device();

// launch_kernel with the grid's blocks in thread-block clusters of `cluster_blocks` along x (compute
// capability 9.0; gridDim.x a multiple of it): 1 launches without clusters, as launch_kernel does.
// The caller checks that the device and the kernel's code have clusters
// (cluster_launch_runs_on_current_device).
template <typename... Parameters, typename... Arguments>
void launch_kernel_in_clusters(const char* name, unsigned cluster_blocks, void (*kernel)(Parameters...), dim3 grid,
                               dim3 block, size_t shared_bytes, cudaStream_t stream, Arguments&&... arguments) {
    cudaLaunchAttribute attributes[2]{};
    unsigned count = 0;
    uint64_t* const counter = dependent_launch_counter();
    if (counter) {
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count].val.programmaticStreamSerializationAllowed = 1;
        ++count;
    }
    if (cluster_blocks > 1) {
        attributes[count].id = cudaLaunchAttributeClusterDimension;
        attributes[count].val.clusterDim.x = cluster_blocks;
        attributes[count].val.clusterDim.y = 1;
        attributes[count].val.clusterDim.z = 1;
        ++count;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = count ? attributes : nullptr;  // null without attributes, as the runtime asks
    config.numAttrs = count;
    check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Arguments>(arguments)...), name, __FILE__, __LINE__);
    if (counter) ++*counter;
    // Asynchronous faults of earlier work surface here, as after a <<<>>> launch.
    check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
}

// Whether `kernel` can run in clusters here: compute capability 9.0 and up, and its code for the
// device compiled for 9.0 or later (clusters exist only there). Clears any error it meets.
inline bool cluster_launch_runs_on_current_device(const void* kernel) {
    return kernel_code_runs_on_current_device(kernel, 9);
}

// Launches `kernel` on `stream` (with the attribute inside a DependentLaunchScope with a counter); a
// launch failure is an mpt::Error naming `name`.
template <typename... Parameters, typename... Arguments>
void launch_kernel(const char* name, void (*kernel)(Parameters...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Arguments&&... arguments) {
    launch_kernel_in_clusters(name, 1, kernel, grid, block, shared_bytes, stream,
                              std::forward<Arguments>(arguments)...);
}

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)  // (emulation: tests/cuda_emulation)
// The first statement of every backend kernel: waits for the kernel before it in the stream (when
// launched with the attribute), then lets the next one launch.
__device__ __forceinline__ void start_after_preceding_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#endif

}  // namespace mpt
