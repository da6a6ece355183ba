// What small_gemm.cpp hands to the kernels of one instruction set (small_gemm_avx512.cpp,
// small_gemm_avx2.cpp): the product already put with the few rows first, and its operand rounding.
#pragma once

#include <cstdint>

namespace mpt {

class ThreadPool;

enum class SmallGemmRounding { none, bf16, fp16 };

// The floats a packed row of op(A') takes with `lanes`-float vectors: whole vectors, and one more
// (rows a multiple of 4 KiB apart would all fall in one L1 set).
inline int64_t small_gemm_padded_depth(int64_t depth, int64_t lanes) { return (depth + lanes - 1) / lanes * lanes + lanes; }
// The widest kernels' lanes: a reservation for them covers every instruction set's.
constexpr int64_t kSmallGemmWidestLanes = 16;

// C' = alpha * op(A') . op(B') + beta * C' with `rows` (at most kSmallGemmMaxRows) rows: op(A')(i, q)
// is a[i * a_row + q * a_depth]; op(B')(q, j) is b[j * b_column + q * b_depth], one of which strides
// is 1; C'(i, j) is c[i * c_row + j * c_column].
//
// The other side is either floats `b` (rounded as loaded) or, with b_depth == 1 only, 16-bit words
// `b_words` of the rounding's dtype (bf16 or fp16 bits, widened as loaded), element (q, j) at
// b_words[j * b_column + q]; the unused one is null.
struct SmallGemmProblem {
    int64_t rows, columns, depth;
    const float* a;
    int64_t a_row, a_depth;
    const float* b;
    const uint16_t* b_words;
    int64_t b_column, b_depth;
    float* c;
    int64_t c_row, c_column;
    float alpha, beta;
};

// The 16-lane kernels: any rounding; b_words with bf16 or fp16 only. Only where cpu_has_avx512_bf16.
void small_gemm_avx512(SmallGemmRounding rounding, const SmallGemmProblem& problem, ThreadPool& pool);

// The 16-lane kernels: fp32 operands only (SmallGemmRounding::none). Only where cpu_has_avx512f.
void small_gemm_avx512f(const SmallGemmProblem& problem, ThreadPool& pool);
// The 8-lane kernels: fp32 operands only (SmallGemmRounding::none). Only where cpu_has_avx2_fma.
void small_gemm_avx2(const SmallGemmProblem& problem, ThreadPool& pool);

}  // namespace mpt
