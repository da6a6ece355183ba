// See small_gemm.h. The problem is first put as C' = op(A') . op(B') with C' having the few rows
// (C itself, or C^T = op(B)^T . op(A)^T when C has few columns); the kernels of one instruction
// set then run it (small_gemm_tiles.inc, compiled twice in small_gemm_avx512.cpp and once in
// small_gemm_avx2.cpp).
#include "backend/cpu/small_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/small_gemm_problem.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace mpt {

bool small_gemm_applies(int64_t m, int64_t n, int64_t k, int64_t max_rows) {
    const int64_t limit = std::min(max_rows, kSmallGemmMaxRows);
    return m > 0 && n > 0 && k > 0 && (m <= limit || n <= limit);
}

namespace {

struct Support {
    SmallGemmKernels kernels = SmallGemmKernels::none;
    std::string reason;       // why none
    std::string fp32_reason;  // why only fp32 operands, when so
};

Support detect_support() {
    const char* setting = std::getenv("MPTRAIN_CPU_SMALL_GEMM");
    const std::string chosen = setting ? setting : "";
    if (chosen == "0") return {SmallGemmKernels::none, "MPTRAIN_CPU_SMALL_GEMM=0", {}};
#if defined(__x86_64__) && defined(__GNUC__)
    // The setting names the widest kernels allowed: "avx2", or "avx512f" (fp32 only, 16 lanes).
    const bool cap_avx2 = chosen == "avx2";
    const bool cap_avx512f = chosen == "avx512f";
    if (!cap_avx2 && !cap_avx512f && cpu_has_avx512_bf16()) return {SmallGemmKernels::avx512, {}, {}};
    const std::string why_fp32 =
        cpu_has_avx512_bf16() ? "MPTRAIN_CPU_SMALL_GEMM=" + chosen : "this CPU lacks AVX512-BF16";
    if (!cap_avx2 && cpu_has_avx512f())
        return {SmallGemmKernels::avx512f, {}, "the AVX512F kernels take fp32 operands only (" + why_fp32 + ")"};
    if (cpu_has_avx2_fma())
        return {SmallGemmKernels::avx2, {}, "the AVX2 kernels take fp32 operands only (" + why_fp32 + ")"};
    return {SmallGemmKernels::none, "this CPU lacks AVX2 and FMA", {}};
#else
    return {SmallGemmKernels::none, "the small-batch GEMM needs x86-64 and GCC or Clang", {}};
#endif
}

const Support& support() {
    static const Support answer = detect_support();
    return answer;
}

// C = alpha * op(A) . op(B) + beta * C put as C' = op(A') . op(B') with C' having the few rows.
SmallGemmProblem with_few_rows_first(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                                     int64_t ldc) {
    // An operand by its outer index x (C's row for op(A), C's column for op(B)) and the depth q:
    // element (x, q) at data[x * outer + q * depth].
    struct Operand {
        const float* data;
        int64_t outer, depth;
    };
    const Operand a_side{a, transpose_a ? 1 : lda, transpose_a ? lda : 1};
    const Operand b_side{b, transpose_b ? ldb : 1, transpose_b ? 1 : ldb};
    // C' = C, or C' = C^T = op(B)^T . op(A)^T when C has the few columns.
    const bool few_rows = m <= kSmallGemmMaxRows;
    const Operand& rows_side = few_rows ? a_side : b_side;
    const Operand& other = few_rows ? b_side : a_side;
    SmallGemmProblem p{};
    p.rows = few_rows ? m : n;
    p.columns = few_rows ? n : m;
    p.depth = k;
    p.a = rows_side.data;
    p.a_row = rows_side.outer;
    p.a_depth = rows_side.depth;
    p.b = other.data;
    p.b_column = other.outer;
    p.b_depth = other.depth;
    p.c = c;
    p.c_row = few_rows ? ldc : 1;
    p.c_column = few_rows ? 1 : ldc;
    p.alpha = alpha;
    p.beta = beta;
    return p;
}

SmallGemmRounding rounding_of(DType operands) {
    switch (operands) {
        case DType::bf16: return SmallGemmRounding::bf16;
        case DType::fp16: return SmallGemmRounding::fp16;
        case DType::fp32: break;
    }
    return SmallGemmRounding::none;
}

}  // namespace

SmallGemmKernels small_gemm_kernels() { return support().kernels; }

const char* small_gemm_kernels_name(SmallGemmKernels kernels) {
    switch (kernels) {
        case SmallGemmKernels::avx512: return "avx512";
        case SmallGemmKernels::avx512f: return "avx512f";
        case SmallGemmKernels::avx2: return "avx2";
        case SmallGemmKernels::none: break;
    }
    return "none";
}

// Asked by every GEMM, so it builds no string: a copied reason allocated inside each step on CPUs
// without the kernels.
bool small_gemm_supported(DType operands) {
    switch (support().kernels) {
        case SmallGemmKernels::avx512: return true;
        case SmallGemmKernels::avx512f:
        case SmallGemmKernels::avx2: return operands == DType::fp32;
        case SmallGemmKernels::none: break;
    }
    return false;
}

const std::string& small_gemm_unsupported_reason(DType operands) {
    static const std::string supported;
    if (small_gemm_supported(operands)) return supported;
    return support().kernels == SmallGemmKernels::none ? support().reason : support().fp32_reason;
}

void small_gemm_reserve(int64_t m, int64_t n, int64_t k, ThreadPool& pool) {
    if (!small_gemm_applies(m, n, k)) return;
    const int64_t rows = m <= kSmallGemmMaxRows ? m : n;
    pool.scratch(ScratchUse::small_gemm_rows).reserve<float>(rows * small_gemm_padded_depth(k, kSmallGemmWidestLanes));
}

void small_gemm(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                ThreadPool& pool) {
    if (!small_gemm_applies(m, n, k) || !small_gemm_supported(operands))
        fail(MPT_STATUS_INTERNAL, "small_gemm called outside its case or where it cannot run");
    const SmallGemmProblem p =
        with_few_rows_first(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#if defined(__x86_64__) && defined(__GNUC__)
    switch (support().kernels) {
        case SmallGemmKernels::avx2: small_gemm_avx2(p, pool); return;
        case SmallGemmKernels::avx512f: small_gemm_avx512f(p, pool); return;
        case SmallGemmKernels::avx512:
        case SmallGemmKernels::none: break;
    }
    small_gemm_avx512(rounding_of(operands), p, pool);
#else
    (void)p;
#endif
}

bool small_gemm_words_supported(DType operands) {
    return operands != DType::fp32 && support().kernels == SmallGemmKernels::avx512;
}

void small_gemm_words(DType operands, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const uint16_t* w, int64_t ldw, float beta, float* c, int64_t ldc, ThreadPool& pool) {
    if (m <= 0 || m > kSmallGemmMaxRows || n <= 0 || k <= 0 || !small_gemm_words_supported(operands))
        fail(MPT_STATUS_INTERNAL, "small_gemm_words called outside its case or where it cannot run");
    // The words stand where op(B) = W^T's floats would: few rows of C, so C' = C.
    SmallGemmProblem p = with_few_rows_first(false, true, m, n, k, alpha, a, lda, nullptr, ldw, beta, c, ldc);
    p.b_words = w;
#if defined(__x86_64__) && defined(__GNUC__)
    small_gemm_avx512(rounding_of(operands), p, pool);
#else
    (void)p, (void)pool;
#endif
}

}  // namespace mpt
