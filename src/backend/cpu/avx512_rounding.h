// 16 fp32 values rounded to fp16 or bf16, as 16-bit words or widened back to fp32 exactly: how the
// AMX GEMM's packing, small_gemm's AVX-512 kernels and the weight words round their operands,
// written once so that they all round alike. Both to the nearest, ties to even; fp16 overflows to
// Inf; bf16 (VCVTNEPS2BF16) counts fp32 subnormal inputs as zero. Only on CPUs with AVX512-BF16
// (cpu_has_avx512_bf16).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define MPTRAIN_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace mpt {

// The zero-masked forms keep every lane; GCC 12 warns that the plain forms' undefined pass-through
// vector "may be used uninitialized".
MPTRAIN_AVX512_BF16_TARGET inline __m256i fp16_words(__m512 values) {
    return _mm512_maskz_cvtps_ph(0xFFFF, values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

MPTRAIN_AVX512_BF16_TARGET inline __m256i bf16_words(__m512 values) {
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values));
}

MPTRAIN_AVX512_BF16_TARGET inline __m512 floats_of_fp16(__m256i words) { return _mm512_maskz_cvtph_ps(0xFFFF, words); }

MPTRAIN_AVX512_BF16_TARGET inline __m512 floats_of_bf16(__m256i words) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, words), 16));
}

MPTRAIN_AVX512_BF16_TARGET inline __m512 rounded_to_fp16(__m512 values) { return floats_of_fp16(fp16_words(values)); }

MPTRAIN_AVX512_BF16_TARGET inline __m512 rounded_to_bf16(__m512 values) { return floats_of_bf16(bf16_words(values)); }

}  // namespace mpt

#undef MPTRAIN_AVX512_BF16_TARGET

#endif
