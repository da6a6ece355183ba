// The GEMM for a few rows or columns of C (small_gemm.h) against a double-precision reference over
// rounded inputs: fp32, bf16 and fp16, every transpose combination, 1 to 8 rows and 1 to 8 columns
// (the transposed problem), depths from 1 up, padded leading dimensions, both beta cases; the same
// bits on any thread count; and the rounding itself (exact fp16 products, bf16's subnormal inputs
// as zero, fp16 overflow to Inf). A dtype the kernels do not take here is skipped, with the reason:
// all of them on a CPU without AVX2, bf16 and fp16 on the AVX2 and AVX512F kernels. ctest runs it four times:
// with the kernels this CPU picks, with MPTRAIN_CPU_SMALL_GEMM=avx2 and =avx512f (those kernels, even
// on a CPU with wider ones) and with MPTRAIN_CPU_SMALL_GEMM=0, where it must report itself turned off.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/small_gemm.h"
#include "backend/cpu/weight_words.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "memory/memory_tracker.h"
#include "support/reference_dot.h"

using namespace mpt;

namespace {

bool supported_or_skip(DType dtype) {
    if (small_gemm_supported(dtype)) return true;
    MESSAGE("small GEMM not tested in " << std::string(dtype_name(dtype)) << ": " << small_gemm_unsupported_reason(dtype));
    return false;
}

constexpr DType kOperandTypes[] = {DType::fp32, DType::bf16, DType::fp16};

// Every transpose combination of C = alpha * op(A) . op(B) + beta * C against the reference;
// returns the last combination's C, for the caller to compare across thread counts.
std::vector<float> check_against_reference(DType dtype, int threads, int64_t m, int64_t n, int64_t k, float beta) {
    ThreadPool pool(threads);
    std::mt19937 generator(static_cast<unsigned>(m * 131 + n * 17 + k));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> last;
    for (bool transpose_a : {false, true})
        for (bool transpose_b : {false, true}) {
            // Padded leading dimensions: a stride mistake reads values that are not the operands.
            const int64_t lda = (transpose_a ? m : k) + 3, ldb = (transpose_b ? k : n) + 5, ldc = n + 2;
            std::vector<float> a(static_cast<size_t>((transpose_a ? k : m) * lda)),
                b(static_cast<size_t>((transpose_b ? n : k) * ldb)), c(static_cast<size_t>(m * ldc));
            for (auto* values : {&a, &b, &c})
                for (float& v : *values) v = uniform(generator);
            const std::vector<float> before = c;
            if (beta == 0.0f)
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = NAN;  // to be ignored
            const float alpha = -0.75f;
            small_gemm(dtype, transpose_a, transpose_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(),
                       ldc, pool);
            int64_t beyond_bound = 0, padding_changed = 0;
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < ldc; ++j) {
                    if (j >= n) {
                        padding_changed += c[i * ldc + j] != before[i * ldc + j];
                        continue;
                    }
                    const mpt_test::ReferenceDot dot =
                        mpt_test::reference_dot(dtype, transpose_a, transpose_b, a, lda, b, ldb, i, j, k);
                    const double old = beta == 0.0f ? 0.0 : before[i * ldc + j];
                    const double expected = alpha * dot.sum + beta * old;
                    // One rounding per fused multiply-add, then alpha, beta and their sum.
                    const double allowed = (static_cast<double>(k) + 3.0) * 0x1p-24 *
                                           (std::fabs(alpha) * dot.magnitude + std::fabs(beta * old));
                    beyond_bound += !(std::fabs(c[i * ldc + j] - expected) <= allowed);
                }
            CAPTURE(dtype_name(dtype));
            CAPTURE(transpose_a);
            CAPTURE(transpose_b);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CHECK(beyond_bound == 0);
            CHECK(padding_changed == 0);
            last = c;
        }
    return last;
}

}  // namespace

