// The sums the kernels' cases expect (tests/emulated_kernels/), over host arrays of floats stored by
// rows, one row of the result a call. They live in a file of their own, which the race-checked build
// compiles without ThreadSanitizer (tests/CMakeLists.txt): their loops read as much as the kernels do,
// of memory that only the test touches, and took a sixth of that program's time instrumented.
#pragma once

#include <cstdint>

namespace mpt_test::emulated_kernels {

// Row r of A B^T in double (a: rows x depth, b: columns x depth): into[j] = the sum over k ascending
// of a[r][k] * b[j][k].
void product_row_with_transposed(const float* a, const float* b, int64_t depth, int64_t columns, int64_t r,
                                 double* into);
// Row r of A B in double (a: rows x depth, b: depth x columns): into[j] = the sum over k ascending of
// a[r][k] * b[k][j].
void product_row(const float* a, const float* b, int64_t depth, int64_t columns, int64_t r, double* into);
// Row o of the weight gradient dZ^T X as the fused SGD kernels state they sum it (dz: rows x out,
// x: rows x in): into[i] = fmaf of dz[r][o] and x[r][i] over the rows r ascending, from 0.
void fma_gradient_row(const float* dz, const float* x, int64_t rows, int64_t out, int64_t in, int64_t o, float* into);
// The same row in double, and beside each element the sum of its terms' magnitudes.
void double_gradient_row(const float* dz, const float* x, int64_t rows, int64_t out, int64_t in, int64_t o,
                         double* sums, double* magnitudes);

}  // namespace mpt_test::emulated_kernels
