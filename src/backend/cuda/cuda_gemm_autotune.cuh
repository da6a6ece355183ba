// Picking a GEMM's algorithm by timing, not by the heuristic's first answer alone: cuBLASLt's
// heuristic offers several algorithms for a problem, ranked by its own model, and its first can
// lose to the others by a lot on the shapes it models worst. On an H200 (2026-12-04) the first
// algorithm for batch 4096's forward GEMMs was a cooperative kernel whose bias/ReLU epilogue ran as
// two passes of its own (80 of 650 us of kernel time), and at batch 32 every forward GEMM split K
// into three kernels. XLA, which JAX runs on, times its candidates the same way.
//
// The candidates run on scratch operands of the key's shapes (device memory allocated for the
// timing and freed after it), so nothing the caller owns is read or written: a plan can be made
// while its own operands are still being computed or hold a micro-batch's partial sums. Each
// candidate is timed with CUDA events over a few launches after one warm-up, in rounds so that
// other work on the device skews them alike, and the fastest median wins. Once per key per
// backend, when the op is first planned: never in a step's steady state.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_cublaslt_library.cuh"

namespace mpt {

struct GemmPlan;

struct GemmTiming {
    int chosen = 0;          // index into the candidates: 0 (the heuristic's first) unless timing chose another
    bool timed = false;      // false: no candidate could be timed (why says why); chosen is 0
    float chosen_us = 0.0f;  // its median time, when timed
    float first_us = 0.0f;   // the heuristic's first's, when timed
    std::string why;
};

// Times `count` heuristic results for `plan` (desc, layouts and key set; its bias and aux pointers
// are set to scratch here and must be set again before each real run, as CudaGemm::run does) on
// `device`, the caller's current device restored after. The scratch is the key's operands and
// workspace, allocated for the timing alone: outside the context's memory budget, which is why
// autotuning is a switch. A plan it cannot time keeps the heuristic's first.
GemmTiming time_gemm_candidates(const CublasLt& lt, cublasLtHandle_t handle, int device, const GemmPlan& plan,
                                const cublasLtMatmulHeuristicResult_t* candidates, int count);

}  // namespace mpt
