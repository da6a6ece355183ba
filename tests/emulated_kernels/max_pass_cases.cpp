// test_cuda_emulated_kernels: the max pass (the finiteness proof's maxima) whatever the grid and the
// blocks' order, its decision from computed and taken maxima, and a pass of taken maxima alone.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_max_abs.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"

using namespace mpt_test::emulated_kernels;

TEST_CASE("the max pass's kernel finds every tensor's max |x| whatever the grid and the blocks' order") {
    std::mt19937 random(20261206);
    std::vector<DeviceTensor> tensors;
    // Vectorised and element-wise (misaligned) tensors of each dtype, with tails, one chunk and many
    // (a chunk is 1,024 16-byte units), an empty one and one of a single element.
    tensors.emplace_back(DType::fp32, 4 * 1024 * 3 + 7);
    tensors.emplace_back(DType::bf16, 8 * 1024 * 2 + 5);
    tensors.emplace_back(DType::fp16, 1000, 2);
    tensors.emplace_back(DType::fp32, 0);
    tensors.emplace_back(DType::fp32, 5000, 4);
    tensors.emplace_back(DType::bf16, 1);
    tensors.emplace_back(DType::fp16, 8 * 1024 + 8);
    tensors.emplace_back(DType::bf16, 333, 6);
    for (size_t k = 0; k < tensors.size(); ++k) fill_random(tensors[k], random, 1.0f + static_cast<float>(k));
    // Planted maxima: at a tensor's first element, its last (the tail), the middle of a vector.
    tensors[0].set(0, -1000.0f);
    tensors[1].set(tensors[1].count - 1, 77.0f);
    tensors[2].set(501, -8.5f);
    tensors[4].set(4999, 123.0f);
    tensors[6].set(8 * 1024 + 3, -65504.0f);  // fp16's largest finite
    SUBCASE("finite values") {}
    SUBCASE("NaN and -Inf count as +Inf") {
        tensors[0].set(4 * 1024 + 9, NAN);
        tensors[7].set(300, -INFINITY);
    }

    std::vector<mpt::MaxAbsInput> inputs;
    for (const DeviceTensor& t : tensors) inputs.push_back(mpt::MaxAbsInput{t.buffer.data(), t.dtype, t.count});
    for (const int max_blocks : {1, 3, 8, 1000}) {
        for (const uint64_t seed : {0ull, 1ull, 2ull}) {
            CAPTURE(max_blocks);
            CAPTURE(seed);
            MaxAbsScratchBuffer scratch(max_blocks);
            DeviceBuffer out(sizeof(float) * inputs.size());
            mpt_emulation::set_block_order_seed(seed);
            mpt::run_max_abs(inputs.data(), static_cast<int>(inputs.size()), out.as<float>(), scratch.scratch(),
                             mpt::MaxAbsDecision{}, nullptr);
            mpt_emulation::set_block_order_seed(0);
            for (size_t k = 0; k < tensors.size(); ++k) {
                CAPTURE(k);
                CHECK(float_bits(out.as<float>()[k]) == float_bits(reference_max_abs(tensors[k].values)));
            }
            CHECK(scratch.zero());  // the cells and the ticket are ready for the next pass
        }
    }
}

TEST_CASE("the max pass's decision reads the maxima it computed and those already taken") {
    // Two layers' (dZ, A_prev) pairs; the second pair's maxima were taken by the backward that wrote
    // them (kMaxAbsTaken: the pass leaves out[2] and out[3] and reads them).
    std::mt19937 random(7);
    DeviceTensor gradient(DType::fp32, 640), input(DType::bf16, 3000);
    fill_random(gradient, random, 1.0f);
    fill_random(input, random, 4.0f);
    const float taken_gradient_max = 2.0f;
    for (const float taken_input_max : {3.0f, 1e38f, INFINITY}) {
        CAPTURE(taken_input_max);
        const mpt::MaxAbsInput inputs[4] = {{gradient.buffer.data(), DType::fp32, gradient.count},
                                            {input.buffer.data(), DType::bf16, input.count},
                                            {nullptr, DType::bf16, mpt::kMaxAbsTaken},
                                            {nullptr, DType::bf16, mpt::kMaxAbsTaken}};
        DeviceBuffer out(4 * sizeof(float));
        out.as<float>()[2] = taken_gradient_max;
        out.as<float>()[3] = taken_input_max;
        DeviceBuffer state_memory(sizeof(mpt::TrainState));
        mpt::TrainState& state = *state_memory.as<mpt::TrainState>();
        state = mpt::TrainState{};
        MaxAbsScratchBuffer scratch(8);
        mpt::run_max_abs(inputs, 4, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{&state, 2, 32}, nullptr);
        CHECK(out.as<float>()[0] == reference_max_abs(gradient.values));
        CHECK(out.as<float>()[1] == reference_max_abs(input.values));
        CHECK(out.as<float>()[2] == taken_gradient_max);
        CHECK(out.as<float>()[3] == taken_input_max);
        const float pairs[4] = {out.as<float>()[0], out.as<float>()[1], taken_gradient_max, taken_input_max};
        CHECK(state.found_inf == (mpt::gradient_bounds_finite(pairs, 2, 32) ? 0 : 1));
        CHECK(state.found_inf == (taken_input_max == 3.0f ? 0 : 1));
        CHECK(scratch.zero());
    }
}

TEST_CASE("a max pass of taken maxima alone launches nothing, unless it decides") {
    const mpt::MaxAbsInput inputs[2] = {{nullptr, DType::fp32, mpt::kMaxAbsTaken},
                                        {nullptr, DType::bf16, mpt::kMaxAbsTaken}};
    DeviceBuffer out(2 * sizeof(float));
    out.as<float>()[0] = 1e30f;
    out.as<float>()[1] = 1e30f;
    MaxAbsScratchBuffer scratch(8);
    const uint64_t before = mpt_emulation::launches();
    mpt::run_max_abs(inputs, 2, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{}, nullptr);
    CHECK(mpt_emulation::launches() == before);

    DeviceBuffer state_memory(sizeof(mpt::TrainState));
    mpt::TrainState& state = *state_memory.as<mpt::TrainState>();
    state = mpt::TrainState{};
    mpt::run_max_abs(inputs, 2, out.as<float>(), scratch.scratch(), mpt::MaxAbsDecision{&state, 1, 64}, nullptr);
    CHECK(mpt_emulation::launches() == before + 1);
    CHECK(state.found_inf == 1);  // 64 * 1e30 * 1e30 overflows
    CHECK(out.as<float>()[0] == 1e30f);
    CHECK(scratch.zero());
}
