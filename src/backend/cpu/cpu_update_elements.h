// The optimizer's element rule (optimizer_update_element) over a range of one parameter group on
// the CPU, as a loop that vectorises: which of the rule's branches the options take is decided once,
// outside the loop, so none is left inside it. Results are those of calling the rule per element,
// bit for bit.
#pragma once

#include <cstdint>

#include "nn/optimizer.h"

namespace mpt {

// master[i] and the states' elements for i in [begin, end), from gradient[i] (multiplied by the loss
// scale); `states` holds optimizer_state_count(optimizer) arrays, none of which overlaps another
// array given.
void update_elements(const OptimizerConfig& optimizer, const OptimizerStepScalars& scalars, float* master,
                     const float* gradient, float* const* states, int64_t begin, int64_t end);

}  // namespace mpt
