// See context.h. AUTO picks CUDA only when a usable device exists, so the library works unchanged on
// machines without a GPU or driver.
#include "core/context.h"

#include "core/error.h"
#include "core/version.h"
#include "io/json_writer.h"

namespace mpt {

namespace {

// `fallback_note` says why AUTO runs on the CPU although a GPU is present.
std::unique_ptr<Backend> make_backend(const ContextConfig& config, MemoryTracker& memory, std::string& fallback_note) {
    switch (config.backend) {
        case MPT_BACKEND_CPU: return create_cpu_backend(config.threads, &memory);
        case MPT_BACKEND_CUDA: return create_cuda_backend(config.device, &memory);
        case MPT_BACKEND_AUTO:
            if (cuda_device_count() > config.device) {
                // A device that is counted can still refuse a context (exclusive mode, out of
                // memory, a driver fault): AUTO then runs on the CPU rather than failing.
                try {
                    return create_cuda_backend(config.device, &memory);
                } catch (const Error& error) {
                    fallback_note = std::string("the CUDA device is unusable, running on the CPU: ") + error.what();
                }
            }
            return create_cpu_backend(config.threads, &memory);
    }
    fail(MPT_STATUS_INVALID_ARGUMENT, "unknown backend");
}

}  // namespace

Context::Context(const ContextConfig& config)
    : config_(config), memory_(config.memory_budget), backend_(make_backend(config, memory_, fallback_note_)) {
    if (!fallback_note_.empty()) log(MPT_LOG_LEVEL_WARNING, fallback_note_);
    const std::string setup_warning = backend_->setup_warning();
    if (!setup_warning.empty()) log(MPT_LOG_LEVEL_WARNING, setup_warning);
    log(MPT_LOG_LEVEL_INFO, "mptrain " + std::string(kVersionString) + " on " + backend_->device_name());
}

std::string Context::describe() const {
    JsonWriter out;
    out.begin_object();
    out.key("version").string(kVersionString);
    out.key("backend").string(backend_->kind() == BackendKind::cuda ? "cuda" : "cpu");
    out.key("device").string(backend_->device_name());
    out.key("auto_fallback").string(fallback_note_);
    out.key("memory_used_bytes").unsigned_integer(memory_.used());
    out.key("memory_peak_bytes").unsigned_integer(memory_.peak());
    out.key("memory_budget_bytes").unsigned_integer(config_.memory_budget);
    backend_->describe(out);
    out.end_object();
    return out.take();
}

namespace {
// The log callbacks this thread is running, innermost first: a callback may use another context,
// whose own log callback then runs inside it, and both contexts are off limits there.
struct RunningLogCallback {
    const Context* context;
    const RunningLogCallback* outer;
};
thread_local const RunningLogCallback* running_log_callbacks = nullptr;
}  // namespace

void Context::log(mpt_log_level level, const std::string& message) const {
    if (!config_.log_callback || level < config_.log_level) return;
    const RunningLogCallback running{this, running_log_callbacks};
    running_log_callbacks = &running;
    struct Restore {
        ~Restore() { running_log_callbacks = running_log_callbacks->outer; }
    } restore;  // also when the callback unwinds (a C++ caller's exception)
    config_.log_callback(level, message.c_str(), config_.log_user_data);
}

bool Context::log_callback_running_on_this_thread() const {
    for (const RunningLogCallback* running = running_log_callbacks; running; running = running->outer)
        if (running->context == this) return true;
    return false;
}

}  // namespace mpt
