// See weight_word_cache.h.
#include "nn/weight_word_cache.h"

#include <thread>

#include "core/error.h"

namespace mpt {

WeightWordCache::WeightWordCache(Backend& backend, MemoryTracker& tracker) : backend_(backend), tracker_(tracker) {
    tracker_.add_reclaimable(this);
}

WeightWordCache::~WeightWordCache() {
    tracker_.remove_reclaimable(this);  // no reclaim runs from here on
}

void WeightWordCache::hold() {
    if (owner_depth_++ > 0) return;
    for (;;) {
        int expected = kNobody;
        if (holder_.compare_exchange_weak(expected, kOwner, std::memory_order_acquire)) return;
        std::this_thread::yield();  // a reclaimer is freeing the words
    }
}

void WeightWordCache::let_go() noexcept {
    if (--owner_depth_ == 0) holder_.store(kNobody, std::memory_order_release);
}

const uint16_t* WeightWordCache::words(uint64_t version) const {
    if (owner_depth_ == 0 || version_ != version || arena_.bytes() == 0) return nullptr;
    return arena_.at<uint16_t>(0);
}

uint16_t* WeightWordCache::room(size_t elements) {
    require(owner_depth_ > 0, MPT_STATUS_INTERNAL, "weight words written outside a reading");
    version_ = kNoWeights;  // not current while being written
    const size_t wanted = elements * sizeof(uint16_t);
    if (arena_.bytes() != wanted) {
        drop();
        try {
            arena_ = Arena(backend_, tracker_, wanted, MemoryTracker::ReservationFor::cache);
        } catch (const Error& error) {
            if (error.status() != MPT_STATUS_OUT_OF_MEMORY) throw;
            return nullptr;  // an optimisation the budget has no room for
        }
        bytes_.store(wanted, std::memory_order_relaxed);
    }
    return arena_.at<uint16_t>(0);
}

void WeightWordCache::written(uint64_t version) { version_ = version; }

void WeightWordCache::release() {
    Reading reading(*this);
    drop();
}

void WeightWordCache::drop() noexcept {
    arena_ = Arena();
    version_ = kNoWeights;
    bytes_.store(0, std::memory_order_relaxed);
}

size_t WeightWordCache::reclaim() noexcept {
    int expected = kNobody;
    if (!holder_.compare_exchange_strong(expected, kReclaimer, std::memory_order_acquire)) return 0;  // being read
    const size_t freed = arena_.bytes();
    drop();
    holder_.store(kNobody, std::memory_order_release);
    return freed;
}

}  // namespace mpt
