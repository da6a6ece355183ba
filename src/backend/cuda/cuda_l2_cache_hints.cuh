// Global loads and stores that ask L2 to keep a share of their lines: PTX createpolicy makes an
// evict-last policy for a fraction of the lines (evict-first for the rest), and ld/st with
// .L2::cache_hint carry it (compute capability 8.0 and up; below, plain accesses, which the backend
// never asks for there). Evict-last lines are what L2's persisting set-aside holds
// (cudaLimitPersistingL2CacheSize): without one they are treated as normal lines.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace mpt {

// `fraction` in (0, 1]: the hardware keeps sixteenths of it (l2_resident_masters.h chooses multiples
// of 1/16). Not volatile: the same fraction gives the same policy, computed once.
__device__ __forceinline__ uint64_t l2_keep_policy(float fraction) {
    uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("createpolicy.fractional.L2::evict_last.L2::evict_first.b64 %0, %1;" : "=l"(policy) : "f"(fraction));
#else
    (void)fraction;
#endif
    return policy;
}

// Evict-last for `fraction` of the lines, evict-first for the rest; for fraction 0, evict-first, or
// with `normal_rest` (data read again soon, as fp32 masters are by the next forward) normal priority
// for every line not kept. (A branch, not a select of both: holding both policies took the grouped
// tensor-core kernel past its 128 registers into spills.)
__device__ __forceinline__ uint64_t l2_policy(float fraction, bool normal_rest) {
    uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (fraction > 0.0f) {
        if (normal_rest)
            asm("createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, %1;"
                : "=l"(policy)
                : "f"(fraction));
        else
            policy = l2_keep_policy(fraction);
    } else if (normal_rest) {
        asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
    } else {
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    }
#else
    (void)fraction;
    (void)normal_rest;
#endif
    return policy;
}

// Volatile, so that no load is moved above the kernel's griddepcontrol.wait (also volatile) and no
// store is dropped or reordered with the fences after it ("memory"). V: float, float2 or float4.
template <typename V>
__device__ __forceinline__ V load_kept(const V* address, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    V value;
    if constexpr (std::is_same_v<V, float>) {
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.f32 %0, [%1], %2;"
                     : "=f"(value)
                     : "l"(address), "l"(policy));
    } else if constexpr (std::is_same_v<V, float2>) {
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v2.f32 {%0, %1}, [%2], %3;"
                     : "=f"(value.x), "=f"(value.y)
                     : "l"(address), "l"(policy));
    } else {
        static_assert(std::is_same_v<V, float4>, "masters are loaded as float, float2 or float4");
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
                     : "l"(address), "l"(policy));
    }
    return value;
#else
    (void)policy;
    return *address;
#endif
}

template <typename V>
__device__ __forceinline__ void store_kept(V* address, V value, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<V, float>) {
        asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(address), "f"(value), "l"(policy) : "memory");
    } else if constexpr (std::is_same_v<V, float2>) {
        asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(address), "f"(value.x), "f"(value.y),
                     "l"(policy)
                     : "memory");
    } else {
        static_assert(std::is_same_v<V, float4>, "masters are stored as float, float2 or float4");
        asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(address), "f"(value.x),
                     "f"(value.y), "f"(value.z), "f"(value.w), "l"(policy)
                     : "memory");
    }
#else
    (void)policy;
    *address = value;
#endif
}

}  // namespace mpt
