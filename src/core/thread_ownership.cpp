// See thread_ownership.h. A waiter counts itself in waiters_ before it last tries, and a leaving
// holder clears holder_ before it reads waiters_ (both sequentially consistent): either the waiter's
// try sees the holder gone, or the holder sees the waiter and wakes it under the mutex, which the
// waiter holds from its count until it waits.
#include "core/thread_ownership.h"

namespace mpt {

bool ThreadOwnership::take_if_free(std::thread::id self) noexcept {
    std::thread::id nobody{};
    if (!holder_.compare_exchange_strong(nobody, self)) return false;
    depth_ = 1;
    return true;
}

bool ThreadOwnership::try_enter() noexcept {
    const std::thread::id self = std::this_thread::get_id();
    if (holder_.load() == self) {
        ++depth_;
        return true;
    }
    if (waiters_.load() > 0) return false;  // a waiting destroy goes first
    return take_if_free(self);
}

void ThreadOwnership::enter() {
    if (try_enter()) return;
    const std::thread::id self = std::this_thread::get_id();
    std::unique_lock<std::mutex> lock(mutex_);
    // Counted off however the wait ends: a count left behind (a thread cancelled while it waits)
    // would refuse every other thread's calls for ever.
    struct Counted {
        std::atomic<int>& waiters;
        explicit Counted(std::atomic<int>& count) : waiters(count) { ++waiters; }
        ~Counted() { --waiters; }
    } counted(waiters_);
    released_.wait(lock, [&] { return take_if_free(self); });
}

void ThreadOwnership::leave() noexcept {
    if (--depth_ > 0) return;
    holder_.store(std::thread::id{});
    if (waiters_.load() == 0) return;
    { const std::lock_guard<std::mutex> lock(mutex_); }  // the waiter is waiting, not between count and wait
    released_.notify_all();
}

}  // namespace mpt
