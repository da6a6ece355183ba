// The rounded copies of the parameters that a CPU keeps where it multiplies a low precision in
// fp32 (no AMX tiles or AVX512-BF16 dot products for it: mixed-fp16 on Zen 4, mixed-bf16 on AVX2
// CPUs): written after every update, read by the next step's GEMMs. They round as round_copy
// does, bit for bit, but in AVX2 vectors (F16C's conversion for fp16, twice as fast as the
// portable rounding), and, for arrays larger than the caches, with non-temporal stores: nothing
// reads the copy before the next step, and an ordinary store reads each line before writing it.
// On the seed MLP's 12.2 M weights this took a 2-thread copy from 5.4 to 2.2 ms (fp16) and from
// 3.0 to 2.2 ms (bf16) on Zen 4 (bench/NOTES.md, "Rounded copies").
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace mpt {

// Arrays of at least this many bytes are written past the caches (4 MiB: more than any core's L2,
// and a whole step's traffic passes through L3 before the copy is read).
constexpr size_t kStreamedCopyBytes = size_t{4} << 20;

// destination[i] = round_to(dtype, source[i]) for i < count; `streamed` stores past the caches (the
// caller's thread then fences, so that whoever it hands the copy to sees it). destination may be
// source.
void write_rounded_copy(DType dtype, const float* source, float* destination, size_t count, bool streamed);

// Whether write_rounded_copy runs in vectors on this CPU (AVX2 and F16C); otherwise it is round_copy.
bool rounded_copy_vectorised();

}  // namespace mpt