TEST_CASE("the small GEMM matches a double reference for 1 to 8 rows or columns of C, in fp32, bf16 and fp16") {
    for (DType dtype : kOperandTypes) {
        if (!supported_or_skip(dtype)) continue;
        for (float beta : {0.0f, 0.5f}) {
            // Every row count (each its own tile shape), ragged column counts and depths.
            for (int64_t rows = 1; rows <= kSmallGemmMaxRows; ++rows) {
                check_against_reference(dtype, 1, rows, 37, 19, beta);
                check_against_reference(dtype, 1, 45, rows, 19, beta);  // few columns: the transposed problem
            }
            check_against_reference(dtype, 1, 1, 131, 1, beta);  // depth 1
            for (int64_t rows : {3, 7})  // deep: the packed rows' padding, every tile width
                check_against_reference(dtype, 1, rows, 40, 3000, beta);
            check_against_reference(dtype, 1, 3, 131, 257, beta);
            check_against_reference(dtype, 1, 257, 6, 131, beta);
            // Large enough to be split across threads.
            check_against_reference(dtype, 2, 1, 1000, 700, beta);
            check_against_reference(dtype, 2, 8, 1000, 300, beta);
            check_against_reference(dtype, 2, 1000, 2, 300, beta);
        }
    }
}

TEST_CASE("the small GEMM gives the same bits on 1, 2 and 3 threads") {
    for (DType dtype : kOperandTypes) {
        if (!supported_or_skip(dtype)) continue;
        for (int64_t rows : {int64_t{1}, int64_t{5}}) {
            const std::vector<float> one = check_against_reference(dtype, 1, rows, 900, 500, 0.5f);
            CHECK(check_against_reference(dtype, 2, rows, 900, 500, 0.5f) == one);
            CHECK(check_against_reference(dtype, 3, rows, 900, 500, 0.5f) == one);
            const std::vector<float> columns = check_against_reference(dtype, 1, 900, rows, 500, 0.5f);
            CHECK(check_against_reference(dtype, 3, 900, rows, 500, 0.5f) == columns);
        }
    }
}

TEST_CASE("the small GEMM rounds as the AMX GEMM does: exact fp16 products, bf16 subnormals as zero") {
    ThreadPool pool(1);
    const auto dot = [&](DType dtype, std::vector<float> a, std::vector<float> b) {
        float c = 0.0f;
        small_gemm(dtype, false, false, 1, 1, static_cast<int64_t>(a.size()), 1.0f, a.data(),
                   static_cast<int64_t>(a.size()), b.data(), 1, 0.0f, &c, 1, pool);
        return c;
    };
    // Exact in fp16, not in bf16: the fp16 product carries all 11 bits of each.
    const float x = 1.0f + 0x1p-10f, y = 1.0f + 0x1p-9f + 0x1p-10f;
    if (supported_or_skip(DType::fp32)) {
        CHECK(dot(DType::fp32, {x, 0.0f}, {y, 0.0f}) == x * y);
        CHECK(dot(DType::fp32, {1e-40f, 1.0f}, {0.5f, 0.0f}) == 5e-41f);  // fp32 keeps its subnormals
    }
    if (supported_or_skip(DType::fp16)) {
        CHECK(dot(DType::fp16, {x, 0.0f}, {y, 0.0f}) == x * y);
        // fp16 keeps its subnormals; above its largest value: Inf.
        CHECK(dot(DType::fp16, {0x1p-24f, 0.0f}, {1.0f, 0.0f}) == 0x1p-24f);
        CHECK(std::isinf(dot(DType::fp16, {70000.0f, 0.0f}, {1.0f, 0.0f})));
    }
    if (supported_or_skip(DType::bf16)) {
        CHECK(dot(DType::bf16, {x, 0.0f}, {y, 0.0f}) == 1.0f);  // both round to 1 in bf16
        // bf16 counts fp32 subnormal inputs as zero, as TDPBF16PS does.
        CHECK(dot(DType::bf16, {1e-40f, 1.0f}, {1e38f, 1.0f}) == 1.0f);
    }
}

