// See cpu_features.h.
#include "backend/cpu/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace mpt {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // Leaf 7's subleaf 1 holds the AVX512-BF16 bit; subleaf 0 says whether it exists.
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || eax < 1) return false;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) || !(eax & (1u << 5))) return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

bool cpu_has_avx512f() {
#if defined(__x86_64__) && defined(__GNUC__)
    // libgcc's answers include XGETBV's check that the OS saves the ZMM and mask registers.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
    // libgcc's answers include XGETBV's check that the OS saves the YMM registers.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

}  // namespace mpt
