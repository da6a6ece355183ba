// Shared by the CUDA backend's translation units (never by host-facing headers): error checks that
// turn every CUDA and cuBLASLt failure into mpt::Error, dtype mapping, and element load/store in
// the storage dtypes with the same round-to-nearest-even as the CPU reference.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_cublaslt_library.cuh"
#include "core/dtype.h"
#include "core/error.h"

namespace mpt {

[[noreturn]] inline void fail_cuda(const char* call, const std::string& reason, const char* file, int line,
                                   mpt_status status = MPT_STATUS_BACKEND_ERROR) {
    std::string where(file);
    const size_t slash = where.find_last_of('/');
    if (slash != std::string::npos) where = where.substr(slash + 1);
    fail(status, std::string("cuda backend: ") + call + " failed: " + reason + " (" + where + ":" + std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
    if (status == cudaSuccess) return;
    // A failed call also sets the thread's last error; clear it (sticky faults stay), or the next
    // launch check would report this failure as its own.
    cudaGetLastError();
    fail_cuda(call, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), file, line,
              status == cudaErrorMemoryAllocation ? MPT_STATUS_OUT_OF_MEMORY : MPT_STATUS_BACKEND_ERROR);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    // A status comes from the loaded library, so cublaslt() is not null; a number if it ever is.
    const CublasLt* lt = cublaslt();
    const std::string reason = lt ? std::string(lt->get_status_name(status)) + ": " + lt->get_status_string(status)
                                  : "cublasStatus_t " + std::to_string(static_cast<int>(status));
    fail_cuda(call, reason, file, line,
              status == CUBLAS_STATUS_ALLOC_FAILED ? MPT_STATUS_OUT_OF_MEMORY : MPT_STATUS_BACKEND_ERROR);
}

// For calls whose failure nobody can be told of (releases and destructors, which are noexcept): a
// failure still sets the thread's last error, where the next launch check would report it as its
// own, or a graph capture would be refused for it. Cleared here; a sticky fault is not cleared by
// this and is reported by the next call that checks.
inline void discard_cuda_error(cudaError_t status) {
    if (status != cudaSuccess) cudaGetLastError();
}

#define MPT_CUDA_CHECK(call) ::mpt::check_cuda((call), #call, __FILE__, __LINE__)
#define MPT_CUBLAS_CHECK(call) ::mpt::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports launch-configuration errors (and earlier asynchronous faults).
#define MPT_CUDA_CHECK_LAUNCH(name) ::mpt::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)

inline cudaDataType_t cuda_data_type(DType dtype) {
    switch (dtype) {
        case DType::fp16: return CUDA_R_16F;
        case DType::bf16: return CUDA_R_16BF;
        case DType::fp32: break;
    }
    return CUDA_R_32F;
}

inline size_t device_dtype_size(DType dtype) { return dtype == DType::fp32 ? 4 : 2; }

// Alignment of a pointer in bytes, capped at 256 (what cuBLASLt's heuristics care about).
inline unsigned pointer_alignment(const void* pointer) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
    if (address == 0) return 256;
    unsigned alignment = 1;
    while (alignment < 256 && (address & alignment) == 0) alignment <<= 1;
    return alignment;
}

// Whether `pointer` is a multiple of `bytes` (a power of two): the kernels' vector paths' test.
inline bool is_aligned(const void* pointer, size_t bytes) {
    return (reinterpret_cast<uintptr_t>(pointer) & (bytes - 1)) == 0;
}

inline void require_aligned16(const void* pointer, const char* what) {
    if (pointer && (reinterpret_cast<uintptr_t>(pointer) & 15u) != 0)
        fail(MPT_STATUS_INVALID_ARGUMENT,
             std::string("cuda backend: ") + what + " is not 16-byte aligned (cuBLASLt needs 16-byte aligned operands)");
}

// Sizes of sub-buffers carved from one allocation keep the next one 256-byte aligned.
inline size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Whether the work before `event` has finished, without blocking. "Not ready" is an answer, not a
// fault, but the runtime keeps it as the thread's last error, where the next kernel launch check
// (cudaGetLastError) would report it: it is cleared here.
inline bool event_passed(cudaEvent_t event) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
    }
    check_cuda(status, "cudaEventQuery", __FILE__, __LINE__);
    return true;
}

// Whether the current device is of compute capability `minimum_major`.0 or later and the code of
// `kernel` that runs on it was compiled for that or later (a build for older architectures alone
// runs on newer devices from its PTX, compiled without what the newer ones have). binaryVersion: the
// compute capability the code that runs here was compiled for (SASS, or the PTX the driver
// compiled), times 10. Clears any error it meets.
inline bool kernel_code_runs_on_current_device(const void* kernel, int minimum_major) {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const int minimum = 10 * minimum_major;
    return major >= minimum_major && attributes.binaryVersion >= minimum && attributes.ptxVersion >= minimum;
}

