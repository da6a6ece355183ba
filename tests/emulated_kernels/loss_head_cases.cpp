// test_cuda_emulated_kernels: the loss head's kernels against the CPU's head in every case, in one
// block and in several.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_loss_head.h"
#include "backend/cuda/cuda_loss_head.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "nn/activation.h"
#include "support/loss_head_case.h"

using namespace mpt_test::emulated_kernels;

namespace {

// One head, as test_cuda_ops's cases describe them: the emulated kernel against cpu_loss_head on the
// same inputs.
// One head, as test_cuda_ops's cases describe them (tests/support/loss_head_case.h), and what the
// emulated kernel adds: a NaN logit, and the head that starts the step (begin_step folded into it).
struct HeadCase {
    mpt_test::LossHeadCase head;
    int64_t nan_logit = -1;  // an element of the logits set to NaN, or none
    bool starts_step = false;
};

// The inputs of a head, in emulated device memory, and what a run of it wrote.
struct HeadRun {
    DeviceBuffer logits, labels, targets, probabilities, gradient, state, metrics, class_weights, row_weights;
    mpt::LossHeadArgs args{};

    HeadRun(const HeadCase& c, const mpt_test::LossHeadInputs& in)
        : logits(in.logits.size() * 4),
          labels(in.labels.size() * 4),
          targets(in.targets.size() * 4),
          probabilities(in.logits.size() * 4),
          gradient(in.logits.size() * 4),
          state(sizeof(mpt::TrainState)),
          metrics(sizeof(double) * mpt::kMetricsCount),
          class_weights(in.class_weights.size() * 4),
          row_weights(in.row_weights.size() * 4) {
        std::memcpy(logits.data(), in.logits.data(), logits.size());
        std::memcpy(labels.data(), in.labels.data(), labels.size());
        std::memcpy(targets.data(), in.targets.data(), targets.size());
        std::memcpy(class_weights.data(), in.class_weights.data(), class_weights.size());
        std::memcpy(row_weights.data(), in.row_weights.data(), row_weights.size());
        mpt::TrainState initial{};
        initial.loss_scale = mpt_test::kLossHeadScale;
        initial.found_inf = c.starts_step ? 1 : 0;  // a head that starts the step clears it
        std::memcpy(state.data(), &initial, sizeof(initial));
        std::memcpy(metrics.data(), mpt_test::kLossHeadInitialMetrics, sizeof(mpt_test::kLossHeadInitialMetrics));
        args = mpt_test::loss_head_args(
            c.head,
            {logits.as<float>(), labels.as<int32_t>(), targets.as<float>(), probabilities.as<float>(), gradient.data(),
             state.as<mpt::TrainState>(), metrics.as<double>(), class_weights.as<float>(), row_weights.as<float>()});
    }

    // The gradient as the dtype stores it on a GPU (`device`), or as the CPU backend stores every
    // dtype: the values it rounds to, as fp32.
    std::vector<float> gradient_values(bool device) const {
        std::vector<float> values(static_cast<size_t>(args.rows * args.width));
        for (size_t i = 0; i < values.size(); ++i) {
            switch (device ? args.logits_grad_dtype : DType::fp32) {
                case DType::fp32:
                    values[i] = gradient.as<float>()[i];
                    break;
                case DType::bf16:
                    values[i] = __bfloat162float(gradient.as<__nv_bfloat16>()[i]);
                    break;
                case DType::fp16:
                    values[i] = __half2float(gradient.as<__half>()[i]);
                    break;
            }
        }
        return values;
    }
};

// max |a - b| over max |b|, NaN where one is NaN and the other not (both NaN: equal).
double normalised_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double largest = 0.0, difference = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) || std::isnan(b[i])) {
            if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
            continue;
        }
        largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
        difference = std::max(difference, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return largest > 0.0 ? difference / largest : difference;
}

