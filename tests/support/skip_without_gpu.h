// GPU test cases return early with a message where no CUDA device is usable (or the build has no
// CUDA backend), so the suites pass on machines without a GPU, CI included. Where a GPU is meant to
// be (the device check sets MPTRAIN_REQUIRE_GPU=1), the same condition fails the case instead, with
// the reason, so a driver too old for the toolkit or a missing cuBLASLt cannot pass as skips.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend.h"

namespace mpt::testing {

inline bool gpu_required() {
    const char* value = std::getenv("MPTRAIN_REQUIRE_GPU");
    return value && std::strcmp(value, "0") != 0 && *value != '\0';
}

// The major compute capability in a CUDA backend's device name ("..., compute capability 9.0, ..."),
// or -1: where it is 8 or more, a tensor-core path that says it cannot run is a failure, not a skip.
inline int compute_capability_major(const Backend& backend) {
    const std::string name = backend.device_name();
    const std::string tag = "compute capability ";
    const size_t at = name.find(tag);
    return at == std::string::npos ? -1 : std::atoi(name.c_str() + at + tag.size());
}

// Turns a device path on through its backend setter (which says whether it is now on). Off is a
// skip below compute capability `minimum_major`.0, and a failure from there up, where the path's own
// availability check is what is under test.
template <typename Setter>
bool turn_on_device_path(Backend& backend, Setter set, const char* what, int minimum_major) {
    const bool on = set(backend, true);
    if (compute_capability_major(backend) >= minimum_major)
        REQUIRE_MESSAGE(on, what << " is off on a device of compute capability " << minimum_major << ".0 or later");
    if (!on) MESSAGE("compute capability below " << minimum_major << ".0: no " << what);
    return on;
}

// A hand-written tensor-core path (mma.m16n8k16): compute capability 8.0 and up.
template <typename Setter>
bool turn_on_tensor_core_path(Backend& backend, Setter set, const char* what) {
    return turn_on_device_path(backend, set, what, 8);
}

}  // namespace mpt::testing

#define SKIP_WITHOUT_GPU()                                                                               \
    do {                                                                                                 \
        if (mpt::cuda_device_count() == 0) {                                                             \
            if (mpt::testing::gpu_required())                                                            \
                FAIL("MPTRAIN_REQUIRE_GPU is set, but no CUDA device is usable: "                        \
                     << mpt::cuda_unavailable_reason());                                                 \
            MESSAGE("skipped: no CUDA device (" << mpt::cuda_unavailable_reason() << ")");               \
            return;                                                                                      \
        }                                                                                                \
    } while (0)
