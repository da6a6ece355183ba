// See thread_ownership.h.
#include "core/thread_ownership.h"

namespace mpt {

bool ThreadOwnership::try_enter() {
    const std::thread::id self = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mutex_);
    if (depth_ > 0 && holder_ != self) return false;
    holder_ = self;
    ++depth_;
    return true;
}

void ThreadOwnership::enter() {
    const std::thread::id self = std::this_thread::get_id();
    std::unique_lock<std::mutex> lock(mutex_);
    released_.wait(lock, [&] { return depth_ == 0 || holder_ == self; });
    holder_ = self;
    ++depth_;
}

void ThreadOwnership::leave() noexcept {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--depth_ > 0) return;
        holder_ = std::thread::id{};
    }
    released_.notify_all();
}

}  // namespace mpt
