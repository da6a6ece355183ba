// The core's one error type. Core code throws mpt::Error (or lets std::bad_alloc escape); the C API
// boundary (capi/) catches everything and turns it into an mpt_status plus a thread-local message.
#pragma once

#include <stdexcept>
#include <string>

#include "mptrain/mptrain.h"

namespace mpt {

class Error : public std::runtime_error {
public:
    Error(mpt_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    mpt_status status() const noexcept { return status_; }

private:
    mpt_status status_;
};

[[noreturn]] inline void fail(mpt_status status, const std::string& message) { throw Error(status, message); }

inline void require(bool condition, mpt_status status, const char* message) {
    if (!condition) fail(status, message);
}

}  // namespace mpt
