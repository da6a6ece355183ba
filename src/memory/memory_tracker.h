// Counts the bytes held by a context's arenas and enforces its optional memory budget. Arenas
// reserve before they allocate, so a plan that does not fit fails before any work starts.
#pragma once

#include <atomic>
#include <cstddef>

namespace mpt {

class MemoryTracker {
public:
    explicit MemoryTracker(size_t budget_bytes = 0) : budget_(budget_bytes) {}

    // Throws Error(MPT_STATUS_OUT_OF_MEMORY) when `bytes` more would exceed the budget.
    void reserve(size_t bytes);
    void unreserve(size_t bytes) noexcept { used_.fetch_sub(bytes); }

    size_t used() const { return used_.load(); }
    size_t peak() const { return peak_.load(); }
    size_t budget() const { return budget_; }

private:
    size_t budget_;
    std::atomic<size_t> used_{0};
    std::atomic<size_t> peak_{0};
};

}  // namespace mpt
