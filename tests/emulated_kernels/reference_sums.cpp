// See reference_sums.h. Each element's terms are added in the order the header states; the loops
// run over the rows of the arrays read for speed, which changes no element's order.
#include "emulated_kernels/reference_sums.h"

#include <cmath>

namespace mpt_test::emulated_kernels {

void product_row_with_transposed(const float* a, const float* b, int64_t depth, int64_t columns, int64_t r,
                                 double* into) {
    const float* row = a + r * depth;
    for (int64_t j = 0; j < columns; ++j) {
        const float* column = b + j * depth;
        double sum = 0.0;
        for (int64_t k = 0; k < depth; ++k) sum += static_cast<double>(row[k]) * column[k];
        into[j] = sum;
    }
}

void product_row(const float* a, const float* b, int64_t depth, int64_t columns, int64_t r, double* into) {
    for (int64_t j = 0; j < columns; ++j) into[j] = 0.0;
    for (int64_t k = 0; k < depth; ++k) {
        const double factor = a[r * depth + k];
        const float* b_row = b + k * columns;
        for (int64_t j = 0; j < columns; ++j) into[j] += factor * b_row[j];
    }
}

void fma_gradient_row(const float* dz, const float* x, int64_t rows, int64_t out, int64_t in, int64_t o, float* into) {
    for (int64_t i = 0; i < in; ++i) into[i] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float factor = dz[r * out + o];
        const float* x_row = x + r * in;
        for (int64_t i = 0; i < in; ++i) into[i] = std::fma(factor, x_row[i], into[i]);
    }
}

void double_gradient_row(const float* dz, const float* x, int64_t rows, int64_t out, int64_t in, int64_t o,
                         double* sums, double* magnitudes) {
    for (int64_t i = 0; i < in; ++i) sums[i] = magnitudes[i] = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const double factor = dz[r * out + o];
        const float* x_row = x + r * in;
        for (int64_t i = 0; i < in; ++i) {
            const double term = factor * x_row[i];
            sums[i] += term;
            magnitudes[i] += std::fabs(term);
        }
    }
}

}  // namespace mpt_test::emulated_kernels
