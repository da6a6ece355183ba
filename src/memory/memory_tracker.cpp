// See memory_tracker.h.
#include "memory/memory_tracker.h"

#include <string>

#include "core/error.h"

namespace mpt {

void MemoryTracker::reserve(size_t bytes) {
    size_t current = used_.load();
    for (;;) {
        const size_t wanted = current + bytes;
        if (budget_ != 0 && wanted > budget_)
            fail(MPT_STATUS_OUT_OF_MEMORY, "memory budget exceeded: the plan needs " + std::to_string(wanted) +
                                               " bytes in all, the context's budget is " + std::to_string(budget_));
        if (used_.compare_exchange_weak(current, wanted)) break;
    }
    size_t peak = peak_.load();
    while (current + bytes > peak && !peak_.compare_exchange_weak(peak, current + bytes)) {
    }
}

}  // namespace mpt
