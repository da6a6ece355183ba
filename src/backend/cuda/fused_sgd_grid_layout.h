// How the fused SGD kernel's grid covers the layers of a launch (cuda_fused_sgd_launch.cuh), as
// plain functions the launch and the kernel call and a CPU test (tests/test_fused_sgd_grid.cpp)
// checks: every 32-row tile of every 128-column strip of every layer updated by exactly one block,
// no block without a tile.
//
// A launch updates 1 to kMaxLayers layers. Blocks [first_block[l], first_block[l + 1]) are layer l's:
// its column strips times runs of consecutive row tiles, block by block strip first. As many blocks
// as are resident on the device at once, shared among the layers in proportion to their weights
// (a layer alone gets them all), with at least one run per strip.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host_device.h"

namespace mpt::fused_sgd_tiles {

constexpr int kStripColumns = 128;  // input columns a block owns
constexpr int kTileRows = 32;       // output rows a block updates at a time
constexpr int kMaxLayers = 4;       // layers one launch updates at most

MPT_HOST_DEVICE int64_t strips(int64_t in_features) { return (in_features + kStripColumns - 1) / kStripColumns; }
MPT_HOST_DEVICE int64_t tiles(int64_t out_features) { return (out_features + kTileRows - 1) / kTileRows; }

struct LayerShape {
    int64_t in_features, out_features;
};

struct Grid {
    int64_t tiles_per_block[kMaxLayers] = {};  // consecutive row tiles a block walks through
    int64_t first_block[kMaxLayers + 1] = {};
    int64_t blocks = 0;
};

// The grid for `count` layers when `resident` blocks of the kernel fit on the device at once.
inline Grid plan(const LayerShape* layers, int count, int64_t resident) {
    Grid grid;
    double weights = 0.0;
    for (int l = 0; l < count; ++l)
        weights += static_cast<double>(layers[l].out_features) * static_cast<double>(layers[l].in_features);
    for (int l = 0; l < count; ++l) {
        const int64_t layer_strips = strips(layers[l].in_features);
        const int64_t layer_tiles = tiles(layers[l].out_features);
        const double share = count == 1 ? 1.0
                                        : static_cast<double>(layers[l].out_features) *
                                              static_cast<double>(layers[l].in_features) / weights;
        const auto layer_resident = static_cast<int64_t>(static_cast<double>(resident) * share);
        const int64_t runs_per_strip =
            std::max<int64_t>(1, std::min<int64_t>(layer_tiles, layer_resident / layer_strips));
        grid.tiles_per_block[l] = (layer_tiles + runs_per_strip - 1) / runs_per_strip;
        const int64_t runs = (layer_tiles + grid.tiles_per_block[l] - 1) / grid.tiles_per_block[l];
        grid.first_block[l] = grid.blocks;
        grid.blocks += layer_strips * runs;
    }
    grid.first_block[count] = grid.blocks;
    return grid;
}

// The layer of block `block` of a launch whose layers start at first_block[0 .. count).
MPT_HOST_DEVICE int block_layer(const unsigned* first_block, int count, unsigned block) {
    int layer = 0;
    for (int l = 1; l < count; ++l)
        if (block >= first_block[l]) layer = l;
    return layer;
}

// A layer's block `local` (counted from its first): its column strip and its run of row tiles.
MPT_HOST_DEVICE int64_t block_strip(int64_t local, int64_t layer_strips) { return local % layer_strips; }
MPT_HOST_DEVICE int64_t block_run(int64_t local, int64_t layer_strips) { return local / layer_strips; }

// The row tiles [run_first_tile, run_end_tile) of run `run`: none past the layer's last.
MPT_HOST_DEVICE int64_t run_first_tile(int64_t run, int64_t tiles_per_block) { return run * tiles_per_block; }
MPT_HOST_DEVICE int64_t run_end_tile(int64_t run, int64_t tiles_per_block, int64_t out_features) {
    const int64_t end = (run + 1) * tiles_per_block;
    return end < tiles(out_features) ? end : tiles(out_features);
}

}  // namespace mpt::fused_sgd_tiles
