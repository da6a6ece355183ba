// See CallScope in capi_internal.h.
#include "capi_internal.h"

namespace mpt::capi {

thread_local CallScope* CallScope::current_ = nullptr;

CallScope::~CallScope() {
    for (int i = count_ - 1; i >= 0; --i) used_[i]->ownership().leave();
    current_ = outer_;
}

void CallScope::use(const std::shared_ptr<Context>& context) {
    CallScope* scope = current_;
    if (!scope) fail(MPT_STATUS_INTERNAL, "a handle was used outside an API call's scope");
    for (int i = 0; i < scope->count_; ++i)
        if (scope->used_[i] == context) return;
    if (scope->count_ == kMostContexts) fail(MPT_STATUS_INTERNAL, "one call used more contexts than expected");
    if (!context->ownership().try_enter())
        fail(MPT_STATUS_INVALID_STATE,
             "the context is in use by another thread (a context and everything made from it, its models, data "
             "sets and trainers, is used by one thread at a time)");
    scope->used_[scope->count_++] = context;
}

}  // namespace mpt::capi
