// The CPU stream scheduler: copy-lane tasks run off the caller's thread, in order, and events order
// the compute lane after them; errors on the copy lane reach the host. The thread pool: static
// ranges, exceptions from any chunk reach the caller, and its per-participant scratch is charged
// to a memory tracker; a pool whose threads cannot all start fails with an error, not a terminate
// (outside the sanitizer builds, which hook pthread_create themselves). A context's thread ownership:
// re-entrant for its holder, refused to others, and a waiting destroy goes before later calls.
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>

#include <sstream>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_ownership.h"
#include "core/thread_pool.h"
#include "memory/memory_tracker.h"
#include "sched/cpu_scheduler.h"

using namespace mpt;

namespace {

struct Recorder {
    std::vector<int>* log;
    int value;
    std::thread::id* thread;
};

void record_task(void* argument) {
    auto* recorder = static_cast<Recorder*>(argument);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    recorder->log->push_back(recorder->value);
    if (recorder->thread) *recorder->thread = std::this_thread::get_id();
}

void throwing_task(void*) { throw std::runtime_error("copy failed"); }

#if defined(MPTRAIN_TEST_FAILING_THREAD_STARTS)
// While >= 0: how many more threads may start before pthread_create fails with EAGAIN, as it does
// when a process reaches its thread limit.
std::atomic<int> thread_starts_left{-1};
#endif

}  // namespace

#if defined(MPTRAIN_TEST_FAILING_THREAD_STARTS)
// Interposes the C library's pthread_create (std::thread's) for this test program.
extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t* thread,
                                                                     const pthread_attr_t* attributes,
                                                                     void* (*start)(void*), void* argument) noexcept {
    using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
    static const Create create = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
    int left = thread_starts_left.load();
    while (left >= 0 && !thread_starts_left.compare_exchange_weak(left, left - 1)) {
    }
    if (left == 0) {
        thread_starts_left.store(0);
        return EAGAIN;
    }
    return create(thread, attributes, start, argument);
}
#endif

TEST_CASE("copy-lane tasks run in order on a worker thread and wait() orders the compute lane after them") {
    CpuScheduler scheduler;
    std::vector<int> log;
    std::thread::id worker;
    std::vector<Recorder> tasks;
    tasks.reserve(40);
    for (int i = 0; i < 40; ++i) tasks.push_back(Recorder{&log, i, &worker});
    for (auto& task : tasks) scheduler.submit(Lane::copy, &record_task, &task);
    const Event done = scheduler.record(Lane::copy);
    scheduler.wait(Lane::compute, done);
    REQUIRE(log.size() == 40);
    for (int i = 0; i < 40; ++i) CHECK(log[static_cast<size_t>(i)] == i);
    CHECK((worker != std::this_thread::get_id()));
}

TEST_CASE("compute-lane tasks run inline on the calling thread") {
    CpuScheduler scheduler;
    std::vector<int> log;
    std::thread::id ran_on;
    Recorder task{&log, 7, &ran_on};
    scheduler.submit(Lane::compute, &record_task, &task);
    CHECK(log == std::vector<int>{7});
    CHECK((ran_on == std::this_thread::get_id()));
    CHECK(scheduler.current_lane() == Lane::compute);
}

TEST_CASE("an exception on the copy lane is rethrown to the host and the scheduler keeps working") {
    CpuScheduler scheduler;
    scheduler.submit(Lane::copy, &throwing_task, nullptr);
    CHECK_THROWS_AS(scheduler.synchronize(), std::runtime_error);
    std::vector<int> log;
    Recorder task{&log, 1, nullptr};
    scheduler.submit(Lane::copy, &record_task, &task);
    scheduler.synchronize();
    CHECK(log == std::vector<int>{1});
    CHECK(scheduler.host_sync_count() == 2);
}

