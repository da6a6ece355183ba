// The CPU GEMMs (OpenBLAS split into panels across the pool, and the portable fallback) against a
// double-precision reference, over every transpose combination, alpha/beta and ragged shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/thread_pool.h"

using namespace mpt;

namespace {

using Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                      float*, int64_t, ThreadPool&);

// `pad` extra elements at the end of every row of A, B and C (leading dimensions beyond the
// shapes'), which must come back untouched.
void check_gemm(Gemm gemm, int threads, int64_t m, int64_t n, int64_t k, int64_t pad = 0) {
    ThreadPool pool(threads);
    std::mt19937 generator(static_cast<unsigned>(m * 31 + n * 7 + k));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const float sentinel = 1234.5f;
    for (bool transpose_a : {false, true})
        for (bool transpose_b : {false, true}) {
            const int64_t lda = (transpose_a ? m : k) + pad, ldb = (transpose_b ? k : n) + pad, ldc = n + pad;
            std::vector<float> a(static_cast<size_t>((transpose_a ? k : m) * lda)),
                b(static_cast<size_t>((transpose_b ? n : k) * ldb)), c(static_cast<size_t>(m * ldc));
            for (auto* values : {&a, &b})
                for (float& v : *values) v = uniform(generator);
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < ldc; ++j) c[i * ldc + j] = j < n ? uniform(generator) : sentinel;
            const float alpha = -0.75f, beta = 0.5f;
            std::vector<double> expected(static_cast<size_t>(m * n));
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                    double sum = 0.0;
                    for (int64_t p = 0; p < k; ++p)
                        sum += static_cast<double>(transpose_a ? a[p * lda + i] : a[i * lda + p]) *
                               (transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
                    expected[i * n + j] = alpha * sum + beta * c[i * ldc + j];
                }
            gemm(transpose_a, transpose_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, pool);
            double worst = 0.0;
            int64_t padding_changed = 0;
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < ldc; ++j) {
                    if (j < n) worst = std::max(worst, std::fabs(c[i * ldc + j] - expected[i * n + j]));
                    else padding_changed += c[i * ldc + j] != sentinel;
                }
            CAPTURE(transpose_a);
            CAPTURE(transpose_b);
            // fp32 accumulation over k terms of magnitude <= 1.
            CHECK(worst < 1e-5 * static_cast<double>(k));
            CHECK(padding_changed == 0);
        }
}

}  // namespace

TEST_CASE("the BLAS GEMM split into panels matches a double reference") {
    for (int threads : {1, 2, 3}) {
        check_gemm(&cpu_sgemm, threads, 67, 131, 257);  // large enough to be split, ragged panels
        check_gemm(&cpu_sgemm, threads, 131, 67, 257);  // split by rows
        check_gemm(&cpu_sgemm, threads, 5, 3, 7);       // too small to split
    }
}

// A single row or column of C is a matrix-vector product (sgemv through OpenBLAS): the strides of
// the vector operands and of C's column come from the leading dimensions.
TEST_CASE("one row or one column of C matches a double reference, with padded leading dimensions") {
    for (int threads : {1, 2}) {
        check_gemm(&cpu_sgemm, threads, 1, 131, 257, 3);
        check_gemm(&cpu_sgemm, threads, 131, 1, 257, 3);
        check_gemm(&cpu_sgemm, threads, 1, 1, 300, 2);
        check_gemm(&cpu_sgemm, threads, 1, 2000, 1100, 5);  // split into column panels, one row each
        check_gemm(&cpu_sgemm, threads, 2000, 1, 1100, 5);  // split into row panels of one column
        check_gemm(&portable_sgemm, threads, 1, 131, 257, 3);
        check_gemm(&portable_sgemm, threads, 131, 1, 257, 3);
    }
    ThreadPool pool(2);
    std::vector<float> a(2000, 1.0f), b(2000 * 3, 0.5f), c(3, NAN);  // beta 0 ignores the NaN in C
    cpu_sgemm(false, true, 1, 3, 2000, 1.0f, a.data(), 2000, b.data(), 2000, 0.0f, c.data(), 3, pool);
    CHECK(c == std::vector<float>(3, 1000.0f));
    std::vector<float> column(3 * 4, NAN);
    cpu_sgemm(false, false, 3, 1, 2000, 1.0f, b.data(), 2000, a.data(), 1, 0.0f, column.data(), 4, pool);
    for (int64_t i = 0; i < 3; ++i) CHECK(column[i * 4] == 1000.0f);
}

TEST_CASE("the portable fallback GEMM matches a double reference, with either kernel") {
    for (Gemm gemm : {static_cast<Gemm>(&portable_sgemm), static_cast<Gemm>(&portable_sgemm_eight_wide)}) {
        for (int threads : {1, 2}) {
            check_gemm(gemm, threads, 67, 131, 300);  // two depth blocks, ragged micro-tiles
            check_gemm(gemm, threads, 200, 300, 40);  // several row and column tiles
            check_gemm(gemm, threads, 1, 1, 1);
            check_gemm(gemm, threads, 9, 17, 5);
        }
    }
}

