// Built when mptrain is compiled without CUDA: the CUDA backend reports itself unavailable.
#include "backend/backend.h"
#include "backend/device_scope.h"
#include "core/error.h"

namespace mpt {

std::unique_ptr<Backend> create_cuda_backend(int, MemoryTracker*) {
    fail(MPT_STATUS_BACKEND_UNAVAILABLE, cuda_unavailable_reason());
}

int cuda_device_count() { return 0; }

std::string cuda_unavailable_reason() {
    return "this build of mptrain has no CUDA backend (built with MPTRAIN_CUDA=OFF)";
}

// Without a CUDA backend mptrain never changes the current device.
DeviceScope::DeviceScope(bool) noexcept {}
DeviceScope::~DeviceScope() = default;

}  // namespace mpt
