// A layer's update as the fused SGD kernels take it (tests/emulated_kernels/): its gradient's inputs,
// masters, bias and low-precision copies in emulated device memory, with the update expected in
// double precision, and the step's state and optimizer they read.
#pragma once

#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "emulated_kernels/reference_sums.h"

namespace mpt_test::emulated_kernels {

struct SgdLayer {
    int64_t rows, in_features, out_features;
    DType dtype;
    DeviceTensor output_grad, input;
    DeviceBuffer weights, bias, low_weights, low_bias;
    std::vector<float> weights_before, bias_before;

    SgdLayer(int64_t r, int64_t in, int64_t out, DType type, bool aligned, std::mt19937& random)
        : rows(r),
          in_features(in),
          out_features(out),
          dtype(type),
          output_grad(upload_rounded(type, random_vector(static_cast<size_t>(r * out), -64.0f, 64.0f, random))),
          input(upload_rounded(type, random_vector(static_cast<size_t>(r * in), 0.0f, 2.0f, random))),
          weights(static_cast<size_t>(in * out) * 4, 256, aligned ? 0 : 4),
          bias(static_cast<size_t>(out) * 4),
          low_weights(static_cast<size_t>(in * out) * (type == DType::fp32 ? 4 : 2)),
          low_bias(static_cast<size_t>(out) * (type == DType::fp32 ? 4 : 2)) {
        weights_before = random_vector(static_cast<size_t>(in * out), -0.5f, 0.5f, random);
        bias_before = random_vector(static_cast<size_t>(out), -0.5f, 0.5f, random);
        std::memcpy(weights.data(), weights_before.data(), weights.size());
        std::memcpy(bias.data(), bias_before.data(), bias.size());
    }

    mpt::DenseUpdateArgs args(const mpt::TrainState* state) const {
        mpt::DenseUpdateArgs a{};
        a.output_grad = output_grad.buffer.data();
        a.input = input.buffer.data();
        a.weights = weights.as<float>();
        a.bias = bias.as<float>();
        a.low_weights = dtype == DType::fp32 ? nullptr : low_weights.data();
        a.low_bias = dtype == DType::fp32 ? nullptr : low_bias.data();
        a.rows = rows;
        a.in_features = in_features;
        a.out_features = out_features;
        a.compute_dtype = dtype;
        a.state = state;
        return a;
    }

