// Fixed thread pool with static partitioning (see thread_pool.h for why).
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>

#include "core/error.h"

namespace mpt {

namespace {

// How long a thread spins on new work, or on the workers finishing theirs, before it blocks. A
// training step hands the pool dozens of loops microseconds to milliseconds apart, and waking a
// blocked worker through the condition variable took 14-18 µs (median) on the 2-vCPU development
// VM, a spinning one 0.7 µs; a mixed-bf16 step at batch 32 (about 20 loops) ran 1.04-1.08x faster,
// fp32 (mostly OpenBLAS's own threads) and batch 256 the same (bench/NOTES.md). An idle pool sleeps.
constexpr auto kSpinTime = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Spins until ready() or kSpinTime has passed; whether it became ready.
template <typename Ready>
bool spin_until(const Ready& ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (unsigned round = 1;; ++round) {
        if (ready()) return true;
        cpu_relax();
        if (round % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return ready();
    }
}

// The pool whose worker this thread is, and its index there (none: a caller, participant 0).
thread_local const ThreadPool* tls_pool = nullptr;
thread_local int tls_worker_index = 0;

}  // namespace

ThreadPool::ThreadPool(int threads) : scratch_(std::max(threads, 1)) {
    // A thread that cannot start (or a full vector that cannot grow) must not leave the ones already
    // started joinable: destroying those would terminate the process.
    try {
        workers_.reserve(static_cast<size_t>(std::max(threads - 1, 0)));
        for (int index = 1; index < threads; ++index) workers_.emplace_back([this, index] { worker_loop(index); });
    } catch (const std::system_error& error) {
        const size_t started = workers_.size();
        stop_workers();
        fail(MPT_STATUS_BACKEND_ERROR, "cannot start the CPU backend's worker thread " + std::to_string(started + 1) +
                                           " of " + std::to_string(threads - 1) + ": " + error.what());
    } catch (...) {
        stop_workers();
        throw;
    }
}

ScratchBuffer& ThreadPool::scratch(ScratchUse use) {
    return scratch_.buffer(tls_pool == this ? tls_worker_index : 0, use);
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() noexcept {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& worker : workers_) worker.join();
    workers_.clear();
}

static void chunk_range(int64_t count, int chunks, int index, int64_t& begin, int64_t& end) {
    const int64_t base = count / chunks, extra = count % chunks;
    begin = index * base + std::min<int64_t>(index, extra);
    end = begin + base + (index < extra ? 1 : 0);
}

void ThreadPool::run(int64_t count, int64_t grain, RangeFn fn, const void* closure) {
    if (count <= 0) return;
    const int64_t useful = std::max<int64_t>(1, count / std::max<int64_t>(grain, 1));
    const int chunks = static_cast<int>(std::min<int64_t>(threads(), useful));
    if (chunks <= 1) {
        fn(closure, 0, count);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = fn;
        closure_ = closure;
        count_ = count;
        chunks_ = chunks;
        pending_ = chunks - 1;
        ++generation_;
    }
    work_ready_.notify_all();
    int64_t begin, end;
    chunk_range(count, chunks, 0, begin, end);
    // The workers read the closure on the caller's stack: wait for them before anything leaves.
    std::exception_ptr caller_error;
    try {
        fn(closure, begin, end);
    } catch (...) {
        caller_error = std::current_exception();
    }
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        work_done_.wait(lock, [this] { return pending_ == 0; });
    }
    if (worker_failed_.load(std::memory_order_acquire)) {
        std::exception_ptr worker_error;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            worker_error = std::move(worker_error_);
            worker_error_ = nullptr;
            worker_failed_ = false;
        }
        if (!caller_error) caller_error = worker_error;
    }
    if (caller_error) std::rethrow_exception(caller_error);
}

void ThreadPool::worker_loop(int index) {
    tls_pool = this;
    tls_worker_index = index;
    uint64_t seen = 0;
    for (;;) {
        spin_until([&] {
            return stopping_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
        });
        std::unique_lock<std::mutex> lock(mutex_);
        work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (index >= chunks_) continue;
        const RangeFn fn = fn_;
        const void* closure = closure_;
        int64_t begin, end;
        chunk_range(count_, chunks_, index, begin, end);
        lock.unlock();
        std::exception_ptr error;
        try {
            fn(closure, begin, end);
        } catch (...) {
            error = std::current_exception();  // escaping a thread's function would end the process
        }
        lock.lock();
        if (error && !worker_error_) {
            worker_error_ = error;
            worker_failed_.store(true, std::memory_order_release);
        }
        if (--pending_ == 0) work_done_.notify_one();
    }
}

}  // namespace mpt
