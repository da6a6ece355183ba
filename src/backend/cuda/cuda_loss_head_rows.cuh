// The loss head's work on one row, as device code that the loss head's kernels (cuda_loss_head.cu)
// and the last layer's kernel around its head (cuda_head_layer.cu) share: a warp a row, the row's
// statistics (softmax max and sums, target sums, the dot products of the activation's Jacobian) as
// warp reductions, and every per-class value recomputed from them where needed instead of stored,
// with the CPU reference's semantics (cpu_loss_head.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_max_abs_cells.cuh"
#include "nn/activation.h"
#include "nn/loss.h"

namespace mpt::loss_head_rows {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

enum class HeadCase : uint8_t {
    logits_categorical,       // softmax or linear + (sparse) categorical cross-entropy: log-sum-exp form
    probability_categorical,  // other activations + categorical cross-entropy: Keras's clipped form
    sigmoid_binary,           // sigmoid + binary cross-entropy: softplus form
    probability_binary,       // other activations + binary cross-entropy: clipped form
    regression                // a regression loss (squared, absolute, Huber) through any activation
};

__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}
__device__ __forceinline__ double warp_sum(double value) {
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}
__device__ __forceinline__ long long warp_sum(long long value) {
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}
__device__ __forceinline__ float warp_max(float value) {
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
        value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
    return value;
}

// Arg-max as the CPU's loop finds it, which keeps index 0 while it is NaN (nothing compares greater)
// and otherwise ends at the first index of the largest value that is not NaN (a NaN never replaces
// it). As a total order, so that the butterfly below gives every lane the loop's answer whatever
// lanes meet first: a NaN at index 0 above everything, a NaN elsewhere below everything, the rest by
// value and then by the lower index.
struct ArgMax {
    float value;
    int64_t index;
};
__device__ __forceinline__ bool argmax_precedes(float value, int64_t index, const ArgMax& other) {
    if (isnan(value)) return index == 0;
    if (isnan(other.value)) return other.index != 0;
    return value > other.value || (value == other.value && index < other.index);
}
__device__ __forceinline__ void argmax_offer(ArgMax& best, float value, int64_t index) {
    if (best.index < 0 || argmax_precedes(value, index, best)) best = ArgMax{value, index};
}
__device__ __forceinline__ ArgMax warp_argmax(ArgMax best) {
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        const float value = __shfl_xor_sync(kFullMask, best.value, offset);
        const long long index = __shfl_xor_sync(kFullMask, static_cast<long long>(best.index), offset);
        if (index >= 0) argmax_offer(best, value, index);
    }
    return best;
}

