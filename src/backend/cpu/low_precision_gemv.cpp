// See low_precision_gemv.h. Sixteen-float AVX-512 vectors; the values are rounded with the same
// instructions as the AMX GEMM's packing (VCVTNEPS2BF16 for bf16, VCVTPS2PH for fp16) and widened
// back to fp32, where a product of two of them is exact.
#include "backend/cpu/low_precision_gemv.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MPTRAIN_GEMV_BUILD 1
#include <immintrin.h>
#endif

namespace mpt {

#if defined(MPTRAIN_GEMV_BUILD)

namespace {

#define MPTRAIN_GEMV_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))

constexpr int64_t kLanes = 16;
constexpr int64_t kRowsAtOnce = 8;        // dot products sharing each load of the vector
constexpr int64_t kColumnVectors = 8;     // sums in registers when the matrix is transposed
constexpr int64_t kWorkPerTask = 1 << 16;  // multiply-adds below which a range stays on one thread

// The first `valid` lanes (all when valid >= 16).
inline __mmask16 lanes_mask(int64_t valid) {
    return static_cast<__mmask16>(valid >= kLanes ? 0xFFFF : (1u << valid) - 1);
}

// Values rounded to bf16 or fp16 (nearest, ties to even) and widened back to fp32, exactly. The
// zero-masked forms keep every lane; GCC 12 warns about the plain forms' pass-through vectors.
MPTRAIN_GEMV_TARGET inline __m512 rounded(__m512 values, bool half) {
    if (half)
        return _mm512_maskz_cvtph_ps(
            0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i words = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, words), 16));
}

// Elements q .. q + valid - 1 of a vector whose elements lie `stride` floats apart, zero beyond.
MPTRAIN_GEMV_TARGET inline __m512 load_strided(const float* vector, int64_t stride, int64_t q, int64_t valid) {
    const __mmask16 mask = lanes_mask(valid);
    if (stride == 1) return _mm512_maskz_loadu_ps(mask, vector + q);
    const __m512i low_lanes = _mm512_set_epi64(7 * stride, 6 * stride, 5 * stride, 4 * stride, 3 * stride,
                                               2 * stride, stride, 0);
    const __m512i high_lanes = _mm512_add_epi64(low_lanes, _mm512_set1_epi64(8 * stride));
    const float* first = vector + q * stride;
    const __m256 low = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), static_cast<__mmask8>(mask), low_lanes, first, 4);
    const __m256 high =
        _mm512_mask_i64gather_ps(_mm256_setzero_ps(), static_cast<__mmask8>(mask >> 8), high_lanes, first, 4);
    alignas(64) float lanes[kLanes];  // joined through memory: GCC 12 warns inside the insert intrinsics
    _mm256_store_ps(lanes, low);
    _mm256_store_ps(lanes + 8, high);
    return _mm512_load_ps(lanes);
}

// The lanes' sum, in lane order (written out: GCC 12 warns inside _mm512_reduce_add_ps).
MPTRAIN_GEMV_TARGET inline float sum_lanes(__m512 values) {
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, values);
    float sum = 0.0f;
    for (float lane : lanes) sum += lane;
    return sum;
}

// y[index] = alpha * sum (+ beta * y[index] unless beta is 0, which ignores what was there).
inline void store_result(const GemvProblem& g, int64_t index, float sum, float alpha, float beta) {
    float& out = g.y[index * g.y_stride];
    out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
}

