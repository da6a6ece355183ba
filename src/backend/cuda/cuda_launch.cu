// See cuda_launch.cuh.
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

thread_local uint64_t* dependent_launches = nullptr;

// Compiled with the library's architectures, like every backend kernel: what binaryVersion says of
// it holds for them all.
__global__ void dependent_launch_probe_kernel() { start_after_preceding_kernel(); }

}  // namespace

uint64_t* dependent_launch_counter() noexcept { return dependent_launches; }

DependentLaunchScope::DependentLaunchScope(uint64_t* counter) noexcept : saved_(dependent_launches) {
    dependent_launches = counter;
}

DependentLaunchScope::~DependentLaunchScope() { dependent_launches = saved_; }

bool dependent_launch_runs_on_current_device() {
    return kernel_code_runs_on_current_device(reinterpret_cast<const void*>(dependent_launch_probe_kernel), 9);
}

}  // namespace mpt
