// A small fixed pool for data-parallel loops on the CPU backend. Work is split into equal static
// ranges, so every element is computed by the same code path whatever the timing: results are
// deterministic for a given thread count. Running a loop never allocates. Waiting threads spin for
// up to 100 µs before they block, since a step runs its loops close together (thread_pool.cpp).
// An exception thrown by the body on any thread reaches the caller of parallel_for, once every
// chunk has finished (none is left running against the caller's stack), and the pool stays usable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "memory/worker_scratch.h"

namespace mpt {

class ThreadPool {
public:
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }

    // The calling thread's scratch buffer for `use`, inside a loop's body or outside one (the
    // caller's): see worker_scratch.h. The buffers go with the pool.
    ScratchBuffer& scratch(ScratchUse use);
    // Charges the buffers to `memory` (a context's budget), what they hold already included.
    void charge_scratch_to(MemoryTracker* memory) { scratch_.charge_to(memory); }
    size_t scratch_bytes() const { return scratch_.bytes(); }
    // Frees every participant's scratch; between loops only (none may be running).
    void release_scratch() noexcept { scratch_.release(); }

    // Calls body(begin, end) over [0, count) split in contiguous chunks; the caller takes one chunk.
    // Ranges smaller than `grain` per thread run on the caller alone. Should chunks throw, the
    // caller's exception is rethrown, else the first worker's; the other chunks still ran.
    template <typename Body>
    void parallel_for(int64_t count, int64_t grain, const Body& body) {
        run(count, grain, [](const void* closure, int64_t begin, int64_t end) {
            (*static_cast<const Body*>(closure))(begin, end);
        }, &body);
    }

private:
    using RangeFn = void (*)(const void* closure, int64_t begin, int64_t end);
    void run(int64_t count, int64_t grain, RangeFn fn, const void* closure);
    void worker_loop(int index);
    // Stops and joins every worker (the destructor, and a constructor whose threads did not all start).
    void stop_workers() noexcept;

    WorkerScratch scratch_;  // before workers_: it outlives the threads that use it
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable work_ready_;
    std::condition_variable work_done_;
    // Changed under mutex_ only; atomic so that a spinning thread may read them without it.
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> worker_failed_{false};  // worker_error_ holds an exception (set under mutex_)
    std::exception_ptr worker_error_;
    RangeFn fn_ = nullptr;
    const void* closure_ = nullptr;
    int64_t count_ = 0;
    int chunks_ = 1;
};

}  // namespace mpt
