// The limits of the emulated device, by compute capability: what the emulated runtime reports
// (cudaGetDeviceProperties, cudaDeviceGetAttribute), what a launch may ask for (dynamic shared
// memory) and how many blocks fit a multiprocessor (the occupancy calculator).
//
// Why: the backend sizes grids by occupancy and multiprocessors, splits K by the multiprocessor
// count, opts kernels into more shared memory and picks paths by capability. Most of the GPUs it will
// meet are not an H200 (the seed's RTX 2060 is 7.5), so a GPU test program run as 7.5 or 8.6
// (MPTRAIN_EMULATED_COMPUTE_CAPABILITY) sees that GPU's limits, not an H200's with another number.
// The numbers are the CUDA C++ Programming Guide's per-capability limits and one shipping GPU's
// multiprocessors, L2 and memory (the model named).
#pragma once

#include <cstddef>

namespace mpt_emulation {

struct DeviceProfile {
    int capability;  // major * 10 + minor
    const char* model;
    int multiprocessors;
    int shared_per_multiprocessor;  // bytes
    int shared_per_block_optin;     // the most a block may opt into (dynamic, with its static)
    int reserved_shared_per_block;  // taken by the system from each resident block's share (8.0 on)
    int threads_per_multiprocessor;
    int blocks_per_multiprocessor;
    int l2_bytes;
    size_t global_memory;
};

// The profile of the highest listed capability at or below `capability` (7.0, 7.5, 8.0, 8.6, 8.9,
// 9.0; above 9.0, 9.0's; below 7.0, 7.0's).
const DeviceProfile& device_profile(int capability);

// The profile of the capability the emulated device reports now (compute_capability()).
const DeviceProfile& current_device_profile();

}  // namespace mpt_emulation
