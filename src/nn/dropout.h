// Dropout's masks, drawn from a counter-based hash rather than stored: whether a value is kept is a
// function of (the trainer's dropout seed, the step count, the layer, the value's index), so the
// backward pass draws the forward's mask again, a CUDA graph replays with the step count read on the
// device, and every backend keeps exactly the same values.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace mpt {

// One dropout application's draw: which step and layer, and how much it drops.
struct DropoutDraw {
    uint64_t seed = 0;        // the trainer's (Trainer::dropout_seed)
    int64_t layer = 0;        // whose outputs (and their gradient) it masks
    uint32_t threshold = 0;   // a value is dropped when its 32 random bits fall below this
    float scale = 1.0f;       // what a kept value is multiplied by: 1 / (1 - rate)
};

// The rates a layer may drop: [0, 1). 0 means no dropout.
inline bool valid_dropout_rate(float rate) { return rate >= 0.0f && rate < 1.0f; }

// The draw for `rate` in (0, 1): dropped with probability threshold / 2^32, rate to within 2^-32.
inline DropoutDraw dropout_draw(uint64_t seed, int64_t layer, float rate) {
    DropoutDraw draw;
    draw.seed = seed;
    draw.layer = layer;
    draw.threshold = static_cast<uint32_t>(static_cast<double>(rate) * 4294967296.0);
    draw.scale = 1.0f / (1.0f - rate);  // Keras's inverted dropout: the expected value is kept
    return draw;
}

// The inputs' masks (a Keras Dropout before the first Dense) draw as layer `layer_count`: past every
// hidden layer, and the last layer never drops.
inline int64_t input_dropout_layer(int64_t layer_count) { return layer_count; }

// splitmix64's finaliser: every input bit moves every output bit.
MPT_HOST_DEVICE uint64_t mix_bits(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The key of one step's mask of one layer. `step` is TrainState::steps, which only finish_step
// advances: the forward and the backward of a step draw the same mask, the next step another.
MPT_HOST_DEVICE uint64_t dropout_key(uint64_t seed, int64_t step, int64_t layer) {
    return mix_bits(seed ^ mix_bits(static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(layer)));
}

// Whether the value at `index` of the masked [rows, width] array is kept.
MPT_HOST_DEVICE bool dropout_keeps(uint64_t key, uint32_t threshold, int64_t index) {
    const uint64_t bits = mix_bits(key + (static_cast<uint64_t>(index) + 1) * 0x9e3779b97f4a7c15ULL);
    return static_cast<uint32_t>(bits >> 32) >= threshold;
}

}  // namespace mpt
