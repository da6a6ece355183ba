// See small_gemm.h. The problem is first put as C' = op(A') . op(B') with C' having the few rows
// (C itself, or C^T = op(B)^T . op(A)^T when C has few columns). op(A')'s rows are packed, rounded
// and zero-padded to whole vectors, into a per-thread buffer. The other side is read where it lies:
// - when its values for one column of C' are contiguous over the depth (the forward's weights),
//   each element of C' is a dot product: R columns at a time share each load of the packed rows,
//   over the depth in lanes of 16, which are then added in lane order;
// - otherwise its values for one depth are contiguous over C's columns (the input gradient's
//   weights): 16 V columns at a time are summed over the depth in order, each packed value
//   broadcast against them.
// The tiles (M rows by R columns, or M by V vectors) keep every sum in registers; the column
// ranges are split across the pool.
#include "backend/cpu/small_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "memory/host_block.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MPTRAIN_SMALL_GEMM_BUILD 1
#include <immintrin.h>
#endif

namespace mpt {

bool small_gemm_applies(int64_t m, int64_t n, int64_t k, int64_t max_rows) {
    const int64_t limit = std::min(max_rows, kSmallGemmMaxRows);
    return m > 0 && n > 0 && k > 0 && (m <= limit || n <= limit);
}

namespace {

struct Support {
    bool supported = false;
    std::string reason;
};

Support detect_support() {
    if (const char* setting = std::getenv("MPTRAIN_CPU_SMALL_GEMM"); setting && std::strcmp(setting, "0") == 0)
        return {false, "MPTRAIN_CPU_SMALL_GEMM=0"};
#if defined(MPTRAIN_SMALL_GEMM_BUILD)
    if (!cpu_has_avx512_bf16()) return {false, "this CPU lacks AVX512F, AVX512BW or AVX512-BF16"};
    return {true, {}};
#else
    return {false, "the small-batch GEMM needs x86-64 and GCC or Clang"};
#endif
}

const Support& support() {
    static const Support answer = detect_support();
    return answer;
}

}  // namespace

bool small_gemm_supported() { return support().supported; }
const std::string& small_gemm_unsupported_reason() { return support().reason; }

#if defined(MPTRAIN_SMALL_GEMM_BUILD)

namespace {

#define MPTRAIN_SMALL_GEMM_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))

constexpr int64_t kLanes = 16;
constexpr int64_t kWorkPerTask = int64_t{1} << 16;  // multiply-adds below which a range stays on one thread
constexpr int64_t kPrefetchAhead = 256;             // floats (1 KiB) ahead in each streamed row

enum class Rounding { none, bf16, fp16 };

// The first `valid` lanes (none when valid <= 0, all from 16 up).
inline __mmask16 lanes_mask(int64_t valid) {
    return static_cast<__mmask16>(valid >= kLanes ? 0xFFFF : valid <= 0 ? 0 : (1u << valid) - 1);
}

// Values rounded to the operands' dtype and widened back to fp32, exactly. The zero-masked forms
// keep every lane; GCC 12 warns about the plain forms' pass-through vectors.
template <Rounding rounding>
MPTRAIN_SMALL_GEMM_TARGET inline __m512 rounded(__m512 values) {
    if constexpr (rounding == Rounding::fp16) {
        return _mm512_maskz_cvtph_ps(
            0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if constexpr (rounding == Rounding::bf16) {
        const __m256i words = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values));
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, words), 16));
    } else {
        return values;
    }
}

// The lanes' sum, in lane order (written out: GCC 12 warns inside _mm512_reduce_add_ps).
MPTRAIN_SMALL_GEMM_TARGET inline float sum_lanes(__m512 values) {
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, values);
    float sum = 0.0f;
    for (float lane : lanes) sum += lane;
    return sum;
}

// C' = op(A') . op(B') with `rows` (at most kSmallGemmMaxRows) rows: C'(i, j) is
// c[i * c_row + j * c_column]; op(B')(q, j) is b[j * b_column + q * b_depth], one of which strides
// is 1.
struct Problem {
    int64_t rows, columns, depth;
    const float* packed;  // op(A') rounded: `rows` rows padded_depth values apart, zero past `depth`
    int64_t padded_depth;
    const float* b;
    int64_t b_column, b_depth;
    float* c;
    int64_t c_row, c_column;
    float alpha, beta;
};

inline void store(const Problem& p, int64_t i, int64_t j, float sum) {
    float& out = p.c[i * p.c_row + j * p.c_column];
    out = p.beta == 0.0f ? p.alpha * sum : p.alpha * sum + p.beta * out;
}

