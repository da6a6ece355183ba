// See cpu_gemm.h.
#include "backend/cpu/cpu_gemm.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "backend/cpu/small_gemm.h"
#include "core/thread_pool.h"

#if defined(MPTRAIN_HAVE_OPENBLAS)
#include "backend/cpu/openblas_library.h"
#endif

namespace mpt {

namespace {

// Whether an fp32 GEMM of C m x n over depth k runs small_gemm (with or without OpenBLAS).
bool takes_small_gemm(int64_t m, int64_t n, int64_t k) {
    return small_gemm_applies(m, n, k) && small_gemm_supported(DType::fp32);
}

}  // namespace

#if defined(MPTRAIN_HAVE_OPENBLAS)

namespace {

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

// Whether C = op(A) . op(B) (row-major, m x n, depth k) has one row or one column and a depth over
// 1; if so, `gemv` is that product.
bool gemm_as_gemv(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc, GemvProblem& gemv) {
    if (k <= 1) return false;
    if (m == 1) {  // C's row = op(B)^T . op(A)'s row
        gemv = GemvProblem{!transpose_b, transpose_b ? n : k, transpose_b ? k : n, b, ldb, a, transpose_a ? lda : 1,
                           c, 1};
        return true;
    }
    if (n == 1) {  // C's column = op(A) . op(B)'s column
        gemv = GemvProblem{transpose_a, transpose_a ? k : m, transpose_a ? m : k, a, lda, b, transpose_b ? 1 : ldb,
                           c, ldc};
        return true;
    }
    return false;
}

// Where small_gemm does not run (no AVX2, or turned off), a product with one row or one column of C (a single
// sample's forward or input gradient) goes to sgemv: OpenBLAS 0.3.21's sgemm packs the whole weight
// matrix even then, and a one-row prediction of the seed MLP took 3.3x as long as through sgemv
// (bench/NOTES.md). With beta 0, BLAS ignores C's old contents, and this OpenBLAS's sgemv does, but
// some of OpenBLAS's gemv kernels have kept a NaN there (its issues 929 and 2496); C is one vector,
// so it is cleared first.
void blas_sgemm(const OpenBlas& blas, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    GemvProblem gemv;
    if (gemm_as_gemv(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc, gemv)) {
        const int64_t length = gemv.transpose ? gemv.columns : gemv.rows;
        if (beta == 0.0f)
            for (int64_t index = 0; index < length; ++index) gemv.y[index * gemv.y_stride] = 0.0f;
        blas.sgemv(CblasRowMajor, gemv.transpose ? CblasTrans : CblasNoTrans, static_cast<int>(gemv.rows),
                   static_cast<int>(gemv.columns), alpha, gemv.matrix, static_cast<int>(gemv.ld), gemv.vector,
                   static_cast<int>(gemv.vector_stride), beta, gemv.y, static_cast<int>(gemv.y_stride));
        return;
    }
    blas.sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
               static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
               static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace

// OpenBLAS runs single-threaded and the pool splits C into column or row panels: OpenBLAS's own
// threaded GEMM allocates a job descriptor on every call and its idle threads spin against ours.
// Each panel is an independent GEMM, so results do not depend on timing. Without a loadable
// OpenBLAS the portable GEMM stands in (the context has warned).
void cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool) {
    if (takes_small_gemm(m, n, k)) {
        small_gemm(DType::fp32, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
        return;
    }
    const OpenBlas* blas = openblas().api;
    if (!blas) {
        portable_sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
        return;
    }
    constexpr int64_t kPanelAlignment = 16;
    const int64_t threads = pool.threads();
    if (threads <= 1 || m * n * k < (int64_t{1} << 21)) {
        blas_sgemm(*blas, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    const bool split_columns = n >= m;
    const int64_t extent = split_columns ? n : m;
    const int64_t panels = std::max<int64_t>(1, std::min(threads, extent / kPanelAlignment));
    const int64_t panel = (extent + panels - 1) / panels;
    const int64_t aligned_panel = (panel + kPanelAlignment - 1) / kPanelAlignment * kPanelAlignment;
    pool.parallel_for(panels, 1, [&](int64_t begin, int64_t end) {
        for (int64_t index = begin; index < end; ++index) {
            const int64_t first = index * aligned_panel;
            const int64_t count = std::min(aligned_panel, extent - first);
            if (count <= 0) continue;
            if (split_columns) {
                const float* b_panel = transpose_b ? b + first * ldb : b + first;
                blas_sgemm(*blas, transpose_a, transpose_b, m, count, k, alpha, a, lda, b_panel, ldb, beta, c + first, ldc);
            } else {
                const float* a_panel = transpose_a ? a + first : a + first * lda;
                blas_sgemm(*blas, transpose_a, transpose_b, count, n, k, alpha, a_panel, lda, b, ldb, beta, c + first * ldc, ldc);
            }
        }
    });
}

void cpu_sgemm_reserve(int64_t m, int64_t n, int64_t k, ThreadPool& pool) {
    if (takes_small_gemm(m, n, k)) small_gemm_reserve(m, n, k, pool);
    else if (!openblas().api) portable_sgemm_reserve(m, n, pool);
}

void cpu_gemm_set_threads(int) {
    if (const OpenBlas* blas = openblas().api) blas->set_num_threads(1);
}

std::string cpu_gemm_library() {
    const OpenBlas* blas = openblas().api;
    if (!blas) return "portable";
    const char* core = blas->get_corename();
    return std::string("openblas ") + (core ? core : "unknown");
}

std::string cpu_gemm_kernel_warning() {
    const OpenBlasLoad& loaded = openblas();
    if (!loaded.api) {
        return "OpenBLAS could not be loaded (" + loaded.why +
               "), so CPU GEMMs run the portable fallback, several times slower: install OpenBLAS (Debian: "
               "libopenblas0) or name the library in MPTRAIN_OPENBLAS";
    }
    const std::string better = openblas_core_for_this_cpu();
    if (better.empty()) return {};
    const char* reported = loaded.api->get_corename();
    std::string core = reported ? reported : "unknown";
    std::string lower = core;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    // OpenBLAS's x86-64 cores without AVX2 kernels: what it falls back to on a CPU it does not know.
    static const char* const kWithoutAvx2[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge",
                                               "katmai", "coppermine", "northwood", "banias", "atom", "athlon",
                                               "opteron", "opteron_sse3", "barcelona", "bobcat", "bulldozer",
                                               "piledriver", "steamroller", "nano", "unknown"};
    if (std::find(std::begin(kWithoutAvx2), std::end(kWithoutAvx2), lower) == std::end(kWithoutAvx2)) return {};
    // mptrain chooses the kernels itself only when it loads OpenBLAS first and the variable is unset,
    // so here the user's environment named these kernels, or something loaded OpenBLAS before mptrain.
    return "OpenBLAS runs its " + core + " GEMM kernels on a CPU with AVX2" +
           (better == "SkylakeX" ? ", FMA and AVX-512" : " and FMA") +
           ", so CPU training may run several times slower than it could; start the process with "
           "OPENBLAS_CORETYPE=" + better + " in its environment";
}

#else

void cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool) {
    if (takes_small_gemm(m, n, k))
        small_gemm(DType::fp32, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
    else
        portable_sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
}

void cpu_sgemm_reserve(int64_t m, int64_t n, int64_t k, ThreadPool& pool) {
    if (takes_small_gemm(m, n, k)) small_gemm_reserve(m, n, k, pool);
    else portable_sgemm_reserve(m, n, pool);
}

void cpu_gemm_set_threads(int) {}
std::string cpu_gemm_library() { return "portable"; }
std::string cpu_gemm_kernel_warning() { return {}; }

#endif

}  // namespace mpt