TEST_CASE("the small GEMM over weight words gives the bits it gives over the floats they came from") {
    for (DType dtype : {DType::bf16, DType::fp16}) {
        if (!small_gemm_words_supported(dtype)) {
            MESSAGE("small GEMM over words not tested in " << std::string(dtype_name(dtype)) << ": "
                                                           << small_gemm_unsupported_reason(dtype));
            continue;
        }
        std::mt19937 generator(7);
        std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
        struct Shape {
            int64_t n, k;
            int threads;
        };
        for (const Shape& shape : {Shape{37, 19, 1}, Shape{131, 257, 1}, Shape{40, 3000, 1}, Shape{1000, 300, 2},
                                   Shape{5, 1, 1}, Shape{901, 1000, 3}}) {
            for (int64_t m = 1; m <= kSmallGemmMaxRows; ++m) {
                ThreadPool pool(shape.threads);
                const int64_t k = shape.k, n = shape.n, lda = k + 3, ldw = k + 5, ldc = n + 2;
                std::vector<float> a(static_cast<size_t>(m * lda)), w(static_cast<size_t>(n * ldw));
                for (float& v : a) v = uniform(generator);
                for (float& v : w) v = uniform(generator);
                // Values each rounding treats on its own: subnormals, beyond fp16's range, NaN.
                w[0] = 1e-40f;
                if (w.size() > 2) w[1] = 70000.0f, w[2] = NAN;
                std::vector<uint16_t> words(w.size(), 0xFFFF);
                write_weight_words(dtype, w.data(), words.data(), static_cast<int64_t>(w.size()), pool);
                for (float beta : {0.0f, 0.5f}) {
                    std::vector<float> from_floats(static_cast<size_t>(m * ldc), 0.25f), from_words = from_floats;
                    small_gemm(dtype, false, true, m, n, k, -0.75f, a.data(), lda, w.data(), ldw, beta,
                               from_floats.data(), ldc, pool);
                    small_gemm_words(dtype, m, n, k, -0.75f, a.data(), lda, words.data(), ldw, beta, from_words.data(),
                                     ldc, pool);
                    int64_t differing = 0;
                    for (size_t i = 0; i < from_floats.size(); ++i)
                        differing += std::memcmp(&from_floats[i], &from_words[i], sizeof(float)) != 0;
                    CAPTURE(dtype_name(dtype));
                    CAPTURE(m);
                    CAPTURE(n);
                    CAPTURE(k);
                    CHECK(differing == 0);
                }
            }
        }
    }
}

