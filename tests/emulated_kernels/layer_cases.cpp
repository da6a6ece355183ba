// test_cuda_emulated_kernels: a dense layer's kernels: ReLU's backward in place and from the outputs,
// the small-batch forward and input-gradient kernels split across a cluster, and the bias gradient's
// stated order of sums.
#include <doctest/doctest.h>

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_bias_gradient.cuh"
#include "backend/cuda/cuda_dense_backward_data.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "emulated_kernels/small_batch_checks.h"
#include "nn/activation.h"

using namespace mpt_test::emulated_kernels;

TEST_CASE("the ReLU backward in place zeroes the gradient where the output is not above 0 and takes both maxima") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        // A tail alone, vectors and a tail, one block's worth, several blocks' (256 threads of 16 bytes).
        for (const int64_t count : {int64_t{5}, int64_t{8 * 37 + 3}, int64_t{2048}, int64_t{4 * 256 * 9 + 1}}) {
            for (const int asked : {0, 1, 2, 3}) {  // bit 0: the gradient's maximum, bit 1: the output's
                CAPTURE(static_cast<int>(dtype));
                CAPTURE(count);
                CAPTURE(asked);
                std::mt19937 random(static_cast<uint32_t>(count * 3 + asked));
                const size_t n = static_cast<size_t>(count), bytes = n * (dtype == DType::fp32 ? 4 : 2);
                DeviceBuffer gradient(bytes, 16), output(bytes, 16);
                std::vector<uint32_t> gradient_before(n);
                std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
                for (size_t i = 0; i < n; ++i) {
                    const float g = uniform(random);
                    gradient_before[i] = dtype == DType::fp32   ? float_bits(g)
                                         : dtype == DType::bf16 ? float_bits(g) >> 16
                                                                : __half_raw(__float2half_rn(g)).x;
                    set_element_bits(gradient, dtype, i, gradient_before[i]);
                    set_element_bits(output, dtype, i, output_bits(dtype, static_cast<int>(random() % 10), random));
                }
                // The largest gradient where the output is 0 (it must not count) and where it is kept.
                set_element_bits(output, dtype, 0, 0);
                set_element_bits(gradient, dtype, 0, dtype == DType::fp32 ? float_bits(1000.0f) : 0x4000u | 0x3000u);
                gradient_before[0] = element_bits(gradient, dtype, 0);
                MaxAbsScratchBuffer scratch(3);  // a cap of 3 blocks: several blocks raise the cells
                DeviceBuffer maxima(2 * sizeof(float));
                maxima.as<float>()[0] = maxima.as<float>()[1] = -1.0f;
                float* gradient_max = (asked & 1) ? maxima.as<float>() : nullptr;
                float* output_max = (asked & 2) ? maxima.as<float>() + 1 : nullptr;
                mpt_emulation::set_block_order_seed(static_cast<uint64_t>(asked) + 1);
                if (asked == 0)
                    mpt::run_relu_backward_in_place(gradient.data(), output.data(), dtype, count, nullptr);
                else
                    mpt::run_relu_backward_in_place(gradient.data(), output.data(), dtype, count, gradient_max,
                                                    output_max, scratch.scratch(), nullptr);
                mpt_emulation::set_block_order_seed(0);

                std::vector<float> kept_values, output_values;
                int64_t wrong = 0;
                for (size_t i = 0; i < n; ++i) {
                    const uint32_t y = element_bits(output, dtype, i);
                    const float y_value = element_float(dtype, y);
                    const bool kept = y_value > 0.0f;  // NaN is not
                    const uint32_t expected = kept ? gradient_before[i] : 0u;
                    if (element_bits(gradient, dtype, i) != expected) ++wrong;
                    kept_values.push_back(kept ? element_float(dtype, gradient_before[i]) : 0.0f);
                    output_values.push_back(y_value);
                }
                CHECK(wrong == 0);
                CHECK(maxima.as<float>()[0] == ((asked & 1) ? reference_max_abs(kept_values) : -1.0f));
                CHECK(maxima.as<float>()[1] == ((asked & 2) ? reference_max_abs(output_values) : -1.0f));
                CHECK(scratch.zero());
            }
        }
    }
}

