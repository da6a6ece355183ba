// Version, status strings and the thread-local last-error message.
#include <cstring>
#include <string>

#include "capi_internal.h"
#include "core/version.h"

namespace mpt::capi {

namespace {
thread_local std::string tls_last_error;
}

mpt_status record_error(mpt_status status, const char* message) noexcept {
    try {
        tls_last_error = message ? message : "";
    } catch (...) {
        tls_last_error.clear();
    }
    return status;
}

void clear_error() noexcept { tls_last_error.clear(); }

}  // namespace mpt::capi

extern "C" {

const char* mpt_version(void) { return mpt::kVersionString; }

const char* mpt_status_string(mpt_status status) {
    // Any integer may arrive here from C: switch on the raw value, never on an out-of-range enum.
    int raw;
    std::memcpy(&raw, &status, sizeof raw);
    switch (raw) {
        case MPT_STATUS_OK: return "MPT_STATUS_OK";
        case MPT_STATUS_INVALID_ARGUMENT: return "MPT_STATUS_INVALID_ARGUMENT";
        case MPT_STATUS_SHAPE_MISMATCH: return "MPT_STATUS_SHAPE_MISMATCH";
        case MPT_STATUS_OUT_OF_MEMORY: return "MPT_STATUS_OUT_OF_MEMORY";
        case MPT_STATUS_IO_ERROR: return "MPT_STATUS_IO_ERROR";
        case MPT_STATUS_CORRUPT_DATA: return "MPT_STATUS_CORRUPT_DATA";
        case MPT_STATUS_INVALID_STATE: return "MPT_STATUS_INVALID_STATE";
        case MPT_STATUS_NON_FINITE: return "MPT_STATUS_NON_FINITE";
        case MPT_STATUS_CANCELLED: return "MPT_STATUS_CANCELLED";
        case MPT_STATUS_BACKEND_UNAVAILABLE: return "MPT_STATUS_BACKEND_UNAVAILABLE";
        case MPT_STATUS_BACKEND_ERROR: return "MPT_STATUS_BACKEND_ERROR";
        case MPT_STATUS_UNSUPPORTED: return "MPT_STATUS_UNSUPPORTED";
        case MPT_STATUS_INTERNAL: return "MPT_STATUS_INTERNAL";
    }
    return "MPT_STATUS_UNKNOWN";
}

const char* mpt_last_error(void) { return mpt::capi::tls_last_error.c_str(); }

}  // extern "C"
