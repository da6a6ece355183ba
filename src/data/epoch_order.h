// The row order of a training epoch: a permutation of [0, rows) sorted by a per-row random key.
// Keys come from a counter-based hash of (seed, row) instead of a sequential RNG, so the CPU (a
// host sort) and the GPU (a CUB radix sort on the device) build the same permutation from the same
// seed without the host shuffling and uploading it every epoch. The key is splitmix64's finaliser,
// a bijection, applied to distinct counters: keys never tie, so any sort gives the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace mpt {

MPT_HOST_DEVICE uint64_t epoch_order_key(uint64_t seed, uint64_t row) {
    uint64_t z = seed + (row + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The reference: writes the identity, or the permutation of `seed`, to `order[0, rows)`. `keys` is
// scratch the caller keeps, so repeated epochs do not allocate.
void make_epoch_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed, std::vector<uint64_t>& keys);

}  // namespace mpt
