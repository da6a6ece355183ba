// Which GEMMs cuBLASLt may split along K (src/backend/cuda/gemm_split_k_rule.h), checked on the CPU,
// where every build runs it: the switches' three settings, the tile count's edges, and the seed
// MLP's GEMMs on an H200's 132 multiprocessors at the bench's three batches, where
// MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 must keep batch 4096's large forward and input-gradient GEMMs
// whole (their split K ran the epilogue as a pass of its own) and leave batch 32's and 256's, which
// need the split to fill the GPU, as the default has them. What cuBLASLt then picks runs only on a
// GPU (test_cuda_fast_paths "MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 ...").
#include <doctest/doctest.h>

#include <array>
#include <cstdint>

#include "backend/cuda/gemm_split_k_rule.h"

using mpt::gemm_may_split_k;

namespace {

constexpr int kH200Multiprocessors = 132;

bool small_outputs_split(int64_t m, int64_t n) { return gemm_may_split_k(m, n, true, true, kH200Multiprocessors); }

}  // namespace

TEST_CASE("split K off forbids every split, on without the rule allows every one") {
    for (const int64_t m : {1, 16, 3000, 100000}) {
        for (const int64_t n : {1, 32, 4096}) {
            CHECK_FALSE(gemm_may_split_k(m, n, false, false, kH200Multiprocessors));
            CHECK_FALSE(gemm_may_split_k(m, n, false, true, kH200Multiprocessors));
            CHECK(gemm_may_split_k(m, n, true, false, kH200Multiprocessors));
        }
    }
}

TEST_CASE("the small-outputs rule counts whole and part 128 x 128 tiles against the multiprocessors") {
    // 131 tiles split, 132 do not (fewer tiles than multiprocessors).
    CHECK(small_outputs_split(131 * 128, 128));
    CHECK_FALSE(small_outputs_split(132 * 128, 128));
    CHECK(small_outputs_split(128, 131 * 128));
    CHECK_FALSE(small_outputs_split(128, 132 * 128));
    // A part tile counts as one: 129 x 129 is 4 tiles, 11 x 12 part tiles 132.
    CHECK(gemm_may_split_k(129, 129, true, true, 5));
    CHECK_FALSE(gemm_may_split_k(129, 129, true, true, 4));
    CHECK(small_outputs_split(10 * 128 + 1, 11 * 128));            // 11 x 11 = 121
    CHECK_FALSE(small_outputs_split(11 * 128 - 5, 12 * 128 - 7));  // 11 x 12 = 132
    // A single tile never fills more than one multiprocessor; a device of one never splits.
    CHECK(small_outputs_split(1, 1));
    CHECK_FALSE(gemm_may_split_k(1, 1, true, true, 1));
}

TEST_CASE("the small-outputs rule on the seed MLP's GEMMs (3072-3000-1000-16, an H200)") {
    // D's shape as the ops give it to cuBLASLt (m x n; the rule is the same either way round).
    struct Gemm {
        const char* what;
        int64_t outputs, other;  // D is outputs x other
    };
    auto forward = [](int64_t batch) {
        return std::array<Gemm, 3>{Gemm{"forward 3072 -> 3000", 3000, batch}, Gemm{"forward 3000 -> 1000", 1000, batch},
                                   Gemm{"forward 1000 -> 16", 16, batch}};
    };
    auto input_gradients = [](int64_t batch) {
        return std::array<Gemm, 2>{Gemm{"input gradient 1000 -> 3000", 3000, batch},
                                   Gemm{"input gradient 16 -> 1000", 1000, batch}};
    };
    // The weight gradients' D does not depend on the batch (K does).
    const Gemm weight_gradients[] = {{"weight gradient 3000 x 3072", 3000, 3072},
                                     {"weight gradient 1000 x 3000", 1000, 3000},
                                     {"weight gradient 16 x 1000", 16, 1000}};

    for (const int64_t batch : {32, 256}) {
        CAPTURE(batch);
        for (const Gemm& gemm : forward(batch)) {
            CAPTURE(gemm.what);
            CHECK(small_outputs_split(gemm.outputs, gemm.other));
        }
        for (const Gemm& gemm : input_gradients(batch)) {
            CAPTURE(gemm.what);
            CHECK(small_outputs_split(gemm.outputs, gemm.other));
        }
    }
    // Batch 4096: the large forward and input-gradient GEMMs (768 and 256 tiles) whole; the logits'
    // 32 tiles may still split.
    const auto large_forward = forward(4096);
    CHECK_FALSE(small_outputs_split(large_forward[0].outputs, large_forward[0].other));
    CHECK_FALSE(small_outputs_split(large_forward[1].outputs, large_forward[1].other));
    CHECK(small_outputs_split(large_forward[2].outputs, large_forward[2].other));
    for (const Gemm& gemm : input_gradients(4096)) {
        CAPTURE(gemm.what);
        CHECK_FALSE(small_outputs_split(gemm.outputs, gemm.other));
    }
    // The two large weight gradients (576 and 192 tiles) whole at any batch; the last layer's (8) not.
    CHECK_FALSE(small_outputs_split(weight_gradients[0].outputs, weight_gradients[0].other));
    CHECK_FALSE(small_outputs_split(weight_gradients[1].outputs, weight_gradients[1].other));
    CHECK(small_outputs_split(weight_gradients[2].outputs, weight_gradients[2].other));
}
