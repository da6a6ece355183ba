// C API: context options and contexts. Argument checks and translation only.
#include "capi_internal.h"

using mpt::capi::impl_of;
using mpt::capi::require_pointer;
using mpt::fail;
using mpt::require;

extern "C" {

int mpt_cuda_device_count(void) {
    try {
        return mpt::cuda_device_count();
    } catch (...) {
        return 0;
    }
}

mpt_status mpt_context_options_create(mpt_context_options_t** out) {
    MPT_API_BEGIN
    require_pointer(out, "out");
    *out = new mpt_context_options{};
    MPT_API_END
}

void mpt_context_options_destroy(mpt_context_options_t* options) { delete options; }

mpt_status mpt_context_options_set_backend(mpt_context_options_t* options, mpt_backend backend) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.backend = mpt::capi::checked_enum(backend, MPT_BACKEND_AUTO, MPT_BACKEND_CUDA, "backend");
    MPT_API_END
}

mpt_status mpt_context_options_set_threads(mpt_context_options_t* options, int threads) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require(threads >= 0 && threads <= 1024, MPT_STATUS_INVALID_ARGUMENT, "threads must be in [0, 1024]");
    options->config.threads = threads;
    MPT_API_END
}

mpt_status mpt_context_options_set_seed(mpt_context_options_t* options, uint64_t seed) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.seed = seed;
    MPT_API_END
}

mpt_status mpt_context_options_set_device(mpt_context_options_t* options, int device) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    require(device >= 0, MPT_STATUS_INVALID_ARGUMENT, "device must be >= 0");
    options->config.device = device;
    MPT_API_END
}

mpt_status mpt_context_options_set_log_callback(mpt_context_options_t* options, mpt_log_fn callback, void* user_data) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.log_callback = callback;
    options->config.log_user_data = user_data;
    MPT_API_END
}

mpt_status mpt_context_options_set_log_level(mpt_context_options_t* options, mpt_log_level level) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.log_level = mpt::capi::checked_enum(level, MPT_LOG_LEVEL_DEBUG, MPT_LOG_LEVEL_ERROR, "log level");
    MPT_API_END
}

mpt_status mpt_context_options_set_dataset_device_budget(mpt_context_options_t* options, size_t bytes) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.dataset_device_budget = bytes;
    MPT_API_END
}

mpt_status mpt_context_options_set_memory_budget(mpt_context_options_t* options, size_t bytes) {
    MPT_API_BEGIN
    require_pointer(options, "options");
    options->config.memory_budget = bytes;
    MPT_API_END
}

mpt_status mpt_context_create(const mpt_context_options_t* options, mpt_context_t** out) {
    MPT_API_BEGIN
    require_pointer(out, "out");
    const mpt::ContextConfig config = options ? options->config : mpt::ContextConfig{};
    // The first CUDA context of the process makes its device current: restore the caller's.
    mpt::DeviceScope device_scope(config.backend != MPT_BACKEND_CPU);
    auto context = std::make_shared<mpt::Context>(config);
    *out = new mpt_context{std::move(context)};
    MPT_API_END
}

void mpt_context_destroy(mpt_context_t* context) {
    mpt::DeviceScope device_scope;  // freeing GPU memory makes the backend's device current
    mpt::capi::destroy_holding_context(context);
}

mpt_status mpt_context_get_backend(const mpt_context_t* context, mpt_backend* out) {
    MPT_API_BEGIN
    const mpt::Context& impl = impl_of(context, "context");
    require_pointer(out, "out");
    *out = impl.backend().kind() == mpt::BackendKind::cuda ? MPT_BACKEND_CUDA : MPT_BACKEND_CPU;
    MPT_API_END
}

mpt_status mpt_context_resolve_precision(const mpt_context_t* context, mpt_precision requested, mpt_precision* out) {
    MPT_API_BEGIN
    const mpt::Context& impl = impl_of(context, "context");
    require_pointer(out, "out");
    const mpt_precision precision = mpt::capi::checked_enum(requested, MPT_PRECISION_FP32, MPT_PRECISION_AUTO, "precision");
    *out = mpt::resolve_precision(precision, impl.backend()).precision;
    MPT_API_END
}

mpt_status mpt_context_get_memory(const mpt_context_t* context, size_t* used_bytes, size_t* peak_bytes) {
    MPT_API_BEGIN
    const mpt::Context& impl = impl_of(context, "context");
    if (used_bytes) *used_bytes = impl.memory().used();
    if (peak_bytes) *peak_bytes = impl.memory().peak();
    MPT_API_END
}

mpt_status mpt_context_describe(const mpt_context_t* context, char* text, size_t capacity, size_t* length) {
    MPT_API_BEGIN
    const mpt::Context& impl = impl_of(context, "context");
    require_pointer(length, "length");
    const std::string description = impl.describe();
    if (text) {
        if (capacity <= description.size())
            fail(MPT_STATUS_SHAPE_MISMATCH, "the description takes " + std::to_string(description.size() + 1) +
                                                " bytes with its NUL, more than the capacity " +
                                                std::to_string(capacity));
        std::memcpy(text, description.c_str(), description.size() + 1);
    }
    *length = description.size();
    MPT_API_END
}

}  // extern "C"
