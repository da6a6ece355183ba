// test_cuda_emulated_kernels: the updates: fused SGD in every compilation, its group launch and
// skipped steps, by bulk copies and tensor cores, plain SGD as one GEMM into the masters, the step's
// state kernels, and the seed MLP's layers at batch 32 as the candidate switches run them.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/cuda_gemm.cuh"
#include "backend/cuda/cuda_gradient_into_masters.cuh"
#include "backend/cuda/cuda_step_state.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "emulated_kernels/sgd_layers.h"
#include "emulated_kernels/small_batch_checks.h"
#include "nn/activation.h"

using namespace mpt_test::emulated_kernels;

TEST_CASE(
    "fused SGD's CUDA-core kernel updates the masters, bias and copies as its sums and rule say, in every "
    "compilation") {
    struct Shape {
        int64_t rows, in_features, out_features;
        bool aligned;
    };
    // Batches of 1 row to the kernel's 64, exactly 32 (its own compilation), a layer's last strip
    // and last tile partial or whole, the scalar path (columns not a multiple of 4, or masters not
    // 16-byte aligned).
    const Shape shapes[] = {{32, 256, 64, true},  {32, 300, 45, true}, {1, 128, 32, true},   {17, 260, 70, true},
                            {64, 136, 33, true},  {32, 130, 40, true}, {32, 128, 32, false}, {5, 7, 3, true},
                            {32, 256, 600, true}, {32, 130, 330, true}};
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const Shape& shape : shapes) {
            for (const float decay : {0.0f, 0.01f}) {
                for (const int choice_bits : {0, 1, 2, 3}) {  // bit 0: exact rows, bit 1: three blocks
                    // A block a tile (132 multiprocessors), or runs of several (one).
                    const Multiprocessors multiprocessors(choice_bits % 2 == 0 ? 132 : 1);
                    CAPTURE(static_cast<int>(dtype));
                    CAPTURE(shape.rows);
                    CAPTURE(shape.in_features);
                    CAPTURE(shape.out_features);
                    CAPTURE(shape.aligned);
                    CAPTURE(decay);
                    CAPTURE(choice_bits);
                    std::mt19937 random(static_cast<uint32_t>(shape.rows * 1000 + shape.in_features + choice_bits));
                    SgdLayer layer(shape.rows, shape.in_features, shape.out_features, dtype, shape.aligned, random);
                    DeviceBuffer state = train_state(1024.0f, 0);
                    const mpt::OptimizerConfig optimizer = plain_sgd(decay);
                    mpt::FusedSgdKernelChoice choice{};
                    choice.exact_rows = (choice_bits & 1) != 0;
                    choice.three_blocks = (choice_bits & 2) != 0;
                    mpt_emulation::set_block_order_seed(static_cast<uint64_t>(choice_bits));
                    mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, choice, nullptr);
                    mpt_emulation::set_block_order_seed(0);
                    CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
                }
            }
        }
    }
}

TEST_CASE("fused SGD writes nothing in a skipped step") {
    std::mt19937 random(3);
    for (const DType dtype : {DType::fp32, DType::bf16}) {
        SgdLayer layer(32, 256, 64, dtype, true, random);
        DeviceBuffer state = train_state(1024.0f, 1);
        const mpt::OptimizerConfig optimizer = plain_sgd(0.01f);
        mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, mpt::FusedSgdKernelChoice{true, true},
                           nullptr);
        CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
    }
}

