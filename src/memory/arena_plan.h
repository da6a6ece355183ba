// Plans an arena before it exists: every buffer a step needs, with the interval of step phases in
// which it is live. Buffers whose intervals do not overlap share bytes (greedy first-fit by size,
// as TFLite's arena planner), and every offset is 256-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpt {

class ArenaPlan {
public:
    static constexpr size_t kAlignment = 256;
    static constexpr int kAlways = 1 << 30;  // last_use of buffers live for the arena's whole life

    // Adds a buffer live from phase `first_use` to `last_use` inclusive; returns its id.
    int add(size_t bytes, int first_use, int last_use);
    // Assigns offsets. Call once after all adds.
    void solve();

    size_t offset(int id) const { return buffers_[static_cast<size_t>(id)].offset; }
    size_t bytes(int id) const { return buffers_[static_cast<size_t>(id)].bytes; }
    size_t total_bytes() const { return total_; }
    // Sum of all buffer sizes: what the arena would need without liveness reuse.
    size_t unshared_bytes() const;

private:
    struct Buffer {
        size_t bytes;
        int first_use;
        int last_use;
        size_t offset;
    };
    std::vector<Buffer> buffers_;
    size_t total_ = 0;
};

inline size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace mpt