    // Mismatches against the update from `state` (skipped: nothing written).
    int64_t mismatches(const mpt::OptimizerConfig& optimizer, const mpt::TrainState& state) const {
        int64_t wrong = 0;
        const bool copies = dtype != DType::fp32;
        const auto check_copy = [&](const DeviceBuffer& low, size_t index, float master, bool written) {
            if (!copies) return;
            const uint32_t bits = low.as<uint16_t>()[index];
            if (!written) {
                if (bits != 0xffffu) ++wrong;
                return;
            }
            const uint32_t expected = dtype == DType::bf16 ? __nv_bfloat16_raw(__float2bfloat16_rn(master)).x
                                                           : __half_raw(__float2half_rn(master)).x;
            if (bits != expected) ++wrong;
        };
        const bool applied = state.found_inf == 0;
        const mpt::OptimizerStepScalars scalars = mpt::plain_step_scalars(optimizer, state.loss_scale, state.steps);
        std::vector<float> gradients(static_cast<size_t>(in_features));
        for (int64_t o = 0; o < out_features; ++o) {
            fma_gradient_row(output_grad.values.data(), input.values.data(), rows, out_features, in_features, o,
                             gradients.data());
            for (int64_t i = 0; i < in_features; ++i) {
                const float gradient = gradients[static_cast<size_t>(i)];
                const size_t index = static_cast<size_t>(o * in_features + i);
                const float expected =
                    applied ? mpt::plain_sgd_update_element(optimizer, scalars, weights_before[index], gradient)
                            : weights_before[index];
                if (float_bits(weights.as<float>()[index]) != float_bits(expected)) ++wrong;
                check_copy(low_weights, index, expected, applied);
            }
            float sum = 0.0f;
            for (int64_t r = 0; r < rows; ++r) sum += output_grad.values[static_cast<size_t>(r * out_features + o)];
            const size_t index = static_cast<size_t>(o);
            const float expected = applied ? mpt::plain_sgd_update_element(optimizer, scalars, bias_before[index], sum)
                                           : bias_before[index];
            if (float_bits(bias.as<float>()[index]) != float_bits(expected)) ++wrong;
            check_copy(low_bias, index, expected, applied);
        }
        return wrong;
    }
};

// The updates of a kernel that sums the weight gradient in another order (the tensor cores'): each
// master within the rounding of its gradient's sum (2^-20 of the sum of its terms' magnitudes) and
// 2 ulps of the result; its copy the rounding of the master it wrote, bit for bit; the bias as
// mismatches() requires it where `exact_bias`.
inline int64_t tolerant_mismatches(const SgdLayer& layer, const mpt::OptimizerConfig& optimizer,
                                   const mpt::TrainState& state, bool exact_bias) {
    int64_t wrong = 0;
    const mpt::OptimizerStepScalars scalars = mpt::plain_step_scalars(optimizer, state.loss_scale, state.steps);
    const int64_t rows = layer.rows, in = layer.in_features, out = layer.out_features;
    std::vector<double> gradients(static_cast<size_t>(in)), magnitudes(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
        double_gradient_row(layer.output_grad.values.data(), layer.input.values.data(), rows, out, in, o,
                            gradients.data(), magnitudes.data());
        for (int64_t i = 0; i < in; ++i) {
            const double gradient = gradients[static_cast<size_t>(i)], magnitude = magnitudes[static_cast<size_t>(i)];
            const size_t index = static_cast<size_t>(o * in + i);
            const float before = layer.weights_before[index];
            const float expected =
                mpt::plain_sgd_update_element(optimizer, scalars, before, static_cast<float>(gradient));
            const float got = layer.weights.as<float>()[index];
            const double ulp = std::fabs(std::nextafter(expected, INFINITY) - expected);
            const double bound = 2.0 * ulp + scalars.learning_rate * scalars.inverse_scale * magnitude * 0x1p-20;
            if (!(std::fabs(static_cast<double>(got) - expected) <= bound)) ++wrong;
            const uint32_t copy = layer.low_weights.as<uint16_t>()[index];
            const uint32_t rounded = layer.dtype == DType::bf16 ? __nv_bfloat16_raw(__float2bfloat16_rn(got)).x
                                                                : __half_raw(__float2half_rn(got)).x;
            if (copy != rounded) ++wrong;
        }
        float sum = 0.0f;
        for (int64_t r = 0; r < rows; ++r) sum += layer.output_grad.values[static_cast<size_t>(r * out + o)];
        const float expected =
            mpt::plain_sgd_update_element(optimizer, scalars, layer.bias_before[static_cast<size_t>(o)], sum);
        const float got = layer.bias.as<float>()[static_cast<size_t>(o)];
        if (exact_bias ? float_bits(got) != float_bits(expected)
                       : !(std::fabs(got - expected) <= 1e-5f * std::fabs(expected) + 1e-6f))
            ++wrong;
    }
    return wrong;
}

inline mpt::OptimizerConfig plain_sgd(float weight_decay) {
    mpt::OptimizerConfig optimizer{};
    optimizer.learning_rate = 0.05f;
    optimizer.weight_decay = weight_decay;
    return optimizer;
}

inline DeviceBuffer train_state(float loss_scale, int32_t found_inf) {
    DeviceBuffer memory(sizeof(mpt::TrainState));
    mpt::TrainState state{};
    state.loss_scale = loss_scale;
    state.found_inf = found_inf;
    state.steps = 7;
    state.applied_steps = 6;
    std::memcpy(memory.data(), &state, sizeof(state));
    return memory;
}

}  // namespace mpt_test::emulated_kernels
