// How the update kernel (cuda_dense_update.cu) shares a layer's update among its threads: the chunk
// count and each chunk's place, plain functions the kernel and its launch call, and a CPU test
// (tests/test_update_chunks.cpp) checks with the kernel's two walks: every weight and bias element
// updated exactly once, for every grid. (The walks and a chunk's end stay written out in the
// kernel: with the end computed by a function here, the plain-SGD fp32 kernel took 48 registers
// instead of 40, sm_90.)
//
// A launch's elements are chunks of four: the weights' ceil(count / 4) chunks, then the bias's. A
// chunk is whole when its group allows 16-byte accesses and four elements from its first are the
// group's; else its elements are updated one by one. Thread t of a grid of `stride` threads takes
// chunks t, t + stride, ...: the plain-SGD kernel two a stride apart per pass while both exist (both
// chunks' loads in flight together), then the last one; the other optimizers' kernel one at a time.
// A chunk that is not whole updates elements [first, min(first + 4, count)).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace mpt::update_chunks {

constexpr int kChunkElements = 4;

MPT_HOST_DEVICE int64_t chunks(int64_t elements) { return (elements + kChunkElements - 1) / kChunkElements; }

// Chunk `chunk`'s group (0: weights, 1: bias), its first element there, and whether it is whole.
struct ChunkPlace {
    int group;
    int64_t first;
    bool whole;
};
// Group: any type with first_chunk (chunks before the group in the launch), count and vectorised.
template <typename Group>
MPT_HOST_DEVICE ChunkPlace place_chunk(const Group (&groups)[2], int64_t chunk) {
    ChunkPlace place;
    place.group = chunk >= groups[1].first_chunk ? 1 : 0;
    const Group& group = groups[place.group];
    place.first = (chunk - group.first_chunk) * kChunkElements;
    place.whole = group.vectorised && place.first + kChunkElements <= group.count;
    return place;
}

}  // namespace mpt::update_chunks
