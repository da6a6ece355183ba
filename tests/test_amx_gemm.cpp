// The AMX bf16 GEMM (amx_gemm.h) against a double-precision reference over bf16-rounded inputs,
// over every transpose combination, alpha/beta and ragged shapes that exercise both work splits
// and partial tiles and depth steps; its bits on any thread count; BLAS's beta and IEEE's NaN rules.
// Skipped, with the reason, on a CPU without AMX-BF16 (ctest also runs it with MPTRAIN_CPU_AMX=0,
// where it must report itself unavailable).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "amp/precision_policy.h"
#include "backend/cpu/amx_gemm.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "memory/memory_tracker.h"
#include "support/reference_dot.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

using namespace mpt;

namespace {

// Whether amx_gemm multiplies `operands` here; where not, the case says why.
bool native_or_skip(DType operands) {
    if (native_gemm_available(operands)) return true;
    MESSAGE(dtype_name(operands) << " GEMM not tested: " << native_gemm_unavailable_reason(operands));
    return false;
}

// The operand dtypes amx_gemm multiplies here: both on AMX tiles, bf16 alone on AVX512-BF16 dot
// products (ctest runs this file once more with MPTRAIN_CPU_AMX=0, so that an AMX CPU tests those
// too), none where neither runs (each case then says so).
std::vector<DType> native_operand_types() {
    std::vector<DType> native;
    for (DType operands : {DType::bf16, DType::fp16})
        if (native_or_skip(operands)) native.push_back(operands);
    return native;
}

// Uniform in [-1, 1], rounded to `dtype` (fp32: not rounded).
std::vector<float> random_values(size_t count, std::mt19937& generator, DType dtype) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(count);
    for (float& v : values) v = round_to(dtype, uniform(generator));
    return values;
}

// `exact_inputs`: A and B hold values of `operands` already (the CPU backend's case); otherwise the
// reference rounds them first, as the GEMM must. `every`: C's rows and columns checked (a large C is
// sampled, every `every`-th one; the GEMM still computes all of it).
void check_against_reference(DType operands, int threads, int64_t m, int64_t n, int64_t k, bool exact_inputs,
                             int64_t every = 1) {
    ThreadPool pool(threads);
    std::mt19937 generator(static_cast<unsigned>(m * 31 + n * 7 + k));
    for (bool transpose_a : {false, true})
        for (bool transpose_b : {false, true}) {
            // Leading dimensions wider than the matrices, so a stride mistake reads the wrong values.
            const int64_t lda = (transpose_a ? m : k) + 3, ldb = (transpose_b ? k : n) + 5, ldc = n + 2;
            const DType stored = exact_inputs ? operands : DType::fp32;
            std::vector<float> a = random_values(static_cast<size_t>((transpose_a ? k : m) * lda), generator, stored);
            std::vector<float> b = random_values(static_cast<size_t>((transpose_b ? n : k) * ldb), generator, stored);
            std::vector<float> c = random_values(static_cast<size_t>(m * ldc), generator, DType::fp32);
            const float alpha = -0.75f, beta = 0.5f;
            // The bound amx_gemm.h states: one fp32 rounding per summed product (bf16) or per partial
            // product (fp16: four per product), then alpha, beta and their sum: within
            // (roundings + 3) * u * (|alpha| * sum|products| + |beta * C|), u = 2^-24.
            const double roundings = static_cast<double>(operands == DType::fp16 ? 4 * k : k) + 3.0;
            std::vector<double> expected(c.begin(), c.end()), allowed(c.size(), 0.0);
            for (int64_t i = 0; i < m; i += every)
                for (int64_t j = 0; j < n; j += every) {
                    const mpt_test::ReferenceDot dot =
                        mpt_test::reference_dot(operands, transpose_a, transpose_b, a, lda, b, ldb, i, j, k);
                    expected[i * ldc + j] = alpha * dot.sum + beta * c[i * ldc + j];
                    allowed[i * ldc + j] =
                        roundings * 0x1p-24 * (std::fabs(alpha) * dot.magnitude + std::fabs(beta * c[i * ldc + j]));
                }
            amx_gemm(operands, transpose_a, transpose_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc,
                          pool);
            int64_t beyond_bound = 0;
            double untouched = 0.0;
            for (int64_t i = 0; i < m; i += every) {
                for (int64_t j = 0; j < n; j += every)
                    beyond_bound += std::fabs(c[i * ldc + j] - expected[i * ldc + j]) > allowed[i * ldc + j];
                for (int64_t j = n; j < ldc; ++j) untouched = std::max(untouched, std::fabs(c[i * ldc + j] - expected[i * ldc + j]));
            }
            CAPTURE(dtype_name(operands));
            CAPTURE(threads);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(transpose_a);
            CAPTURE(transpose_b);
            CHECK(beyond_bound == 0);
            CHECK(untouched == 0.0);  // C's padding columns are not C
        }
}

}  // namespace