TEST_CASE("the portable GEMM gives the same bits on any thread count and with either kernel") {
    const int64_t m = 150, n = 290, k = 300;
    std::mt19937 generator(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c0(static_cast<size_t>(m * n));
    for (auto* values : {&a, &b, &c0})
        for (float& v : *values) v = uniform(generator);
    std::vector<float> first;
    for (Gemm gemm : {static_cast<Gemm>(&portable_sgemm), static_cast<Gemm>(&portable_sgemm_eight_wide)}) {
        for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<float> c = c0;
            gemm(false, true, m, n, k, 0.5f, a.data(), k, b.data(), k, 0.25f, c.data(), n, pool);
            if (first.empty()) first = c;
            CAPTURE(threads);
            CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("beta 0 overwrites C, NaN included, as BLAS defines it") {
    ThreadPool pool(1);
    for (Gemm gemm : {static_cast<Gemm>(&cpu_sgemm), static_cast<Gemm>(&portable_sgemm),
                      static_cast<Gemm>(&portable_sgemm_eight_wide)}) {
        std::vector<float> a = {1.0f, 2.0f}, b = {3.0f, 4.0f}, c = {NAN};
        gemm(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1, pool);
        CHECK(c[0] == 11.0f);
        std::vector<float> d = {NAN, 7.0f};  // no products (k = 0): C = beta * C
        gemm(false, false, 1, 2, 0, 1.0f, a.data(), 1, b.data(), 2, 0.0f, d.data(), 2, pool);
        CHECK(d[0] == 0.0f);
        CHECK(d[1] == 0.0f);
    }
}

TEST_CASE("the GEMMs propagate NaN and Inf like IEEE arithmetic") {
    ThreadPool pool(1);
    for (Gemm gemm : {static_cast<Gemm>(&cpu_sgemm), static_cast<Gemm>(&portable_sgemm),
                      static_cast<Gemm>(&portable_sgemm_eight_wide)}) {
        std::vector<float> a = {0.0f, 1.0f}, b = {INFINITY, 2.0f}, c = {0.0f};
        gemm(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1, pool);
        CHECK(std::isnan(c[0]));  // 0 * Inf is NaN: a skipped zero would hide an overflow
    }
}

// What the environment said before anything loaded OpenBLAS (static initialisation runs first).
const char* const kUserCore = std::getenv("OPENBLAS_CORETYPE");

// Run by ctest four times (MPTRAIN_EXPECT_CORE says which): as it comes; with OPENBLAS_CORETYPE
// forced to Prescott (SSE3 kernels, what OpenBLAS falls back to on a CPU it does not know) and to
// Haswell (AVX2 kernels); and with MPTRAIN_OPENBLAS naming a library that does not exist ("missing").
// The warning is the user's only hint that CPU training runs 3-4x slower than it could (measured on
// an AVX-512 VM that OpenBLAS 0.3.21 took for Prescott).
TEST_CASE("OpenBLAS runs the kernels this CPU can, and a warning names any slower fallback with its fix") {
    const std::string library = cpu_gemm_library();
    const std::string warning = cpu_gemm_kernel_warning();
    const std::string expect = std::getenv("MPTRAIN_EXPECT_CORE") ? std::getenv("MPTRAIN_EXPECT_CORE") : "";
    if (expect == "missing") {
        CHECK(library == "portable");
        CHECK(warning.find("OpenBLAS could not be loaded") != std::string::npos);
        CHECK(warning.find("MPTRAIN_OPENBLAS") != std::string::npos);
        return;
    }
    if (library == "portable") {  // a build without OpenBLAS: nothing to warn about
        CHECK(warning.empty());
        return;
    }
    REQUIRE(library.rfind("openblas ", 0) == 0);
    const std::string core = library.substr(9);
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    const bool avx2 = false, avx512 = false;
#endif
    if (!warning.empty()) {
        CHECK(warning.find("OPENBLAS_CORETYPE=") != std::string::npos);
        CHECK(avx2);
    }
    // Loading OpenBLAS left the environment as it found it.
    CHECK((std::getenv("OPENBLAS_CORETYPE") == nullptr) == (kUserCore == nullptr));
    if (expect.empty() && !kUserCore && avx2) {
        // Nobody named the kernels, so mptrain did: the best the instruction set allows.
        CHECK(core == (avx512 ? "SkylakeX" : "Haswell"));
        CHECK(warning.empty());
    }
    if (expect == "Prescott") {
        CHECK(core == "Prescott");  // the user's choice stands
        CHECK(warning.empty() == !avx2);
        if (avx2) CHECK(warning.find("Prescott") != std::string::npos);
    }
    if (expect == "Haswell") {
        CHECK(core == "Haswell");
        CHECK(warning.empty());
    }
}

TEST_CASE("the CPU backend warns about settings of its environment variables it does not know") {
    // Set for this case only: the other cases of this program read the variables too.
    struct ScopedVariable {
        const char* name;
        std::optional<std::string> before;
        ScopedVariable(const char* variable) : name(variable) {
            if (const char* value = std::getenv(name)) before = value;
        }
        ~ScopedVariable() {
            if (before) setenv(name, before->c_str(), 1); else unsetenv(name);
        }
    } amx("MPTRAIN_CPU_AMX"), small_gemm("MPTRAIN_CPU_SMALL_GEMM");
    setenv("MPTRAIN_CPU_AMX", "off", 1);
    setenv("MPTRAIN_CPU_SMALL_GEMM", "avx512", 1);
    const std::string warning = create_cpu_backend(1)->setup_warning();
    CHECK(warning.find("MPTRAIN_CPU_AMX=off is ignored (known: 0, 1)") != std::string::npos);
    CHECK(warning.find("MPTRAIN_CPU_SMALL_GEMM=avx512 is ignored (known: 0, avx2, avx512f)") != std::string::npos);
    setenv("MPTRAIN_CPU_AMX", "0", 1);
    setenv("MPTRAIN_CPU_SMALL_GEMM", "avx2", 1);
    CHECK(create_cpu_backend(1)->setup_warning().find("is ignored") == std::string::npos);
}
