// Which fp32 masters the fused SGD kernels ask L2 to keep (src/backend/cuda/l2_resident_masters.h),
// checked on the CPU, where every build runs it: the seed MLP's layers on an H200's L2 in mixed
// precision and in fp32, the budget's edges (no set-aside, copies that fill L2, a layer without a
// kept kernel), and random task shapes against the rule's invariants: shares in sixteenths, smaller
// layers first, never past the budget, the set-aside asked for what the shares hold. Whether L2 then
// keeps them, and what that saves, only a GPU shows (test_cuda_fast_paths
// "MPTRAIN_CUDA_L2_RESIDENT_MASTERS=1 ..." and the device check's stage).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/l2_resident_masters.h"

namespace l2 = mpt::l2_residency;

namespace {

// An H100's or H200's L2 as cudaGetDeviceProperties gives it (50 MiB), and a set-aside of at most
// three quarters of it (an assumption: the device's persistingL2CacheMaxSize decides on a GPU).
constexpr int64_t kH200L2 = 50LL << 20;
constexpr int64_t kH200SetAsideMax = kH200L2 / 4 * 3;

// A layer of `out` x `in` weights and `out` biases: 4 bytes a master, `copy_bytes` a copy.
l2::LayerBytes layer(int64_t out, int64_t in, int64_t copy_bytes) {
    const int64_t values = out * in + out;
    return l2::LayerBytes{values * 4, values * copy_bytes};
}

// The seed MLP's fused SGD updates in a step's order (3072 -> 3000 -> 1000 -> 16 padded outputs).
std::vector<l2::LayerBytes> seed_mlp(int64_t copy_bytes) {
    return {layer(3000, 3072, copy_bytes), layer(1000, 3000, copy_bytes), layer(16, 1000, copy_bytes)};
}

int64_t sixteenths_bytes(int64_t masters, float fraction) {
    const int64_t steps = static_cast<int64_t>(fraction * 16.0f);
    return (masters * steps + 15) / 16;
}

}  // namespace

TEST_CASE("mixed precision on an H200: the last two layers' masters whole, a sixteenth of the first's") {
    const std::vector<l2::LayerBytes> layers = seed_mlp(2);
    // Copies 24.5 MB, a quarter of L2 free: 52.4 - 13.1 - 24.5 = 14.8 MB for masters.
    CHECK(l2::budget(layers, kH200L2, kH200SetAsideMax) == 52428800 - 13107200 - 24472032);
    const l2::KeptMasters kept = l2::choose(layers, kH200L2, kH200SetAsideMax);
    REQUIRE(kept.fractions.size() == 3);
    CHECK(kept.fractions[0] == 1.0f / 16);
    CHECK(kept.fractions[1] == 1.0f);
    CHECK(kept.fractions[2] == 1.0f);
    CHECK(kept.kept_bytes == 36876000 / 16 + 12004000 + 64064);
    CHECK(kept.kept_bytes <= l2::budget(layers, kH200L2, kH200SetAsideMax));
}

TEST_CASE("fp32 on an H200: no copies, so eleven sixteenths of the first layer fit beside the others") {
    const std::vector<l2::LayerBytes> layers = seed_mlp(0);
    CHECK(l2::budget(layers, kH200L2, kH200SetAsideMax) == kH200SetAsideMax);
    const l2::KeptMasters kept = l2::choose(layers, kH200L2, kH200SetAsideMax);
    CHECK(kept.fractions[0] == 11.0f / 16);
    CHECK(kept.fractions[1] == 1.0f);
    CHECK(kept.fractions[2] == 1.0f);
    CHECK(kept.kept_bytes == (36876000 * 11 + 15) / 16 + 12004000 + 64064);
}

TEST_CASE("nothing is kept without a set-aside, or where the copies leave no room") {
    const std::vector<l2::LayerBytes> layers = seed_mlp(2);
    const l2::KeptMasters none = l2::choose(layers, kH200L2, 0);
    CHECK(none.kept_bytes == 0);
    for (const float fraction : none.fractions) CHECK(fraction == 0.0f);
    // An L2 of 30 MiB: three quarters of it (23.6 MB) less 24.5 MB of copies is nothing.
    const l2::KeptMasters crowded = l2::choose(layers, 30LL << 20, 22LL << 20);
    CHECK(l2::budget(layers, 30LL << 20, 22LL << 20) == 0);
    CHECK(crowded.kept_bytes == 0);
    for (const float fraction : crowded.fractions) CHECK(fraction == 0.0f);
    // The set-aside's maximum bounds the budget below L2's three quarters.
    CHECK(l2::budget(seed_mlp(0), kH200L2, 1000000) == 1000000);
    const l2::KeptMasters small = l2::choose(seed_mlp(0), kH200L2, 1000000);
    CHECK(small.fractions[2] == 1.0f);       // 64 KB
    CHECK(small.fractions[1] == 1.0f / 16);  // 750 KB of the 12 MB
    CHECK(small.fractions[0] == 0.0f);
}

TEST_CASE("a layer whose kernel cannot keep its masters takes no share, but its copies count") {
    std::vector<l2::LayerBytes> layers = seed_mlp(2);
    layers[1].masters = 0;  // (the backend's mark for a kernel without a kept variant)
    const l2::KeptMasters kept = l2::choose(layers, kH200L2, kH200SetAsideMax);
    CHECK(kept.fractions[1] == 0.0f);
    CHECK(kept.fractions[2] == 1.0f);
    // The budget still takes layer 1's copies: 14.8 MB less 64 KB, 6 sixteenths of the first layer.
    CHECK(kept.fractions[0] == 6.0f / 16);
}

TEST_CASE("random tasks: shares in sixteenths, smaller layers first, within the budget") {
    std::mt19937_64 random(20261205);
    std::uniform_int_distribution<int64_t> width(1, 5000);
    std::uniform_int_distribution<int> count(1, 6);
    l2::KeptMasters reused;  // as the backend keeps one across steps: nothing left of the trial before
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<l2::LayerBytes> layers;
        const int64_t copy_bytes = trial % 3 == 0 ? 0 : 2;
        for (int l = count(random); l > 0; --l) layers.push_back(layer(width(random), width(random), copy_bytes));
        const int64_t l2_bytes = (trial % 2 == 0 ? 40LL : 50LL) << 20;
        const int64_t set_aside_max = trial % 5 == 0 ? l2_bytes / 8 : l2_bytes / 4 * 3;
        const l2::KeptMasters kept = l2::choose(layers, l2_bytes, set_aside_max);
        REQUIRE(kept.fractions.size() == layers.size());
        int64_t held = 0;
        for (size_t l = 0; l < layers.size(); ++l) {
            const float fraction = kept.fractions[l];
            CHECK(fraction >= 0.0f);
            CHECK(fraction <= 1.0f);
            CHECK(fraction * 16.0f == static_cast<float>(static_cast<int>(fraction * 16.0f)));
            held += sixteenths_bytes(layers[l].masters, fraction);
            // A larger layer never keeps a larger share than a smaller one.
            for (size_t other = 0; other < layers.size(); ++other)
                if (layers[other].masters > layers[l].masters) CHECK(kept.fractions[other] <= fraction);
        }
        CHECK(held == kept.kept_bytes);
        CHECK(kept.kept_bytes <= l2::budget(layers, l2_bytes, set_aside_max));
        l2::choose_into(layers, l2_bytes, set_aside_max, reused);
        CHECK(reused.fractions == kept.fractions);
        CHECK(reused.kept_bytes == kept.kept_bytes);
    }
}
