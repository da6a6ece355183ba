// The arena planner (liveness sharing, alignment) and the memory tracker (budget, peak).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "memory/arena.h"
#include "memory/arena_plan.h"
#include "memory/host_block.h"
#include "memory/memory_tracker.h"

using namespace mpt;

namespace {

bool overlap_in_time(int a_first, int a_last, int b_first, int b_last) { return a_first <= b_last && b_first <= a_last; }

}  // namespace

TEST_CASE("buffers with disjoint lifetimes share bytes and live ones never overlap") {
    std::mt19937 generator(5);
    for (int trial = 0; trial < 200; ++trial) {
        ArenaPlan plan;
        struct Spec {
            size_t bytes;
            int first, last;
        };
        std::vector<Spec> specs;
        const int count = 1 + static_cast<int>(generator() % 30);
        for (int i = 0; i < count; ++i) {
            const int first = static_cast<int>(generator() % 20);
            const int last = first + static_cast<int>(generator() % 6);
            const size_t bytes = 1 + generator() % 5000;
            specs.push_back({bytes, first, last});
            CHECK(plan.add(bytes, first, last) == i);
        }
        plan.solve();
        size_t end = 0;
        for (int i = 0; i < count; ++i) {
            CHECK(plan.offset(i) % 256 == 0);  // DESIGN.md: 256-byte offsets (cuBLASLt needs 16)
            CHECK(plan.bytes(i) >= specs[i].bytes);
            end = std::max(end, plan.offset(i) + plan.bytes(i));
            for (int j = 0; j < i; ++j) {
                if (!overlap_in_time(specs[i].first, specs[i].last, specs[j].first, specs[j].last)) continue;
                const bool disjoint = plan.offset(i) + plan.bytes(i) <= plan.offset(j) ||
                                      plan.offset(j) + plan.bytes(j) <= plan.offset(i);
                CHECK(disjoint);
            }
        }
        CHECK(plan.total_bytes() == end);
        CHECK(plan.total_bytes() <= plan.unshared_bytes());
    }
}

TEST_CASE("a chain of short-lived buffers needs only two slots") {
    ArenaPlan plan;
    for (int phase = 0; phase < 10; ++phase) plan.add(1000, phase, phase + 1);
    plan.solve();
    CHECK(plan.total_bytes() == 2 * align_up(1000, ArenaPlan::kAlignment));
}

TEST_CASE("the memory tracker enforces its budget before allocation and records the peak") {
    MemoryTracker tracker(1000);
    tracker.reserve(600);
    CHECK_THROWS_AS(tracker.reserve(500), Error);
    try {
        tracker.reserve(500);
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
    }
    CHECK(tracker.used() == 600);
    tracker.unreserve(600);
    tracker.reserve(1000);
    CHECK(tracker.peak() == 1000);
    tracker.unreserve(1000);
    CHECK(tracker.used() == 0);
}

TEST_CASE("an arena is one aligned, zeroed allocation accounted with its tracker") {
    auto backend = create_cpu_backend(1);
    MemoryTracker tracker;
    {
        Arena arena(*backend, tracker, 4096 + 17);
        CHECK(reinterpret_cast<uintptr_t>(arena.base()) % 256 == 0);
        CHECK(tracker.used() == 4096 + 17);
        const unsigned char* bytes = arena.at<unsigned char>(0);
        bool all_zero = true;
        for (size_t i = 0; i < arena.bytes(); ++i) all_zero &= bytes[i] == 0;
        CHECK(all_zero);
        Arena moved = std::move(arena);
        CHECK(arena.base() == nullptr);
        CHECK(tracker.used() == 4096 + 17);
    }
    CHECK(tracker.used() == 0);
    MemoryTracker small(100);
    CHECK_THROWS_AS(Arena(*backend, small, 101), Error);
    CHECK(small.used() == 0);
}

// The CPU backend's host blocks: 256-byte aligned, 2 MiB aligned from 2 MiB up (where huge pages
// are asked for), every byte usable (ASan checks the ends), and nullptr released harmlessly.
TEST_CASE("host blocks are aligned for the GEMMs and huge pages, and usable to their last byte") {
    constexpr size_t kHugePage = size_t{2} << 20;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{255}, size_t{4097}, kHugePage - 1, kHugePage, 5 * kHugePage + 3}) {
        CAPTURE(bytes);
        void* block = allocate_host_block(bytes);
        REQUIRE(block != nullptr);
        CHECK(reinterpret_cast<uintptr_t>(block) % 256 == 0);
        if (bytes >= kHugePage) CHECK(reinterpret_cast<uintptr_t>(block) % kHugePage == 0);
        if (bytes > 0) {
            unsigned char* data = static_cast<unsigned char*>(block);
            data[bytes - 1] = 2;
            data[0] = 1;
            CHECK(data[0] == 1);
            CHECK(data[bytes - 1] == (bytes == 1 ? 1 : 2));
        }
        release_host_block(block);
    }
    release_host_block(nullptr);
}