TEST_CASE("completed() polls an event without blocking and wait_host() blocks until it has passed") {
    CpuScheduler scheduler;
    std::atomic<bool> release{false};
    struct Gate {
        std::atomic<bool>* release;
    } gate{&release};
    scheduler.submit(Lane::copy, [](void* argument) {
        while (!static_cast<Gate*>(argument)->release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }, &gate);
    const Event copy_done = scheduler.record(Lane::copy);
    CHECK_FALSE(scheduler.completed(copy_done));
    CHECK(scheduler.completed(scheduler.record(Lane::compute)));  // compute work ran inline
    const uint64_t syncs = scheduler.host_sync_count();
    std::thread opener([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        release = true;
    });
    scheduler.wait_host(copy_done);
    opener.join();
    CHECK(scheduler.completed(copy_done));
    CHECK(scheduler.host_sync_count() == syncs + 1);  // it had to wait
    scheduler.wait_host(copy_done);                    // already passed: no wait counted
    CHECK(scheduler.host_sync_count() == syncs + 1);
}

TEST_CASE("the timer measures the span between its start and stop") {
    CpuScheduler scheduler;
    scheduler.start_timer();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    scheduler.stop_timer();
    CHECK(scheduler.timer_seconds() >= 0.029);
    CHECK(scheduler.timer_seconds() < 5.0);
}

TEST_CASE("the thread pool covers every index exactly once with static ranges") {
    ThreadPool pool(3);
    for (int64_t count : {0, 1, 5, 1000, 100003}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
        pool.parallel_for(count, 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        bool once = true;
        for (auto& hit : hits) once &= hit.load() == 1;
        CHECK(once);
    }
}

#if defined(MPTRAIN_TEST_FAILING_THREAD_STARTS)
TEST_CASE("a pool whose threads cannot all start fails with BACKEND_ERROR and joins those that did") {
    for (int started : {0, 1, 2}) {
        CAPTURE(started);
        thread_starts_left.store(started);
        try {
            ThreadPool pool(4);
            FAIL("the pool started 3 workers");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_BACKEND_ERROR);
            CHECK(std::string(error.what()).find("worker thread " + std::to_string(started + 1) + " of 3") !=
                  std::string::npos);
        }
        thread_starts_left.store(-1);
    }
    ThreadPool pool(4);  // once threads start again
    std::atomic<int64_t> sum{0};
    pool.parallel_for(4000, 1, [&](int64_t begin, int64_t end) { sum += end - begin; });
    CHECK(sum.load() == 4000);
}

TEST_CASE("a scheduler whose copy-lane thread cannot start fails with BACKEND_ERROR") {
    thread_starts_left.store(0);
    try {
        CpuScheduler scheduler;
        FAIL("the copy lane started");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_BACKEND_ERROR);
        CHECK(std::string(error.what()).find("copy-lane thread") != std::string::npos);
    }
    thread_starts_left.store(-1);
    CpuScheduler scheduler;  // once threads start again
    std::vector<int> log;
    Recorder recorder{&log, 1, nullptr};
    scheduler.submit(Lane::copy, &record_task, &recorder);
    scheduler.wait(Lane::compute, scheduler.record(Lane::copy));
    CHECK(log == std::vector<int>{1});
}
#endif

TEST_CASE("an exception in a pool chunk reaches the caller after every chunk ran, and the pool goes on") {
    ThreadPool pool(3);
    const int64_t count = 3000;  // three chunks of 1000: [0, 1000) is the caller's
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    const auto covered_once = [&] {
        bool once = true;
        for (auto& hit : hits) once &= hit.exchange(0) == 1;
        return once;
    };
    // A worker's chunk throws: the caller gets that exception, not the end of the process.
    CHECK_THROWS_WITH_AS(pool.parallel_for(count, 1,
                                           [&](int64_t begin, int64_t end) {
                                               for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
                                               if (begin == 2000) throw std::runtime_error("worker");
                                           }),
                         "worker", std::runtime_error);
    CHECK(covered_once());
    // The caller's chunk and a worker's throw: the caller's is rethrown, after the worker finished
    // (its chunk sleeps first, so a caller that left early would not have seen it end).
    std::atomic<bool> worker_finished{false};
    CHECK_THROWS_WITH_AS(pool.parallel_for(count, 1,
                                           [&](int64_t begin, int64_t end) {
                                               for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
                                               if (begin == 0) throw std::logic_error("caller");
                                               if (begin == 1000) {
                                                   std::this_thread::sleep_for(std::chrono::milliseconds(50));
                                                   worker_finished = true;
                                                   throw std::runtime_error("second worker");
                                               }
                                           }),
                         "caller", std::logic_error);
    CHECK(worker_finished);
    CHECK(covered_once());
    // And the next loops run as before, with no exception left over.
    for (int round = 0; round < 3; ++round) {
        CHECK_NOTHROW(pool.parallel_for(count, 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        }));
        CHECK(covered_once());
    }
}

