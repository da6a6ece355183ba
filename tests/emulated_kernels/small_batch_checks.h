// The small-batch forward and input-gradient kernels (tests/emulated_kernels/) run on a case's shapes
// and compared with the reference, in every block order asked for: what their cases and the seed
// MLP's case check.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_small_batch_backward_data.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "emulated_kernels/reference_sums.h"
#include "nn/activation.h"

namespace mpt_test::emulated_kernels {

struct ForwardCase {
    int64_t rows, in_features, out_features, valid_out;
    DType compute, output;
    Activation activation;
};

// Runs the small-batch forward on `c` (split as planned on the emulated device) and checks it against
// a double-precision reference; returns the outputs and the mask for a backward case, and the split.
struct ForwardResult {
    std::vector<float> output;
    DeviceBuffer output_buffer, mask;
    int splits = 0;
};
inline ForwardResult check_small_batch_forward(const ForwardCase& c, uint32_t data_seed, uint64_t order_seed) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(c.valid_out);
    CAPTURE(static_cast<int>(c.compute));
    CAPTURE(static_cast<int>(c.output));
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(order_seed);
    std::mt19937 random(data_seed);
    const DeviceTensor input =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.rows * c.in_features), -1.0f, 1.0f, random));
    const DeviceTensor weights = upload_rounded(
        c.compute, random_vector(static_cast<size_t>(c.out_features * c.in_features), -0.1f, 0.1f, random));
    const DeviceTensor bias =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.out_features), -0.5f, 0.5f, random));
    ForwardResult result;
    const size_t outputs = static_cast<size_t>(c.rows * c.out_features);
    result.output_buffer = DeviceBuffer(outputs * (c.output == DType::fp32 ? 4 : 2));
    result.mask = DeviceBuffer(mpt::relu_mask_size(c.rows, c.out_features));
    mpt::DenseForwardArgs args{};
    args.input = input.buffer.data();
    args.weights = weights.buffer.data();
    args.bias = bias.buffer.data();
    args.output = result.output_buffer.data();
    args.relu_mask = result.mask.data();
    args.rows = c.rows;
    args.in_features = c.in_features;
    args.out_features = c.out_features;
    args.valid_out = c.valid_out;
    args.activation = c.activation;
    args.compute_dtype = c.compute;
    args.bias_dtype = c.compute;
    args.output_dtype = c.output;
    REQUIRE(mpt::small_batch_forward_applies(args));
    const mpt::small_batch_mma::SplitK split = mpt::small_batch_forward_split(args);
    result.splits = split.splits;
    mpt_emulation::set_block_order_seed(order_seed);
    mpt::run_small_batch_forward(args, split, true, nullptr);
    mpt_emulation::set_block_order_seed(0);

    result.output = download_values(result.output_buffer, c.output, outputs);
    std::vector<float> expected(outputs);
    int64_t mask_wrong = 0;
    const int64_t ld_bits = mpt::relu_mask_ld_bits(c.out_features);
    std::vector<double> sums(static_cast<size_t>(c.out_features));
    for (int64_t r = 0; r < c.rows; ++r) {
        product_row_with_transposed(input.values.data(), weights.values.data(), c.in_features, c.out_features, r,
                                    sums.data());
        for (int64_t f = 0; f < c.out_features; ++f) {
            double z = sums[static_cast<size_t>(f)];
            const bool valid = f < c.valid_out;
            z += bias.values[static_cast<size_t>(f)];
            expected[static_cast<size_t>(r * c.out_features + f)] =
                valid ? mpt::activation_forward(c.activation, static_cast<float>(z)) : 0.0f;
            if (c.activation == Activation::relu && std::fabs(z) > 1e-3) {  // (the sums' order decides near 0)
                const int64_t bit = mpt::small_batch_mma::mask_bit(f, r, ld_bits);
                const bool set = (result.mask.as<uint32_t>()[bit / 32] >> (bit % 32)) & 1u;
                if (set != (valid && z > 0.0)) ++mask_wrong;
            }
        }
    }
    CHECK(outside_rounding(result.output, expected, c.output) == 0);
    CHECK(mask_wrong == 0);
    // Padded features are written as 0.
    for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t f = c.valid_out; f < c.out_features; ++f)
            CHECK(result.output[static_cast<size_t>(r * c.out_features + f)] == 0.0f);
    return result;
}

struct BackwardCase {
    int64_t rows, in_features, out_features;
    DType compute, gradient;
    Activation previous;  // A_prev's activation (ReLU: from the forward's mask, or from A_prev)
};

