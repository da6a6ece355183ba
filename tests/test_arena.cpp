// The arena planner (liveness sharing, alignment), the memory tracker (budget, peak, caches it
// takes back) and the weight-word cache's protocol with it.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "core/error.h"
#include "memory/arena.h"
#include "memory/arena_plan.h"
#include "memory/host_block.h"
#include "memory/memory_tracker.h"
#include "nn/weight_word_cache.h"

using namespace mpt;

namespace {

bool overlap_in_time(int a_first, int a_last, int b_first, int b_last) { return a_first <= b_last && b_first <= a_last; }

// A cache that holds `bytes` of its tracker's budget and gives them back when asked.
class HeldBytes final : public MemoryTracker::Reclaimable {
public:
    HeldBytes(MemoryTracker& tracker, size_t bytes, bool gives_back) : tracker_(tracker), gives_back_(gives_back) {
        tracker_.reserve(bytes);
        held_ = bytes;
        tracker_.add_reclaimable(this);
    }
    ~HeldBytes() {
        tracker_.remove_reclaimable(this);
        tracker_.unreserve(held_);
    }
    size_t reclaim() noexcept override {
        ++asked_;
        if (!gives_back_) return 0;
        const size_t freed = held_;
        tracker_.unreserve(held_);
        held_ = 0;
        return freed;
    }
    size_t held_bytes() const noexcept override { return held_; }
    size_t held() const { return held_; }
    int asked() const { return asked_; }

private:
    MemoryTracker& tracker_;
    bool gives_back_;
    size_t held_ = 0;
    int asked_ = 0;
};

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

// Caches (the trainers' weight words) never make a reservation fail that fits without them; the
// tracker asks them only when the budget is short, only until the shortfall is covered, and not
// at all when even all of them could not cover it.
TEST_CASE("a reservation over the budget first takes back what registered caches give") {
    MemoryTracker tracker(1000);
    HeldBytes stubborn(tracker, 100, false);
    {
        HeldBytes cache(tracker, 600, true);
        tracker.reserve(200);  // fits beside the cache: nobody is asked
        CHECK(cache.asked() == 0);
        CHECK(stubborn.asked() == 0);
        CHECK_THROWS_AS(tracker.reserve(801), Error);  // 100 + 200 + 801 > 1000 even without the cache
        CHECK(cache.asked() == 0);
        CHECK(cache.held() == 600);
        tracker.reserve(300);  // fits once the cache gave its 600 back
        CHECK(cache.asked() + stubborn.asked() >= 1);
        CHECK(cache.held() == 0);
        CHECK(tracker.used() == 600);
        CHECK(tracker.peak() == 900);
        try {
            tracker.reserve(401);  // nothing left to give
            FAIL("reserved beyond the budget");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
        }
        CHECK(tracker.used() == 600);
        tracker.unreserve(500);
    }
    CHECK(tracker.used() == 100);
    // Asked in turn until the shortfall is covered; a cache's own reservation takes from none.
    HeldBytes first(tracker, 300, true), second(tracker, 300, true);
    CHECK_THROWS_AS(tracker.reserve(400, MemoryTracker::ReservationFor::cache), Error);
    CHECK(first.held() + second.held() == 600);
    tracker.reserve(400);  // short by 100: one cache is enough
    CHECK(first.held() + second.held() == 300);
    tracker.unreserve(400);
}

// Two threads short of budget at once (the pool's workers growing their GEMM scratch together do
// this): the cache's memory is enough for both, so neither may fail, whichever reclaimed it.
TEST_CASE("two reservations short of budget at once both fit once a cache gives enough back") {
    class SlowCache final : public MemoryTracker::Reclaimable {
    public:
        explicit SlowCache(MemoryTracker& tracker) : tracker_(tracker) {
            tracker_.reserve(1000);
            tracker_.add_reclaimable(this);
        }
        ~SlowCache() { tracker_.remove_reclaimable(this); }
        size_t reclaim() noexcept override {
            if (held_.load() == 0) return 0;
            entered.store(true);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the other thread fails its first try
            tracker_.unreserve(held_.load());
            return held_.exchange(0);
        }
        size_t held_bytes() const noexcept override { return held_.load(); }
        std::atomic<bool> entered{false};

    private:
        MemoryTracker& tracker_;
        std::atomic<size_t> held_{1000};
    };
    MemoryTracker tracker(1000);
    SlowCache cache(tracker);
    bool first_fits = false, second_fits = false;
    std::thread first([&] {
        try {
            tracker.reserve(400);
            first_fits = true;
        } catch (const Error&) {
        }
    });
    while (!cache.entered.load()) std::this_thread::yield();
    try {
        tracker.reserve(400);  // 400 + 400 fit the 1000 the cache gives back
        second_fits = true;
    } catch (const Error&) {
    }
    first.join();
    CHECK(first_fits);
    CHECK(second_fits);
    CHECK(tracker.used() == 800);
}

TEST_CASE("weight words under a reading stay; outside one the tracker may take them back") {
    auto backend = create_cpu_backend(1);
    MemoryTracker tracker(10000);
    WeightWordCache cache(*backend, tracker);
    const uint64_t version = 7;
    {
        const WeightWordCache::Reading reading(cache);
        CHECK(cache.words(version) == nullptr);
        uint16_t* words = cache.room(3000);
        REQUIRE(words != nullptr);
        CHECK(cache.words(version) == nullptr);  // not current until written
        for (int i = 0; i < 3000; ++i) words[i] = static_cast<uint16_t>(i);
        cache.written(version);
        CHECK(cache.words(version) == words);
        CHECK(cache.words(version + 1) == nullptr);
        CHECK(cache.bytes() == 6000);
        CHECK_THROWS_AS(tracker.reserve(5000), Error);  // the words are being read
        CHECK(cache.words(version) == words);
        const WeightWordCache::Reading nested(cache);
        CHECK(cache.words(version) == words);
    }
    CHECK(cache.words(version) == nullptr);  // outside a reading they are not to be read
    tracker.reserve(5000);                    // takes them back
    CHECK(cache.bytes() == 0);
    CHECK(tracker.used() == 5000);
    {
        const WeightWordCache::Reading reading(cache);
        CHECK(cache.words(version) == nullptr);
        CHECK(cache.room(3000) == nullptr);  // no room now: predictions read the masters
        CHECK(cache.bytes() == 0);
    }
    tracker.unreserve(5000);
    {
        const WeightWordCache::Reading reading(cache);
        REQUIRE(cache.room(3000) != nullptr);
        cache.written(version);
        cache.release();  // inside a reading too
        CHECK(cache.words(version) == nullptr);
    }
    CHECK(tracker.used() == 0);
}

// One thread predicts (reads words under a reading, writes them when gone), another reserves a
// budget that fits only without them: the words go only between readings, and never while read
// (ThreadSanitizer checks the hand-over as well).
TEST_CASE("weight words are taken back between readings only, while another thread reserves") {
    auto backend = create_cpu_backend(1);
    const size_t elements = 4096, words_bytes = elements * sizeof(uint16_t);
    MemoryTracker tracker(words_bytes + 1000);
    WeightWordCache cache(*backend, tracker);
    std::atomic<bool> done{false};
    std::atomic<int> reservations{0};
    std::thread reserver([&] {
        while (!done.load()) {
            try {
                tracker.reserve(2000);
                reservations.fetch_add(1);
                tracker.unreserve(2000);
            } catch (const Error&) {
                std::this_thread::yield();  // the words were being read
            }
        }
    });
    int rewrites = 0, intact = 0;
    for (int round = 0; round < 3000 && !(round >= 200 && reservations.load() >= 50); ++round) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));  // between predictions
        const WeightWordCache::Reading reading(cache);
        const uint16_t* words = cache.words(1);
        if (!words) {
            uint16_t* room = cache.room(elements);
            if (!room) continue;  // the reserver holds the budget now
            for (size_t i = 0; i < elements; ++i) room[i] = static_cast<uint16_t>(i * 7);
            cache.written(1);
            words = room;
            ++rewrites;
        }
        bool same = true;
        for (size_t i = 0; i < elements; ++i) same &= words[i] == static_cast<uint16_t>(i * 7);
        intact += same;
        CHECK(same);
        CHECK(cache.words(1) == words);
    }
    done.store(true);
    reserver.join();
    CHECK(intact > 0);
    CHECK(rewrites > 1);  // the reserver took the words back at least once
    CHECK(reservations.load() > 0);
    cache.release();
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
