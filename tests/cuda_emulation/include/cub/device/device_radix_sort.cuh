// A stand-in for CUB's device radix sort on the emulated device (tests/cuda_emulation/): SortPairs's
// contract (a first call with no temporary storage asks its size; the sort is stable, by the keys'
// bits [begin_bit, end_bit)) over host memory, issued on the stream as a kernel would be (recorded
// while the stream captures a graph). CUB's own header does not compile for the host.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_emulation/emulated_threads.h"

namespace cub {

struct DeviceRadixSort {
    template <typename Key, typename Value, typename Items>
    static cudaError_t SortPairs(void* temporary, size_t& temporary_bytes, const Key* keys_in, Key* keys_out,
                                 const Value* values_in, Value* values_out, Items items, int begin_bit = 0,
                                 int end_bit = static_cast<int>(sizeof(Key) * 8), cudaStream_t stream = nullptr) {
        if (temporary == nullptr) {
            temporary_bytes = 256;
            return cudaSuccess;
        }
        mpt_emulation::issue(stream, [=] {
            const auto bits = [&](Key key) {
                const Key shifted = static_cast<Key>(key >> begin_bit);
                const int width = end_bit - begin_bit;
                return width >= static_cast<int>(sizeof(Key) * 8) ? shifted
                                                                  : static_cast<Key>(shifted & ((Key{1} << width) - 1));
            };
            std::vector<size_t> order(static_cast<size_t>(items));
            std::iota(order.begin(), order.end(), size_t{0});
            std::stable_sort(order.begin(), order.end(),
                             [&](size_t a, size_t b) { return bits(keys_in[a]) < bits(keys_in[b]); });
            for (size_t i = 0; i < order.size(); ++i) {
                keys_out[i] = keys_in[order[i]];
                values_out[i] = values_in[order[i]];
            }
        });
        return cudaSuccess;
    }
};

}  // namespace cub
