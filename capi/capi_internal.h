// Shared by the C API's translation units: the handle structs (thin wrappers around the core's
// shared objects) and the begin/end pair every entry point is wrapped in, so that no exception,
// abort or exit crosses the ABI.
#pragma once

#include <atomic>
#include <cstring>
#include <type_traits>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "backend/device_scope.h"
#include "core/context.h"
#include "core/error.h"
#include "data/dataset.h"
#include "mptrain/mptrain.h"
#include "nn/model.h"
#include "nn/trainer.h"

struct mpt_context_options {
    mpt::ContextConfig config;
};
struct mpt_context {
    std::shared_ptr<mpt::Context> impl;
};
struct mpt_model {
    std::shared_ptr<mpt::Model> impl;
};
struct mpt_dataset {
    std::shared_ptr<mpt::Dataset> impl;
};
struct mpt_trainer_options {
    mpt::TrainerConfig config;
    bool weight_decay_chosen = false;  // by the caller: AdamW's default decay then no longer applies
    bool betas_chosen = false;  // by the caller: Lion's default beta2 (0.99, Adam's 0.999) then no longer applies
};
struct mpt_trainer {
    std::unique_ptr<mpt::Trainer> impl;
    std::atomic<bool> busy{false};  // set while a call that uses the trainer runs (ExclusiveUse)
    std::atomic<std::thread::id> user{};  // the thread of that call
    // mpt_trainer_destroy from inside that call (its callbacks): done when the call returns.
    bool destroy_when_done = false;
    // As in the options it was created with, for mpt_trainer_get_options' copy.
    bool weight_decay_chosen = false;
    bool betas_chosen = false;
};

namespace mpt::capi {

// Records the message for mpt_last_error() and returns the status.
mpt_status record_error(mpt_status status, const char* message) noexcept;
void clear_error() noexcept;

template <typename T>
void require_pointer(const T* pointer, const char* name) {
    if (!pointer) fail(MPT_STATUS_INVALID_ARGUMENT, std::string(name) + " is NULL");
}

// A C caller may pass any integer as an enum. Reading an out-of-range value through the C++ enum type
// is undefined behaviour, so the raw bits are copied out and checked before the value is used.
template <typename Enum>
Enum checked_enum(const Enum& value, int first, int last, const char* what) {
    std::underlying_type_t<Enum> raw;
    std::memcpy(&raw, &value, sizeof raw);
    if (static_cast<long long>(raw) < first || static_cast<long long>(raw) > last) {
        // A C enum is an int to the caller (-1 may reach us as 4294967295): say it as they wrote it.
        int as_written;
        static_assert(sizeof raw == sizeof as_written, "C enums are int-sized");
        std::memcpy(&as_written, &raw, sizeof as_written);
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string("unknown ") + what + " " + std::to_string(as_written));
    }
    return static_cast<Enum>(raw);
}

// The context a handle's object belongs to.
inline const std::shared_ptr<Context>& context_of(const std::shared_ptr<Context>& context) { return context; }
inline const std::shared_ptr<Context>& context_of(const std::shared_ptr<Model>& model) { return model->context(); }
inline const std::shared_ptr<Context>& context_of(const std::shared_ptr<Dataset>& dataset) { return dataset->context(); }
inline const std::shared_ptr<Context>& context_of(const std::unique_ptr<Trainer>& trainer) {
    return trainer->model()->context();
}

// The contexts one C API call uses (MPT_API_BEGIN declares it): each is taken for the calling thread
// as the call first reaches one of its handles, and given back as the call returns. A context in use
// by another thread refuses the call (mptrain.h: a context and everything made from it is used by one
// thread at a time; they share one backend). Calls from the owner's callbacks re-enter.
class CallScope {
public:
    CallScope() noexcept : outer_(current_) { current_ = this; }
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

