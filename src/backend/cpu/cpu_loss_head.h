// The fused loss head on the CPU: one row at a time, fp32 throughout (see LossHeadArgs).
#pragma once

#include "backend/backend.h"

namespace mpt {

void cpu_loss_head(const LossHeadArgs& args);

}  // namespace mpt
