// See cuda_epoch_order.cuh.
#include "backend/cuda/cuda_epoch_order.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "data/epoch_order.h"

namespace mpt {

namespace {

constexpr unsigned kOrderThreads = 256;

__global__ void identity_order_kernel(int32_t* order, int64_t rows) {
    start_after_preceding_kernel();
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += stride)
        order[row] = static_cast<int32_t>(row);
}

__global__ void order_keys_kernel(uint64_t* keys, int32_t* indices, int64_t rows, uint64_t seed) {
    start_after_preceding_kernel();
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += stride) {
        keys[row] = epoch_order_key(seed, static_cast<uint64_t>(row));
        indices[row] = static_cast<int32_t>(row);
    }
}

}  // namespace

CudaEpochOrder::~CudaEpochOrder() { backend_.release_scratch(storage_); }

void CudaEpochOrder::reserve(int64_t rows) {
    require(rows >= 0 && rows <= INT_MAX, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: an epoch order holds at most 2^31 - 1 rows");
    if (rows <= capacity_) return;
    const int items = static_cast<int>(rows);
    size_t temp_bytes = 0;
    MPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr),
                                                   static_cast<uint64_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), items));
    const size_t key_bytes = round_up_256(static_cast<size_t>(rows) * sizeof(uint64_t));
    const size_t index_bytes = round_up_256(static_cast<size_t>(rows) * sizeof(int32_t));
    backend_.release_scratch(storage_);
    storage_ = nullptr;
    capacity_ = 0;
    storage_ = backend_.allocate_scratch(2 * key_bytes + index_bytes + temp_bytes);
    char* base = static_cast<char*>(storage_);
    keys_in_ = reinterpret_cast<uint64_t*>(base);
    keys_out_ = reinterpret_cast<uint64_t*>(base + key_bytes);
    indices_in_ = reinterpret_cast<int32_t*>(base + 2 * key_bytes);
    sort_temp_ = base + 2 * key_bytes + index_bytes;
    sort_temp_bytes_ = temp_bytes;
    capacity_ = rows;
}

void CudaEpochOrder::run(int32_t* order, int64_t rows, bool shuffle, uint64_t seed, cudaStream_t stream) {
    if (rows <= 0) return;
    require(order != nullptr, MPT_STATUS_INVALID_ARGUMENT, "cuda backend: fill_order needs an order buffer");
    const unsigned blocks = grid_for(rows, kOrderThreads, 1024);
    if (!shuffle) {
        launch_kernel("identity_order_kernel", identity_order_kernel, blocks, kOrderThreads, 0, stream, order, rows);
        return;
    }
    require(rows <= capacity_, MPT_STATUS_INTERNAL, "cuda backend: the epoch order was not reserved");
    launch_kernel("order_keys_kernel", order_keys_kernel, blocks, kOrderThreads, 0, stream, keys_in_, indices_in_, rows,
                  seed);
    size_t temp_bytes = sort_temp_bytes_;
    MPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp_, temp_bytes, keys_in_, keys_out_, indices_in_, order,
                                                   static_cast<int>(rows), 0, 64, stream));
}

}  // namespace mpt
