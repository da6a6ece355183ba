// The matrix-vector products of bf16 and fp16 layers on an AMX CPU (low_precision_gemv.h), which
// the CPU backend uses for GEMMs with one row or one column of C: against a double-precision
// reference over rounded inputs, for each GEMM transpose combination through gemm_as_gemv, with
// padded strides, ragged lengths and both work splits; the same bits on any thread count; beta 0
// ignores NaN; and the rounding itself (exact fp16 products, bf16's subnormal inputs as zero,
// fp16 overflow to Inf). Skipped, with the reason, where the AMX GEMM is unavailable.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/low_precision_gemv.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

using namespace mpt;

namespace {

bool available_or_skip() {
    if (amx_gemm_available()) return true;
    MESSAGE("low-precision GEMV not tested (it runs only where the AMX GEMM does): " << amx_gemm_unavailable_reason());
    return false;
}

// C = alpha * op(A) . op(B) + beta * C with one row or one column, through gemm_as_gemv.
void run_gemm(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
              const std::vector<float>& a, int64_t lda, const std::vector<float>& b, int64_t ldb, float beta,
              std::vector<float>& c, int64_t ldc, ThreadPool& pool) {
    GemvProblem gemv;
    REQUIRE(gemm_as_gemv(transpose_a, transpose_b, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, gemv));
    low_precision_gemv(dtype, gemv, alpha, beta, pool);
}

// Every transpose combination of an m x n product (m or n is 1) against the reference; returns C
// as computed on `threads` threads for the last combination, for the caller to compare.
std::vector<float> check_against_reference(DType dtype, int threads, int64_t m, int64_t n, int64_t k, float beta) {
    ThreadPool pool(threads);
    std::mt19937 generator(static_cast<unsigned>(m * 131 + n * 17 + k));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> last;
    for (bool transpose_a : {false, true})
        for (bool transpose_b : {false, true}) {
            // Padded leading dimensions: a stride mistake reads values that are not the operands.
            const int64_t lda = (transpose_a ? m : k) + 3, ldb = (transpose_b ? k : n) + 5, ldc = n + 2;
            std::vector<float> a(static_cast<size_t>((transpose_a ? k : m) * lda)),
                b(static_cast<size_t>((transpose_b ? n : k) * ldb)), c(static_cast<size_t>(m * ldc));
            for (auto* values : {&a, &b, &c})
                for (float& v : *values) v = uniform(generator);
            const std::vector<float> before = c;
            if (beta == 0.0f)
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = NAN;  // to be ignored
            const float alpha = -0.75f;
            run_gemm(dtype, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
            int64_t beyond_bound = 0, padding_changed = 0;
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < ldc; ++j) {
                    if (j >= n) {
                        padding_changed += c[i * ldc + j] != before[i * ldc + j];
                        continue;
                    }
                    double sum = 0.0, magnitude = 0.0;
                    for (int64_t p = 0; p < k; ++p) {
                        const double product =
                            static_cast<double>(round_to(dtype, transpose_a ? a[p * lda + i] : a[i * lda + p])) *
                            round_to(dtype, transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
                        sum += product;
                        magnitude += std::fabs(product);
                    }
                    const double old = beta == 0.0f ? 0.0 : before[i * ldc + j];
                    const double expected = alpha * sum + beta * old;
                    // Exact products, k fp32 roundings in the sum, then alpha, beta and their sum.
                    const double allowed = (static_cast<double>(k) + 3.0) * 0x1p-24 *
                                           (std::fabs(alpha) * magnitude + std::fabs(beta * old));
                    beyond_bound += !(std::fabs(c[i * ldc + j] - expected) <= allowed);
                }
            CAPTURE(dtype_name(dtype));
            CAPTURE(transpose_a);
            CAPTURE(transpose_b);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CHECK(beyond_bound == 0);
            CHECK(padding_changed == 0);
            last = c;
        }
    return last;
}

}  // namespace

TEST_CASE("the low-precision GEMV matches a double reference over rounded inputs, one row or one column of C") {
    if (!available_or_skip()) return;
    for (DType dtype : {DType::bf16, DType::fp16})
        for (float beta : {0.0f, 0.5f}) {
            // Ragged lengths (not multiples of 4 rows, 16 lanes or 128 columns), tiny and deep depths.
            check_against_reference(dtype, 1, 1, 37, 2, beta);
            check_against_reference(dtype, 1, 1, 131, 257, beta);
            check_against_reference(dtype, 1, 131, 1, 257, beta);
            check_against_reference(dtype, 1, 1, 1, 300, beta);
            // Large enough to be split across threads.
            check_against_reference(dtype, 2, 1, 1000, 700, beta);
            check_against_reference(dtype, 2, 1000, 1, 700, beta);
        }
}

TEST_CASE("the low-precision GEMV gives the same bits on 1, 2 and 3 threads") {
    if (!available_or_skip()) return;
    for (DType dtype : {DType::bf16, DType::fp16})
        for (int64_t rows : {int64_t{1}, int64_t{1000}}) {
            const int64_t columns = rows == 1 ? 1000 : 1;
            const std::vector<float> one = check_against_reference(dtype, 1, rows, columns, 900, 0.5f);
            CHECK(check_against_reference(dtype, 2, rows, columns, 900, 0.5f) == one);
            CHECK(check_against_reference(dtype, 3, rows, columns, 900, 0.5f) == one);
        }
}

TEST_CASE("the low-precision GEMV rounds as the AMX GEMM does: exact fp16 products, bf16 subnormals as zero") {
    if (!available_or_skip()) return;
    ThreadPool pool(1);
    const auto dot = [&](DType dtype, std::vector<float> a, std::vector<float> b) {
        std::vector<float> c = {0.0f};
        run_gemm(dtype, false, false, 1, 1, static_cast<int64_t>(a.size()), 1.0f, a, static_cast<int64_t>(a.size()), b,
                 1, 0.0f, c, 1, pool);
        return c[0];
    };
    // Exact in fp16, not in bf16: the fp16 product carries all 11 bits of each.
    const float x = 1.0f + 0x1p-10f, y = 1.0f + 0x1p-9f + 0x1p-10f;
    CHECK(dot(DType::fp16, {x, 0.0f}, {y, 0.0f}) == x * y);
    CHECK(dot(DType::bf16, {x, 0.0f}, {y, 0.0f}) == 1.0f);  // both round to 1 in bf16
    // fp16 keeps its subnormals; bf16 counts fp32 subnormal inputs as zero, as TDPBF16PS does.
    CHECK(dot(DType::fp16, {0x1p-24f, 0.0f}, {1.0f, 0.0f}) == 0x1p-24f);
    CHECK(dot(DType::bf16, {1e-40f, 1.0f}, {1e38f, 1.0f}) == 1.0f);
    // Above fp16's largest value: Inf.
    CHECK(std::isinf(dot(DType::fp16, {70000.0f, 0.0f}, {1.0f, 0.0f})));
}
