// See portable_gemm.h. The classic blocked GEMM (Goto's layout, as in BLIS and OpenBLAS): C is cut
// into tiles of up to kRowBlock x kColumnBlock, each tile one task on the pool; for every block of
// kDepthBlock products, A's rows and B's columns are packed into contiguous, zero-padded panels (the
// transposes and alpha are applied there), and a register-blocked kernel computes kMicroRows x
// kMicroColumns of C at a time from them. The kernel is compiled for AVX-512, AVX2 and the baseline,
// the widest the CPU has taken, with the same per-element order of operations in each.
#include "backend/cpu/portable_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"

namespace mpt {

namespace {

// 6 x 16 sums: 12 AVX2 registers (6 with AVX-512), leaving room for B's row and A's broadcast.
constexpr int64_t kMicroRows = 6;
constexpr int64_t kMicroColumns = 16;
constexpr int64_t kDepthBlock = 256;   // products per packed block: panels stay in L2
constexpr int64_t kRowBlock = 96;      // a multiple of kMicroRows
constexpr int64_t kColumnBlock = 256;  // a multiple of kMicroColumns

struct Operands {
    bool transpose_a, transpose_b;
    int64_t m, n, k;
    float alpha;
    const float* a;
    int64_t lda;
    const float* b;
    int64_t ldb;
    float beta;
    float* c;
    int64_t ldc;
};

// A tile's packed panels, in the pool's scratch of the thread computing it (grown on its first
// GEMM: steady-state training allocates nothing).
struct Panels {
    float* a;
    float* b;
};

// beta * C's old value, where beta 0 ignores it, NaN included (as BLAS defines it).
inline float scaled_by_beta(float beta, float old_value) { return beta == 0.0f ? 0.0f : beta * old_value; }

// alpha * op(A)[rows, depth] as kMicroRows-row strips, each depth-major: strip[p][r].
void pack_a(const Operands& g, int64_t row0, int64_t rows, int64_t depth0, int64_t depth, float* out) {
    for (int64_t strip = 0; strip < rows; strip += kMicroRows) {
        for (int64_t p = 0; p < depth; ++p) {
            for (int64_t r = 0; r < kMicroRows; ++r) {
                const int64_t i = row0 + strip + r, q = depth0 + p;
                const float value = strip + r >= rows ? 0.0f : g.transpose_a ? g.a[q * g.lda + i] : g.a[i * g.lda + q];
                *out++ = g.alpha * value;
            }
        }
    }
}

// op(B)[depth, columns] as kMicroColumns-column strips, each depth-major: strip[p][t].
void pack_b(const Operands& g, int64_t depth0, int64_t depth, int64_t column0, int64_t columns, float* out) {
    for (int64_t strip = 0; strip < columns; strip += kMicroColumns) {
        for (int64_t p = 0; p < depth; ++p) {
            for (int64_t t = 0; t < kMicroColumns; ++t) {
                const int64_t j = column0 + strip + t, q = depth0 + p;
                *out++ = strip + t >= columns ? 0.0f : g.transpose_b ? g.b[j * g.ldb + q] : g.b[q * g.ldb + j];
            }
        }
    }
}

// kWidth floats as one value (GCC and Clang vector extensions; a vector_size that depends on a
// template parameter is dropped by GCC, hence one specialisation per width).
template <int64_t kWidth>
struct FloatVector;
template <>
struct FloatVector<8> {
    using type = float __attribute__((vector_size(8 * sizeof(float))));
};
template <>
struct FloatVector<16> {
    using type = float __attribute__((vector_size(16 * sizeof(float))));
};

// One tile of C over one depth block from packed panels, with the sums of a micro-tile held as
// vectors of kWidth floats. `first` applies beta (the tile's first depth block); later blocks add to
// what C holds. Every width does each element's multiplies and adds in the same order.
template <int64_t kWidth>
inline __attribute__((always_inline)) void multiply_tile(const float* a_panel, const float* b_panel, int64_t rows,
                                                         int64_t columns, int64_t depth, bool first, float beta,
                                                         float* c, int64_t ldc) {
    using Vector = typename FloatVector<kWidth>::type;
    static_assert(sizeof(Vector) == kWidth * sizeof(float), "a vector of kWidth floats");
    constexpr int64_t kVectors = kMicroColumns / kWidth;
    for (int64_t row_strip = 0; row_strip < rows; row_strip += kMicroRows) {
        const float* a_strip = a_panel + row_strip * depth;
        for (int64_t column_strip = 0; column_strip < columns; column_strip += kMicroColumns) {
            const float* b_strip = b_panel + column_strip * depth;
            Vector sums[kMicroRows][kVectors] = {};
            for (int64_t p = 0; p < depth; ++p) {
                const float* a_values = a_strip + p * kMicroRows;
                const float* b_values = b_strip + p * kMicroColumns;
                for (int64_t v = 0; v < kVectors; ++v) {
                    Vector b_vector;
                    std::memcpy(&b_vector, b_values + kWidth * v, sizeof b_vector);
                    for (int64_t r = 0; r < kMicroRows; ++r) sums[r][v] += a_values[r] * b_vector;
                }
            }
            // Constant indices only, so the sums stay in registers through the loop above.
            float results[kMicroRows][kMicroColumns];
            for (int64_t r = 0; r < kMicroRows; ++r)
                for (int64_t v = 0; v < kVectors; ++v) std::memcpy(&results[r][kWidth * v], &sums[r][v], sizeof(Vector));
            const int64_t valid_rows = std::min(kMicroRows, rows - row_strip);
            const int64_t valid_columns = std::min(kMicroColumns, columns - column_strip);
            for (int64_t r = 0; r < valid_rows; ++r) {
                float* c_row = c + (row_strip + r) * ldc + column_strip;
                for (int64_t t = 0; t < valid_columns; ++t) {
                    const float before = first ? scaled_by_beta(beta, c_row[t]) : c_row[t];
                    c_row[t] = before + results[r][t];
                }
            }
        }
    }
}

// Eight-float sums fit AVX2's 16 registers (12 of them) and SSE's as pairs; GCC moves sixteen-float
// ones through the stack there. AVX-512 holds sixteen floats in one of its 32 registers. The kernel
// is picked by a plain CPU check on first use, not with target_clones: the ifunc resolver that
// makes runs while relocating, before a sanitizer's runtime is up, and crashed TSan builds.
void multiply_tile_baseline(const float* a_panel, const float* b_panel, int64_t rows, int64_t columns, int64_t depth,
                            bool first, float beta, float* c, int64_t ldc) {
    multiply_tile<8>(a_panel, b_panel, rows, columns, depth, first, beta, c, ldc);
}

using MultiplyTile = void (*)(const float*, const float*, int64_t, int64_t, int64_t, bool, float, float*, int64_t);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void multiply_tile_avx2(const float* a_panel, const float* b_panel, int64_t rows,
                                                        int64_t columns, int64_t depth, bool first, float beta,
                                                        float* c, int64_t ldc) {
    multiply_tile<8>(a_panel, b_panel, rows, columns, depth, first, beta, c, ldc);
}

__attribute__((target("avx512f"))) void multiply_tile_avx512(const float* a_panel, const float* b_panel, int64_t rows,
                                                             int64_t columns, int64_t depth, bool first, float beta,
                                                             float* c, int64_t ldc) {
    multiply_tile<16>(a_panel, b_panel, rows, columns, depth, first, beta, c, ldc);
}

#endif

MultiplyTile eight_wide_multiply_tile() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();  // harmless when libgcc's constructor has run, needed when it has not
    if (__builtin_cpu_supports("avx2")) return &multiply_tile_avx2;
#endif
    return &multiply_tile_baseline;
}

MultiplyTile widest_multiply_tile() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &multiply_tile_avx512;
#endif
    return eight_wide_multiply_tile();
}