// std::max / std::min as the CPU reference calls them, keeping a NaN first argument (fmaxf and fminf
// return the other one), so a NaN probability gives a NaN loss and raises found_inf on both backends.
__device__ __forceinline__ float std_max(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float std_min(float a, float b) { return b < a ? b : a; }

__device__ __forceinline__ float clip_probability(float p) {
    return std_min(std_max(p, kProbabilityEpsilon), 1.0f - kProbabilityEpsilon);
}
__device__ __forceinline__ bool inside_clip(float p) {
    return p > kProbabilityEpsilon && p < 1.0f - kProbabilityEpsilon;
}

struct Row {
    const float* z;
    const float* t;
    int32_t label;
    bool softmax;  // y is the row-wise softmax of z
    float max_z;
    float sum_exp;  // float sum of exp(z - max_z), for y
    float target_sum;
    double lse;
    float safe_sum;  // probability_categorical: sum of y, at least 1e-30
    float inverse_classes;
    float smoothing_share;  // what label smoothing adds to each target (nn/loss.h)
};

struct Terms {
    float y;
    float gradient;  // dL/dz before the row-wide correction (see final_gradient)
    double loss;
    float chain;  // this class's share of the row-wide correction's dot product
};

__device__ __forceinline__ float given_target(const LossHeadArgs& args, const Row& row, int64_t c) {
    return args.labels ? (c == row.label ? 1.0f : 0.0f) : row.t[c];
}
// The target trained towards (smoothed); the metric reads the given ones (row.t, row.label).
__device__ __forceinline__ float target_of(const LossHeadArgs& args, const Row& row, int64_t c) {
    return smoothed_target(given_target(args, row, c), args.label_smoothing, row.smoothing_share);
}

template <HeadCase kind>
__device__ __forceinline__ Terms class_terms(const LossHeadArgs& args, const Row& row, int64_t c) {
    Terms terms;
    const float zc = row.z[c];
    const float tc = target_of(args, row, c);
    terms.y = row.softmax ? expf(zc - row.max_z) / row.sum_exp : activation_forward(args.activation, zc);
    switch (kind) {  // (a constant: each kernel compiles its own case only)
        case HeadCase::logits_categorical:
            // Rounded per operation as on the CPU (no FMA): with smoothing the sum is not exactly 1.
            terms.gradient = __fsub_rn(__fmul_rn(terms.y, row.target_sum), tc);
            terms.loss = tc != 0.0f ? tc * (row.lse - static_cast<double>(zc)) : 0.0;
            terms.chain = 0.0f;
            break;
        case HeadCase::probability_categorical: {
            const float p = terms.y / row.safe_sum, q = clip_probability(p);
            terms.loss = tc != 0.0f ? -tc * log(static_cast<double>(q)) : 0.0;
            terms.gradient = inside_clip(p) ? -tc / q : 0.0f;
            terms.chain = terms.gradient * p;
            break;
        }
        case HeadCase::sigmoid_binary:
            terms.loss =
                static_cast<double>((std_max(zc, 0.0f) - zc * tc + log1pf(expf(-fabsf(zc)))) * row.inverse_classes);
            terms.gradient = (terms.y - tc) * row.inverse_classes;
            terms.chain = 0.0f;
            break;
        case HeadCase::probability_binary: {
            const float q = clip_probability(terms.y);
            terms.loss = -static_cast<double>((tc * logf(q) + (1.0f - tc) * logf(1.0f - q)) * row.inverse_classes);
            terms.gradient = inside_clip(terms.y) ? (-tc / q + (1.0f - tc) / (1.0f - q)) * row.inverse_classes : 0.0f;
            terms.chain = terms.gradient * terms.y;
            break;
        }
        case HeadCase::regression: {
            const RegressionTerm term = regression_term(args.loss, terms.y, tc, args.huber_delta, row.inverse_classes);
            terms.loss = term.loss;
            terms.gradient = term.gradient;
            terms.chain = terms.gradient * terms.y;
            break;
        }
    }
    return terms;
}

// dL/dz of one class from its terms and the row's reduced dot product (Jacobian of the activation).
template <HeadCase kind>
__device__ __forceinline__ float final_gradient(const LossHeadArgs& args, const Row& row, const Terms& terms,
                                                float dot) {
    switch (kind) {
        case HeadCase::logits_categorical:
        case HeadCase::sigmoid_binary:
            return terms.gradient;
        case HeadCase::probability_categorical:
            return (terms.gradient - dot) / row.safe_sum * activation_derivative_from_output(args.activation, terms.y);
        case HeadCase::probability_binary:
        case HeadCase::regression:
            if (row.softmax) return terms.y * (terms.gradient - dot);
            return terms.gradient * activation_derivative_from_output(args.activation, terms.y);
    }
    return terms.gradient;
}

struct RowResult {
    double loss;
    long long correct;
    long long counted;
    unsigned gradient_largest;  // this lane's largest |logits gradient| as stored, in bits (where asked)
};

// Calls f(c) for each class c of this lane: c = lane, lane + 32, ... below `classes`; kNarrow (the
// caller knows classes <= 32): at most the one, as a branch instead of a loop.
template <bool kNarrow, typename F>
__device__ __forceinline__ void for_lane_classes(int64_t classes, int lane, F&& f) {
    if constexpr (kNarrow) {
        if (lane < classes) f(static_cast<int64_t>(lane));
    } else {
        for (int64_t c = lane; c < classes; c += kWarpSize) f(c);
    }
}

template <HeadCase kind, bool kNarrow>
__device__ RowResult head_row(const LossHeadArgs& args, int64_t row_index, int lane, float gradient_factor) {
    const int64_t classes = args.classes;
    Row row;
    row.z = args.logits + row_index * args.width;
    row.t = args.targets ? args.targets + row_index * classes : nullptr;
    row.label = args.labels ? args.labels[row_index] : -1;
    row.softmax = kind == HeadCase::logits_categorical || args.activation == Activation::softmax;
    row.max_z = 0.0f;
    row.sum_exp = 1.0f;
    row.target_sum = 0.0f;
    row.lse = 0.0;
    row.safe_sum = 1.0f;
    row.inverse_classes = 1.0f / static_cast<float>(classes);
    row.smoothing_share = label_smoothing_share(args.loss, args.label_smoothing, classes);

    if (row.softmax) {
        // fmaxf may drop a NaN logit that the CPU's max keeps (its z[0]); the NaN still reaches
        // exp(z - max_z), so the sums, the loss and found_inf come out NaN on both backends.
        float max_z = -INFINITY;
        for_lane_classes<kNarrow>(classes, lane, [&](int64_t c) { max_z = fmaxf(max_z, row.z[c]); });
        row.max_z = warp_max(max_z);
        float sum = 0.0f;
        double sum_double = 0.0;
        for_lane_classes<kNarrow>(classes, lane, [&](int64_t c) {
            sum += expf(row.z[c] - row.max_z);
            if (kind == HeadCase::logits_categorical) sum_double += exp(static_cast<double>(row.z[c] - row.max_z));
        });
        row.sum_exp = warp_sum(sum);
        if (kind == HeadCase::logits_categorical) row.lse = row.max_z + log(warp_sum(sum_double));
    }
    if (kind == HeadCase::logits_categorical) {
        // The smoothed targets' sum from the given ones' ((1 - s) sum + s), as the CPU forms it:
        // exactly 1 for labels and one-hot rows whatever order the warp sums in.
        float given_sum = 0.0f;
        for_lane_classes<kNarrow>(classes, lane, [&](int64_t c) { given_sum += given_target(args, row, c); });
        row.target_sum = smoothed_target(warp_sum(given_sum), args.label_smoothing, args.label_smoothing);
    }
    if (kind == HeadCase::probability_categorical) {
        float sum = 0.0f;
        for_lane_classes<kNarrow>(classes, lane,
                                  [&](int64_t c) { sum += activation_forward(args.activation, row.z[c]); });
        row.safe_sum = std_max(warp_sum(sum), 1e-30f);
    }

    // Loss, the correction's dot product and the metric.
    const bool binary = kind != HeadCase::logits_categorical && kind != HeadCase::probability_categorical &&
                        (args.loss == LossKind::binary_crossentropy || (is_regression(args.loss) && classes == 1));
    double loss = 0.0;
    float dot = 0.0f;
    long long correct = 0;
    ArgMax predicted{0.0f, -1}, expected{0.0f, -1};
    for_lane_classes<kNarrow>(classes, lane, [&](int64_t c) {
        const Terms terms = class_terms<kind>(args, row, c);
        // Rounded as added (no FMA): with the case known when compiled, the product that makes a
        // term would otherwise fuse with its addition, other bits than the CPU's order of rounding
        // (and this kernel's before 2026-12-06) wherever a lane sums two classes or more.
        loss = __dadd_rn(loss, terms.loss);
        dot = __fadd_rn(dot, terms.chain);
        if (binary) {
            correct += (terms.y > 0.5f) == (row.t[c] > 0.5f);
        } else {
            argmax_offer(predicted, terms.y, c);
            if (!args.labels) argmax_offer(expected, row.t[c], c);
        }
    });
    RowResult result;
    result.gradient_largest = 0;
    result.loss = warp_sum(loss);
    dot = warp_sum(dot);
    float row_weight = 1.0f;  // the row's class weight (categorical losses only), times its own
    if (binary) {
        result.correct = warp_sum(correct);
        result.counted = classes;
    } else {
        predicted = warp_argmax(predicted);
        const int64_t expected_index = args.labels ? row.label : warp_argmax(expected).index;
        result.correct = predicted.index == expected_index ? 1 : 0;
        result.counted = 1;
        if (args.class_weights) {
            // Lane 0's class for every lane: with NaN targets the butterfly need not agree across lanes.
            const long long weighted_class = __shfl_sync(kFullMask, static_cast<long long>(expected_index), 0);
            row_weight = args.class_weights[weighted_class];
        }
    }
    // A weighted dataset's own weight for the row, after the class's: the CPU's order.
    if (args.row_weights) row_weight = __fmul_rn(row_weight, args.row_weights[row_index]);
    if (args.class_weights || args.row_weights) result.loss *= row_weight;

    // Outputs: the scaled logits gradient and the activation, zero in the padded columns.
    if (args.logits_grad || args.probabilities) {
        for_lane_classes<kNarrow>(args.width, lane, [&](int64_t c) {
            float y = 0.0f, gradient = 0.0f;
            if (c < classes) {
                const Terms terms = class_terms<kind>(args, row, c);
                y = terms.y;
                // Weighted, then scaled: the CPU's order (a weight of 1 changes no bit).
                gradient = __fmul_rn(final_gradient<kind>(args, row, terms, dot), row_weight) * gradient_factor;
            }
            const int64_t index = row_index * args.width + c;
            if (args.logits_grad) {
                store_element(args.logits_grad, args.logits_grad_dtype, index, gradient);
                if (args.logits_grad_max_abs)
                    result.gradient_largest =
                        max(result.gradient_largest, magnitude_bits(round_to_device(args.logits_grad_dtype, gradient)));
            }
            if (args.probabilities) args.probabilities[index] = y;
        });
    }
    return result;
}

// The sums of `count` warps' or rows' partial results (loss, correct, counted), added in index order.
struct HeadSums {
    double loss = 0.0;
    long long correct = 0, counted = 0;
};
__device__ inline HeadSums add_head_partials(const double* loss, const long long* correct, const long long* counted,
                                             int count) {
    HeadSums sums;
    for (int i = 0; i < count; ++i) {
        sums.loss += loss[i];
        sums.correct += correct[i];
        sums.counted += counted[i];
    }
    return sums;
}

// The batch's sums, reduced in a fixed order, into the train state and the metrics (thread 0).
// `starts_step`: this head also clears found_inf first (the step's begin_step, folded into it by
// CudaBackend::execute_recorded), so it writes found_inf whether the loss is finite or not.
__device__ inline void finish_head(const LossHeadArgs& args, bool starts_step, double loss_sum, long long correct_sum,
                                   long long counted_sum) {
    const double batch_loss = head_batch_loss(args, loss_sum);
    // Non-finite as the float it is reported as, as on the CPU.
    if (args.state) {
        if (!(fabs(batch_loss) <= kLargestFloat))
            args.state->found_inf = 1;
        else if (starts_step)
            args.state->found_inf = 0;
    }
    if (args.metrics) {
        args.metrics[kMetricLossSum] += loss_sum;
        args.metrics[kMetricCorrect] += static_cast<double>(correct_sum);
        args.metrics[kMetricCounted] += static_cast<double>(counted_sum);
        args.metrics[kMetricBatchLoss] = batch_loss;
    }
}

// The case a head computes, which picks its kernel (each compiled for its case alone).
inline HeadCase head_case(const LossHeadArgs& args) {
    switch (args.loss) {
        case LossKind::sparse_categorical_crossentropy:
        case LossKind::categorical_crossentropy:
            return args.activation == Activation::softmax || args.activation == Activation::linear
                       ? HeadCase::logits_categorical
                       : HeadCase::probability_categorical;
        case LossKind::binary_crossentropy:
            return args.activation == Activation::sigmoid ? HeadCase::sigmoid_binary : HeadCase::probability_binary;
        case LossKind::mean_squared_error:
        case LossKind::mean_absolute_error:
        case LossKind::huber:
            break;
    }
    return HeadCase::regression;
}

}  // namespace mpt::loss_head_rows
