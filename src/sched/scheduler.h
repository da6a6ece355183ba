// The stream scheduler: a step is an ordered set of tasks on two lanes. The compute lane runs
// forward, backward and update; the copy lane prepares the next batch while the current step
// computes. Events order the lanes. On the CPU the compute lane runs inline on the caller's thread
// and the copy lane on a worker thread; on CUDA each lane is a stream and events are CUDA events.
#pragma once

#include <atomic>
#include <cstdint>

namespace mpt {

enum class Lane : uint8_t { compute = 0, copy = 1 };

inline Lane other_lane(Lane lane) { return lane == Lane::compute ? Lane::copy : Lane::compute; }

// A task is a plain function and argument, so submitting one never allocates.
using TaskFn = void (*)(void* argument);

// An event marks a point in one lane's work; waiting on it orders later work after that point.
struct Event {
    Lane lane = Lane::compute;
    uint64_t ticket = 0;
};

class Scheduler {
public:
    virtual ~Scheduler() = default;

    // Runs `task(argument)` on `lane` after everything submitted to that lane before it. The task
    // issues backend operations, which run on (or are enqueued to) that lane.
    virtual void submit(Lane lane, TaskFn task, void* argument) = 0;
    // Marks the current end of `lane`'s work.
    virtual Event record(Lane lane) = 0;
    // Makes later work on `waiter` start only after `event`.
    virtual void wait(Lane waiter, const Event& event) = 0;
    // Blocks the host until every lane is idle; rethrows the first error a task raised.
    virtual void synchronize() = 0;
    // The lane whose work the calling code is issuing now (inside a task: that task's lane).
    virtual Lane current_lane() const = 0;
    // Whether the work before `event` has finished; never blocks.
    virtual bool completed(const Event& event) = 0;
    // Blocks the host until the work before `event` has finished (a host synchronisation when it
    // has to wait); rethrows an error the lane's tasks raised.
    virtual void wait_host(const Event& event) = 0;

    // Device time of the compute lane between start_timer() and stop_timer(), both issued outside
    // tasks: CUDA events on a GPU, the host clock on the CPU (where compute runs inline). Blocks
    // until the stop point has passed. For benchmarks and the per-epoch time the trainer reports.
    virtual void start_timer() = 0;
    virtual void stop_timer() = 0;
    virtual double timer_seconds() = 0;

    // Debug counter: host synchronisations so far. Tests require none inside a steady-state step.
    uint64_t host_sync_count() const { return host_syncs_.load(std::memory_order_relaxed); }

protected:
    std::atomic<uint64_t> host_syncs_{0};
};

}  // namespace mpt