TEST_CASE("the AMX GEMM matches a double reference over bf16 and over fp16 inputs") {
    for (DType operands : native_operand_types())
        for (int threads : {1, 2, 3}) {
            check_against_reference(operands, threads, 67, 131, 257, true);  // the left side packed whole, partial tiles and step
            check_against_reference(operands, threads, 131, 67, 257, true);  // the right side packed whole
            check_against_reference(operands, threads, 200, 300, 40, true);
            check_against_reference(operands, threads, 32, 3000, 96, true);   // exact blocks; many streamed blocks
            check_against_reference(operands, threads, 1, 1, 1, true);
            check_against_reference(operands, threads, 5, 3, 7, true);
            check_against_reference(operands, threads, 17, 33, 16, true);     // half a depth step
            check_against_reference(operands, threads, 33, 40, 1100, true);   // two passes over the depth, the second partial
        }
}

// A shallow product whose packed side is over 256 KiB walks it in panels, every streamed block of a
// task against one panel at a time; here three panels (the last partial) and a partial last block.
TEST_CASE("the AMX GEMM over a packed side taken in panels") {
    for (DType operands : native_operand_types())
        for (int threads : {1, 2}) check_against_reference(operands, threads, 100, 1100, 300, true, 3);
}

// A deep product is taken in passes over the depth for a group of streamed blocks at a time, their
// sums held in fp32 between passes; here the packed side is wide enough that one task's blocks
// take several groups, the last one partial (C sampled: it has 4.6 million elements).
TEST_CASE("the AMX GEMM over a depth taken in several passes, for several groups of blocks") {
    for (DType operands : native_operand_types()) check_against_reference(operands, 1, 2150, 2100, 1100, true, 29);
}

TEST_CASE("the AMX GEMM rounds inputs to the operand dtype, to the nearest, ties to even") {
    for (DType operands : native_operand_types()) check_against_reference(operands, 2, 45, 70, 100, false);
    ThreadPool pool(1);
    std::vector<float> b = {1.0f, 1.0f}, c = {0.0f};
    if (native_or_skip(DType::bf16)) {
        // bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1. 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
        std::vector<float> a = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
        amx_gemm(DType::bf16, false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1, pool);
        CHECK(c[0] == 2.0f + 0x1p-6f);
    }
    if (native_or_skip(DType::fp16)) {
        // fp16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even is 1; 1 + 3 * 2^-11 rounds up to 1 + 2^-9.
        std::vector<float> h = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
        amx_gemm(DType::fp16, false, false, 1, 1, 2, 1.0f, h.data(), 2, b.data(), 1, 0.0f, c.data(), 1, pool);
        CHECK(c[0] == 2.0f + 0x1p-9f);
    }
}