// The rounding of a gradient element in its dtype, and a few ulps of fp32 for the rest.
double difference_bound(DType dtype) {
    switch (dtype) {
        case DType::fp32:
            return 1e-5;
        case DType::bf16:
            return 1.6e-2;
        case DType::fp16:
            return 2e-3;
    }
    return 0.0;
}

void compare_head(const HeadCase& test, uint64_t block_order_seed) {
    const mpt_test::LossHeadCase& c = test.head;
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(c.rows);
    CAPTURE(c.width);
    CAPTURE(c.classes);
    CAPTURE(static_cast<int>(c.gradient_dtype));
    CAPTURE(c.label_smoothing);
    CAPTURE(c.with_class_weights);
    CAPTURE(c.with_row_weights);
    CAPTURE(c.mean_rows);
    CAPTURE(test.nan_logit);
    CAPTURE(test.starts_step);
    CAPTURE(block_order_seed);
    std::mt19937 random(static_cast<uint32_t>(c.rows * 131 + c.width * 7 + c.classes));
    const mpt_test::LossHeadInputs in = mpt_test::random_loss_head_inputs(c, random, test.nan_logit);
    HeadRun reference(test, in);
    HeadRun emulated(test, in);
    float reference_gradient_max = NAN;
    reference.args.logits_grad_max_abs = &reference_gradient_max;
    mpt::cpu_loss_head(reference.args);
    CHECK(float_bits(reference_gradient_max) == float_bits(reference_max_abs(reference.gradient_values(false))));
    if (test.starts_step && c.with_state && reference.args.state->found_inf == 1) {
        // cpu_loss_head leaves a set found_inf set; begin_step on the CPU would have cleared it first.
        const double batch_loss = reference.args.metrics[mpt::kMetricBatchLoss];
        if (std::fabs(batch_loss) <= 3.4028234663852886e38) reference.args.state->found_inf = 0;
    }
    DeviceBuffer head_scratch_memory(mpt::kLossHeadMaxBlocks * (sizeof(double) + 2 * sizeof(long long)) + 256);
    std::memset(head_scratch_memory.data(), 0, head_scratch_memory.size());
    char* base = head_scratch_memory.as<char>();
    const mpt::LossHeadScratch scratch{reinterpret_cast<double*>(base),
                                       reinterpret_cast<long long*>(base + mpt::kLossHeadMaxBlocks * 8),
                                       reinterpret_cast<long long*>(base + mpt::kLossHeadMaxBlocks * 16),
                                       reinterpret_cast<unsigned*>(base + mpt::kLossHeadMaxBlocks * 24),
                                       reinterpret_cast<unsigned*>(base + mpt::kLossHeadMaxBlocks * 24 + 128)};
    // The gradient's max |x| as the head writes it, poisoned before (NaN in every float format).
    DeviceBuffer gradient_max(sizeof(float));
    std::memset(gradient_max.data(), 0xff, sizeof(float));
    emulated.args.logits_grad_max_abs = gradient_max.as<float>();
    mpt_emulation::set_block_order_seed(block_order_seed);
    mpt::run_loss_head(emulated.args, scratch, nullptr, test.starts_step);
    mpt_emulation::set_block_order_seed(0);
    // Exactly max_abs's value over the gradient as stored (NaN and Inf as +Inf); the cell left 0.
    CHECK(float_bits(*gradient_max.as<float>()) == float_bits(reference_max_abs(emulated.gradient_values(true))));
    CHECK(*scratch.gradient_largest == 0u);

    const std::vector<float> gradient = emulated.gradient_values(true),
                             expected_gradient = reference.gradient_values(false);
    CHECK(normalised_difference(gradient, expected_gradient) <= difference_bound(c.gradient_dtype));
    // Padded columns are 0 in the gradient (the model's padded outputs must not learn).
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t k = c.classes; k < c.width; ++k) CHECK(gradient[static_cast<size_t>(r * c.width + k)] == 0.0f);
    if (c.with_probabilities) {
        const size_t n = static_cast<size_t>(c.rows * c.width);
        const std::vector<float> p(emulated.probabilities.as<float>(), emulated.probabilities.as<float>() + n);
        const std::vector<float> q(reference.probabilities.as<float>(), reference.probabilities.as<float>() + n);
        CHECK(normalised_difference(p, q) <= 1e-5);
    }
    const double* metrics = emulated.args.metrics;
    const double* expected = reference.args.metrics;
    if (test.nan_logit >= 0) {
        CHECK(std::isnan(metrics[mpt::kMetricLossSum]));
        CHECK(std::isnan(metrics[mpt::kMetricBatchLoss]));
    } else {
        CHECK(metrics[mpt::kMetricLossSum] == doctest::Approx(expected[mpt::kMetricLossSum]).epsilon(1e-5));
        CHECK(metrics[mpt::kMetricBatchLoss] == doctest::Approx(expected[mpt::kMetricBatchLoss]).epsilon(1e-5));
    }
    CHECK(metrics[mpt::kMetricCorrect] == expected[mpt::kMetricCorrect]);
    CHECK(metrics[mpt::kMetricCounted] == expected[mpt::kMetricCounted]);
    if (c.with_state) CHECK(emulated.args.state->found_inf == reference.args.state->found_inf);
    CHECK(*scratch.counter == 0u);  // ready for the next head
}

}  // namespace

