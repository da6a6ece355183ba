// The portable GEMM: what the CPU backend runs when OpenBLAS is not there (not built with, or not
// installed where libmptrain.so runs). Always built, so it is always tested.
#pragma once

#include <cstdint>

namespace mpt {

class ThreadPool;

// Row-major C = alpha * op(A) * op(B) + beta * C, like cblas_sgemm (beta == 0 ignores C's old
// contents, NaN included). Every element of C is summed in one fixed order, with no fused
// multiply-add, whatever the thread count and whichever kernel runs: the results depend on the
// inputs alone. Runs the widest kernel this CPU has (sixteen floats with AVX-512, else eight).
void portable_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool);
// Reserves in `pool`'s scratch what portable_sgemm of this shape will use (every thread's panels;
// see amx_gemm_reserve).
void portable_sgemm_reserve(int64_t m, int64_t n, ThreadPool& pool);
// The same with the eight-float kernel on any CPU, for tests that compare the kernels.
void portable_sgemm_eight_wide(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                               int64_t ldc, ThreadPool& pool);

}  // namespace mpt