TEST_CASE("the pool's scratch is per participant, charged to a tracker, and over its budget an error") {
    MemoryTracker memory(64 * 1024);
    {
        ThreadPool pool(3);
        pool.charge_scratch_to(&memory);
        // Each chunk's thread gets its own buffer; the caller's outside a loop is chunk 0's.
        std::vector<const void*> buffers(3);
        pool.parallel_for(3, 1, [&](int64_t begin, int64_t) {
            buffers[static_cast<size_t>(begin)] = pool.scratch(ScratchUse::amx_sums).reserve<float>(1000);
        });
        CHECK(buffers[0] != buffers[1]);
        CHECK(buffers[1] != buffers[2]);
        CHECK(buffers[0] != buffers[2]);
        CHECK(pool.scratch(ScratchUse::amx_sums).reserve<float>(10) == buffers[0]);
        CHECK(memory.used() == pool.scratch_bytes());
        CHECK(memory.used() >= 3 * 4000);
        // A worker's buffer past the budget: an OUT_OF_MEMORY error reaches the caller, nothing is
        // charged for it, and the pool and its other buffers go on.
        const size_t before = memory.used();
        try {
            pool.parallel_for(3, 1, [&](int64_t begin, int64_t) {
                if (begin == 2) pool.scratch(ScratchUse::amx_own_blocks).reserve<float>(1 << 20);
            });
            FAIL("no error past the budget");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
            CHECK(std::string(error.what()).find("GEMM scratch") != std::string::npos);
        }
        CHECK(memory.used() == before);
        pool.parallel_for(3, 1, [&](int64_t begin, int64_t) {
            CHECK(pool.scratch(ScratchUse::amx_sums).reserve<float>(1000) == buffers[static_cast<size_t>(begin)]);
        });
    }
    CHECK(memory.used() == 0);  // the buffers went with the pool
}

TEST_CASE("thread ownership: re-entrant for its holder, refused to others, and a waiter goes before later tries") {
    ThreadOwnership ownership;
    REQUIRE(ownership.try_enter());
    REQUIRE(ownership.try_enter());  // again, from a callback of the same thread
    bool other_got_it = true;
    std::thread([&] { other_got_it = ownership.try_enter(); }).join();
    CHECK_FALSE(other_got_it);
    ownership.leave();

    // A waiter (a destroy) comes while this thread holds it.
    std::atomic<bool> waiter_in{false}, waiter_may_leave{false};
    std::thread waiter([&] {
        ownership.enter();
        waiter_in = true;
        while (!waiter_may_leave.load()) std::this_thread::yield();
        ownership.leave();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the waiter is waiting by now
    CHECK_FALSE(waiter_in.load());
    ownership.leave();
    // Taken back at once, it would be ahead of the waiter, which may not have woken yet: refused.
    const bool taken_back = ownership.try_enter();
    CHECK_FALSE(taken_back);
    if (taken_back) ownership.leave();
    while (!waiter_in.load()) std::this_thread::yield();
    CHECK_FALSE(ownership.try_enter());  // the waiter holds it
    waiter_may_leave = true;
    waiter.join();
    CHECK(ownership.try_enter());
    ownership.leave();
}

TEST_CASE("thread ownership: a waiter cancelled while it waits leaves the context usable by other threads") {
    static ThreadOwnership ownership;  // static: the cancelled thread's function takes no captures
    REQUIRE(ownership.try_enter());
    pthread_t waiter;
    REQUIRE(pthread_create(
                &waiter, nullptr,
                [](void*) -> void* {
                    ownership.enter();  // cancelled in here, a cancellation point
                    ownership.leave();
                    return nullptr;
                },
                nullptr) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // waiting by now
    REQUIRE(pthread_cancel(waiter) == 0);
    REQUIRE(pthread_join(waiter, nullptr) == 0);
    ownership.leave();
    bool taken = false;
    std::thread([&] {
        taken = ownership.try_enter();
        if (taken) ownership.leave();
    }).join();
    CHECK(taken);
}
