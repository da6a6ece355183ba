// Keeps the calling thread's current CUDA device across one C API call. The CUDA backend makes its
// own device current for its work; an application that also uses CUDA, on another device, must find
// its own device current again when the call returns. Until a CUDA backend has been created in the
// process this makes no CUDA call at all (CPU-only use never initialises the CUDA runtime).
#pragma once

namespace mpt {

class DeviceScope {
public:
    // `cuda_may_start`: this call may create the first CUDA backend, so save the device even before.
    explicit DeviceScope(bool cuda_may_start = false) noexcept;
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int saved_ = -1;  // -1: nothing to restore
};

}  // namespace mpt