TEST_CASE("the loss head's kernels match the CPU's head in every case, in one block and in several") {
    struct Shape {
        int64_t rows, width, classes;
    };
    // One block (at most 32 rows, a warp each) and several (8 rows a block, the last partial); rows
    // of at most 32 columns (the narrow kernel for the logits' cases) and wider ones.
    const Shape shapes[] = {{1, 16, 10}, {7, 8, 5}, {32, 16, 10}, {33, 16, 10}, {67, 8, 3}, {29, 48, 40}, {45, 40, 33}};
    struct Head {
        Activation activation;
        LossKind loss;
    };
    const Head heads[] = {{Activation::softmax, LossKind::sparse_categorical_crossentropy},
                          {Activation::linear, LossKind::sparse_categorical_crossentropy},
                          {Activation::softmax, LossKind::categorical_crossentropy},
                          {Activation::sigmoid, LossKind::categorical_crossentropy},
                          {Activation::sigmoid, LossKind::binary_crossentropy},
                          {Activation::tanh, LossKind::binary_crossentropy},
                          {Activation::linear, LossKind::mean_squared_error},
                          {Activation::softmax, LossKind::huber},
                          {Activation::elu, LossKind::mean_absolute_error}};
    const DType dtypes[] = {DType::fp32, DType::bf16, DType::fp16};
    int variant = 0;
    for (const Head& head : heads) {
        for (const Shape& shape : shapes) {
            HeadCase test{{head.activation, head.loss, shape.rows, shape.width, shape.classes, dtypes[variant % 3],
                           true, variant % 2 == 0}};
            // Options in rotation, so that each head meets each of them in some shape.
            mpt_test::LossHeadCase& c = test.head;
            c.with_class_weights = variant % 3 == 1 && mpt::loss_takes_class_weights(c.loss);
            c.with_row_weights = variant % 4 == 2;
            c.label_smoothing = variant % 5 == 3 && mpt::valid_label_smoothing(c.loss, 0.1f) ? 0.1f : 0.0f;
            test.starts_step = variant % 3 == 2;
            if (variant % 7 == 4) {
                c.mean_rows = 3 * c.rows;
                c.continues_batch = true;
            }
            ++variant;
            compare_head(test, 0);
            compare_head(test, 5);  // the blocks in another order: the last block combines in a fixed one
            HeadCase nan_case = test;
            nan_case.nan_logit = shape.classes > 1 ? 1 : 0;  // row 0: found_inf, NaN loss
            compare_head(nan_case, 0);
        }
    }
}
