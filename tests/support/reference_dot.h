// One element of C = op(A) . op(B) in double precision over inputs rounded to a dtype, for the
// GEMM tests: the sum of the products, and the sum of their magnitudes (the scale of a rounding
// bound). A and B are row-major with leading dimensions lda and ldb, as cblas_sgemm takes them.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mpt_test {

struct ReferenceDot {
    double sum = 0.0;
    double magnitude = 0.0;
};

inline ReferenceDot reference_dot(mpt::DType operands, bool transpose_a, bool transpose_b, const std::vector<float>& a,
                                  int64_t lda, const std::vector<float>& b, int64_t ldb, int64_t i, int64_t j,
                                  int64_t k) {
    ReferenceDot dot;
    for (int64_t p = 0; p < k; ++p) {
        const double product =
            static_cast<double>(mpt::round_to(operands, transpose_a ? a[p * lda + i] : a[i * lda + p])) *
            mpt::round_to(operands, transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
        dot.sum += product;
        dot.magnitude += std::fabs(product);
    }
    return dot;
}

}  // namespace mpt_test