TEST_CASE("the small-batch forward kernel, K split across a cluster, matches the reference and is deterministic") {
    const ComputeCapability hopper(90);
    const ForwardCase cases[] = {
        // K long enough for the split model to split it across a cluster, a feature tile or several.
        {32, 3072, 64, 64, DType::bf16, DType::bf16, Activation::relu},
        {32, 4096, 32, 32, DType::fp16, DType::fp16, Activation::relu},
        // Rows of each mma-tile count, padded outputs, the last layer's fp32 logits.
        {1, 2048, 40, 40, DType::bf16, DType::bf16, Activation::relu},
        {17, 1024, 96, 90, DType::bf16, DType::fp32, Activation::linear},
        {64, 1024, 32, 30, DType::fp16, DType::fp32, Activation::tanh},
        {8, 64, 16, 10, DType::bf16, DType::fp32, Activation::linear},  // short K: one block a tile
    };
    for (const ForwardCase& c : cases) {
        const ForwardResult first = check_small_batch_forward(c, 1, 0);
        MESSAGE("rows " << c.rows << ", K " << c.in_features << ", features " << c.out_features << ": " << first.splits
                        << " blocks a cluster");
        CHECK((first.splits > 1) == (c.in_features >= 1024));  // every case but the short K's is split
        // The clusters in another order: the same bits (each sum's order is fixed).
        const ForwardResult again = check_small_batch_forward(c, 1, 7);
        int64_t differ = 0;
        for (size_t i = 0; i < first.output.size(); ++i)
            differ += float_bits(first.output[i]) != float_bits(again.output[i]);
        CHECK(differ == 0);
    }
    // The seed MLP's first layer at batch 32 splits K in 2 (the prediction's 2 blocks a cluster on 132
    // SMs; the last test case runs it).
    mpt::DenseForwardArgs seed_layer{};
    seed_layer.rows = 32;
    seed_layer.in_features = 3072;
    seed_layer.out_features = 3000;
    seed_layer.valid_out = 3000;
    seed_layer.activation = Activation::relu;
    seed_layer.compute_dtype = seed_layer.bias_dtype = seed_layer.output_dtype = DType::bf16;
    CHECK(mpt::small_batch_forward_split(seed_layer).splits == 2);
}

TEST_CASE("the small-batch input-gradient kernel, the output features split across a cluster, matches the reference") {
    const ComputeCapability hopper(90);
    const BackwardCase cases[] = {
        {32, 96, 2048, DType::bf16, DType::bf16, Activation::relu},
        {32, 64, 16, DType::bf16, DType::bf16, Activation::relu},  // K of 16, as the seed MLP's layer 3
        {5, 40, 1024, DType::fp16, DType::fp32, Activation::relu},
        {64, 32, 512, DType::fp16, DType::fp16, Activation::tanh},
        {17, 48, 256, DType::bf16, DType::fp32, Activation::linear},
    };
    for (const BackwardCase& c : cases) {
        for (const bool from_mask : {true, false}) {
            if (from_mask && c.previous != Activation::relu) continue;
            const int splits = check_small_batch_backward_data(c, from_mask, {0, 3});
            MESSAGE("rows " << c.rows << ", features " << c.in_features << ", K " << c.out_features << ": " << splits
                            << " blocks a cluster");
            CHECK((splits > 1) == (c.out_features >= 512));  // the long K's are split
        }
    }
}

TEST_CASE("the bias-gradient kernel sums dZ's columns in its stated order") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const int64_t rows : {int64_t{1}, int64_t{17}, int64_t{300}}) {
            for (const int64_t columns : {int64_t{5}, int64_t{40}, int64_t{1000}}) {
                for (const bool accumulate : {false, true}) {
                    CAPTURE(static_cast<int>(dtype));
                    CAPTURE(rows);
                    CAPTURE(columns);
                    CAPTURE(accumulate);
                    std::mt19937 random(static_cast<uint32_t>(rows * columns));
                    const DeviceTensor gradient =
                        upload_rounded(dtype, random_vector(static_cast<size_t>(rows * columns), -4.0f, 4.0f, random));
                    DeviceBuffer sums(static_cast<size_t>(columns) * 4);
                    for (int64_t k = 0; k < columns; ++k) sums.as<float>()[k] = 0.5f * static_cast<float>(k);
                    mpt::run_bias_gradient({gradient.buffer.data(), dtype, sums.as<float>(), rows, columns, accumulate},
                                           nullptr);
                    int64_t wrong = 0;
                    for (int64_t k = 0; k < columns; ++k) {
                        // 8 row slices (rows s, s + 8, ...) summed in row order, then the slices in order.
                        float total = 0.0f;
                        for (int64_t slice = 0; slice < 8; ++slice) {
                            float sum = 0.0f;
                            for (int64_t r = slice; r < rows; r += 8)
                                sum += gradient.values[static_cast<size_t>(r * columns + k)];
                            total += sum;
                        }
                        const float expected = accumulate ? 0.5f * static_cast<float>(k) + total : total;
                        wrong += float_bits(sums.as<float>()[k]) != float_bits(expected);
                    }
                    CHECK(wrong == 0);
                }
            }
        }
    }
}

