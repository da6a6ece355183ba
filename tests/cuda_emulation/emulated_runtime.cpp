// The CUDA runtime's host functions that the emulated kernels' entry points call (the real runtime
// is not linked: without a GPU it would only report that there is none). The device they describe is
// an H200's shape (132 multiprocessors unless a test sets fewer, 228 KiB of shared memory each), its code compiled for
// the compute capability the tests set (mpt_emulation::set_compute_capability; 8.0 unless set, so that no entry point
// picks a path whose code only 9.0 has and the emulation leaves out: bulk copies, dependent launch; the clusters of the
// small-batch kernels are emulated, under 9.0). Memory is the host's: a stream runs its work at once, in order.
#include <cuda_runtime_api.h>

#include "cuda_emulation/emulated_threads.h"

#include <cstdlib>
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
            *value = mpt_emulation::multiprocessors();
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor:
            *value = mpt_emulation::compute_capability() / 10;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor:
            *value = mpt_emulation::compute_capability() % 10;
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
    attributes->binaryVersion = mpt_emulation::compute_capability();
    attributes->ptxVersion = mpt_emulation::compute_capability();
    attributes->maxThreadsPerBlock = 1024;
    attributes->numRegs = 64;
    return cudaSuccess;
}

// The dynamic shared memory opt-in is kept (launches check it); the other attributes are hints.
cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
    if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 227 * 1024) return record(cudaErrorInvalidValue);
        mpt_emulation::set_dynamic_shared_limit(function, static_cast<size_t>(value));
    }
    return cudaSuccess;
}

// Blocks an SM holds by threads (2,048), by the launch's dynamic shared memory (228 KiB, 1 KiB
// reserved a block) and at most 8; the kernels' registers and static shared memory are a GPU's concern.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* /*function*/,
                                                                   int block_size, size_t shared,
                                                                   unsigned int /*flags*/) {
    if (block_size <= 0 || block_size > 1024) {
        *blocks = 0;
        return cudaSuccess;
    }
    int fit = 2048 / block_size;
    const int by_shared = static_cast<int>(228 * 1024 / (shared + 1024));
    if (by_shared < fit) fit = by_shared;
    *blocks = fit < 8 ? fit : 8;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function, int block_size,
                                                          size_t shared) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, shared, 0);
}

// Two clusters of up to 8 blocks fit a pair of multiprocessors: 66 at once on 132 (9.0 only).
cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* /*function*/, const cudaLaunchConfig_t* config) {
    *clusters = 0;
    if (mpt_emulation::compute_capability() < 90) return record(cudaErrorNotSupported);
    for (unsigned a = 0; a < config->numAttrs; ++a)
        if (config->attrs[a].id == cudaLaunchAttributeClusterDimension && config->attrs[a].val.clusterDim.x > 8)
            return cudaSuccess;
    *clusters = 66;
    return cudaSuccess;
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

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record(cudaErrorInvalidDevice); }

// Memory: the host's, 256-byte aligned as cudaMalloc's.
cudaError_t cudaMalloc(void** pointer, size_t bytes) {
    *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    return *pointer || bytes == 0 ? cudaSuccess : record(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* pointer) {
    std::free(pointer);
    return cudaSuccess;
}

// Streams and events: work runs when it is issued, so there is nothing to wait for and no time.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
    static char streams;
    *stream = reinterpret_cast<cudaStream_t>(&streams);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    static char events;
    *event = reinterpret_cast<cudaEvent_t>(&events);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t, cudaEvent_t) {
    *milliseconds = 0.0f;
    return cudaSuccess;
}

}  // extern "C"
