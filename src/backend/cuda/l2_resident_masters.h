// Which fp32 masters a step's fused SGD updates ask L2 to keep (MPTRAIN_CUDA_L2_RESIDENT_MASTERS=1),
// as a plain function that CudaBackend calls for each recorded task and a CPU test
// (tests/test_l2_resident_masters.cpp) checks on the seed MLP's layers.
//
// At batch 32 the fused SGD kernels move 10 bytes a weight: the fp32 master read and written, the
// low-precision copy written (the next step's forward reads the copy back from L2, where the masters'
// streaming accesses leave it). For the seed MLP that is 122 MB a step, most of the step's DRAM
// traffic; its smaller layers' masters would fit in L2 beside the copies (an H200's L2 holds 50 MiB,
// the copies take 24.5 MB, the second layer's masters 12 MB). A master kept there is read and written
// in L2 every step, never in DRAM. The kernels then load and store a share of a layer's masters with
// L2's evict-last priority (PTX createpolicy.fractional, in steps of 1/16 of its lines) and the rest
// as streaming data as before, and the backend sets aside as much of L2 for them (evict-last lines
// are what the persisting set-aside holds).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mpt {

namespace l2_residency {

// createpolicy's fraction is a multiple of 1/16 of a range's lines.
constexpr int kFractionSteps = 16;

// A fused SGD update's bytes: its fp32 masters (weights and bias), read and written every step, and
// its low-precision copies (0 in fp32), written by the update and read by the next step's forward.
struct LayerBytes {
    int64_t masters = 0;
    int64_t copies = 0;
};

struct KeptMasters {
    std::vector<float> fractions;  // per layer, the share of its masters kept (multiples of 1/16; 0: none)
    int64_t kept_bytes = 0;        // what those shares hold: the L2 set-aside they need
    std::vector<size_t> order;     // choose_into's scratch: the layers by size (kept, so that a caller
                                   // that reuses one KeptMasters allocates nothing per step)
};

// What stays free of kept masters: a quarter of L2 and every layer's copies (activations, gradients
// and the copies' own lines need room; L2 is no perfect LRU). A guess until a GPU has measured it.
inline int64_t budget(const std::vector<LayerBytes>& layers, int64_t l2_bytes, int64_t set_aside_max) {
    int64_t copies = 0;
    for (const LayerBytes& layer : layers) copies += layer.copies;
    return std::max<int64_t>(0, std::min(set_aside_max, l2_bytes - l2_bytes / 4 - copies));
}

// The smallest layers' masters first, each whole while the budget lasts, then the largest share of
// the next one in sixteenths that fits; nothing on a device without a set-aside (set_aside_max 0:
// compute capability below 8.0, or MIG). Into `kept`, whose vectors keep their capacity.
inline void choose_into(const std::vector<LayerBytes>& layers, int64_t l2_bytes, int64_t set_aside_max,
                        KeptMasters& kept) {
    kept.fractions.assign(layers.size(), 0.0f);
    kept.kept_bytes = 0;
    int64_t left = budget(layers, l2_bytes, set_aside_max);
    std::vector<size_t>& order = kept.order;
    order.resize(layers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    // (Insertion sort, stable: a step has a few layers, and std::stable_sort may allocate.)
    for (size_t i = 1; i < order.size(); ++i)
        for (size_t j = i; j > 0 && layers[order[j]].masters < layers[order[j - 1]].masters; --j)
            std::swap(order[j], order[j - 1]);
    for (const size_t l : order) {
        const int64_t masters = layers[l].masters;
        if (masters <= 0) continue;
        const int64_t steps = std::min<int64_t>(kFractionSteps, left * kFractionSteps / masters);
        if (steps <= 0) break;
        // The bytes of `steps` sixteenths, rounded up (a part line is a whole one).
        const int64_t bytes = (masters * steps + kFractionSteps - 1) / kFractionSteps;
        kept.fractions[l] = static_cast<float>(steps) / kFractionSteps;
        kept.kept_bytes += bytes;
        left -= bytes;
    }
}

inline KeptMasters choose(const std::vector<LayerBytes>& layers, int64_t l2_bytes, int64_t set_aside_max) {
    KeptMasters kept;
    choose_into(layers, l2_bytes, set_aside_max, kept);
    return kept;
}

}  // namespace l2_residency

}  // namespace mpt