// Columns [first, last) of C' as dot products (b_depth == 1), R columns at a time. A tile past the
// last column repeats that column's loads; those sums are not stored.
template <int M, int R, Rounding rounding>
MPTRAIN_SMALL_GEMM_TARGET void dot_columns(const Problem& p, int64_t first, int64_t last) {
    for (int64_t j = first; j < last; j += R) {
        const int64_t count = std::min<int64_t>(R, last - j);
        const float* columns[R];
        const float* next_columns[R];
        for (int r = 0; r < R; ++r) {
            columns[r] = p.b + (j + std::min<int64_t>(r, count - 1)) * p.b_column;
            next_columns[r] = p.b + std::min(last - 1, j + R + r) * p.b_column;
        }
        __m512 sums[R][M];
        for (int r = 0; r < R; ++r)
            for (int i = 0; i < M; ++i) sums[r][i] = _mm512_setzero_ps();
        for (int64_t q = 0; q < p.depth; q += kLanes) {
            const __mmask16 mask = lanes_mask(p.depth - q);
            __m512 values[R];
            for (int r = 0; r < R; ++r) {
                // Prefetches past the end of a column are harmless: they never fault.
                _mm_prefetch(reinterpret_cast<const char*>(columns[r] + q + kPrefetchAhead), _MM_HINT_T0);
                // With four columns or fewer at a time, the next tile's too: more rows in flight
                // (8 rows of C over the seed MLP's first layer: 2.5 -> 1.9 ms).
                if constexpr (R <= 4)
                    _mm_prefetch(reinterpret_cast<const char*>(next_columns[r] + q), _MM_HINT_T1);
                values[r] = rounded<rounding>(_mm512_maskz_loadu_ps(mask, columns[r] + q));
            }
            for (int i = 0; i < M; ++i) {
                const __m512 row = _mm512_load_ps(p.packed + i * p.padded_depth + q);
                for (int r = 0; r < R; ++r) sums[r][i] = _mm512_fmadd_ps(values[r], row, sums[r][i]);
            }
        }
        for (int r = 0; r < count; ++r)
            for (int i = 0; i < M; ++i) store(p, i, j + r, sum_lanes(sums[r][i]));
    }
}

// Columns [first, last) of C' summed over the depth in order (b_column == 1), 16 V at a time.
template <int M, int V, Rounding rounding>
MPTRAIN_SMALL_GEMM_TARGET void scale_and_add_columns(const Problem& p, int64_t first, int64_t last) {
    constexpr int64_t kBlock = V * kLanes;
    for (int64_t j = first; j < last; j += kBlock) {
        const int64_t count = std::min(kBlock, last - j);
        __m512 sums[M][V];
        for (int i = 0; i < M; ++i)
            for (int v = 0; v < V; ++v) sums[i][v] = _mm512_setzero_ps();
        for (int64_t q = 0; q < p.depth; ++q) {
            const float* values = p.b + q * p.b_depth + j;
            __m512 loaded[V];
            for (int v = 0; v < V; ++v)
                loaded[v] = rounded<rounding>(_mm512_maskz_loadu_ps(lanes_mask(count - v * kLanes), values + v * kLanes));
            for (int i = 0; i < M; ++i) {
                const __m512 factor = _mm512_set1_ps(p.packed[i * p.padded_depth + q]);
                for (int v = 0; v < V; ++v) sums[i][v] = _mm512_fmadd_ps(loaded[v], factor, sums[i][v]);
            }
        }
        alignas(64) float results[kBlock];
        for (int i = 0; i < M; ++i) {
            for (int v = 0; v < V; ++v) _mm512_store_ps(results + v * kLanes, sums[i][v]);
            for (int64_t t = 0; t < count; ++t) store(p, i, j + t, results[t]);
        }
    }
}

// Tiles of 16 to 24 registers of sums: M rows by 8, 4 or 2 columns (or vectors of 16 columns).
constexpr int tile_width(int rows) { return rows <= 2 ? 8 : rows <= 4 ? 4 : 2; }

using ColumnsFn = void (*)(const Problem&, int64_t, int64_t);

template <int M, Rounding rounding>
ColumnsFn columns_kernel(bool dot) {
    return dot ? &dot_columns<M, tile_width(M), rounding> : &scale_and_add_columns<M, tile_width(M), rounding>;
}

template <Rounding rounding>
ColumnsFn columns_kernel(int rows, bool dot) {
    switch (rows) {
        case 1: return columns_kernel<1, rounding>(dot);
        case 2: return columns_kernel<2, rounding>(dot);
        case 3: return columns_kernel<3, rounding>(dot);
        case 4: return columns_kernel<4, rounding>(dot);
        case 5: return columns_kernel<5, rounding>(dot);
        case 6: return columns_kernel<6, rounding>(dot);
        case 7: return columns_kernel<7, rounding>(dot);
        default: return columns_kernel<8, rounding>(dot);
    }
}

