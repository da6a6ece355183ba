// One warp's mma.m16n8k16 (row.col, fp16 or bf16 operands, fp32 sums) on the emulated threads:
// emulated_device.h's mma_m16n8k16 calls it. Compiled with the emulation's runtime, not with the
// kernels, so that the race check does not instrument its arithmetic, whose operands are the lanes'
// registers and the emulation's own cache of them: instrumented, it was a tenth of the race-checked
// kernels' time.
#pragma once

#include <cstdint>

namespace mpt_emulation {

// Every lane's fragments gathered, placed by the PTX ISA's layout (tests/mma_m16n8k16_reference.h),
// and each lane's 4 sums of 16 products added to its accumulators `d` (in double, then rounded once:
// the hardware's order and intermediate rounding are its own).
void warp_mma_m16n8k16(bool bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

}  // namespace mpt_emulation
