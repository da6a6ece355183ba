// The CPU floor of one training step: the time of its bare GEMMs (forward, weight gradient, and
// input gradient for every layer but the first) through OpenBLAS, nothing else.
#pragma once

#include <cstdint>
#include <vector>

// Median µs of the step's GEMMs for an MLP with `widths` (input first) at `batch` rows, or a
// negative value when the build has no OpenBLAS.
double measure_gemm_floor_us(const std::vector<int64_t>& widths, int64_t batch, int repeats);
