// Learning-rate schedules evaluated from the optimizer's step count. The factor is a pure function
// of the count that the backends already keep in TrainState (`steps`), so a CUDA kernel computes it
// on the device: a scheduled rate changes every step without changing any kernel argument, and the
// step's CUDA graph replays unchanged. One definition serves the CPU backend, the CUDA kernels and
// the C API's getter, so all three agree (to float rounding on the device: see lr_schedule_factor).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace mpt {

enum class LrScheduleKind : uint8_t { constant = 0, linear = 1, cosine = 2, step = 3 };

struct LrSchedule {
    LrScheduleKind kind = LrScheduleKind::constant;
    int64_t warmup_steps = 0;  // linear from 1/warmup_steps up to 1 over the first steps
    int64_t decay_steps = 0;   // linear, cosine: the decay's length; step: the steps between two drops
    float decay_factor = 1.0f; // linear, cosine: the factor at the end; step: the drop's factor
};

inline bool is_constant(const LrSchedule& schedule) {
    return schedule.kind == LrScheduleKind::constant && schedule.warmup_steps == 0;
}

// sin(pi * x) for x in [0, 1/2]. On the device sinpif, whose argument needs no reduction: sinf's
// reduction path for huge arguments would give the update kernels a stack frame.
MPT_HOST_DEVICE float sin_pi(float x) {
#if defined(__CUDA_ARCH__)
    return sinpif(x);
#else
    return sinf(3.14159265358979f * x);
#endif
}

// The factor on the base learning rate of step `step` (counted from 0, skipped steps included). In
// float arithmetic on purpose: the CUDA kernels evaluate it per block, where double's pow and sin
// are calls that cost registers. The CPU backend and the C API's getter compute it alike, bit for
// bit; the device's sinpif and powf, and nvcc's contraction of the last multiply-add, may differ
// from them in the last bits.
MPT_HOST_DEVICE float lr_schedule_factor(const LrSchedule& schedule, int64_t step) {
    if (step < schedule.warmup_steps)
        return static_cast<float>(step + 1) / static_cast<float>(schedule.warmup_steps);
    const int64_t decayed = step - schedule.warmup_steps;
    switch (schedule.kind) {
        case LrScheduleKind::constant:
            return 1.0f;
        case LrScheduleKind::linear:
        case LrScheduleKind::cosine: {
            if (decayed >= schedule.decay_steps) return schedule.decay_factor;
            // The fraction of the decay still ahead, from the steps left: 1 at its start, 0 at its end.
            const float left = static_cast<float>(schedule.decay_steps - decayed) / static_cast<float>(schedule.decay_steps);
            // A straight line, or half a cosine period: (1 + cos(pi (1 - left))) / 2 = sin^2(pi left / 2),
            // which keeps its relative precision to the last step where the cosine form cancels.
            float remaining = left;
            if (schedule.kind == LrScheduleKind::cosine) {
                const float sine = sin_pi(0.5f * left);
                remaining = sine * sine;
            }
            return schedule.decay_factor + (1.0f - schedule.decay_factor) * remaining;
        }
        case LrScheduleKind::step:
            return powf(schedule.decay_factor, static_cast<float>(decayed / schedule.decay_steps));
    }
    return 1.0f;
}

}  // namespace mpt
