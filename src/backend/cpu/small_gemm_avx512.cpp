// small_gemm's kernels on 16-float AVX-512 vectors (small_gemm_tiles.inc), compiled twice:
// - for CPUs with AVX512-BF16 (Cooper Lake, Sapphire Rapids and later; Zen 4 and later), any
//   rounding, as the AMX GEMM's packing rounds (avx512_rounding.h);
// - for CPUs with AVX512F only (Skylake-SP to Ice Lake servers), fp32 operands only: such a CPU has
//   no AMX, so the backend keeps bf16 and fp16 values already rounded, in fp32. Their 32 registers
//   hold tiles twice as wide as AVX2's (8 rows of the seed MLP: 2.3-2.6 ms against AVX2's 4.2-5.0
//   and OpenBLAS's SkylakeX sgemm at 3.7-4.3; bench/NOTES.md).
#include "backend/cpu/small_gemm_problem.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/avx512_rounding.h"
#include "core/thread_pool.h"

namespace mpt {

namespace {

#define MPTRAIN_AVX512F_TARGET __attribute__((target("avx512f,fma")))

// What both compilations share: 16 lanes and their masks, the loads, stores and fused multiply-add.
// AVX512F alone, so its functions inline into either target's kernels.
struct Lanes512 {
    using Reg = __m512;
    using Mask = __mmask16;
    static constexpr int64_t kLanes = 16;

    // The first `valid` lanes (none when valid <= 0, all from 16 up).
    static Mask mask(int64_t valid) {
        return static_cast<Mask>(valid >= kLanes ? 0xFFFF : valid <= 0 ? 0 : (1u << valid) - 1);
    }
    MPTRAIN_AVX512F_TARGET static Reg zero() { return _mm512_setzero_ps(); }
    MPTRAIN_AVX512F_TARGET static Reg load(const float* p) { return _mm512_load_ps(p); }
    MPTRAIN_AVX512F_TARGET static Reg load_masked(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
    MPTRAIN_AVX512F_TARGET static Reg broadcast(float x) { return _mm512_set1_ps(x); }
    MPTRAIN_AVX512F_TARGET static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
    MPTRAIN_AVX512F_TARGET static void store(float* p, Reg v) { _mm512_store_ps(p, v); }

    // Tiles of 16 to 24 of the 32 registers: M rows by 8, 4 or 2 columns (or vectors of columns).
    static constexpr int tile_width(int rows) { return rows <= 2 ? 8 : rows <= 4 ? 4 : 2; }
};

namespace any_rounding {

#define MPTRAIN_SMALL_GEMM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

struct Vec : Lanes512 {
    // Values rounded to the operands' dtype and widened back to fp32, exactly.
    template <SmallGemmRounding rounding>
    MPTRAIN_SMALL_GEMM_TARGET static Reg rounded(Reg values) {
        if constexpr (rounding == SmallGemmRounding::fp16) {
            return rounded_to_fp16(values);
        } else if constexpr (rounding == SmallGemmRounding::bf16) {
            return rounded_to_bf16(values);
        } else {
            return values;
        }
    }

    // bf16 dot products as AVX512-BF16's pairs (small_gemm_tiles.inc's dot_pairs_columns): 32 bf16
    // words a register, in depth order.
    static constexpr bool kBf16Pairs = true;
    using Pairs = __m512i;
    // The first `valid` of 32 floats (the others read as zero, never fault), rounded to bf16 words as
    // bf16_words rounds them.
    MPTRAIN_SMALL_GEMM_TARGET static Pairs load_pairs(const float* p, int64_t valid) {
        const __m512 low = _mm512_maskz_loadu_ps(mask(valid), p);
        const __m512 high = _mm512_maskz_loadu_ps(mask(valid - kLanes), p + kLanes);
        return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
    }
    // The first `valid` of 32 bf16 words (the others read as zero, never fault).
    MPTRAIN_SMALL_GEMM_TARGET static Pairs load_pairs(const uint16_t* p, int64_t valid) {
        const __mmask32 words = valid >= 32 ? ~__mmask32{0} : (__mmask32{1} << valid) - 1;
        return _mm512_maskz_loadu_epi16(words, p);
    }
    MPTRAIN_SMALL_GEMM_TARGET static Pairs load_packed_pairs(const uint16_t* p) { return _mm512_loadu_si512(p); }
    MPTRAIN_SMALL_GEMM_TARGET static void store_packed_pairs(uint16_t* p, Pairs words) {
        _mm512_storeu_si512(p, words);
    }
    // sums + each lane's two products (exact), two roundings, results below fp32's normal range
    // flushed to zero (VDPBF16PS).
    MPTRAIN_SMALL_GEMM_TARGET static Reg dot_pairs(Reg sums, Pairs a, Pairs b) {
        return _mm512_dpbf16_ps(sums, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
    }

    // Up to 16 bf16 or fp16 words (the masked-off ones read as zero, never fault), exactly as floats.
    template <SmallGemmRounding rounding>
    MPTRAIN_SMALL_GEMM_TARGET static Reg widened(const uint16_t* p, Mask m) {
        const __m256i words = _mm256_maskz_loadu_epi16(m, p);
        if constexpr (rounding == SmallGemmRounding::fp16) {
            return floats_of_fp16(words);
        } else {
            static_assert(rounding == SmallGemmRounding::bf16, "words are bf16 or fp16");
            return floats_of_bf16(words);
        }
    }
};

#include "backend/cpu/small_gemm_tiles.inc"

#undef MPTRAIN_SMALL_GEMM_TARGET

}  // namespace any_rounding

namespace fp32_only {

#define MPTRAIN_SMALL_GEMM_TARGET MPTRAIN_AVX512F_TARGET

struct Vec : Lanes512 {
    template <SmallGemmRounding rounding>
    MPTRAIN_SMALL_GEMM_TARGET static Reg rounded(Reg values) {
        static_assert(rounding == SmallGemmRounding::none, "the AVX512F kernels take fp32 operands only");
        return values;
    }
};

#include "backend/cpu/small_gemm_tiles.inc"

#undef MPTRAIN_SMALL_GEMM_TARGET

}  // namespace fp32_only

#undef MPTRAIN_AVX512F_TARGET

}  // namespace

void small_gemm_avx512(SmallGemmRounding rounding, const SmallGemmProblem& problem, ThreadPool& pool) {
    using any_rounding::run_tiles;
    const bool words = problem.b_words != nullptr;
    switch (rounding) {
        case SmallGemmRounding::none: run_tiles<SmallGemmRounding::none>(problem, pool); return;
        case SmallGemmRounding::bf16:
            if (words) run_tiles<SmallGemmRounding::bf16, uint16_t>(problem, pool);
            else run_tiles<SmallGemmRounding::bf16>(problem, pool);
            return;
        case SmallGemmRounding::fp16:
            if (words) run_tiles<SmallGemmRounding::fp16, uint16_t>(problem, pool);
            else run_tiles<SmallGemmRounding::fp16>(problem, pool);
            return;
    }
}


void small_gemm_avx512f(const SmallGemmProblem& problem, ThreadPool& pool) {
    fp32_only::run_tiles<SmallGemmRounding::none>(problem, pool);
}

}  // namespace mpt

#endif
