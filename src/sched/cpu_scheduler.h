// The CPU scheduler: the compute lane runs tasks inline on the calling thread; the copy lane is a
// worker thread draining a fixed ring of tasks, so the next batch is gathered while this one computes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "sched/scheduler.h"

namespace mpt {

class CpuScheduler final : public Scheduler {
public:
    CpuScheduler();
    ~CpuScheduler() override;

    void submit(Lane lane, TaskFn task, void* argument) override;
    Event record(Lane lane) override;
    void wait(Lane waiter, const Event& event) override;
    void synchronize() override;
    Lane current_lane() const override;
    bool completed(const Event& event) override;
    void wait_host(const Event& event) override;
    void start_timer() override;
    void stop_timer() override;
    double timer_seconds() override;

private:
    struct Task {
        TaskFn fn;
        void* argument;
    };
    static constexpr int kCapacity = 16;

    void worker_loop();
    void wait_for_copy_ticket(uint64_t ticket);

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    Task ring_[kCapacity] = {};
    uint64_t submitted_ = 0;  // copy tasks submitted (tickets)
    uint64_t completed_ = 0;  // copy tasks finished
    bool stopping_ = false;
    std::exception_ptr copy_error_;
    std::chrono::steady_clock::time_point timer_start_{}, timer_stop_{};
    std::thread worker_;  // last: it starts once every member it uses exists
};

}  // namespace mpt
