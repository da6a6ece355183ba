// See mma_m16n8k16.h.
#include "cuda_emulation/mma_m16n8k16.h"

#include <cuda_fp16.h>

#include <cstring>

#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/race_check.h"
#include "mma_m16n8k16_reference.h"

namespace mpt_emulation {

namespace {

// Element 2j of a fragment's word is its low half, 2j + 1 its high one.
double element(bool bf16, uint32_t word, int half) {
    const uint16_t bits = static_cast<uint16_t>(half ? word >> 16 : word & 0xffffu);
    if (bf16) {
        const uint32_t wide = static_cast<uint32_t>(bits) << 16;
        float value;
        std::memcpy(&value, &wide, 4);
        return static_cast<double>(value);
    }
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
        for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 8; ++i) {
                const mma_reference::Place p = mma_reference::ptx_a(lane, i);
                am[p.row][p.col] = element(bf16, all[lane].a[i / 2], i & 1);
            }
            for (int i = 0; i < 4; ++i) {
                const mma_reference::Place p = mma_reference::ptx_b(lane, i);
                bm[p.row][p.col] = element(bf16, all[lane].b[i / 2], i & 1);
            }
        }
    }
    const int lane = static_cast<int>(lane_index());
    for (int i = 0; i < 4; ++i) {
        const mma_reference::Place p = mma_reference::ptx_c(lane, i);
        double sum = d[i];
        for (int k = 0; k < 16; ++k) sum += am[p.row][k] * bm[k][p.col];
        d[i] = static_cast<float>(sum);
    }
}

}  // namespace mpt_emulation