TEST_CASE("fused SGD's group launch updates each layer as alone and finishes the step in its last block") {
    std::mt19937 random(11);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const int choice_bits : {0, 1, 3}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(choice_bits);
            // The seed MLP's shape, narrowed: three layers of one variant in one launch.
            SgdLayer first(32, 384, 96, dtype, true, random), second(32, 96, 64, dtype, true, random),
                last(32, 64, 16, dtype, true, random);
            DeviceBuffer state = train_state(256.0f, 0);
            mpt::TrainState* device_state = state.as<mpt::TrainState>();
            const mpt::TrainState before = *device_state;
            const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
            const mpt::DenseUpdateArgs args[3] = {first.args(device_state), second.args(device_state),
                                                  last.args(device_state)};
            const mpt::DenseUpdateArgs* layers[3] = {&args[0], &args[1], &args[2]};
            const mpt::OptimizerConfig* optimizers[3] = {&optimizer, &optimizer, &optimizer};
            DeviceBuffer metrics(sizeof(double) * mpt::kMetricsCount), committed(sizeof(double) * mpt::kMetricsCount),
                counter(256);
            for (int m = 0; m < mpt::kMetricsCount; ++m) {
                metrics.as<double>()[m] = 1.5 * (m + 1);
                committed.as<double>()[m] = -1.0;
            }
            std::memset(counter.data(), 0, counter.size());
            mpt::FusedSgdFinish finish{};
            finish.state = device_state;
            finish.scaler.mode = mpt::LossScaling::dynamic;
            finish.scaler.growth_interval = 2;
            finish.metrics = metrics.as<double>();
            finish.committed_metrics = committed.as<double>();
            finish.counter = counter.as<unsigned>();
            mpt::FusedSgdKernelChoice choice{};
            choice.exact_rows = (choice_bits & 1) != 0;
            choice.three_blocks = (choice_bits & 2) != 0;
            mpt_emulation::set_block_order_seed(9);
            const uint64_t launches = mpt_emulation::launches();
            CHECK(mpt::run_fused_sgd_layers(layers, optimizers, 3, &finish, choice, nullptr) == 3);
            mpt_emulation::set_block_order_seed(0);
            CHECK(mpt_emulation::launches() == launches + 1);
            // The updates read the state before the last block advanced it.
            CHECK(first.mismatches(optimizer, before) == 0);
            CHECK(second.mismatches(optimizer, before) == 0);
            CHECK(last.mismatches(optimizer, before) == 0);
            mpt::TrainState expected = before;
            mpt::advance_loss_scaler(expected, finish.scaler);
            CHECK(std::memcmp(device_state, &expected, sizeof(expected)) == 0);
            for (int m = 0; m < mpt::kMetricsCount; ++m) CHECK(committed.as<double>()[m] == metrics.as<double>()[m]);
            CHECK(*counter.as<unsigned>() == 0u);
        }
    }
}

TEST_CASE("fused SGD by bulk copies and tensor cores updates as the CUDA-core kernel does, within the sums' rounding") {
    const ComputeCapability hopper(90);
    const mpt::FusedSgdBulkCopyDevice device = mpt::prepare_fused_sgd_bulk_copy();
    struct Shape {
        int64_t rows, in_features, out_features;
    };
    // Each compilation (32, 64 and 256 rows, the batch padded up to them), runs of several tiles a
    // block (the ring of 3 stages turning over), a layer's last strip and tile partial.
    const Shape shapes[] = {{32, 256, 64},  {32, 300, 200}, {7, 128, 32},   {64, 132, 40},  {33, 256, 96},
                            {256, 128, 48}, {100, 260, 24}, {32, 256, 640}, {64, 132, 328}, {256, 128, 200}};
    // On one multiprocessor (3, 2 and 1 blocks of the three compilations), the last three give each
    // block more tiles than stages.
    const auto turns_ring = [](const Shape& shape) { return shape.out_features >= 200 && shape.in_features <= 256; };
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const Shape& shape : shapes) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(shape.rows);
            CAPTURE(shape.in_features);
            CAPTURE(shape.out_features);
            // One multiprocessor: blocks take runs of several tiles, and the ring of stages turns over.
            const Multiprocessors one(1);
            std::mt19937 random(static_cast<uint32_t>(shape.rows * 7 + shape.out_features));
            SgdLayer layer(shape.rows, shape.in_features, shape.out_features, dtype, true, random);
            DeviceBuffer state = train_state(1024.0f, 0);
            const mpt::OptimizerConfig optimizer = plain_sgd(0.01f);
            const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
            REQUIRE(mpt::fused_sgd_bulk_copy_applies(args, device));
            mpt::FusedSgdKernelChoice choice{};
            choice.bulk_copy_layers = 1;
            mpt_emulation::set_block_order_seed(4);
            mpt_emulation::take_most_mbarrier_phases();
            mpt::run_fused_sgd(args, optimizer, choice, nullptr);
            const uint64_t phases = mpt_emulation::take_most_mbarrier_phases();
            mpt_emulation::set_block_order_seed(0);
            CHECK(tolerant_mismatches(layer, optimizer, *state.as<mpt::TrainState>(), shape.rows <= 64) == 0);
            if (turns_ring(shape)) CHECK(phases >= 2);  // a stage refilled and waited for at parity 1
        }
    }
}

