// See emulated_device_profile.h.
#include "cuda_emulation/emulated_device_profile.h"

#include "cuda_emulation/emulated_threads.h"

namespace mpt_emulation {

namespace {

constexpr int kKiB = 1024;
constexpr size_t kGiB = size_t{1} << 30;

// Ascending by capability. Shared memory, threads and blocks an SM: the Programming Guide's
// "Technical Specifications per Compute Capability"; the rest: the model's.
constexpr DeviceProfile kProfiles[] = {
    {70, "Tesla V100", 80, 96 * kKiB, 96 * kKiB, 0, 2048, 32, 6 * kKiB* kKiB, 16 * kGiB},
    {75, "GeForce RTX 2060", 30, 64 * kKiB, 64 * kKiB, 0, 1024, 16, 3 * kKiB* kKiB, 6 * kGiB},
    {80, "A100", 108, 164 * kKiB, 163 * kKiB, kKiB, 2048, 32, 40 * kKiB* kKiB, 40 * kGiB},
    {86, "GeForce RTX 3090", 82, 100 * kKiB, 99 * kKiB, kKiB, 1536, 16, 6 * kKiB* kKiB, 24 * kGiB},
    {89, "GeForce RTX 4090", 128, 100 * kKiB, 99 * kKiB, kKiB, 1536, 24, 72 * kKiB* kKiB, 24 * kGiB},
    {90, "H200", 132, 228 * kKiB, 227 * kKiB, kKiB, 2048, 32, 50 * kKiB* kKiB, 141 * kGiB},
};

}  // namespace

const DeviceProfile& device_profile(int capability) {
    const DeviceProfile* chosen = &kProfiles[0];
    for (const DeviceProfile& profile : kProfiles)
        if (profile.capability <= capability) chosen = &profile;
    return *chosen;
}

const DeviceProfile& current_device_profile() { return device_profile(compute_capability()); }

}  // namespace mpt_emulation
