// small_gemm's kernels on 16-float AVX-512 vectors (small_gemm_tiles.inc), rounding to bf16 with
// AVX512-BF16's VCVTNEPS2BF16 and to fp16 with AVX512F's VCVTPS2PH, as the AMX GEMM's packing does.
#include "backend/cpu/small_gemm_problem.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>

#include "core/thread_pool.h"

namespace mpt {

namespace {

#define MPTRAIN_SMALL_GEMM_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))

struct Vec {
    using Reg = __m512;
    using Mask = __mmask16;
    static constexpr int64_t kLanes = 16;

    // The first `valid` lanes (none when valid <= 0, all from 16 up).
    static Mask mask(int64_t valid) {
        return static_cast<Mask>(valid >= kLanes ? 0xFFFF : valid <= 0 ? 0 : (1u << valid) - 1);
    }
    MPTRAIN_SMALL_GEMM_TARGET static Reg zero() { return _mm512_setzero_ps(); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg load(const float* p) { return _mm512_load_ps(p); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg load_masked(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg broadcast(float x) { return _mm512_set1_ps(x); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
    MPTRAIN_SMALL_GEMM_TARGET static void store(float* p, Reg v) { _mm512_store_ps(p, v); }

    // Values rounded to the operands' dtype and widened back to fp32, exactly. The zero-masked
    // forms keep every lane; GCC 12 warns about the plain forms' pass-through vectors.
    template <SmallGemmRounding rounding>
    MPTRAIN_SMALL_GEMM_TARGET static Reg rounded(Reg values) {
        if constexpr (rounding == SmallGemmRounding::fp16) {
            return _mm512_maskz_cvtph_ps(
                0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        } else if constexpr (rounding == SmallGemmRounding::bf16) {
            const __m256i words = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values));
            return _mm512_castsi512_ps(
                _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, words), 16));
        } else {
            return values;
        }
    }

    // Tiles of 16 to 24 of the 32 registers: M rows by 8, 4 or 2 columns (or vectors of columns).
    static constexpr int tile_width(int rows) { return rows <= 2 ? 8 : rows <= 4 ? 4 : 2; }
};

#include "backend/cpu/small_gemm_tiles.inc"

#undef MPTRAIN_SMALL_GEMM_TARGET

}  // namespace

void small_gemm_avx512(SmallGemmRounding rounding, const SmallGemmProblem& problem, ThreadPool& pool) {
    switch (rounding) {
        case SmallGemmRounding::none: run_tiles<SmallGemmRounding::none>(problem, pool); return;
        case SmallGemmRounding::bf16: run_tiles<SmallGemmRounding::bf16>(problem, pool); return;
        case SmallGemmRounding::fp16: run_tiles<SmallGemmRounding::fp16>(problem, pool); return;
    }
}

}  // namespace mpt

#endif
