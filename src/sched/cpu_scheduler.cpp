// See cpu_scheduler.h.
#include "sched/cpu_scheduler.h"

#include <string>
#include <system_error>

#include "core/error.h"

namespace mpt {

namespace {
// Which lane the current thread is working for: the worker thread is the copy lane.
thread_local Lane tls_lane = Lane::compute;
}  // namespace

CpuScheduler::CpuScheduler() {
    try {
        worker_ = std::thread([this] { worker_loop(); });
    } catch (const std::system_error& error) {
        fail(MPT_STATUS_BACKEND_ERROR, std::string("cannot start the CPU backend's copy-lane thread: ") + error.what());
    }
}

CpuScheduler::~CpuScheduler() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();
}

void CpuScheduler::submit(Lane lane, TaskFn task, void* argument) {
    if (lane == Lane::compute) {
        task(argument);
        return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return submitted_ - completed_ < kCapacity; });
    ring_[submitted_ % kCapacity] = Task{task, argument};
    ++submitted_;
    lock.unlock();
    changed_.notify_all();
}

Event CpuScheduler::record(Lane lane) {
    std::lock_guard<std::mutex> lock(mutex_);
    return Event{lane, lane == Lane::copy ? submitted_ : 0};
}

void CpuScheduler::wait(Lane waiter, const Event& event) {
    // Compute work is finished when it returns, so only compute waiting on copy has to block; a copy
    // task submitted later already starts after the compute work that preceded its submission.
    if (waiter == Lane::compute && event.lane == Lane::copy) wait_for_copy_ticket(event.ticket);
}

void CpuScheduler::wait_for_copy_ticket(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return completed_ >= ticket; });
    if (copy_error_) {
        std::exception_ptr error = copy_error_;
        copy_error_ = nullptr;
        std::rethrow_exception(error);
    }
}

void CpuScheduler::synchronize() {
    ++host_syncs_;
    uint64_t ticket;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ticket = submitted_;
    }
    wait_for_copy_ticket(ticket);
}

Lane CpuScheduler::current_lane() const { return tls_lane; }

bool CpuScheduler::completed(const Event& event) {
    if (event.lane == Lane::compute) return true;  // compute work ran inline before record()
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= event.ticket;
}

void CpuScheduler::wait_host(const Event& event) {
    if (event.lane == Lane::compute) return;
    if (!completed(event)) ++host_syncs_;
    wait_for_copy_ticket(event.ticket);
}

void CpuScheduler::start_timer() { timer_start_ = std::chrono::steady_clock::now(); }
void CpuScheduler::stop_timer() { timer_stop_ = std::chrono::steady_clock::now(); }
double CpuScheduler::timer_seconds() { return std::chrono::duration<double>(timer_stop_ - timer_start_).count(); }

void CpuScheduler::worker_loop() {
    tls_lane = Lane::copy;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [this] { return stopping_ || completed_ < submitted_; });
        if (completed_ == submitted_ && stopping_) return;
        const Task task = ring_[completed_ % kCapacity];
        lock.unlock();
        try {
            task.fn(task.argument);
        } catch (...) {
            lock.lock();
            if (!copy_error_) copy_error_ = std::current_exception();
            lock.unlock();
        }
        lock.lock();
        ++completed_;
        changed_.notify_all();
    }
}

}  // namespace mpt
