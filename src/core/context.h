// A context: the backend everything created from it runs on, the seed, the log sink and the
// memory budget. Models, datasets and trainers hold a shared_ptr to it, so it outlives them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/thread_ownership.h"
#include "memory/memory_tracker.h"
#include "mptrain/mptrain.h"

namespace mpt {

struct ContextConfig {
    mpt_backend backend = MPT_BACKEND_AUTO;
    int threads = 0;
    uint64_t seed = 42;
    int device = 0;
    mpt_log_fn log_callback = nullptr;
    void* log_user_data = nullptr;
    mpt_log_level log_level = MPT_LOG_LEVEL_INFO;
    size_t memory_budget = 0;
    size_t dataset_device_budget = SIZE_MAX;
};

class Context {
public:
    explicit Context(const ContextConfig& config);

    Backend& backend() { return *backend_; }
    const Backend& backend() const { return *backend_; }
    MemoryTracker& memory() { return memory_; }
    const MemoryTracker& memory() const { return memory_; }
    uint64_t seed() const { return config_.seed; }
    const ContextConfig& config() const { return config_; }

    // mpt_context_describe's JSON object: the version, backend and device, why AUTO fell back to
    // the CPU (empty when it did not), the memory held, then the backend's own members.
    std::string describe() const;
    void log(mpt_log_level level, const std::string& message) const;
    // Whether this thread is inside this context's log callback, which must not call back into the
    // context: the C API refuses such calls (a log line can come from the middle of an operation).
    bool log_callback_running_on_this_thread() const;
    // Which thread uses the context and everything made from it (the C API takes it per call).
    ThreadOwnership& ownership() const { return ownership_; }

private:
    ContextConfig config_;
    MemoryTracker memory_;
    std::string fallback_note_;  // set (and logged) when AUTO could not use the GPU it found
    std::unique_ptr<Backend> backend_;
    mutable ThreadOwnership ownership_;
};

}  // namespace mpt
