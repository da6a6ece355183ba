// How the max_abs kernel (cuda_max_abs.cu) shares a pass's tensors among its blocks, as plain
// functions the kernel and its launch call and a CPU test (tests/test_max_abs_chunks.cpp) walks as
// the kernel does: every element of every tensor read exactly once, by a block that counts it
// towards its own tensor.
//
// Why one flat range: with a grid per tensor (blockIdx.y the tensor, as until 2026-12-06) the
// pass was a wave of blocks a tensor, each with its tail, and a thread had one 16-byte load in
// flight (at batch 4096 on an H200, 31.3 us for 72 MB: 2.3 TB/s). Here a pass's tensors are one
// sequence of chunks, each a block's 4 loads a thread at once, dealt to the blocks in turn.
//
// A tensor's elements are units: 16-byte vectors (4 fp32 or 8 fp16/bf16 elements) where it is
// 16-byte aligned, single elements where it is not. Its units are chunks of kChunkUnits, in which
// thread t reads units t, t + kThreads, t + 2 kThreads and t + 3 kThreads; the count % per-unit
// elements after its last vector (the tail, fewer than 8) are read by its last chunk's first
// threads, one each. A tensor has at least one chunk when it has an element (a tail alone, say), none
// when it is empty. Block b takes chunks b, b + blocks, ...: their tensors never decrease, so a
// block's running maximum changes tensor only forward, where the kernel adds it to the tensor's.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace mpt::max_abs_chunks {

constexpr int kThreads = 256;
constexpr int kUnitsPerThread = 4;
constexpr int64_t kChunkUnits = int64_t{kThreads} * kUnitsPerThread;

// Elements a unit holds: a 16-byte vector's when vectorised (element_bytes 4 or 2), else 1.
MPT_HOST_DEVICE int per_unit(bool vectorised, int element_bytes) { return vectorised ? 16 / element_bytes : 1; }
MPT_HOST_DEVICE int64_t units(int64_t count, int unit_elements) { return count / unit_elements; }
// The first element of the tail after the last whole unit (count when there is none).
MPT_HOST_DEVICE int64_t tail_first(int64_t count, int unit_elements) {
    return units(count, unit_elements) * unit_elements;
}
MPT_HOST_DEVICE int64_t chunks(int64_t count, int unit_elements) {
    if (count <= 0) return 0;
    const int64_t whole = (units(count, unit_elements) + kChunkUnits - 1) / kChunkUnits;
    return whole > 0 ? whole : 1;
}

// The tensor of chunk `chunk` where first_chunk[k] is tensor k's first (first_chunk[tensors] the
// total), searching forward from tensor `from` (a block's chunks never go back).
MPT_HOST_DEVICE int tensor_of_chunk(const int64_t* first_chunk, int tensors, int64_t chunk, int from) {
    int tensor = from;
    while (tensor + 1 < tensors && chunk >= first_chunk[tensor + 1]) ++tensor;
    return tensor;
}

}  // namespace mpt::max_abs_chunks