void compute_tile(const Operands& g, int64_t row0, int64_t rows, int64_t column0, int64_t columns, MultiplyTile multiply,
                  const Panels& panels) {
    float* c_tile = g.c + row0 * g.ldc + column0;
    if (g.k == 0) {  // no products: C = beta * C
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < columns; ++j)
                c_tile[i * g.ldc + j] = scaled_by_beta(g.beta, c_tile[i * g.ldc + j]);
        return;
    }
    for (int64_t depth0 = 0; depth0 < g.k; depth0 += kDepthBlock) {
        const int64_t depth = std::min(kDepthBlock, g.k - depth0);
        pack_a(g, row0, rows, depth0, depth, panels.a);
        pack_b(g, depth0, depth, column0, columns, panels.b);
        multiply(panels.a, panels.b, rows, columns, depth, depth0 == 0, g.beta, c_tile, g.ldc);
    }
}

int64_t tiles_of(int64_t m, int64_t n) {
    return (m + kRowBlock - 1) / kRowBlock * ((n + kColumnBlock - 1) / kColumnBlock);
}

// The calling thread's panels, in its pool scratch.
Panels panels_here(ThreadPool& pool) {
    return Panels{pool.scratch(ScratchUse::portable_a).reserve<float>(kRowBlock * kDepthBlock),
                  pool.scratch(ScratchUse::portable_b).reserve<float>(kColumnBlock * kDepthBlock)};
}

// Every thread's panels, in a loop of their own (the same ranges on the same threads as the loop
// over tiles): running out of memory or budget then stops the GEMM before any of C is written.
void reserve_panels(int64_t m, int64_t n, ThreadPool& pool) {
    pool.parallel_for(tiles_of(m, n), 1, [&](int64_t, int64_t) { panels_here(pool); });
}

void run_portable_sgemm(const Operands& g, MultiplyTile multiply, ThreadPool& pool) {
    const int64_t m = g.m, n = g.n;
    if (m <= 0 || n <= 0) return;
    const int64_t column_tiles = (n + kColumnBlock - 1) / kColumnBlock;
    reserve_panels(m, n, pool);
    // Tiles are independent and each sums its elements' products in one fixed order, so which
    // thread computes a tile changes nothing.
    pool.parallel_for(tiles_of(m, n), 1, [&](int64_t begin, int64_t end) {
        const Panels panels = panels_here(pool);
        for (int64_t tile = begin; tile < end; ++tile) {
            const int64_t row0 = tile / column_tiles * kRowBlock, column0 = tile % column_tiles * kColumnBlock;
            compute_tile(g, row0, std::min(kRowBlock, m - row0), column0, std::min(kColumnBlock, n - column0), multiply,
                         panels);
        }
    });
}

}  // namespace

void portable_sgemm_reserve(int64_t m, int64_t n, ThreadPool& pool) {
    if (m > 0 && n > 0) reserve_panels(m, n, pool);
}

void portable_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool) {
    static const MultiplyTile widest = widest_multiply_tile();
    run_portable_sgemm({transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, widest, pool);
}

void portable_sgemm_eight_wide(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                               int64_t ldc, ThreadPool& pool) {
    static const MultiplyTile eight_wide = eight_wide_multiply_tile();
    run_portable_sgemm({transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, eight_wide, pool);
}

}  // namespace mpt
