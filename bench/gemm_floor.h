// The CPU floor of one training step: the time of its bare GEMMs (forward, weight gradient, and
// input gradient for every layer but the first), nothing else.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

// µs of the step's GEMMs for an MLP with `widths` (input first) at `batch` rows: the fastest of
// `repeats` runs (a floor is the best the machine did; the bench's step time is a median), and the
// faster of two ways to run them on `threads` threads (0: every core): OpenBLAS's own threading,
// and mptrain's split of single-threaded GEMMs across its pool (the portable GEMM without OpenBLAS).
// `compute`: the step's compute dtype; where the CPU multiplies it natively (AMX tiles: bf16 and
// fp16; AVX512-BF16 dot products: bf16; amx_gemm.h), the step's GEMMs run there, and so do the
// floor's. Elsewhere they run in fp32 GEMMs and the floor is fp32's.
// `frozen_layers`: the first that many layers are frozen, so they take no weight gradient and the
// input gradients stop at the lowest trainable layer.
double measure_gemm_floor_us(const std::vector<int64_t>& widths, int64_t batch, int repeats, int threads,
                             mpt::DType compute, int frozen_layers = 0);
