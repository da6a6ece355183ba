// See mma_m16n8k16.h.
#include "cuda_emulation/mma_m16n8k16.h"

#include <cuda_fp16.h>

#include "core/float_bits.h"
#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/race_check.h"
#include "mma_m16n8k16_reference.h"

namespace mpt_emulation {

namespace {

// Element 2j of a fragment's word is its low half, 2j + 1 its high one.
double element(bool bf16, uint32_t word, int half) {
    const uint16_t bits = static_cast<uint16_t>(half ? word >> 16 : word & 0xffffu);
    if (bf16) return static_cast<double>(mpt::bits_float(static_cast<uint32_t>(bits) << 16));
    __half_raw raw;
    raw.x = bits;
    return static_cast<double>(__half2float(__half(raw)));
}

}  // namespace

void warp_mma_m16n8k16(bool bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    struct Fragments {
        uint32_t a[4];
        uint32_t b[2];
    };
    const Fragments mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
    Fragments all[32];
    gather_lanes(0xffffffffu, &mine, sizeof(mine), all);
    const race_check::OwnMemory own;  // (the emulation's memory, should a copy above be a call)
    // The operands as matrices, placed once a warp's mma by its first lane to get here (the lanes of
    // one OS thread's blocks run one at a time, and all of one collective's between it and the next).
    thread_local struct {
        const void* warp = nullptr;
        uint64_t collective = 0;
        double am[16][16], bm[16][8];
    } placed;
    double(&am)[16][16] = placed.am;
    double(&bm)[16][8] = placed.bm;
    if (placed.warp != warp_identity() || placed.collective != warp_collectives_completed()) {
        placed.warp = warp_identity();
        placed.collective = warp_collectives_completed();
        mma_reference::place_operands([&](int lane, int i) { return element(bf16, all[lane].a[i / 2], i & 1); },
                                      [&](int lane, int i) { return element(bf16, all[lane].b[i / 2], i & 1); }, am,
                                      bm);
    }
    const int lane = static_cast<int>(lane_index());
    for (int i = 0; i < 4; ++i) d[i] = static_cast<float>(mma_reference::mma_element(lane, i, d[i], am, bm));
}

}  // namespace mpt_emulation
