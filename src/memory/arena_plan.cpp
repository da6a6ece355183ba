// See arena_plan.h.
#include "memory/arena_plan.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace mpt {

int ArenaPlan::add(size_t bytes, int first_use, int last_use) {
    require(first_use <= last_use, MPT_STATUS_INTERNAL, "arena plan: buffer used before it is produced");
    buffers_.push_back(Buffer{align_up(bytes, kAlignment), first_use, last_use, 0});
    return static_cast<int>(buffers_.size()) - 1;
}

void ArenaPlan::solve() {
    std::vector<size_t> order(buffers_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    // Largest first; ties by id so the plan is deterministic.
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return buffers_[a].bytes > buffers_[b].bytes; });
    std::vector<size_t> placed;
    total_ = 0;
    for (size_t id : order) {
        Buffer& buffer = buffers_[id];
        // Byte ranges of already placed buffers whose lifetimes overlap this one, by offset.
        std::vector<std::pair<size_t, size_t>> busy;
        for (size_t other_id : placed) {
            const Buffer& other = buffers_[other_id];
            if (other.first_use <= buffer.last_use && buffer.first_use <= other.last_use)
                busy.emplace_back(other.offset, other.offset + other.bytes);
        }
        std::sort(busy.begin(), busy.end());
        size_t candidate = 0;
        for (const auto& range : busy) {
            if (candidate + buffer.bytes <= range.first) break;
            candidate = std::max(candidate, range.second);
        }
        buffer.offset = candidate;
        total_ = std::max(total_, candidate + buffer.bytes);
        placed.push_back(id);
    }
}

size_t ArenaPlan::unshared_bytes() const {
    size_t sum = 0;
    for (const Buffer& buffer : buffers_) sum += buffer.bytes;
    return sum;
}

}  // namespace mpt
