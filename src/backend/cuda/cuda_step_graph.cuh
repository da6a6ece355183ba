// CUDA graphs for repeated compute tasks. While a compute-lane task runs, the backend records its
// operations (with every argument that decides the device work) instead of issuing them; at the
// end of the task the serialised arguments are the task's signature. The same signature means the
// same kernels with the same arguments, so a signature seen before is replayed from a graph
// captured on its second sighting (the first runs eagerly and warms every cache). Values that
// change from step to step (loss scale, found_inf, weights) live in device memory and are read by
// the kernels, so one graph serves every step of a shape; a new shape, buffer or policy is a new
// signature and so a new capture. No trainer change is needed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace mpt {

class TaskSignature {
public:
    void clear() { bytes_.clear(); }
    template <typename T>
    void put(const T& value) {
        static_assert(std::is_trivially_copyable<T>::value && (std::is_arithmetic<T>::value || std::is_enum<T>::value ||
                                                                std::is_pointer<T>::value),
                      "only scalars and pointers are serialised field by field (no padding bytes)");
        const size_t at = bytes_.size();
        bytes_.resize(at + sizeof(T));
        std::memcpy(bytes_.data() + at, &value, sizeof(T));
    }
    const std::vector<uint8_t>& bytes() const { return bytes_; }

private:
    std::vector<uint8_t> bytes_;
};

class StepGraphCache {
public:
    enum class Action { run_eagerly, capture, replay };

    StepGraphCache() = default;
    ~StepGraphCache();
    StepGraphCache(const StepGraphCache&) = delete;
    StepGraphCache& operator=(const StepGraphCache&) = delete;

    // What to do with a task of this signature; for `replay`, `exec` is the graph to launch.
    Action lookup(const TaskSignature& signature, cudaGraphExec_t& exec);
    void store(const TaskSignature& signature, cudaGraphExec_t exec);   // after a successful capture
    // Capture, or a replay's launch, failed (`why`): always run this one eagerly (its graph, if
    // any, is freed).
    void refuse(const TaskSignature& signature, std::string why);
    void clear();
    // A `replay`'s graph was launched (a launch that failed and ran eagerly is none).
    void count_replay() { ++replays_; }

    uint64_t replays() const { return replays_; }
    uint64_t captures() const { return captures_; }
    uint64_t refusals() const { return refusals_; }
    const std::string& last_refusal() const { return last_refusal_; }

private:
    struct Entry {
        std::vector<uint8_t> signature;
        cudaGraphExec_t exec = nullptr;
        bool refused = false;
        uint64_t last_use = 0;
    };
    // A step in micro-batches is one task (one signature) per pass, and an epoch adds its last, partial
    // batch and an evaluation's tasks: 8 entries left a step of 8 passes exactly full, so an epoch's
    // partial batch evicted a pass and the next step ran eagerly and captured again. Past the
    // capacity, cyclic tasks each miss and run eagerly (never a capture per step, since a signature
    // is captured on its second sighting while still held). find() is linear: 32 short compares.
    static constexpr size_t kMaxEntries = 32;
    Entry* find(const TaskSignature& signature);

    std::vector<Entry> entries_;
    uint64_t clock_ = 0;
    uint64_t replays_ = 0;
    uint64_t captures_ = 0;
    uint64_t refusals_ = 0;
    std::string last_refusal_;
};

}  // namespace mpt
