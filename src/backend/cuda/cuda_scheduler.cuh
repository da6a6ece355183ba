// The CUDA scheduler: each lane is a non-blocking stream and events are CUDA events from a fixed
// ring, so recording and waiting never allocate. Tasks run inline on the calling thread and enqueue
// their work on their lane's stream; compute-lane tasks are bracketed by hooks that let the backend
// record the task's operations and replay them as a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sched/scheduler.h"

namespace mpt {

// Implemented by the CUDA backend: what happens around a task submitted to the compute lane.
class CudaTaskHooks {
public:
    virtual void begin_compute_task() = 0;           // start recording the task's operations
    virtual void end_compute_task() = 0;             // issue them (graph replay, capture or eagerly)
    virtual void abandon_compute_task() noexcept = 0;  // the task threw: drop what it recorded
    // Something must be ordered after the operations recorded so far: issue them now, eagerly.
    virtual void flush_recording() = 0;

protected:
    ~CudaTaskHooks() = default;
};

class CudaScheduler final : public Scheduler {
public:
    explicit CudaScheduler(CudaTaskHooks& hooks);  // the backend's device must be current
    ~CudaScheduler() override;
    CudaScheduler(const CudaScheduler&) = delete;
    CudaScheduler& operator=(const CudaScheduler&) = delete;

    void submit(Lane lane, TaskFn task, void* argument) override;
    Event record(Lane lane) override;
    void wait(Lane waiter, const Event& event) override;
    void synchronize() override;
    Lane current_lane() const override { return current_; }
    bool completed(const Event& event) override;
    void wait_host(const Event& event) override;
    void start_timer() override;
    void stop_timer() override;
    double timer_seconds() override;

    cudaStream_t stream(Lane lane) const { return streams_[static_cast<int>(lane)]; }
    cudaStream_t current_stream() const { return stream(current_); }
    // Work issued so far on `lane` precedes anything issued later on the other lane.
    void order_other_lane_after(Lane lane);
    // Both streams drained (a host synchronisation, counted).
    void drain();
    void count_host_sync() { ++host_syncs_; }

private:
    // A training step takes two events a pass and one for its report, and the trainer keeps eight
    // reports in flight: 512 keep every pending report's own event up to 31 micro-batches a step.
    static constexpr uint64_t kEvents = 512;
    cudaEvent_t next_event(Lane lane, uint64_t& ticket);
    // The ring event that stands for `event`: itself, or once recycled the earliest later one its
    // lane recorded that the ring still holds (recorded now if the lane has none left in the ring).
    cudaEvent_t event_for(const Event& event);

    CudaTaskHooks& hooks_;
    cudaStream_t streams_[2] = {nullptr, nullptr};
    cudaEvent_t events_[kEvents] = {};
    Lane event_lanes_[kEvents] = {};  // the lane each ring event was last recorded on
    cudaEvent_t timer_[2] = {nullptr, nullptr};  // with timing, unlike the ring
    uint64_t issued_tickets_ = 0;   // tickets start at 1; 0 is the default Event ("nothing")
    Lane current_ = Lane::compute;
    int depth_ = 0;                 // nesting of submit() calls
};

}  // namespace mpt