// Packs op(A')'s rows, element (i, q) at a[i * row_stride + q * depth_stride], rounded and
// zero-padded to `padded_depth`.
template <Rounding rounding>
MPTRAIN_SMALL_GEMM_TARGET void pack_rows(const float* a, int64_t row_stride, int64_t depth_stride, int64_t rows,
                                         int64_t depth, int64_t padded_depth, float* packed) {
    for (int64_t i = 0; i < rows; ++i) {
        float* row = packed + i * padded_depth;
        for (int64_t q = 0; q < depth; ++q) row[q] = a[i * row_stride + q * depth_stride];
        for (int64_t q = depth; q < padded_depth; ++q) row[q] = 0.0f;
        for (int64_t q = 0; q < padded_depth; q += kLanes)
            _mm512_store_ps(row + q, rounded<rounding>(_mm512_load_ps(row + q)));
    }
}

template <Rounding rounding>
void run(const Problem& shape, const float* a, int64_t a_row, int64_t a_depth, ThreadPool& pool) {
    thread_local ScratchBuffer packed_buffer;
    Problem p = shape;
    // Whole vectors, and one more: rows a multiple of 4 KiB apart would all fall in one L1 set.
    p.padded_depth = (p.depth + kLanes - 1) / kLanes * kLanes + kLanes;
    float* packed = packed_buffer.reserve<float>(p.rows * p.padded_depth);
    pack_rows<rounding>(a, a_row, a_depth, p.rows, p.depth, p.padded_depth, packed);
    p.packed = packed;
    const bool dot = p.b_depth == 1;
    const ColumnsFn kernel = columns_kernel<rounding>(static_cast<int>(p.rows), dot);
    const int64_t unit = dot ? tile_width(static_cast<int>(p.rows)) : tile_width(static_cast<int>(p.rows)) * kLanes;
    const int64_t units = (p.columns + unit - 1) / unit;
    const int64_t grain = std::max<int64_t>(1, kWorkPerTask / std::max<int64_t>(1, unit * p.depth * p.rows));
    pool.parallel_for(units, grain, [&](int64_t begin, int64_t end) {
        kernel(p, begin * unit, std::min(p.columns, end * unit));
    });
}

}  // namespace

void small_gemm(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                ThreadPool& pool) {
    if (!small_gemm_applies(m, n, k) || !small_gemm_supported())
        fail(MPT_STATUS_INTERNAL, "small_gemm called outside its case or where it cannot run");
    // An operand by its outer index x (C's row for op(A), C's column for op(B)) and the depth q:
    // element (x, q) at data[x * outer + q * depth].
    struct Operand {
        const float* data;
        int64_t outer, depth;
    };
    const Operand a_side{a, transpose_a ? 1 : lda, transpose_a ? lda : 1};
    const Operand b_side{b, transpose_b ? ldb : 1, transpose_b ? 1 : ldb};
    // C' = C, or C' = C^T = op(B)^T . op(A)^T when C has the few columns.
    const bool few_rows = m <= kSmallGemmMaxRows;
    const Operand& rows_side = few_rows ? a_side : b_side;
    const Operand& other = few_rows ? b_side : a_side;
    Problem p{};
    p.rows = few_rows ? m : n;
    p.columns = few_rows ? n : m;
    p.depth = k;
    p.b = other.data;
    p.b_column = other.outer;
    p.b_depth = other.depth;
    p.c = c;
    p.c_row = few_rows ? ldc : 1;
    p.c_column = few_rows ? 1 : ldc;
    p.alpha = alpha;
    p.beta = beta;
    switch (operands) {
        case DType::fp32: run<Rounding::none>(p, rows_side.data, rows_side.outer, rows_side.depth, pool); return;
        case DType::bf16: run<Rounding::bf16>(p, rows_side.data, rows_side.outer, rows_side.depth, pool); return;
        case DType::fp16: run<Rounding::fp16>(p, rows_side.data, rows_side.outer, rows_side.depth, pool); return;
    }
    fail(MPT_STATUS_INTERNAL, std::string("small_gemm: unknown operand dtype ") + dtype_name(operands));
}

#else

void small_gemm(DType, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                float, float*, int64_t, ThreadPool&) {
    fail(MPT_STATUS_INTERNAL, "small_gemm called in a build without AVX-512 support");
}

#endif

}  // namespace mpt
