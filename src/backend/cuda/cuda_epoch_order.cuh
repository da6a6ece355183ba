// An epoch's row order on the device, so a shuffled epoch needs no host work and no upload: one
// kernel writes each row's key (data/epoch_order.h) and index, then a CUB radix sort orders the
// indices by key. The keys never tie, so the result is the permutation the CPU reference builds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mpt {

class CudaBackend;

class CudaEpochOrder {
public:
    explicit CudaEpochOrder(CudaBackend& backend) : backend_(backend) {}
    ~CudaEpochOrder();
    CudaEpochOrder(const CudaEpochOrder&) = delete;
    CudaEpochOrder& operator=(const CudaEpochOrder&) = delete;

    // Sizes the keys and CUB's temporary storage for `rows` (device allocations, only on growth).
    void reserve(int64_t rows);
    // Writes the order to `order` on `stream`; reserve(rows) must have been called.
    void run(int32_t* order, int64_t rows, bool shuffle, uint64_t seed, cudaStream_t stream);

private:
    CudaBackend& backend_;
    int64_t capacity_ = 0;
    void* storage_ = nullptr;   // keys in, keys out, indices in, then CUB's temporary storage
    uint64_t* keys_in_ = nullptr;
    uint64_t* keys_out_ = nullptr;
    int32_t* indices_in_ = nullptr;
    void* sort_temp_ = nullptr;
    size_t sort_temp_bytes_ = 0;
};

}  // namespace mpt
