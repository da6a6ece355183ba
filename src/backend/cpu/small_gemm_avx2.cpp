// small_gemm's kernels on 8-float AVX2 vectors with FMA (small_gemm_tiles.inc), for CPUs without
// AVX-512: most desktops and laptops. fp32 operands only: such a CPU has no AMX, so the backend
// keeps bf16 and fp16 values already rounded, in fp32, and multiplies them as fp32.
#include "backend/cpu/small_gemm_problem.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/thread_pool.h"

namespace mpt {

namespace {

#define MPTRAIN_SMALL_GEMM_TARGET __attribute__((target("avx2,fma")))

struct Vec {
    using Reg = __m256;
    using Mask = __m256i;
    static constexpr int64_t kLanes = 8;

    // The first `valid` lanes (none when valid <= 0, all from 8 up), as VMASKMOVPS wants them: the
    // sign bit of each 32-bit lane.
    MPTRAIN_SMALL_GEMM_TARGET static Mask mask(int64_t valid) {
        const int clamped = static_cast<int>(std::clamp<int64_t>(valid, 0, kLanes));
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(clamped), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    MPTRAIN_SMALL_GEMM_TARGET static Reg zero() { return _mm256_setzero_ps(); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg load(const float* p) { return _mm256_load_ps(p); }
    // Masked-off lanes read as zero and never fault, like AVX-512's zero-masked load.
    MPTRAIN_SMALL_GEMM_TARGET static Reg load_masked(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg broadcast(float x) { return _mm256_set1_ps(x); }
    MPTRAIN_SMALL_GEMM_TARGET static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
    MPTRAIN_SMALL_GEMM_TARGET static void store(float* p, Reg v) { _mm256_store_ps(p, v); }

    template <SmallGemmRounding rounding>
    MPTRAIN_SMALL_GEMM_TARGET static Reg rounded(Reg values) {
        static_assert(rounding == SmallGemmRounding::none, "the AVX2 kernels take fp32 operands only");
        return values;
    }

    // M rows by 8, 4 or 2 columns (or vectors of columns). Tiles of more than 16 registers (sums,
    // loaded values and one row) spill a few, which measured faster than narrower tiles that do
    // not: on the seed MLP's layers, 1 row by 8 columns took 1.5-1.7 ms against 1.9 by 6, and 8 rows
    // by 2 columns 4.8-5.3 ms against 5.9-6.0 by 1 (and against 5.8-5.9 in two passes of 4 rows).
    static constexpr int tile_width(int rows) { return rows <= 1 ? 8 : rows <= 2 ? 4 : 2; }
};

#include "backend/cpu/small_gemm_tiles.inc"

#undef MPTRAIN_SMALL_GEMM_TARGET

}  // namespace

void small_gemm_avx2(const SmallGemmProblem& problem, ThreadPool& pool) {
    run_tiles<SmallGemmRounding::none>(problem, pool);
}

}  // namespace mpt

#endif