// Not transposed: y[j] = matrix row j . vector, for the rows [first, last), eight rows per load of
// the vector. Each sum runs over the columns in lanes of 16, which are then added in lane order.
MPTRAIN_GEMV_TARGET void dot_rows(const GemvProblem& g, bool half, float alpha, float beta, int64_t first,
                                  int64_t last) {
    for (int64_t row = first; row < last; row += kRowsAtOnce) {
        const int64_t count = std::min(kRowsAtOnce, last - row);
        __m512 sums[kRowsAtOnce];
        for (int64_t r = 0; r < kRowsAtOnce; ++r) sums[r] = _mm512_setzero_ps();
        for (int64_t q = 0; q < g.columns; q += kLanes) {
            const int64_t valid = std::min(kLanes, g.columns - q);
            const __m512 vector = rounded(load_strided(g.vector, g.vector_stride, q, valid), half);
            for (int64_t r = 0; r < count; ++r) {
                // 1 KiB ahead in each row (past a row's end is harmless: a prefetch never faults). A
                // one-row bf16 prediction took 1.01-1.06x fp32's time with it, 1.06-1.07x without.
                _mm_prefetch(reinterpret_cast<const char*>(g.matrix + (row + r) * g.ld + q + 256), _MM_HINT_T0);
                const __m512 values = _mm512_maskz_loadu_ps(lanes_mask(valid), g.matrix + (row + r) * g.ld + q);
                sums[r] = _mm512_fmadd_ps(rounded(values, half), vector, sums[r]);
            }
        }
        for (int64_t r = 0; r < count; ++r) store_result(g, row + r, sum_lanes(sums[r]), alpha, beta);
    }
}

// Transposed: y[j] = sum over q of matrix[q][j] * vector[q], for the columns [first, last), 128 at
// a time in registers, each summed over q in order.
MPTRAIN_GEMV_TARGET void scale_and_add_rows(const GemvProblem& g, bool half, float alpha, float beta, int64_t first,
                                            int64_t last) {
    constexpr int64_t kBlockColumns = kColumnVectors * kLanes;
    for (int64_t column = first; column < last; column += kBlockColumns) {
        const int64_t count = std::min(kBlockColumns, last - column);
        const int64_t vectors = (count + kLanes - 1) / kLanes;
        __m512 sums[kColumnVectors];
        for (int64_t v = 0; v < kColumnVectors; ++v) sums[v] = _mm512_setzero_ps();
        for (int64_t q = 0; q < g.rows; ++q) {
            const __m512 factor = rounded(_mm512_set1_ps(g.vector[q * g.vector_stride]), half);
            const float* values = g.matrix + q * g.ld + column;
            for (int64_t v = 0; v < vectors; ++v) {
                const __m512 loaded = _mm512_maskz_loadu_ps(lanes_mask(count - v * kLanes), values + v * kLanes);
                sums[v] = _mm512_fmadd_ps(rounded(loaded, half), factor, sums[v]);
            }
        }
        alignas(64) float results[kBlockColumns];
        for (int64_t v = 0; v < vectors; ++v) _mm512_store_ps(results + v * kLanes, sums[v]);
        for (int64_t c = 0; c < count; ++c) store_result(g, column + c, results[c], alpha, beta);
    }
}

}  // namespace

void low_precision_gemv(DType dtype, const GemvProblem& gemv, float alpha, float beta, ThreadPool& pool) {
    if (dtype != DType::bf16 && dtype != DType::fp16)
        fail(MPT_STATUS_INTERNAL, std::string("low_precision_gemv takes bf16 or fp16, not ") + dtype_name(dtype));
    const bool half = dtype == DType::fp16;
    const int64_t length = gemv.transpose ? gemv.columns : gemv.rows;
    const int64_t depth = gemv.transpose ? gemv.rows : gemv.columns;
    if (length <= 0) return;
    // Whole blocks of output per task, and enough work in each to be worth a thread.
    const int64_t unit = gemv.transpose ? kColumnVectors * kLanes : kRowsAtOnce;
    const int64_t units = (length + unit - 1) / unit;
    const int64_t grain = std::max<int64_t>(1, kWorkPerTask / std::max<int64_t>(1, depth * unit));
    pool.parallel_for(units, grain, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * unit, last = std::min(length, end * unit);
        if (gemv.transpose) scale_and_add_rows(gemv, half, alpha, beta, first, last);
        else dot_rows(gemv, half, alpha, beta, first, last);
    });
}

#else

void low_precision_gemv(DType, const GemvProblem&, float, float, ThreadPool&) {
    fail(MPT_STATUS_INTERNAL, "low_precision_gemv called in a build without AVX-512");
}

#endif

}  // namespace mpt
