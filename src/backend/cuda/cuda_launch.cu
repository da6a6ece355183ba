// See cuda_launch.cuh.
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

thread_local bool dependent_launch = false;

// Compiled with the library's architectures, like every backend kernel: what binaryVersion says of
// it holds for them all.
__global__ void dependent_launch_probe_kernel() { start_after_preceding_kernel(); }

}  // namespace

bool dependent_launch_requested() noexcept { return dependent_launch; }

DependentLaunchScope::DependentLaunchScope(bool enabled) noexcept : saved_(dependent_launch) {
    dependent_launch = enabled;
}

DependentLaunchScope::~DependentLaunchScope() { dependent_launch = saved_; }

bool dependent_launch_runs_on_current_device() {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(dependent_launch_probe_kernel)) !=
        cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return major >= 9 && attributes.binaryVersion >= 90 && attributes.ptxVersion >= 90;
}

}  // namespace mpt
