// The library version as text, from the public header's macros.
#pragma once

#include "mptrain/mptrain.h"

#define MPT_STRINGIFY_INNER(x) #x
#define MPT_STRINGIFY(x) MPT_STRINGIFY_INNER(x)

namespace mpt {

constexpr const char* kVersionString =
    MPT_STRINGIFY(MPT_VERSION_MAJOR) "." MPT_STRINGIFY(MPT_VERSION_MINOR) "." MPT_STRINGIFY(MPT_VERSION_PATCH);

}  // namespace mpt