    // Takes `context` for the call in progress on this thread (once per call).
    static void use(const std::shared_ptr<Context>& context);

private:
    static constexpr int kMostContexts = 4;  // a call reaches at most two (a trainer and a data set)
    std::shared_ptr<Context> used_[kMostContexts];  // kept alive until given back
    int count_ = 0;
    CallScope* outer_;
    static thread_local CallScope* current_;
};

// The object behind a live handle, its context taken for this call. Refused inside the context's log
// callback: a log line can come from the middle of an operation on any handle of that context
// (mptrain.h forbids such calls).
template <typename Handle>
auto& impl_of(Handle* handle, const char* name) {
    require_pointer(handle, name);
    if (!handle->impl) fail(MPT_STATUS_INVALID_ARGUMENT, std::string(name) + " is not a live handle");
    const std::shared_ptr<Context>& context = context_of(handle->impl);
    if (context->log_callback_running_on_this_thread())
        fail(MPT_STATUS_INVALID_STATE, std::string("the ") + name + "'s context is running its log callback, "
                                                                     "which must not call back into that context");
    CallScope::use(context);
    return *handle->impl;
}

// Frees a handle (its object, when the handle held the last reference) while its context is held by
// this thread, waiting for another thread's call on that context to return: the objects of a context
// share its backend. The context itself goes last, after it was given back.
template <typename Handle>
void destroy_holding_context(Handle* handle) {
    if (!handle) return;
    const std::shared_ptr<Context> context = handle->impl ? context_of(handle->impl) : nullptr;
    if (context) context->ownership().enter();
    delete handle;
    if (context) context->ownership().leave();
}

// Detects a trainer re-entered from its own callback (another thread is already refused by its
// context's CallScope) and refuses the second use instead of corrupting the first. A destroy
// requested from inside the call (by a callback) is carried out when the call ends, after its last
// use of the trainer.
class ExclusiveUse {
public:
    explicit ExclusiveUse(mpt_trainer& trainer) : trainer_(trainer) {
        bool expected = false;
        if (!trainer_.busy.compare_exchange_strong(expected, true))
            fail(MPT_STATUS_INVALID_STATE,
                 "the trainer is already in use (by another thread, or this call came from its own callback)");
        trainer_.user.store(std::this_thread::get_id());
    }
    ~ExclusiveUse() {
        const bool destroy = trainer_.destroy_when_done;
        trainer_.user.store(std::thread::id{});
        trainer_.busy.store(false);
        if (destroy) delete &trainer_;
    }
    ExclusiveUse(const ExclusiveUse&) = delete;
    ExclusiveUse& operator=(const ExclusiveUse&) = delete;

private:
    mpt_trainer& trainer_;
};

// Whether the calling thread is inside a call that uses `trainer` (so this call came from one of
// its callbacks).
inline bool used_by_this_thread(const mpt_trainer& trainer) {
    return trainer.busy.load() && trainer.user.load() == std::this_thread::get_id();
}

}  // namespace mpt::capi

#define MPT_API_BEGIN                    \
    mpt::capi::clear_error();             \
    mpt::DeviceScope mpt_device_scope_;   \
    mpt::capi::CallScope mpt_call_scope_; \
    try {
#define MPT_API_END                                                                       \
    }                                                                                     \
    catch (const mpt::Error& error) {                                                     \
        return mpt::capi::record_error(error.status(), error.what());                     \
    }                                                                                     \
    catch (const std::bad_alloc&) {                                                       \
        return mpt::capi::record_error(MPT_STATUS_OUT_OF_MEMORY, "out of host memory");   \
    }                                                                                     \
    catch (const std::exception& error) {                                                 \
        return mpt::capi::record_error(MPT_STATUS_INTERNAL, error.what());                \
    }                                                                                     \
    catch (...) {                                                                         \
        return mpt::capi::record_error(MPT_STATUS_INTERNAL, "unknown exception (from a callback?)"); \
    }                                                                                     \
    return MPT_STATUS_OK;
