// test_cuda_emulated_kernels: what a batch goes through before the layers: the gather kernels'
// normalised rows, bit for bit with the CPU, and the dropout kernel's kept and scaled values.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "amp/loss_scaler.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_dropout.cuh"
#include "backend/cuda/cuda_gather.cuh"
#include "cuda_emulation/emulated_threads.h"
#include "emulated_kernels/harness.h"
#include "emulated_kernels/sgd_layers.h"
#include "nn/dropout.h"

using namespace mpt_test::emulated_kernels;

TEST_CASE("the gather kernels normalise a batch's rows as the CPU does, bit for bit") {
    struct Case {
        bool u8;
        int64_t features, padded;
        DType dtype;
        bool standardized, ordered;
        int64_t rows;
    };
    // uint8 rows in 16-byte chunks (CIFAR's 3072 features), the general kernel (padded, odd widths,
    // fp32 samples), each batch dtype, standardization, an epoch's order.
    const Case cases[] = {
        {true, 3072, 3072, DType::bf16, false, true, 33}, {true, 3072, 3072, DType::fp16, true, true, 5},
        {true, 48, 48, DType::fp32, true, false, 300},    {true, 7, 16, DType::bf16, true, true, 9},
        {false, 40, 48, DType::fp32, false, true, 17},    {false, 33, 40, DType::fp16, true, false, 4}};
    for (const Case& c : cases) {
        CAPTURE(c.u8);
        CAPTURE(c.features);
        CAPTURE(c.padded);
        CAPTURE(static_cast<int>(c.dtype));
        CAPTURE(c.standardized);
        CAPTURE(c.rows);
        std::mt19937 random(static_cast<uint32_t>(c.features + c.rows));
        const int64_t dataset_rows = c.rows + 50, target_width = 3;
        DeviceBuffer samples(static_cast<size_t>(dataset_rows * c.features) * (c.u8 ? 1 : 4), 16);
        for (int64_t i = 0; i < dataset_rows * c.features; ++i) {
            if (c.u8)
                samples.as<uint8_t>()[i] = static_cast<uint8_t>(random());
            else
                samples.as<float>()[i] = std::uniform_real_distribution<float>(-3.0f, 300.0f)(random);
        }
        DeviceBuffer mean(static_cast<size_t>(c.features) * 4), divisor(static_cast<size_t>(c.features) * 4);
        for (int64_t f = 0; f < c.features; ++f) {
            mean.as<float>()[f] = std::uniform_real_distribution<float>(-0.5f, 0.5f)(random);
            divisor.as<float>()[f] = std::uniform_real_distribution<float>(0.1f, 2.0f)(random);
        }
        DeviceBuffer order(static_cast<size_t>(dataset_rows) * 4), labels(static_cast<size_t>(dataset_rows) * 4),
            targets(static_cast<size_t>(dataset_rows * target_width) * 4),
            weights(static_cast<size_t>(dataset_rows) * 4);
        for (int64_t r = 0; r < dataset_rows; ++r) {
            order.as<int32_t>()[r] = static_cast<int32_t>(random() % dataset_rows);
            labels.as<int32_t>()[r] = static_cast<int32_t>(r * 7);
            weights.as<float>()[r] = static_cast<float>(r) * 0.5f;
            for (int64_t k = 0; k < target_width; ++k)
                targets.as<float>()[r * target_width + k] = static_cast<float>(r + k);
        }
        const size_t element_bytes = c.dtype == DType::fp32 ? 4 : 2;
        DeviceBuffer batch(static_cast<size_t>(c.rows * c.padded) * element_bytes, 16),
            batch_labels(static_cast<size_t>(c.rows) * 4),
            batch_targets(static_cast<size_t>(c.rows * target_width) * 4),
            batch_weights(static_cast<size_t>(c.rows) * 4);
        mpt::GatherArgs args{};
        args.samples = samples.data();
        args.samples_are_u8 = c.u8;
        args.scale = c.u8 ? 1.0f / 255.0f : 0.01f;
        args.offset = -0.25f;
        args.feature_mean = c.standardized ? mean.as<float>() : nullptr;
        args.feature_divisor = c.standardized ? divisor.as<float>() : nullptr;
        args.order = c.ordered ? order.as<int32_t>() : nullptr;
        args.first = 11;
        args.rows = c.rows;
        args.features = c.features;
        args.padded_features = c.padded;
        args.batch = batch.data();
        args.batch_dtype = c.dtype;
        args.labels = labels.as<int32_t>();
        args.batch_labels = batch_labels.as<int32_t>();
        args.targets = targets.as<float>();
        args.target_width = target_width;
        args.batch_targets = batch_targets.as<float>();
        args.row_weights = weights.as<float>();
        args.batch_row_weights = batch_weights.as<float>();
        mpt::validate_gather(args);
        mpt_emulation::set_block_order_seed(2);
        mpt::run_gather(args, nullptr);
        mpt_emulation::set_block_order_seed(0);
        int64_t wrong = 0;
        for (int64_t r = 0; r < c.rows; ++r) {
            const int64_t source = c.ordered ? order.as<int32_t>()[args.first + r] : args.first + r;
            for (int64_t f = 0; f < c.padded; ++f) {
                float value = 0.0f;
                if (f < c.features) {  // CpuBackend::gather_batch's arithmetic, without contraction
                    const float x = c.u8 ? static_cast<float>(samples.as<uint8_t>()[source * c.features + f])
                                         : samples.as<float>()[source * c.features + f];
                    value = x * args.scale + args.offset;
                    if (c.standardized) value = (value - mean.as<float>()[f]) / divisor.as<float>()[f];
                }
                DeviceTensor expected(c.dtype, 1);
                expected.set(0, value);
                const size_t index = static_cast<size_t>(r * c.padded + f);
                const uint32_t got = c.dtype == DType::fp32 ? batch.as<uint32_t>()[index] : batch.as<uint16_t>()[index];
                const uint32_t want =
                    c.dtype == DType::fp32 ? expected.buffer.as<uint32_t>()[0] : expected.buffer.as<uint16_t>()[0];
                wrong += got != want;
            }
            wrong += batch_labels.as<int32_t>()[r] != labels.as<int32_t>()[source];
            wrong += batch_weights.as<float>()[r] != weights.as<float>()[source];
            for (int64_t k = 0; k < target_width; ++k)
                wrong +=
                    batch_targets.as<float>()[r * target_width + k] != targets.as<float>()[source * target_width + k];
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("the dropout kernel keeps and scales what the shared draw says, in place or not") {
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        for (const bool in_place : {false, true}) {
            CAPTURE(static_cast<int>(dtype));
            CAPTURE(in_place);
            std::mt19937 random(5);
            const int64_t count = 3000;
            DeviceTensor input = upload_rounded(dtype, random_vector(static_cast<size_t>(count), -2.0f, 2.0f, random));
            DeviceBuffer separate(static_cast<size_t>(count) * (dtype == DType::fp32 ? 4 : 2));
            DeviceBuffer state = train_state(1.0f, 0);
            mpt::DropoutArgs args{};
            args.input = input.buffer.data();
            args.output = in_place ? input.buffer.data() : separate.data();
            args.dtype = dtype;
            args.count = count;
            args.draw = mpt::DropoutDraw{77, 2, 0x40000000u, 1.0f / 0.75f};
            args.state = state.as<mpt::TrainState>();
            args.first_index = 64;
            mpt::run_dropout(args, nullptr);
            const std::vector<float> got =
                download_values(in_place ? input.buffer : separate, dtype, static_cast<size_t>(count));
            const uint64_t key = mpt::dropout_key(args.draw.seed, args.state->steps, args.draw.layer);
            int64_t wrong = 0, dropped = 0;
            for (int64_t i = 0; i < count; ++i) {
                const bool kept = mpt::dropout_keeps(key, args.draw.threshold, args.first_index + i);
                DeviceTensor expected(dtype, 1);
                expected.set(0, kept ? input.values[static_cast<size_t>(i)] * args.draw.scale : 0.0f);
                wrong += float_bits(got[static_cast<size_t>(i)]) != float_bits(expected.values[0]);
                dropped += !kept;
            }
            CHECK(wrong == 0);
            CHECK(dropped > count / 5);  // a quarter of them, about
            CHECK(dropped < count / 3);
        }
    }
}
