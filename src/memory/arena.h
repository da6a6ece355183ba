// An arena: one backend allocation holding every buffer of a plan. It reserves its bytes with the
// context's memory tracker first, so budgets fail before allocation.
#pragma once

#include <cstddef>

#include "memory/arena_plan.h"
#include "memory/memory_tracker.h"

namespace mpt {

class Backend;

class Arena {
public:
    Arena() = default;
    // `purpose`: MemoryTracker::reserve's (a cache's own arena passes ReservationFor::cache).
    Arena(Backend& backend, MemoryTracker& tracker, size_t bytes,
          MemoryTracker::ReservationFor purpose = MemoryTracker::ReservationFor::work);
    ~Arena();
    Arena(Arena&& other) noexcept;
    Arena& operator=(Arena&& other) noexcept;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    void* base() const { return base_; }
    size_t bytes() const { return bytes_; }
    template <typename T>
    T* at(size_t offset) const {
        return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
    }

private:
    void reset() noexcept;

    Backend* backend_ = nullptr;
    MemoryTracker* tracker_ = nullptr;
    void* base_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace mpt
