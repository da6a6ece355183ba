// Which GEMMs cuBLASLt may split along K, as a plain function that CudaGemm calls when it makes a
// plan and a CPU test (tests/test_gemm_split_k_rule.cpp) checks on the seed MLP's shapes.
//
// Splitting K is how a GEMM with few output tiles fills the GPU: at batch 32 the seed MLP's
// forward layers have 24, 8 and 1 tiles of 128 x 128 for 132 multiprocessors, and the heuristic
// splits them. A GEMM with at least a tile per multiprocessor gains little from it, and at batch
// 4096 on an H200 (2026-12-04) the heuristic's split (or streamed) K kernels there ran the bias +
// ReLU epilogue as a pass of its own: 80 of 650 us of kernel time. MPTRAIN_CUDA_SPLIT_K=0 forbids
// splitting everywhere, which also takes it from the small GEMMs that need it;
// MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 forbids it only where the output has tiles enough.
#pragma once

#include <cstdint>

namespace mpt {

// The output tile the rule counts in (cuBLASLt's common tile for 16-bit operands on sm_80+).
constexpr int64_t kSplitKRuleTile = 128;

// Whether a GEMM whose output D is m x n may be split along K: never when `split_k` is off; with
// `small_outputs_only`, only while D has fewer whole-or-part 128 x 128 tiles than the device has
// multiprocessors; else always (the heuristic decides).
inline bool gemm_may_split_k(int64_t m, int64_t n, bool split_k, bool small_outputs_only, int multiprocessors) {
    if (!split_k) return false;
    if (!small_outputs_only) return true;
    const int64_t tiles = ((m + kSplitKRuleTile - 1) / kSplitKRuleTile) * ((n + kSplitKRuleTile - 1) / kSplitKRuleTile);
    return tiles < static_cast<int64_t>(multiprocessors);
}

}  // namespace mpt
