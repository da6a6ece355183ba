// The 16-bit weight words that predictions on a few rows read (Executor::prepare_prediction). They
// are a cache of the fp32 masters, so they must never cost anything else its memory: the cache
// registers with the context's memory tracker, which takes it back whenever a reservation would
// otherwise exceed the budget (a data set, another trainer's plan, a GEMM's scratch), except while a
// prediction reads it. It takes no room from other caches: two trainers' words would take turns. The owner, the trainer's thread, marks that window with a Reading.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memory/arena.h"
#include "memory/memory_tracker.h"

namespace mpt {

class Backend;

class WeightWordCache final : private MemoryTracker::Reclaimable {
public:
    WeightWordCache(Backend& backend, MemoryTracker& tracker);
    ~WeightWordCache();
    WeightWordCache(const WeightWordCache&) = delete;
    WeightWordCache& operator=(const WeightWordCache&) = delete;

    // While one exists the words stay where they are: the tracker skips them. The owner's thread
    // only; Readings nest. Waits for a reclaim in progress (a few microseconds) to finish.
    class Reading {
    public:
        explicit Reading(WeightWordCache& cache) : cache_(cache) { cache_.hold(); }
        ~Reading() { cache_.let_go(); }
        Reading(const Reading&) = delete;
        Reading& operator=(const Reading&) = delete;

    private:
        WeightWordCache& cache_;
    };

    // Under a Reading: the words of the weights `version`, or null (none, other weights, or no
    // Reading: outside one they may go at any time).
    const uint16_t* words(uint64_t version) const;
    // Under a Reading: room for `elements` words, current for no weights until written(version);
    // null where the budget has no room (the cache takes none from other caches).
    uint16_t* room(size_t elements);
    void written(uint64_t version);
    // Gives the memory back now (the owner's thread; inside a Reading or not).
    void release();
    // Bytes held now; any thread.
    size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

private:
    size_t reclaim() noexcept override;
    size_t held_bytes() const noexcept override { return bytes(); }
    void hold();
    void let_go() noexcept;
    void drop() noexcept;  // with the cache held

    enum Holder : int { kNobody, kOwner, kReclaimer };
    static constexpr uint64_t kNoWeights = ~uint64_t{0};

    Backend& backend_;
    MemoryTracker& tracker_;
    Arena arena_;
    uint64_t version_ = kNoWeights;
    std::atomic<size_t> bytes_{0};
    std::atomic<int> holder_{kNobody};
    int owner_depth_ = 0;  // the owner's nested holds; only the owner's thread touches it
};

}  // namespace mpt