TEST_CASE("ReLU's input gradient from the outputs (a plain GEMM, then the kernel in place) matches the mask's DRELU") {
    mpt::CudaGemm gemm;
    std::mt19937 random(43);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const bool maxima : {false, true}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(maxima);
            const int64_t rows = 96, in = 64, out = 40;  // past the small-batch kernels' 64 rows
            const DeviceTensor output_grad =
                upload_rounded(dtype, random_vector(static_cast<size_t>(rows * out), -8.0f, 8.0f, random));
            const DeviceTensor weights =
                upload_rounded(dtype, random_vector(static_cast<size_t>(out * in), -0.2f, 0.2f, random));
            std::vector<float> outputs = random_vector(static_cast<size_t>(rows * in), -1.0f, 1.0f, random);
            for (float& y : outputs) y = y > 0.0f ? y : 0.0f;  // a ReLU layer's outputs
            const DeviceTensor input = upload_rounded(dtype, outputs);
            // The mask the forward's RELU_AUX_BIAS would have written, for the DRELU plan.
            DeviceBuffer mask(mpt::relu_mask_size(rows, in));
            std::memset(mask.data(), 0, mask.size());
            const int64_t ld_bits = mpt::relu_mask_ld_bits(in);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t i = 0; i < in; ++i)
                    if (input.values[static_cast<size_t>(r * in + i)] > 0.0f) {
                        const int64_t bit = r * ld_bits + i;
                        mask.as<uint8_t>()[bit / 8] =
                            static_cast<uint8_t>(mask.as<uint8_t>()[bit / 8] | (1u << (bit % 8)));
                    }
            std::vector<float> results[2];
            float taken[2] = {-1.0f, -1.0f};
            for (const bool mask_valid : {true, false}) {  // DRELU from the mask; relu_from_output
                DeviceBuffer input_grad(static_cast<size_t>(rows * in) * 2), workspace(1 << 20),
                    bounds(2 * sizeof(float));
                bounds.as<float>()[0] = bounds.as<float>()[1] = -1.0f;
                mpt::DenseBackwardDataArgs args{};
                args.output_grad = output_grad.buffer.data();
                args.weights = weights.buffer.data();
                args.input = input.buffer.data();
                args.relu_mask = mask.data();
                args.input_grad = input_grad.data();
                args.rows = rows;
                args.in_features = in;
                args.out_features = out;
                args.input_activation = Activation::relu;
                args.compute_dtype = dtype;
                args.input_grad_dtype = dtype;
                args.workspace = {workspace.data(), workspace.size()};
                if (maxima && !mask_valid) {
                    args.input_grad_max_abs = bounds.as<float>();
                    args.input_max_abs = bounds.as<float>() + 1;
                }
                const mpt::DenseBackwardDataPlan plan = mpt::plan_dense_backward_data(gemm, args, mask_valid, true);
                CHECK(plan.relu_from_output == !mask_valid);
                DeviceBuffer scratch(plan.scratch_bytes > 0 ? plan.scratch_bytes : 16);
                MaxAbsScratchBuffer max_abs_scratch(8);
                mpt::run_dense_backward_data(gemm, plan, args, scratch.as<float>(), max_abs_scratch.scratch(), nullptr);
                CHECK(max_abs_scratch.zero());
                results[mask_valid ? 0 : 1] = download_values(input_grad, dtype, static_cast<size_t>(rows * in));
                if (!mask_valid) {
                    taken[0] = bounds.as<float>()[0];
                    taken[1] = bounds.as<float>()[1];
                }
            }
            // The same 0 or 1 from the mask and from the outputs, so the same bits.
            int64_t differ = 0;
            for (size_t i = 0; i < results[0].size(); ++i)
                differ += float_bits(results[0][i]) != float_bits(results[1][i]);
            CHECK(differ == 0);
            if (maxima) {
                CHECK(taken[0] == reference_max_abs(results[1]));
                CHECK(taken[1] == reference_max_abs(input.values));
            } else {
                CHECK(taken[0] == -1.0f);
            }
        }
    }
}
