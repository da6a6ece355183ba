// Counts the bytes held by a context's arenas and enforces its optional memory budget. Arenas
// reserve before they allocate, so a plan that does not fit fails before any work starts. Caches
// (memory that only saves work, such as a trainer's weight words) register as reclaimable: a
// reservation that would exceed the budget first takes their memory back, so a cache never makes
// anything else fail.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace mpt {

class MemoryTracker {
public:
    // A cache whose memory the tracker may take back. reclaim() runs on whichever thread reserves
    // (an API call of another handle of the context, or one of the backend's worker threads) while
    // the tracker's registry is locked: it must give back what it can at once (unreserving it)
    // and skip, never wait for, what its owner is using. It never reserves.
    class Reclaimable {
    public:
        virtual size_t reclaim() noexcept = 0;

    protected:
        ~Reclaimable() = default;
    };

    explicit MemoryTracker(size_t budget_bytes = 0) : budget_(budget_bytes) {}
    MemoryTracker(const MemoryTracker&) = delete;
    MemoryTracker& operator=(const MemoryTracker&) = delete;

    // Throws Error(MPT_STATUS_OUT_OF_MEMORY) when `bytes` more would exceed the budget, even after
    // every registered cache gave back what it could.
    void reserve(size_t bytes);
    void unreserve(size_t bytes) noexcept { used_.fetch_sub(bytes); }

    // A cache registers for its lifetime; once remove_reclaimable returns, no reclaim() of it runs.
    void add_reclaimable(Reclaimable* cache);
    void remove_reclaimable(Reclaimable* cache) noexcept;

    size_t used() const { return used_.load(); }
    size_t peak() const { return peak_.load(); }
    size_t budget() const { return budget_; }

private:
    // Reserves `bytes` if they fit; false (nothing reserved) if not. `wanted`: the total tried.
    bool try_reserve(size_t bytes, size_t& wanted);
    // Asks every registered cache for its memory; the bytes given back.
    size_t reclaim_caches() noexcept;

    size_t budget_;
    std::atomic<size_t> used_{0};
    std::atomic<size_t> peak_{0};
    std::mutex caches_mutex_;
    std::vector<Reclaimable*> caches_;
};

}  // namespace mpt
