// See memory_tracker.h.
#include "memory/memory_tracker.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace mpt {

bool MemoryTracker::try_reserve(size_t bytes, size_t& wanted) {
    size_t current = used_.load();
    for (;;) {
        wanted = current + bytes;
        if (budget_ != 0 && wanted > budget_) return false;
        if (used_.compare_exchange_weak(current, wanted)) break;
    }
    size_t peak = peak_.load();
    while (wanted > peak && !peak_.compare_exchange_weak(peak, wanted)) {
    }
    return true;
}

void MemoryTracker::reserve(size_t bytes) {
    size_t wanted = 0;
    if (try_reserve(bytes, wanted)) return;
    if (reclaim_caches() != 0 && try_reserve(bytes, wanted)) return;
    fail(MPT_STATUS_OUT_OF_MEMORY, "memory budget exceeded: the plan needs " + std::to_string(wanted) +
                                       " bytes in all, the context's budget is " + std::to_string(budget_));
}

void MemoryTracker::add_reclaimable(Reclaimable* cache) {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    caches_.push_back(cache);
}

void MemoryTracker::remove_reclaimable(Reclaimable* cache) noexcept {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    caches_.erase(std::remove(caches_.begin(), caches_.end(), cache), caches_.end());
}

size_t MemoryTracker::reclaim_caches() noexcept {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    size_t reclaimed = 0;
    for (Reclaimable* cache : caches_) reclaimed += cache->reclaim();
    return reclaimed;
}

}  // namespace mpt