// The two bf16 planes: an fp16 value has 11 significant bits, bf16 8, so a product taken from the
// leading parts alone would be off; the four partial products make it exact.
TEST_CASE("fp16 operands multiply exactly: 11-bit significands, subnormals, overflow to Inf") {
    if (!native_or_skip(DType::fp16)) return;
    ThreadPool pool(1);
    std::vector<float> one = {1.0f}, c = {0.0f};
    const float x = 1.0f + 0x1p-10f, y = 1.0f + 0x1p-9f + 0x1p-10f;  // exact in fp16, not in bf16
    std::vector<float> a = {x}, b = {y};
    amx_gemm(DType::fp16, false, false, 1, 1, 1, 1.0f, a.data(), 1, b.data(), 1, 0.0f, c.data(), 1, pool);
    CHECK(c[0] == x * y);  // 1 + 2^-9 + 2^-8 + 2^-19 + 2^-20: exact in fp32
    std::vector<float> tiny = {0x1p-24f};  // fp16's smallest subnormal
    amx_gemm(DType::fp16, false, false, 1, 1, 1, 1.0f, tiny.data(), 1, tiny.data(), 1, 0.0f, c.data(), 1, pool);
    CHECK(c[0] == 0x1p-48f);
    std::vector<float> huge = {70000.0f};  // above fp16's 65504: Inf
    amx_gemm(DType::fp16, false, false, 1, 1, 1, 1.0f, huge.data(), 1, one.data(), 1, 0.0f, c.data(), 1, pool);
    CHECK_FALSE(std::isfinite(c[0]));
    std::vector<float> largest = {65504.0f};
    amx_gemm(DType::fp16, false, false, 1, 1, 1, 1.0f, largest.data(), 1, largest.data(), 1, 0.0f, c.data(), 1, pool);
    CHECK(c[0] == 65504.0f * 65504.0f);
}

