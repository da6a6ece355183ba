// The op comparisons that the CPU-against-CPU case of test_cuda_ops runs too (so that the harness
// is checked on every machine), each defined beside its op's GPU cases in tests/cuda_ops/: the
// reference backend first, the candidate second; each CHECKs its outputs within error_bound of the
// reference's.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace mpt::testing {

// dense_layer_cases.cpp
void compare_dense_forward_cases(Backend& reference, Backend& candidate);
void compare_dense_backward_data_cases(Backend& reference, Backend& candidate);
void check_backward_data_maxima(Backend& backend, DType dtype, bool expect_taken);

// loss_head_cases.cpp
void compare_loss_head_cases(Backend& reference, Backend& candidate);
void compare_head_layer_cases(Backend& reference, Backend& candidate, int max_blocks);

// update_cases.cpp
void compare_dense_update_cases(Backend& reference, Backend& candidate);
void compare_clip_factor(Backend& reference, Backend& candidate);
void compare_weight_averaging(Backend& reference, Backend& candidate);
void compare_clip_paths(Backend& backend);

// step_cases.cpp
void compare_gather(Backend& reference, Backend& candidate, bool u8, DType dtype, bool standardized = false,
                    int64_t features = 50, int64_t padded = 56);
void compare_dropout(Backend& reference, Backend& candidate);
void compare_max_abs(Backend& reference, Backend& candidate);
void compare_decide_update(Backend& reference, Backend& candidate);
void compare_finish_step(Backend& reference, Backend& candidate);
void compare_conversions(Backend& reference, Backend& candidate);

}  // namespace mpt::testing
