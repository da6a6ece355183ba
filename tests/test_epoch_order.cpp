// Epoch orders: the keyed shuffle of data/epoch_order.h is a permutation, deterministic in its seed,
// different across seeds, unbiased over small permutations, and what the CPU backend's fill_order
// writes. (tests/test_cuda_pipeline.cpp checks the CUDA backend against the same reference.)
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "data/epoch_order.h"

namespace {

using namespace mpt;

std::vector<int32_t> order_of(int64_t rows, bool shuffle, uint64_t seed) {
    std::vector<int32_t> order(static_cast<size_t>(rows), -1);
    std::vector<uint64_t> keys;
    make_epoch_order(order.data(), rows, shuffle, seed, keys);
    return order;
}

bool is_permutation_of_rows(const std::vector<int32_t>& order) {
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
        if (sorted[i] != static_cast<int32_t>(i)) return false;
    return true;
}

}  // namespace

TEST_CASE("without shuffling the order is the identity") {
    const std::vector<int32_t> order = order_of(1000, false, 1234);
    for (size_t i = 0; i < order.size(); ++i) REQUIRE(order[i] == static_cast<int32_t>(i));
}

TEST_CASE("a shuffled order is a permutation, fixed by its seed and different for another") {
    for (int64_t rows : {1, 2, 7, 1000, 50000}) {
        CAPTURE(rows);
        const std::vector<int32_t> a = order_of(rows, true, 42);
        CHECK(is_permutation_of_rows(a));
        CHECK(a == order_of(rows, true, 42));
        if (rows >= 7) {
            std::vector<int32_t> identity(static_cast<size_t>(rows));
            std::iota(identity.begin(), identity.end(), 0);
            CHECK(a != identity);
            CHECK(a != order_of(rows, true, 43));
        }
    }
}

TEST_CASE("keys never tie, so every sort yields the same order") {
    // splitmix64's finaliser is a bijection and the counters are distinct.
    std::vector<uint64_t> keys;
    for (uint64_t row = 0; row < 100000; ++row) keys.push_back(epoch_order_key(0x1234567890abcdefULL, row));
    std::sort(keys.begin(), keys.end());
    CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
}

TEST_CASE("all orders of four rows are equally likely over seeds") {
    constexpr int kSeeds = 24000;
    std::map<std::vector<int32_t>, int> counts;
    // Independent seeds, as the trainer draws them (a seed per epoch from its generator): seeds in
    // arithmetic steps of the key's own increment would share keys and not be independent draws.
    std::mt19937_64 seeds(2024);
    for (int trial = 0; trial < kSeeds; ++trial) ++counts[order_of(4, true, seeds())];
    CHECK(counts.size() == 24);
    // Expected 1000 each; a binomial standard deviation is about 31, so 850..1150 is ~5 sigma.
    for (const auto& entry : counts) {
        CHECK(entry.second > 850);
        CHECK(entry.second < 1150);
    }
}

TEST_CASE("the CPU backend's fill_order writes the reference order") {
    auto backend = create_cpu_backend(1);
    for (bool shuffle : {false, true}) {
        const int64_t rows = 4099;
        std::vector<int32_t> written(static_cast<size_t>(rows), -1);
        backend->fill_order(written.data(), rows, shuffle, 99);
        CHECK(written == order_of(rows, shuffle, 99));
    }
}