// Kernel launch geometry for grid-stride loops over `work` items.
inline unsigned grid_for(int64_t work, unsigned block, unsigned max_blocks) {
    const int64_t blocks = (work + block - 1) / block;
    if (blocks < 1) return 1;
    return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)  // (emulation: tests/cuda_emulation)
// A relaxed atomic load at device scope: a read of a flag that another thread may write meanwhile
// (with an atomic) is then no data race, and costs what a plain load does.
__device__ __forceinline__ int32_t load_relaxed(const int32_t* address) {
#if defined(__CUDA_ARCH__)
    int32_t value;
    asm volatile("ld.relaxed.gpu.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
    return value;
#elif defined(MPT_CUDA_EMULATION)
    return __atomic_load_n(address, __ATOMIC_RELAXED);
#else
    return *address;  // (nvcc's host pass: never called)
#endif
}

// A relaxed atomic store at device scope: a word that other blocks update with atomics (a ticket
// counter the last block sets back to 0) written with no data race under the PTX memory model, for
// what a plain store costs. (A plain store there races with the other blocks' atomics: their fences
// order what they wrote before their tickets, not the tickets themselves.)
__device__ __forceinline__ void store_relaxed(uint32_t* address, uint32_t value) {
#if defined(__CUDA_ARCH__)
    asm volatile("st.relaxed.gpu.b32 [%0], %1;\n" : : "l"(address), "r"(value) : "memory");
#elif defined(MPT_CUDA_EMULATION)
    __atomic_store_n(address, value, __ATOMIC_RELAXED);
#else
    *address = value;  // (nvcc's host pass: never called)
#endif
}

// Device-side element access in storage dtypes. Conversions round to nearest even, as round_to.
__device__ __forceinline__ float load_element(const void* base, DType dtype, int64_t index) {
    switch (dtype) {
        case DType::fp16: return __half2float(static_cast<const __half*>(base)[index]);
        case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
        case DType::fp32: break;
    }
    return static_cast<const float*>(base)[index];
}

__device__ __forceinline__ void store_element(void* base, DType dtype, int64_t index, float value) {
    switch (dtype) {
        case DType::fp16: static_cast<__half*>(base)[index] = __float2half_rn(value); return;
        case DType::bf16: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value); return;
        case DType::fp32: break;
    }
    static_cast<float*>(base)[index] = value;
}

// An element of a storage type known at compile time, as a float; a float as one, rounded to nearest
// even as store_element rounds.
template <typename T>
__device__ __forceinline__ float to_float(T value) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __bfloat162float(value);
    } else if constexpr (std::is_same_v<T, __half>) {
        return __half2float(value);
    } else {
        return value;
    }
}

// A 16-bit element of T (__half or __nv_bfloat16) given as its bits, as a float.
template <typename T>
__device__ __forceinline__ float bits_to_float(uint16_t bits) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __uint_as_float(static_cast<uint32_t>(bits) << 16);
    } else {
        return __half2float(__ushort_as_half(bits));
    }
}

template <typename T>
__device__ __forceinline__ T from_float(float value) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __float2bfloat16_rn(value);
    } else if constexpr (std::is_same_v<T, __half>) {
        return __float2half_rn(value);
    } else {
        return value;
    }
}

// Four values stored as four elements of T in one store, rounded to nearest even as from_float
// rounds: 8 bytes of fp16/bf16 (`out` 8-byte aligned), 16 of fp32 (16-byte aligned).
__device__ __forceinline__ void store_rounded4(float* out, const float4& w) { *reinterpret_cast<float4*>(out) = w; }
__device__ __forceinline__ void store_rounded4(__nv_bfloat16* out, const float4& w) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(w.x, w.y), hi = __floats2bfloat162_rn(w.z, w.w);
    *reinterpret_cast<uint2*>(out) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}
__device__ __forceinline__ void store_rounded4(__half* out, const float4& w) {
    const __half2 lo = __floats2half2_rn(w.x, w.y), hi = __floats2half2_rn(w.z, w.w);
    *reinterpret_cast<uint2*>(out) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// The value `dtype` stores for `value` (round_to on the device).
__device__ __forceinline__ float round_to_device(DType dtype, float value) {
    switch (dtype) {
        case DType::fp16: return __half2float(__float2half_rn(value));
        case DType::bf16: return __bfloat162float(__float2bfloat16_rn(value));
        case DType::fp32: break;
    }
    return value;
}
#endif

}  // namespace mpt
