// Single-precision GEMM for the CPU backend: OpenBLAS's cblas_sgemm when built with it and it loads
// (openblas_library.h), otherwise a portable blocked fallback; a few rows or columns of C take
// small_gemm.h where it runs (AVX2 and FMA), else sgemv for one. Row-major;
// C = alpha * op(A) * op(B) + beta * C.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/portable_gemm.h"

namespace mpt {

class ThreadPool;

void cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool);
// Reserves in `pool`'s scratch what cpu_sgemm of this shape will use (nothing through OpenBLAS,
// which keeps its own buffers).
void cpu_sgemm_reserve(int64_t m, int64_t n, int64_t k, ThreadPool& pool);
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