TEST_CASE("values past the depth, in a padded row of weights, never reach the sums (floats or words)") {
    // NaN in every row's padding: a load that reads past the depth (the pairs of bf16 words take 32
    // depths a step, the floats 16) poisons C.
    std::mt19937 generator(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    ThreadPool pool(1);
    for (DType dtype : kOperandTypes) {
        if (!supported_or_skip(dtype)) continue;
        for (const int64_t k : {1, 2, 15, 17, 31, 33, 63, 65}) {
            const int64_t n = 19, lda = k, ldw = k + 40, ldc = n;
            for (int64_t m = 1; m <= kSmallGemmMaxRows; ++m) {
                std::vector<float> a(static_cast<size_t>(m * lda)), w(static_cast<size_t>(n * ldw), NAN);
                for (float& v : a) v = uniform(generator);
                for (int64_t j = 0; j < n; ++j)
                    for (int64_t q = 0; q < k; ++q) w[static_cast<size_t>(j * ldw + q)] = uniform(generator);
                std::vector<float> c(static_cast<size_t>(m * ldc));
                small_gemm(dtype, false, true, m, n, k, 1.0f, a.data(), lda, w.data(), ldw, 0.0f, c.data(), ldc, pool);
                int64_t not_finite = 0;
                for (float v : c) not_finite += !std::isfinite(v);
                if (small_gemm_words_supported(dtype)) {
                    std::vector<uint16_t> words(w.size());
                    write_weight_words(dtype, w.data(), words.data(), static_cast<int64_t>(w.size()), pool);
                    small_gemm_words(dtype, m, n, k, 1.0f, a.data(), lda, words.data(), ldw, 0.0f, c.data(), ldc, pool);
                    for (float v : c) not_finite += !std::isfinite(v);
                }
                CAPTURE(dtype_name(dtype));
                CAPTURE(m);
                CAPTURE(k);
                CHECK(not_finite == 0);
            }
        }
    }
}

TEST_CASE("weight words hold each value rounded as the small GEMM rounds it") {
    for (DType dtype : {DType::bf16, DType::fp16}) {
        if (!small_gemm_words_supported(dtype)) continue;
        ThreadPool pool(2);
        // More than one task's chunk, and a ragged tail.
        const int64_t count = (int64_t{1} << 17) + 21;
        std::vector<float> values(static_cast<size_t>(count));
        std::mt19937 generator(11);
        std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
        for (float& v : values) v = uniform(generator);
        std::vector<uint16_t> words(static_cast<size_t>(count) + 16, 0xABCD);
        write_weight_words(dtype, values.data(), words.data(), count, pool);
        int64_t wrong = 0;
        for (int64_t i = 0; i < count; ++i) {
            // One value through the small GEMM: 1 x 1 over depth 1, times 1 (exact).
            const float one = 1.0f;
            float through_gemm = 0.0f;
            small_gemm(dtype, false, true, 1, 1, 1, 1.0f, &one, 1, &values[static_cast<size_t>(i)], 1, 0.0f,
                       &through_gemm, 1, pool);
            const uint16_t word = words[static_cast<size_t>(i)];
            const float widened = dtype == DType::bf16 ? bfloat16_to_float(word) : half_to_float(word);
            wrong += widened != through_gemm;
            if (i > 4000) i += 97;  // a sample of the rest
        }
        CHECK(wrong == 0);
        for (int64_t i = count; i < count + 16; ++i) CHECK(words[static_cast<size_t>(i)] == 0xABCD);  // nothing past
    }
}

TEST_CASE("the CPU backend's dense forward reads weight words on the rows it offers them for, and only there") {
    const std::unique_ptr<Backend> backend = create_cpu_backend(2);
    CHECK(backend->weight_words_max_rows(DType::fp32) == 0);
    for (DType dtype : {DType::bf16, DType::fp16}) {
        if (backend->weight_words_max_rows(dtype) == 0) {
            MESSAGE("weight words not tested in " << std::string(dtype_name(dtype)) << ": the backend reads none here");
            continue;
        }
        CHECK(backend->rounds_parameters_on_read(dtype));
        const int64_t in = 72, out = 40, most_rows = 70;
        std::mt19937 generator(3);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        std::vector<float> input(static_cast<size_t>(most_rows * in)), masters(static_cast<size_t>(out * in)),
            other(masters.size()), bias(static_cast<size_t>(out), 0.0f);
        for (auto* values : {&input, &masters, &other})
            for (float& v : *values) v = uniform(generator);
        // Words of `other`: where they are read, the forward computes with `other`, not the masters.
        std::vector<uint16_t> words(other.size());
        backend->write_weight_words(other.data(), words.data(), dtype, static_cast<int64_t>(other.size()));
        const auto forward = [&](const std::vector<float>& weights, const uint16_t* weight_words, int64_t rows) {
            std::vector<float> result(static_cast<size_t>(rows * out), NAN);
            DenseForwardArgs args{};
            args.input = input.data();
            args.weights = weights.data();
            args.weight_words = weight_words;
            args.bias = bias.data();
            args.output = result.data();
            args.rows = rows;
            args.in_features = in;
            args.out_features = out;
            args.valid_out = out;
            args.activation = Activation::linear;
            args.compute_dtype = dtype;
            args.bias_dtype = dtype;
            args.output_dtype = DType::fp32;
            backend->dense_forward(args);
            return result;
        };
        const int64_t max_rows = backend->weight_words_max_rows(dtype);
        REQUIRE(max_rows < most_rows);
        for (int64_t rows = 1; rows <= max_rows + 1; ++rows) {
            CAPTURE(rows);
            const std::vector<float> from_words = forward(masters, words.data(), rows);
            const std::vector<float> expected = forward(rows <= max_rows ? other : masters, nullptr, rows);
            CHECK(std::memcmp(from_words.data(), expected.data(), from_words.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("the small GEMM's packed rows are charged to the pool's tracker; past its budget, an error") {
    if (!supported_or_skip(DType::fp32)) return;
    const int64_t m = 4, n = 50, k = 3000;
    const std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f);
    std::vector<float> c(static_cast<size_t>(m * n));
    MemoryTracker unlimited;
    {
        ThreadPool pool(2);
        pool.charge_scratch_to(&unlimited);
        small_gemm(DType::fp32, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n, pool);
        CHECK(unlimited.used() >= static_cast<size_t>(m * k) * sizeof(float));
        CHECK(unlimited.used() == pool.scratch_bytes());
        CHECK(c[0] == doctest::Approx(0.125 * k));
    }
    CHECK(unlimited.used() == 0);
    MemoryTracker small(4096);
    ThreadPool pool(2);
    pool.charge_scratch_to(&small);
    try {
        small_gemm(DType::fp32, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n, pool);
        FAIL("no error past the budget");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
    }
    CHECK(small.used() == 0);
}

// ctest runs this file again with MPTRAIN_CPU_SMALL_GEMM=0 (MPTRAIN_EXPECT_SMALL_GEMM=off), and with
// MPTRAIN_CPU_SMALL_GEMM=avx2 and =avx512f (MPTRAIN_EXPECT_SMALL_GEMM the same).
TEST_CASE("MPTRAIN_CPU_SMALL_GEMM=0 turns the small GEMM off, with the reason") {
    const char* expect = std::getenv("MPTRAIN_EXPECT_SMALL_GEMM");
    if (!expect || std::strcmp(expect, "off") != 0) return;
    CHECK(small_gemm_kernels() == SmallGemmKernels::none);
    for (DType dtype : kOperandTypes) {
        CHECK_FALSE(small_gemm_supported(dtype));
        CHECK(small_gemm_unsupported_reason(dtype) == "MPTRAIN_CPU_SMALL_GEMM=0");
    }
}

// MPTRAIN_CPU_SMALL_GEMM=avx512f falls back to AVX2's kernels where the CPU lacks AVX512F.
TEST_CASE("MPTRAIN_CPU_SMALL_GEMM=avx2 or avx512f picks those kernels, which take fp32 only") {
    const char* expect = std::getenv("MPTRAIN_EXPECT_SMALL_GEMM");
    if (!expect) return;
    const std::string setting = expect;
    if (setting != "avx2" && setting != "avx512f") return;
    SmallGemmKernels wanted = setting == "avx512f" ? SmallGemmKernels::avx512f : SmallGemmKernels::avx2;
    if (wanted == SmallGemmKernels::avx512f && !cpu_has_avx512f()) {
        MESSAGE("AVX512F kernels not tested: this CPU lacks AVX512F");
        wanted = SmallGemmKernels::avx2;
    }
    if (wanted == SmallGemmKernels::avx2 && !cpu_has_avx2_fma()) {
        MESSAGE("AVX2 kernels not tested: this CPU lacks AVX2 and FMA");
        CHECK(small_gemm_kernels() == SmallGemmKernels::none);
        return;
    }
    CHECK(small_gemm_kernels() == wanted);
    CHECK(small_gemm_supported(DType::fp32));
    const char* name = wanted == SmallGemmKernels::avx2 ? "AVX2" : "AVX512F";
    for (DType dtype : {DType::bf16, DType::fp16}) {
        CHECK_FALSE(small_gemm_supported(dtype));
        const std::string reason = small_gemm_unsupported_reason(dtype);
        CHECK(reason.find(name) != std::string::npos);
        CHECK(reason.find("fp32") != std::string::npos);
        if (cpu_has_avx512_bf16()) CHECK(reason.find("MPTRAIN_CPU_SMALL_GEMM=" + setting) != std::string::npos);
    }
}
