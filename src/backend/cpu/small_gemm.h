// GEMMs with a few rows (or a few columns) of C: a prediction or a training step on a handful of
// samples, where the weights are read once and nearly nothing is reused. OpenBLAS 0.3.21's sgemm
// packs the whole weight matrix even for one row, and the AMX GEMM packs it into 32-row blocks of
// which it then uses a few rows; both read and write the weights more than once. Here op(A)'s few
// rows are packed (rounded) once, and the weights stream through 16-float AVX-512 vectors (8-float
// AVX2 ones on CPUs without AVX-512), each value rounded to the operands' dtype as it is loaded,
// into fused multiply-adds. Predictions of the seed MLP on 2 and 4 rows took 3.1x and 2.5x less
// time than through OpenBLAS in fp32, and on 1 to 4 rows 1.4-1.9x (bf16) and 3.5-4.4x (fp16) less
// than on AMX tiles; the AVX2 kernels against OpenBLAS's AVX2 ones: bench/NOTES.md.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace mpt {

class ThreadPool;

// The most rows (or columns) of C that small_gemm takes.
constexpr int64_t kSmallGemmMaxRows = 8;

// Whether small_gemm takes C = op(A) . op(B) of m x n over depth k: m or n at most max_rows (and
// kSmallGemmMaxRows), k at least 1. bf16 on AMX tiles beats it from 7 rows as dot products (the
// forward) and from 5 otherwise (CpuBackend::small_gemm_rows); fp32 (OpenBLAS) and fp16 (four tile
// products) only above 8.
bool small_gemm_applies(int64_t m, int64_t n, int64_t k, int64_t max_rows = kSmallGemmMaxRows);
// The kernels small_gemm runs, chosen once: AVX-512 (AVX512F, AVX512BW and AVX512-BF16: Cooper
// Lake, Sapphire Rapids and later; Zen 4 and later) for fp32, bf16 and fp16 operands; else AVX512F
// (Skylake-SP to Ice Lake) for fp32 operands; else AVX2 with FMA (Haswell and Zen 1 on) for fp32
// operands; else none. MPTRAIN_CPU_SMALL_GEMM in the environment (read once): "0" turns it off,
// "avx512f" or "avx2" names the widest kernels it may take (to test them where wider ones run, or
// compare).
enum class SmallGemmKernels { none, avx2, avx512f, avx512 };
SmallGemmKernels small_gemm_kernels();
// "avx512", "avx512f", "avx2" or "none".
const char* small_gemm_kernels_name(SmallGemmKernels kernels);
// Whether it runs here for `operands`.
bool small_gemm_supported(DType operands);
// Why not, in words; empty when it does.
const std::string& small_gemm_unsupported_reason(DType operands);

// Row-major C = alpha * op(A) . op(B) + beta * C, like cblas_sgemm (beta == 0 ignores C's old
// contents, NaN included), with A and B read as `operands`: fp32 as they are; bf16 or fp16 rounded
// to the nearest, ties to even, as they are loaded (bf16 counts fp32 subnormal inputs as zero, as
// the AMX GEMM does; fp16 overflows to Inf). Each product is added into an fp32 sum by a fused
// multiply-add, one rounding per product, each element of C in one fixed order whatever the
// thread count. bf16 dot products (op(B)'s values contiguous over the depth: the forward) are
// summed in pairs by AVX512-BF16's VDPBF16PS instead: each pair of exact products added with two
// roundings, as the AMX tiles and the packed GEMM's dot products add them (results below fp32's
// normal range flushed to zero); half the instructions of rounding, widening and a fused
// multiply-add per product, so 1.4x (floats) and 1.9x (words) faster on 8 rows of the seed MLP's
// first layer on Zen 4 (bench/NOTES.md).
// Only where small_gemm_applies and small_gemm_supported(operands).
void small_gemm(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                ThreadPool& pool);
// Reserves in `pool`'s scratch what small_gemm of this shape will use (see amx_gemm_reserve).
void small_gemm_reserve(int64_t m, int64_t n, int64_t k, ThreadPool& pool);

// The weights read as 16-bit words (weight_words.h): half the bytes of the fp32 values small_gemm
// rounds as it loads them. Whether small_gemm_words runs here for `operands`: bf16 or fp16 with the
// AVX-512 kernels.
bool small_gemm_words_supported(DType operands);
// Row-major C = alpha * A . W^T + beta * C for m <= kSmallGemmMaxRows rows: A [m, k] floats (row
// stride lda), rounded to `operands` as packed; W [n, k] words of `operands` (row stride ldw) as
// write_weight_words writes them. The same bits as small_gemm(operands, false, true, ...) over
// the floats the words were written from. Only where small_gemm_words_supported(operands).
void small_gemm_words(DType operands, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const uint16_t* w, int64_t ldw, float beta, float* c, int64_t ldc, ThreadPool& pool);

}  // namespace mpt
