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

void MemoryTracker::reserve(size_t bytes, ReservationFor purpose) {
    size_t wanted = 0;
    if (try_reserve(bytes, wanted)) return;
    if (purpose == ReservationFor::work) {
        reclaim_caches(wanted - budget_);
        // Tried again whatever this thread's reclaim freed: another thread's may have freed enough.
        if (try_reserve(bytes, wanted)) return;
    }
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

void MemoryTracker::reclaim_caches(size_t shortfall) noexcept {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    size_t held = 0;
    for (const Reclaimable* cache : caches_) held += cache->held_bytes();
    if (held < shortfall) return;
    size_t reclaimed = 0;
    for (Reclaimable* cache : caches_) {
        if (reclaimed >= shortfall) break;
        reclaimed += cache->reclaim();
    }
}

}  // namespace mpt
