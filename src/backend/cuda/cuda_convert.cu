// See cuda_convert.cuh.
#include "backend/cuda/cuda_convert.cuh"

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace mpt {

namespace {

__global__ void from_fp32_kernel(void* destination, DType dtype, const float* source, int64_t count) {
    start_after_preceding_kernel();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        store_element(destination, dtype, i, source[i]);
}

__global__ void to_fp32_kernel(float* destination, const void* source, DType dtype, int64_t count) {
    start_after_preceding_kernel();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        destination[i] = load_element(source, dtype, i);
}

}  // namespace

void run_convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count, cudaStream_t stream) {
    if (count <= 0) return;
    if (dtype == DType::fp32) {
        if (destination != source)
            MPT_CUDA_CHECK(cudaMemcpyAsync(destination, source, static_cast<size_t>(count) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, stream));
        return;
    }
    // In place (destination == source) would overwrite values not yet read by other threads.
    require(destination != static_cast<const void*>(source), MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: convert_from_fp32 cannot convert in place to a 2-byte dtype");
    launch_kernel("from_fp32_kernel", from_fp32_kernel, grid_for(count, 256, 4096), 256, 0, stream, destination, dtype,
                  source, count);
}

void run_convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count, cudaStream_t stream) {
    if (count <= 0) return;
    if (dtype == DType::fp32) {
        if (destination != source)
            MPT_CUDA_CHECK(cudaMemcpyAsync(destination, source, static_cast<size_t>(count) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, stream));
        return;
    }
    require(destination != source, MPT_STATUS_INVALID_ARGUMENT,
            "cuda backend: convert_to_fp32 cannot convert in place from a 2-byte dtype");
    launch_kernel("to_fp32_kernel", to_fp32_kernel, grid_for(count, 256, 4096), 256, 0, stream, destination, source,
                  dtype, count);
}

}  // namespace mpt