// The small-batch input gradient of `c` (split as planned on the emulated device) against a double
// reference, ReLU's derivative from the forward's mask or from A_prev, in each block order of `orders`;
// returns the split.
inline int check_small_batch_backward_data(const BackwardCase& c, bool from_mask,
                                           std::initializer_list<uint64_t> orders) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(static_cast<int>(c.previous));
    CAPTURE(from_mask);
    // A_prev and its mask from the forward kernel of the layer below (64 inputs of its own).
    const ForwardCase below{c.rows, 64, c.in_features, c.in_features, c.compute, c.compute, c.previous};
    const ForwardResult previous = check_small_batch_forward(below, 5, 0);
    std::mt19937 random(9);
    const DeviceTensor output_grad =
        upload_rounded(c.compute, random_vector(static_cast<size_t>(c.rows * c.out_features), -8.0f, 8.0f, random));
    const DeviceTensor weights = upload_rounded(
        c.compute, random_vector(static_cast<size_t>(c.out_features * c.in_features), -0.1f, 0.1f, random));
    const size_t n = static_cast<size_t>(c.rows * c.in_features);
    DeviceBuffer input_grad(n * (c.gradient == DType::fp32 ? 4 : 2));
    mpt::DenseBackwardDataArgs args{};
    args.output_grad = output_grad.buffer.data();
    args.weights = weights.buffer.data();
    args.input = previous.output_buffer.data();
    args.relu_mask = previous.mask.data();
    args.input_grad = input_grad.data();
    args.rows = c.rows;
    args.in_features = c.in_features;
    args.out_features = c.out_features;
    args.input_activation = c.previous;
    args.compute_dtype = c.compute;
    args.input_grad_dtype = c.gradient;
    REQUIRE(mpt::small_batch_backward_data_applies(args));
    const mpt::small_batch_mma::SplitK split = mpt::small_batch_backward_data_split(args);
    CAPTURE(split.splits);
    std::vector<float> expected(n);
    std::vector<double> sums(static_cast<size_t>(c.in_features));
    for (int64_t r = 0; r < c.rows; ++r) {
        product_row(output_grad.values.data(), weights.values.data(), c.out_features, c.in_features, r, sums.data());
        for (int64_t i = 0; i < c.in_features; ++i) {
            const double sum = sums[static_cast<size_t>(i)];
            const float y = previous.output[static_cast<size_t>(r * c.in_features + i)];
            expected[static_cast<size_t>(r * c.in_features + i)] =
                static_cast<float>(sum) * mpt::activation_derivative_from_output(c.previous, y);
        }
    }
    // The step's maxima of dZ_prev and A_prev where the launch takes them (every order but the first),
    // poisoned before: exactly max_abs's over the arrays as stored, the scratch's cells left zero.
    const MaxAbsScratchBuffer scratch(1);
    DeviceBuffer maxima(2 * sizeof(float));
    args.input_grad_max_abs = maxima.as<float>();
    args.input_max_abs = maxima.as<float>() + 1;
    const std::vector<float> input_values = download_values(previous.output_buffer, c.compute, n);
    for (const uint64_t order : orders) {
        // None (the first order), both, or the gradient's alone (as for a frozen layer above).
        for (const int asked : {0, 2, 1}) {
            if ((asked == 0) != (order == *orders.begin())) continue;
            CAPTURE(order);
            CAPTURE(asked);
            args.input_max_abs = asked == 2 ? maxima.as<float>() + 1 : nullptr;
            std::memset(maxima.data(), 0xff, maxima.size());
            mpt_emulation::set_block_order_seed(order);
            mpt::run_small_batch_backward_data(args, split, from_mask, asked > 0, scratch.scratch(), nullptr);
            mpt_emulation::set_block_order_seed(0);
            const std::vector<float> gradient = download_values(input_grad, c.gradient, n);
            CHECK(outside_rounding(gradient, expected, c.gradient) == 0);
            if (asked > 0) {
                CHECK(float_bits(maxima.as<float>()[0]) == float_bits(reference_max_abs(gradient)));
            } else {
                CHECK(std::isnan(maxima.as<float>()[0]));  // not written
            }
            if (asked == 2) {
                CHECK(float_bits(maxima.as<float>()[1]) == float_bits(reference_max_abs(input_values)));
            } else {
                CHECK(std::isnan(maxima.as<float>()[1]));
            }
            CHECK(scratch.zero());
        }
    }
    return split.splits;
}

}  // namespace mpt_test::emulated_kernels
