// One thread at a time, re-entrant for that thread: what a context and everything made from it
// need, since they share one backend (its thread pool, scheduler and scratch). The C API takes a
// context's ownership for every call on any of its handles. A call from another thread meanwhile
// is refused, not queued: a callback of the owner that waited for such a thread would otherwise
// deadlock. A destroy, which cannot be refused, waits for the owner to let go, and goes before
// later calls: while one waits, new calls (not other destroys, which wait too) are refused, so a
// thread that calls without pause cannot take the context back at every release and keep the
// destroy waiting for ever. Waiting destroys go in no particular order among themselves.
//
// Taking and giving back are a compare-exchange and a store (about 20 ns a call, not the 80 of a
// mutex round trip); the mutex and condition variable serve waiting destroys only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mpt {

class ThreadOwnership {
public:
    // Takes it for the calling thread, or again when that thread holds it; false when another
    // thread holds it or waits in enter() for it (nothing changes then).
    bool try_enter() noexcept;
    // Takes it for the calling thread, waiting while another thread holds it.
    void enter();
    // Gives back one enter; the last wakes the waiting destroys.
    void leave() noexcept;

private:
    bool take_if_free(std::thread::id self) noexcept;

    std::atomic<std::thread::id> holder_{};
    int depth_ = 0;  // read and written by the holder only
    std::atomic<int> waiters_{0};
    std::mutex mutex_;
    std::condition_variable released_;
};

}  // namespace mpt
