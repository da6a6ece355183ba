// Keeps the calling thread's current CUDA context across one C API call. The CUDA backend makes its
// own device current for its work; an application that also uses CUDA, on another device or with a
// context of its own, must find it current again when the call returns. (The driver's context, not
// the runtime's device: on a thread with no context, restoring "device 0" would create one.) Until a CUDA backend has been created in the
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
    void* saved_context_ = nullptr;  // the driver's current context at entry (may be none)
    bool active_ = false;            // false: nothing to restore
};

}  // namespace mpt
