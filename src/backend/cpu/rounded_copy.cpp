// See rounded_copy.h.
#include "backend/cpu/rounded_copy.h"

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_features.h"

namespace mpt {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

#define MPTRAIN_AVX2_F16C __attribute__((target("avx2,f16c")))

// round_bfloat16_bits in lanes: a NaN keeps its upper half, quieted; anything else rounds to the
// nearest, ties to even, by adding 0x7FFF plus the kept half's lowest bit (fp32 subnormals
// included, as the portable rounding does and VCVTNEPS2BF16 does not).
MPTRAIN_AVX2_F16C inline __m256 rounded_to_bf16_lanes(__m256 values) {
    const __m256i bits = _mm256_castps_si256(values);
    const __m256i upper_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
    const __m256i quieted = _mm256_and_si256(_mm256_or_si256(bits, _mm256_set1_epi32(0x00400000)), upper_half);
    const __m256i kept_lowest = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_and_si256(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), kept_lowest)), upper_half);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quieted, is_nan));
}

// VCVTPS2PH rounds as round_half_bits: to the nearest, ties to even, fp16 subnormals kept,
// overflow to Inf, a NaN quieted with its payload's upper bits.
MPTRAIN_AVX2_F16C inline __m256 rounded_to_fp16_lanes(__m256 values) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

template <bool kHalf, bool kStreamed>
MPTRAIN_AVX2_F16C void round_lanes(const float* source, float* destination, size_t count) {
    for (size_t index = 0; index + 8 <= count; index += 8) {
        const __m256 values = _mm256_loadu_ps(source + index);
        const __m256 rounded = kHalf ? rounded_to_fp16_lanes(values) : rounded_to_bf16_lanes(values);
        if (kStreamed)
            _mm256_stream_ps(destination + index, rounded);
        else
            _mm256_storeu_ps(destination + index, rounded);
    }
}

template <bool kHalf>
MPTRAIN_AVX2_F16C void round_vectors(const float* source, float* destination, size_t count, bool streamed) {
    size_t head = 0;
    if (streamed) {  // the streaming stores want 32-byte aligned destinations
        const size_t misaligned = (reinterpret_cast<uintptr_t>(destination) / sizeof(float)) % 8;
        head = misaligned ? 8 - misaligned : 0;
        if (head > count) head = count;
        round_copy(kHalf ? DType::fp16 : DType::bf16, source, destination, head);
    }
    const size_t body = (count - head) / 8 * 8;
    if (streamed)
        round_lanes<kHalf, true>(source + head, destination + head, body);
    else
        round_lanes<kHalf, false>(source + head, destination + head, body);
    round_copy(kHalf ? DType::fp16 : DType::bf16, source + head + body, destination + head + body, count - head - body);
    if (streamed) _mm_sfence();  // streaming stores are weakly ordered: done before the hand-off
}

#undef MPTRAIN_AVX2_F16C

bool detect_vectors() {
    __builtin_cpu_init();
    return cpu_has_avx2_fma() && __builtin_cpu_supports("f16c");
}

}  // namespace

bool rounded_copy_vectorised() {
    static const bool answer = detect_vectors();
    return answer;
}

void write_rounded_copy(DType dtype, const float* source, float* destination, size_t count, bool streamed) {
    if (dtype == DType::fp32 || !rounded_copy_vectorised()) {
        round_copy(dtype, source, destination, count);
        return;
    }
    if (dtype == DType::fp16)
        round_vectors<true>(source, destination, count, streamed);
    else
        round_vectors<false>(source, destination, count, streamed);
}

#else

bool rounded_copy_vectorised() { return false; }

void write_rounded_copy(DType dtype, const float* source, float* destination, size_t count, bool) {
    round_copy(dtype, source, destination, count);
}

#endif

}  // namespace mpt
