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
        virtual size_t held_bytes() const noexcept = 0;  // what it holds now, read from any thread

    protected:
        ~Reclaimable() = default;
    };

    // Who reserves: work takes caches' memory when short; a cache never takes another's (two
    // caches would otherwise take turns evicting each other, each rewriting itself every time).
    enum class ReservationFor { work, cache };

    explicit MemoryTracker(size_t budget_bytes = 0) : budget_(budget_bytes) {}
    MemoryTracker(const MemoryTracker&) = delete;
    MemoryTracker& operator=(const MemoryTracker&) = delete;

    // Throws Error(MPT_STATUS_OUT_OF_MEMORY) when `bytes` more would exceed the budget, even after
    // the registered caches gave back what they could (for work only, and only when all of them
    // together could cover the shortfall: a reservation that fails anyway leaves them alone).
    void reserve(size_t bytes, ReservationFor purpose = ReservationFor::work);
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
    // Asks registered caches for their memory until `shortfall` bytes came back, unless all of them
    // together hold less.
    void reclaim_caches(size_t shortfall) noexcept;

    size_t budget_;
    std::atomic<size_t> used_{0};
    std::atomic<size_t> peak_{0};
    std::mutex caches_mutex_;
    std::vector<Reclaimable*> caches_;
};

}  // namespace mpt