TEST_CASE("the seed MLP's layers at batch 32 on the emulated H200, as the candidate switches run them") {
    // Each kernel once on the real shapes: 94 feature tiles with the last partial, splits as planned,
    // 24 column strips of masters with the last partial, a block a tile.
    const ComputeCapability hopper(90);
    // Layer 1's forward (MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1): K split in 2.
    CHECK(check_small_batch_forward({32, 3072, 3000, 3000, DType::bf16, DType::bf16, Activation::relu}, 3, 0).splits ==
          2);
    // Layer 2's input gradient (MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1), ReLU's derivative from layer 1's mask.
    MESSAGE("layer 2's input gradient: " << check_small_batch_backward_data(
                                                {32, 3000, 1000, DType::bf16, DType::bf16, Activation::relu}, true, {0})
                                         << " blocks a cluster");
    // Layer 1's update: fused SGD for exactly 32 rows, 3 blocks an SM (MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1,
    // MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1), the sums bit for bit; by bulk copies
    // (MPTRAIN_CUDA_BULK_COPY_SGD=1), within their rounding.
    std::mt19937 random(32);
    const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
    {
        SgdLayer layer(32, 3072, 3000, DType::bf16, true, random);
        DeviceBuffer state = train_state(32768.0f, 0);
        mpt::run_fused_sgd(layer.args(state.as<mpt::TrainState>()), optimizer, mpt::FusedSgdKernelChoice{true, true},
                           nullptr);
        CHECK(layer.mismatches(optimizer, *state.as<mpt::TrainState>()) == 0);
    }
    {
        SgdLayer layer(32, 3072, 3000, DType::bf16, true, random);
        DeviceBuffer state = train_state(32768.0f, 0);
        const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
        REQUIRE(mpt::fused_sgd_bulk_copy_applies(args, mpt::prepare_fused_sgd_bulk_copy()));
        mpt::FusedSgdKernelChoice choice{};
        choice.bulk_copy_layers = 1;
        mpt::run_fused_sgd(args, optimizer, choice, nullptr);
        CHECK(tolerant_mismatches(layer, optimizer, *state.as<mpt::TrainState>(), true) == 0);
    }
}

TEST_CASE("fused SGD by bulk copies: a group launch that finishes the step, and a skipped step") {
    const ComputeCapability hopper(90);
    const Multiprocessors one(1);
    std::mt19937 random(21);
    const mpt::OptimizerConfig optimizer = plain_sgd(0.0f);
    for (const int rows : {32, 64, 256}) {
        CAPTURE(rows);
        SgdLayer first(rows, 256, 96, DType::bf16, true, random), second(rows, 96, 64, DType::bf16, true, random),
            last(rows, 64, 16, DType::bf16, true, random);
        DeviceBuffer state = train_state(256.0f, 0);
        mpt::TrainState* device_state = state.as<mpt::TrainState>();
        const mpt::TrainState before = *device_state;
        const mpt::DenseUpdateArgs args[3] = {first.args(device_state), second.args(device_state),
                                              last.args(device_state)};
        const mpt::DenseUpdateArgs* layers[3] = {&args[0], &args[1], &args[2]};
        const mpt::OptimizerConfig* optimizers[3] = {&optimizer, &optimizer, &optimizer};
        DeviceBuffer counter(256);
        std::memset(counter.data(), 0, counter.size());
        mpt::FusedSgdFinish finish{};
        finish.state = device_state;
        finish.scaler.mode = mpt::LossScaling::dynamic;
        finish.counter = counter.as<unsigned>();
        mpt::FusedSgdKernelChoice choice{};
        choice.bulk_copy_layers = 0b111;
        const uint64_t launches = mpt_emulation::launches();
        mpt_emulation::set_block_order_seed(6);
        CHECK(mpt::run_fused_sgd_layers(layers, optimizers, 3, &finish, choice, nullptr) == 3);
        mpt_emulation::set_block_order_seed(0);
        CHECK(mpt_emulation::launches() == launches + 1);
        CHECK(tolerant_mismatches(first, optimizer, before, rows <= 64) == 0);
        CHECK(tolerant_mismatches(second, optimizer, before, rows <= 64) == 0);
        CHECK(tolerant_mismatches(last, optimizer, before, rows <= 64) == 0);
        mpt::TrainState expected = before;
        mpt::advance_loss_scaler(expected, finish.scaler);
        CHECK(std::memcmp(device_state, &expected, sizeof(expected)) == 0);
        CHECK(*counter.as<unsigned>() == 0u);

        // A skipped step: nothing written (mismatches() compares with the masters as they were).
        SgdLayer skipped(rows, 256, 96, DType::bf16, true, random);
        DeviceBuffer skip_state = train_state(256.0f, 1);
        mpt::FusedSgdKernelChoice alone{};
        alone.bulk_copy_layers = 1;
        mpt::run_fused_sgd(skipped.args(skip_state.as<mpt::TrainState>()), optimizer, alone, nullptr);
        CHECK(skipped.mismatches(optimizer, *skip_state.as<mpt::TrainState>()) == 0);
    }
}

