// Single-precision GEMM for the CPU backend: OpenBLAS's cblas_sgemm when built with it and it loads
// (openblas_library.h), otherwise a portable blocked fallback. Row-major; C = alpha * op(A) * op(B) + beta * C.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/portable_gemm.h"

namespace mpt {

class ThreadPool;

void cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool);
// A GEMM with one row or one column of C is a matrix-vector product, here in cblas_sgemv's terms
// (row-major): y = alpha * op(matrix) . vector + beta * y, where matrix is `rows` x `columns` with
// leading dimension `ld`, and op transposes it when `transpose` (y then has `columns` elements,
// else `rows`).
struct GemvProblem {
    bool transpose;
    int64_t rows, columns;
    const float* matrix;
    int64_t ld;
    const float* vector;
    int64_t vector_stride;
    float* y;
    int64_t y_stride;
};
// Whether C = alpha * op(A) . op(B) + beta * C (row-major, m x n, depth k) has one row or one column
// and a depth over 1; if so, `gemv` is that product.
bool gemm_as_gemv(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc, GemvProblem& gemv);

// Sets the BLAS library's thread count (process-wide in OpenBLAS).
void cpu_gemm_set_threads(int threads);
// "portable", or "openblas " and the kernels OpenBLAS runs ("openblas SkylakeX").
std::string cpu_gemm_library();
// Empty, or why the GEMMs run several times slower than this CPU allows: OpenBLAS could not be
// loaded, or it runs kernels for an older CPU (SSE3-only "Prescott" on a CPU with AVX2, FMA and even
// AVX-512) because the user's OPENBLAS_CORETYPE named them or something loaded OpenBLAS before
// mptrain could choose; then with the OPENBLAS_CORETYPE setting that fixes it.
std::string cpu_gemm_kernel_warning();

}  // namespace mpt
