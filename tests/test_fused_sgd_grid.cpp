// The fused SGD kernel's grid (src/backend/cuda/fused_sgd_grid_layout.h), checked on the CPU, where
// every build runs it: each block of a launch mapped to its layer, column strip and run of row tiles
// as the kernel maps it, and every tile of every strip of every layer required to be updated by
// exactly one block, with no block left without a tile, for one layer and for groups, at the
// resident block counts of small and large GPUs. The kernels' updates themselves run only on a GPU
// (test_cuda_ops compares them with the CPU backend there).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/fused_sgd_grid_layout.h"

using namespace mpt::fused_sgd_tiles;

namespace {

void check_grid(const std::vector<LayerShape>& layers, int64_t resident) {
    CAPTURE(resident);
    CAPTURE(layers.size());
    CAPTURE(layers[0].in_features);
    CAPTURE(layers[0].out_features);
    const int count = static_cast<int>(layers.size());
    const Grid grid = plan(layers.data(), count, resident);
    unsigned first_block[kMaxLayers + 1];
    for (int l = 0; l <= count; ++l) first_block[l] = static_cast<unsigned>(grid.first_block[l]);

    std::vector<std::vector<int>> updates(layers.size());  // [layer][tile * strips + strip]
    int64_t strips_in_all = 0;
    for (int l = 0; l < count; ++l) {
        updates[l].assign(static_cast<size_t>(tiles(layers[l].out_features) * strips(layers[l].in_features)), 0);
        strips_in_all += strips(layers[l].in_features);
        CHECK(grid.tiles_per_block[l] >= 1);
    }
    int64_t empty_blocks = 0;
    for (int64_t block = 0; block < grid.blocks; ++block) {
        const int layer = block_layer(first_block, count, static_cast<unsigned>(block));
        const LayerShape& shape = layers[layer];
        const int64_t layer_strips = strips(shape.in_features);
        const int64_t local = block - first_block[layer];
        const int64_t strip = block_strip(local, layer_strips);
        const int64_t run = block_run(local, layer_strips);
        const int64_t first = run_first_tile(run, grid.tiles_per_block[layer]);
        const int64_t end = run_end_tile(run, grid.tiles_per_block[layer], shape.out_features);
        if (first >= end) ++empty_blocks;
        for (int64_t tile = first; tile < end; ++tile) ++updates[layer][tile * layer_strips + strip];
    }
    CHECK(empty_blocks == 0);
    int64_t wrong = 0;
    for (const std::vector<int>& layer : updates)
        for (int count_of_tile : layer) wrong += count_of_tile != 1;
    CHECK(wrong == 0);
    // As many blocks as are resident, give or take a run per strip (every strip gets at least one).
    CHECK(grid.blocks <= resident + strips_in_all);
    CHECK(grid.first_block[0] == 0);
    CHECK(grid.first_block[count] == grid.blocks);
}

}  // namespace

TEST_CASE("the fused SGD grid updates every tile of the seed MLP's layers once, alone and as a group") {
    const std::vector<LayerShape> seed = {{3072, 3000}, {3000, 1000}, {1000, 16}};
    for (int64_t resident : {30, 132, 264, 396, 1056}) {  // an RTX 2060's 30 SMs to 8 blocks on each of an H200's
        for (const LayerShape& layer : seed) check_grid({layer}, resident);
        check_grid(seed, resident);
        check_grid({seed[1], seed[2]}, resident);
    }
    // The H200's grid for the seed MLP's group, by the formula the NOTES quote: 192 + 48 + 8 of 264.
    const Grid grid = plan(seed.data(), 3, 264);
    CHECK(grid.first_block[1] - grid.first_block[0] == 24 * 8);
    CHECK(grid.first_block[2] - grid.first_block[1] == 24 * 2);
    CHECK(grid.first_block[3] - grid.first_block[2] == 8);
}

TEST_CASE("the fused SGD grid updates every tile once for odd and extreme shapes") {
    for (int64_t resident : {1, 7, 132, 264}) {
        check_grid({{3001, 2000}}, resident);
        check_grid({{45, 13}}, resident);
        check_grid({{1, 1}}, resident);
        check_grid({{129, 33}}, resident);
        check_grid({{4096, 4096}}, resident);
        check_grid({{5, 100000}}, resident);
        check_grid({{100000, 5}}, resident);
        check_grid({{3001, 2000}, {45, 13}, {1, 1}, {129, 33}}, resident);
    }
}

TEST_CASE("the fused SGD grid updates every tile once for random groups") {
    std::mt19937 random(20261205);
    std::uniform_int_distribution<int64_t> features(1, 5000), layer_count(1, kMaxLayers), resident(1, 2000);
    for (int i = 0; i < 200; ++i) {
        std::vector<LayerShape> layers(static_cast<size_t>(layer_count(random)));
        for (LayerShape& layer : layers) layer = {features(random), features(random)};
        check_grid(layers, resident(random));
    }
}
