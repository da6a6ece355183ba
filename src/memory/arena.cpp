// See arena.h.
#include "memory/arena.h"

#include <utility>

#include "backend/backend.h"
#include "memory/memory_tracker.h"

namespace mpt {

Arena::Arena(Backend& backend, MemoryTracker& tracker, size_t bytes, MemoryTracker::ReservationFor purpose)
    : backend_(&backend), tracker_(&tracker) {
    tracker.reserve(bytes, purpose);
    try {
        base_ = backend.allocate(bytes);
    } catch (...) {
        tracker.unreserve(bytes);
        throw;
    }
    bytes_ = bytes;
    try {
        backend.fill_zero(base_, bytes);  // may flush a recorded task and report its fault
    } catch (...) {
        reset();  // no destructor runs for an arena that was never made
        throw;
    }
}

Arena::~Arena() { reset(); }

Arena::Arena(Arena&& other) noexcept { *this = std::move(other); }

Arena& Arena::operator=(Arena&& other) noexcept {
    if (this != &other) {
        reset();
        std::swap(backend_, other.backend_);
        std::swap(tracker_, other.tracker_);
        std::swap(base_, other.base_);
        std::swap(bytes_, other.bytes_);
    }
    return *this;
}

void Arena::reset() noexcept {
    if (base_) {
        backend_->release(base_);
        tracker_->unreserve(bytes_);
    }
    base_ = nullptr;
    bytes_ = 0;
}

}  // namespace mpt
