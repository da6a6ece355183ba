// GPU test cases return early with a message where no CUDA device is usable (or the build has no
// CUDA backend), so the suites pass on machines without a GPU, CI included.
#pragma once

#include <doctest/doctest.h>

#include "backend/backend.h"

#define SKIP_WITHOUT_GPU()                                                         \
    do {                                                                           \
        if (mpt::cuda_device_count() == 0) {                                       \
            MESSAGE("skipped: no CUDA device (or no CUDA backend in this build)"); \
            return;                                                                \
        }                                                                          \
    } while (0)