TEST_CASE("the step's state kernels decide and finish as the shared rules say") {
    for (const float largest : {1.0f, 1e20f, INFINITY}) {
        DeviceBuffer pairs(4 * sizeof(float));
        const float values[4] = {3.0f, 2.0f, largest, 1e19f};
        std::memcpy(pairs.data(), values, sizeof(values));
        DeviceBuffer state = train_state(128.0f, 0);
        mpt::run_decide_update(pairs.as<float>(), 2, 64, state.as<mpt::TrainState>(), nullptr);
        CHECK(state.as<mpt::TrainState>()->found_inf == (mpt::gradient_bounds_finite(values, 2, 64) ? 0 : 1));
    }
    for (const int32_t found_inf : {0, 1}) {
        DeviceBuffer state = train_state(1024.0f, found_inf), metrics(sizeof(double) * mpt::kMetricsCount),
                     committed(sizeof(double) * mpt::kMetricsCount);
        for (int m = 0; m < mpt::kMetricsCount; ++m) metrics.as<double>()[m] = 0.25 * (m + 3);
        mpt::LossScalerConfig scaler{};
        scaler.mode = mpt::LossScaling::dynamic;
        scaler.growth_interval = 1;
        mpt::TrainState expected = *state.as<mpt::TrainState>();
        mpt::advance_loss_scaler(expected, scaler);
        mpt::run_finish_step(state.as<mpt::TrainState>(), scaler, metrics.as<double>(), committed.as<double>(),
                             nullptr);
        CHECK(std::memcmp(state.data(), &expected, sizeof(expected)) == 0);
        for (int m = 0; m < mpt::kMetricsCount; ++m) CHECK(committed.as<double>()[m] == metrics.as<double>()[m]);
    }
}

TEST_CASE(
    "plain SGD as one GEMM into the masters (over the emulated cuBLASLt) updates as the fused kernels do, and skips") {
    mpt::CudaGemm gemm;
    std::mt19937 random(41);
    for (const DType dtype : {DType::bf16, DType::fp16}) {
        for (const float decay : {0.0f, 0.004f}) {
            for (const int32_t found_inf : {0, 1}) {
                CAPTURE(static_cast<int>(dtype));
                CAPTURE(decay);
                CAPTURE(found_inf);
                // A batch past fused SGD's 64 rows, where this path applies.
                SgdLayer layer(100, 96, 40, dtype, true, random);
                if (found_inf) {  // a skipped step's non-finite inputs must not reach the masters
                    layer.input.set(5, NAN);
                    layer.input.set(700, INFINITY);
                    layer.output_grad.set(3, -INFINITY);
                }
                DeviceBuffer state = train_state(512.0f, found_inf);
                const mpt::OptimizerConfig optimizer = plain_sgd(decay);
                const mpt::DenseUpdateArgs args = layer.args(state.as<mpt::TrainState>());
                REQUIRE(mpt::gradient_into_masters_applies(gemm, args, optimizer));
                DeviceBuffer scratch(mpt::gradient_into_masters_scratch_bytes(args.out_features));
                const mpt::GradientIntoMastersPlan plan =
                    mpt::plan_gradient_into_masters(gemm, args, scratch.as<float>());
                CHECK(plan.bias_fused);  // the emulated cuBLASLt offers BGRADB
                mpt::run_gradient_into_masters(gemm, plan, args, optimizer, 64, nullptr);
                const mpt::TrainState& after = *state.as<mpt::TrainState>();
                if (found_inf)
                    CHECK(layer.mismatches(optimizer, after) == 0);  // every master, bias and copy as it was
                else
                    CHECK(tolerant_mismatches(layer, optimizer, after, false) == 0);
            }
        }
    }
}