// What lets a low-precision layer on this GEMM keep no copy of its weights (rounds_parameters_on_read):
// fp32 masters in, the same bits out as from their rounded copy, on either side of the product.
TEST_CASE("the AMX GEMM gives the same bits from fp32 values as from their roundings") {
    const int64_t m = 40, n = 70, k = 100;
    std::mt19937 generator(9);
    const std::vector<float> a = random_values(static_cast<size_t>(m * k), generator, DType::fp32);
    const std::vector<float> b = random_values(static_cast<size_t>(k * n), generator, DType::fp32);
    ThreadPool pool(2);
    for (DType operands : native_operand_types()) {
        std::vector<float> a_rounded(a.size()), b_rounded(b.size());
        round_copy(operands, a.data(), a_rounded.data(), a.size());
        round_copy(operands, b.data(), b_rounded.data(), b.size());
        for (bool transpose_b : {false, true}) {
            const int64_t ldb = transpose_b ? k : n;
            std::vector<float> from_masters(static_cast<size_t>(m * n)), from_copies(from_masters.size());
            amx_gemm(operands, false, transpose_b, m, n, k, 1.0f, a.data(), k, b.data(), ldb, 0.0f, from_masters.data(), n,
                     pool);
            amx_gemm(operands, false, transpose_b, m, n, k, 1.0f, a_rounded.data(), k, b_rounded.data(), ldb, 0.0f,
                     from_copies.data(), n, pool);
            CAPTURE(dtype_name(operands));
            CAPTURE(transpose_b);
            CHECK(std::memcmp(from_masters.data(), from_copies.data(), from_masters.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("the AMX GEMM gives the same bits on any thread count") {
    const int64_t m = 150, n = 290, k = 300;
    std::mt19937 generator(5);
    const std::vector<float> a = random_values(static_cast<size_t>(m * k), generator, DType::fp16);
    const std::vector<float> b = random_values(static_cast<size_t>(k * n), generator, DType::fp16);
    const std::vector<float> c0 = random_values(static_cast<size_t>(m * n), generator, DType::fp32);
    for (DType operands : native_operand_types())
        for (bool transpose_b : {false, true}) {
            std::vector<float> first;
            for (int threads : {1, 2, 3, 5}) {
                ThreadPool pool(threads);
                std::vector<float> c = c0;
                amx_gemm(operands, false, transpose_b, m, n, k, 0.5f, a.data(), k, b.data(), transpose_b ? k : n, 0.25f,
                         c.data(), n, pool);
                if (first.empty()) first = c;
                CAPTURE(dtype_name(operands));
                CAPTURE(threads);
                CAPTURE(transpose_b);
                CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
            }
        }
}

TEST_CASE("the AMX GEMM's packing buffers are charged to the pool's tracker; past its budget, an error and C untouched") {
    if (!native_or_skip(DType::bf16)) return;
    const int64_t m = 200, n = 300, k = 500;
    std::mt19937 generator(8);
    const std::vector<float> a = random_values(static_cast<size_t>(m * k), generator, DType::bf16);
    const std::vector<float> b = random_values(static_cast<size_t>(k * n), generator, DType::bf16);
    MemoryTracker unlimited;
    {
        ThreadPool pool(2);
        pool.charge_scratch_to(&unlimited);
        std::vector<float> c(static_cast<size_t>(m * n));
        amx_gemm(DType::bf16, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n, pool);
        CHECK(unlimited.used() > 0);
        CHECK(unlimited.used() == pool.scratch_bytes());
    }
    CHECK(unlimited.used() == 0);
    // One byte short of what the two threads' tasks and the caller's packed side need: the side
    // fits, a task's buffers do not. Every task reserves before any writes C, so C (here read and
    // written, beta 1, as plain SGD updates the weights) is left as it was.
    size_t total = 0;
    {
        ThreadPool pool(2);
        MemoryTracker counted;
        pool.charge_scratch_to(&counted);
        std::vector<float> c(static_cast<size_t>(m * n));
        amx_gemm(DType::bf16, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, c.data(), n, pool);
        total = counted.used();
    }
    MemoryTracker short_by_one(total - 1);
    ThreadPool pool(2);
    pool.charge_scratch_to(&short_by_one);
    const std::vector<float> before = random_values(static_cast<size_t>(m * n), generator, DType::fp32);
    std::vector<float> c = before;
    try {
        amx_gemm(DType::bf16, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, c.data(), n, pool);
        FAIL("no error past the budget");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
    }
    CHECK(std::memcmp(c.data(), before.data(), c.size() * sizeof(float)) == 0);
    CHECK(short_by_one.used() == pool.scratch_bytes());
    CHECK(short_by_one.used() > 0);  // the side, at least, was reserved: the failure was a task's
}

TEST_CASE("the AMX GEMM: beta 0 overwrites C, NaN included; no products leave beta * C; NaN and Inf propagate") {
    ThreadPool pool(1);
    for (DType operands : native_operand_types()) {
        CAPTURE(dtype_name(operands));
        std::vector<float> a = {1.0f, 2.0f}, b = {3.0f, 4.0f}, c = {NAN};
        amx_gemm(operands, false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1, pool);
        CHECK(c[0] == 11.0f);
        std::vector<float> d = {NAN, 7.0f};
        amx_gemm(operands, false, false, 1, 2, 0, 1.0f, a.data(), 1, b.data(), 2, 0.0f, d.data(), 2, pool);
        CHECK(d[0] == 0.0f);
        CHECK(d[1] == 0.0f);
        std::vector<float> zero_a = {0.0f, 1.0f}, infinite_b = {INFINITY, 2.0f}, e = {0.0f};
        amx_gemm(operands, false, false, 1, 1, 2, 1.0f, zero_a.data(), 2, infinite_b.data(), 1, 0.0f, e.data(), 1, pool);
        CHECK(std::isnan(e[0]));  // 0 * Inf is NaN: a skipped zero would hide an overflow
        std::vector<float> nan_a = {NAN, 1.0f}, f = {0.0f};
        amx_gemm(operands, false, true, 1, 1, 2, 1.0f, nan_a.data(), 2, b.data(), 2, 0.0f, f.data(), 1, pool);
        CHECK(std::isnan(f[0]));
    }
}

// Granting the tile state holds the whole process to larger signal stacks, so only a
// low-precision GEMM's caller may ask for it. ctest runs this case alone in a fresh process
// (MPTRAIN_FRESH_PROCESS=1): in the full run another case has asked already.
TEST_CASE("fp32 work leaves Linux's AMX permission alone; resolving auto to bf16 asks for it") {
#if defined(__x86_64__) && defined(__linux__)
    if (!std::getenv("MPTRAIN_FRESH_PROCESS")) return;
    auto tile_state_permitted = [] {
        unsigned long permitted = 0;
        syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &permitted);
        return (permitted & (1ul << 18)) != 0;
    };
    REQUIRE_FALSE(tile_state_permitted());
    ContextConfig config;
    config.backend = MPT_BACKEND_CPU;
    Context context(config);
    CHECK(resolve_precision(MPT_PRECISION_FP32, context.backend()).compute_dtype == DType::fp32);
    CHECK_FALSE(context.backend().rounds_parameters_on_read(DType::fp32));
    const std::string name = context.backend().device_name();
    CHECK_FALSE(tile_state_permitted());
    CHECK_FALSE(amx_gemm_refused());  // nothing asked yet
    if (!amx_gemm_supported()) {
        CHECK(name.find("amx") == std::string::npos);
        MESSAGE("the rest not tested: " << amx_gemm_unavailable_reason());
        return;
    }
    CHECK(name.find(", amx,") != std::string::npos);
    CHECK(resolve_precision(MPT_PRECISION_AUTO, context.backend()).compute_dtype == DType::bf16);
    CHECK(tile_state_permitted());
    CHECK_FALSE(amx_gemm_refused());
    CHECK(context.backend().device_name() == name);
#endif
}

// ctest runs this file a second time with MPTRAIN_CPU_AMX=0 (MPTRAIN_EXPECT_AMX=off).
TEST_CASE("MPTRAIN_CPU_AMX=0 turns the AMX GEMM off, with the reason") {
    const char* expect = std::getenv("MPTRAIN_EXPECT_AMX");
    if (!expect || std::strcmp(expect, "off") != 0) return;
    CHECK_FALSE(amx_gemm_available());
    CHECK(amx_gemm_unavailable_reason() == "MPTRAIN_CPU_AMX=0");
    CHECK_FALSE(amx_gemm_refused());  // turned off, not refused
    auto backend = create_cpu_backend(1);
    CHECK(backend->device_name().find("amx") == std::string::npos);
    // bf16 on AVX512-BF16 dot products where the CPU has them, fp16 emulated (AMX alone multiplies it).
    CHECK(native_gemm_available(DType::bf16) == amx_gemm_dot_products_supported());
    CHECK_FALSE(native_gemm_available(DType::fp16));
}

// ctest runs this file a third time with both off (MPTRAIN_EXPECT_AMX=emulated): every low-precision
// GEMM is emulated, and auto is fp32.
TEST_CASE("MPTRAIN_CPU_AMX=0 and MPTRAIN_CPU_BF16_DOT=0 leave the low-precision GEMMs emulated") {
    const char* expect = std::getenv("MPTRAIN_EXPECT_AMX");
    if (!expect || std::strcmp(expect, "emulated") != 0) return;
    CHECK_FALSE(amx_gemm_dot_products_supported());
    for (DType operands : {DType::bf16, DType::fp16}) {
        CAPTURE(dtype_name(operands));
        CHECK_FALSE(native_gemm_available(operands));
        CHECK(native_gemm_unavailable_reason(operands).find("MPTRAIN_CPU_AMX=0") != std::string::npos);
    }
    CHECK(native_gemm_unavailable_reason(DType::bf16).find("MPTRAIN_CPU_BF16_DOT=0") != std::string::npos);
    auto backend = create_cpu_backend(1);
    CHECK(backend->preferred_compute_dtype() == DType::fp32);
    CHECK(backend->emulation_warning(DType::bf16).find("bf16 GEMMs are emulated in fp32") != std::string::npos);
}
