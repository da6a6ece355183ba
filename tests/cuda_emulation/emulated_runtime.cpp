// The CUDA runtime's host functions that the emulated kernels' entry points call (the real runtime
// is not linked: without a GPU it would only report that there is none). The device they describe is
// an H200's shape (132 multiprocessors, 228 KiB of shared memory each) running code compiled for
// compute capability 8.0, so that no entry point picks a path for 9.0 (clusters, bulk copies,
// dependent launch), whose code the emulation leaves out. Memory is the host's: a stream runs its
// work at once, in order.
#include <cuda_runtime_api.h>

#include <cstring>

namespace {

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t record(cudaError_t status) {
    if (status != cudaSuccess) last_error = status;
    return status;
}

}  // namespace

extern "C" {

cudaError_t cudaGetLastError() {
    const cudaError_t status = last_error;
    last_error = cudaSuccess;
    return status;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t status) { return status == cudaSuccess ? "cudaSuccess" : "cudaError"; }

const char* cudaGetErrorString(cudaError_t status) {
    return status == cudaSuccess ? "no error" : "an emulated CUDA runtime call failed";
}

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
    if (device != 0) return record(cudaErrorInvalidDevice);
    switch (attribute) {
        case cudaDevAttrMultiProcessorCount:
            *value = 132;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor:
            *value = 8;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor:
            *value = 0;
            return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
            *value = 228 * 1024;
            return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = 227 * 1024;
            return cudaSuccess;
        case cudaDevAttrReservedSharedMemoryPerBlock:
            *value = 1024;
            return cudaSuccess;
        case cudaDevAttrMaxThreadsPerMultiProcessor:
            *value = 2048;
            return cudaSuccess;
        case cudaDevAttrMaxThreadsPerBlock:
            *value = 1024;
            return cudaSuccess;
        case cudaDevAttrWarpSize:
            *value = 32;
            return cudaSuccess;
        case cudaDevAttrL2CacheSize:
            *value = 50 * 1024 * 1024;
            return cudaSuccess;
        default:
            return record(cudaErrorNotSupported);
    }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* /*function*/) {
    std::memset(attributes, 0, sizeof(*attributes));
    attributes->binaryVersion = 80;
    attributes->ptxVersion = 80;
    attributes->maxThreadsPerBlock = 1024;
    attributes->numRegs = 64;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* /*function*/, cudaFuncAttribute /*attribute*/, int /*value*/) {
    return cudaSuccess;
}

// Two blocks of up to 1,024 threads fill a multiprocessor's 2,048; the kernels' register and shared
// memory limits are a GPU's concern.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* /*function*/,
                                                                   int block_size, size_t /*shared*/,
                                                                   unsigned int /*flags*/) {
    *blocks = block_size > 0 ? (block_size <= 1024 ? 2048 / block_size : 0) : 0;
    if (*blocks > 8) *blocks = 8;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function, int block_size,
                                                          size_t shared) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, shared, 0);
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t /*stream*/) {
    std::memset(pointer, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes, cudaMemcpyKind /*kind*/,
                            cudaStream_t /*stream*/) {
    std::memmove(destination, source, bytes);
    return cudaSuccess;
}

}  // extern "C"
