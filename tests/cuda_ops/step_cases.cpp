// test_cuda_ops: the ops around a step's layers (the batch gather, dropout, the max pass and the
// update decision of the finiteness proof, finish_step's loss scaler, conversions), CUDA against
// the CPU; and the recorded steps' folds of them into one launch (the decision into the max pass,
// begin_step into the loss head).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;
using mpt_test::normalised_error;

#if defined(MPTRAIN_WITH_CUDA)
// One step's decision as a compute task: the max_abs pass over three layers' (dZ, A_prev) tensors
// and the decide_update that reads exactly its results, between begin_step and finish_step (four
// ops, so that the task is captured and replayed as the trainer's steps are).
struct DecisionTask {
    Backend* backend;
    MaxAbsInput inputs[6];
    float* maxima;
    TrainState* state;
    int64_t rows;
    LossScalerConfig scaler;
    // The maxima in two passes (4 tensors, then 2), as the executor makes them past 8 layers: the
    // decision reads both, so neither pass may take it.
    bool two_passes = false;
};

void run_decision_task(void* argument) {
    const DecisionTask& task = *static_cast<const DecisionTask*>(argument);
    task.backend->begin_step(task.state);
    if (task.two_passes) {
        task.backend->max_abs(task.inputs, 4, task.maxima);
        task.backend->max_abs(task.inputs + 4, 2, task.maxima + 4);
    } else {
        task.backend->max_abs(task.inputs, 6, task.maxima);
    }
    task.backend->decide_update(task.maxima, 3, task.rows, task.state);
    task.backend->finish_step(task.state, task.scaler, nullptr, nullptr);
}

// What a head task issues between its begin_step and its loss head: nothing, a dropout (the fold
// looks past the forward ops and dropouts the trainer issues there), or a max_abs pass (which keeps
// the begin_step a node of its own).
enum class BetweenStepAndHead { nothing, dropout, max_abs };

// A step's start as a compute task: begin_step, then the loss head (which may find the loss
// non-finite), a max pass and finish_step (four ops, so that the task is captured and replayed).

struct HeadTask {
    Backend* backend;
    LossHeadArgs head;
    MaxAbsInput input;
    float* maximum;
    LossScalerConfig scaler;
    BetweenStepAndHead between = BetweenStepAndHead::nothing;
    DropoutArgs dropout{};        // for BetweenStepAndHead::dropout
    MaxAbsInput between_input{};  // for BetweenStepAndHead::max_abs
    float* between_maximum = nullptr;
};

void run_head_task(void* argument) {
    const HeadTask& task = *static_cast<const HeadTask*>(argument);
    task.backend->begin_step(task.head.state);
    if (task.between == BetweenStepAndHead::dropout) task.backend->dropout(task.dropout);
    if (task.between == BetweenStepAndHead::max_abs)
        task.backend->max_abs(&task.between_input, 1, task.between_maximum);
    task.backend->loss_head(task.head);
    task.backend->max_abs(&task.input, 1, task.maximum);
    task.backend->finish_step(task.head.state, task.scaler, nullptr, nullptr);
}
#endif

}  // namespace

namespace mpt::testing {

// `standardized`: then (value - mean) / divisor per feature, as for mpt_dataset_create_standardized.
// features = padded, a multiple of 16, and uint8 samples: the 16-byte chunk path.
void compare_gather(Backend& reference, Backend& candidate, bool u8, DType dtype, bool standardized, int64_t features,
                    int64_t padded) {
    CAPTURE(u8);
    CAPTURE(std::string(dtype_name(dtype)));
    CAPTURE(standardized);
    CAPTURE(features);
    CAPTURE(padded);
    const int64_t dataset_rows = 100, rows = 21, first = 7, target_width = 3;
    std::vector<uint8_t> samples_u8(static_cast<size_t>(dataset_rows * features));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& value : samples_u8) value = static_cast<uint8_t>(byte(random_engine()));
    const std::vector<float> samples_f32 = random_values(static_cast<size_t>(dataset_rows * features), -3, 3);
    std::vector<int32_t> order(static_cast<size_t>(dataset_rows));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), random_engine());
    std::vector<int32_t> labels(static_cast<size_t>(dataset_rows));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    const std::vector<float> targets = random_values(static_cast<size_t>(dataset_rows * target_width), 0, 1);
    const std::vector<float> row_weights = random_values(static_cast<size_t>(dataset_rows), 0, 2);
    const std::vector<float> feature_means = random_values(static_cast<size_t>(features), -1, 1);
    const std::vector<float> feature_divisors = random_values(static_cast<size_t>(features), 0.1f, 3);

    std::vector<float> batches[2], batch_targets[2], batch_row_weights[2];
    std::vector<int32_t> batch_labels[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer samples = u8 ? upload_raw(backend, samples_u8) : upload_raw(backend, samples_f32);
        Buffer order_buffer = upload_raw(backend, order);
        Buffer label_buffer = upload_raw(backend, labels);
        Buffer target_buffer = upload_raw(backend, targets);
        Buffer batch = poisoned(backend, dtype, static_cast<size_t>(rows * padded));
        Buffer batch_label = poisoned(backend, DType::fp32, static_cast<size_t>(rows));
        Buffer batch_target = poisoned(backend, DType::fp32, static_cast<size_t>(rows * target_width));
        Buffer row_weight_buffer = upload_raw(backend, row_weights);
        Buffer batch_row_weight = poisoned(backend, DType::fp32, static_cast<size_t>(rows));
        Buffer mean_buffer = upload_raw(backend, feature_means);
        Buffer divisor_buffer = upload_raw(backend, feature_divisors);
        GatherArgs args{};
        args.samples = samples.data();
        args.samples_are_u8 = u8;
        args.scale = u8 ? 1.0f / 255.0f : 0.7f;
        args.offset = u8 ? -0.25f : 0.1f;
        args.order = order_buffer.as<int32_t>();
        args.first = first;
        args.rows = rows;
        args.features = features;
        args.padded_features = padded;
        args.batch = batch.data();
        args.batch_dtype = dtype;
        args.labels = label_buffer.as<int32_t>();
        args.batch_labels = batch_label.as<int32_t>();
        args.targets = target_buffer.as<float>();
        args.target_width = target_width;
        args.batch_targets = batch_target.as<float>();
        args.row_weights = row_weight_buffer.as<float>();
        args.batch_row_weights = batch_row_weight.as<float>();
        if (standardized) {
            args.feature_mean = mean_buffer.as<float>();
            args.feature_divisor = divisor_buffer.as<float>();
        }
        backend.gather_batch(args);
        backend.scheduler().synchronize();
        batches[b] = download(backend, batch, dtype, static_cast<size_t>(rows * padded));
        batch_labels[b] = download_raw<int32_t>(backend, batch_label, static_cast<size_t>(rows));
        batch_targets[b] = download(backend, batch_target, DType::fp32, static_cast<size_t>(rows * target_width));
        batch_row_weights[b] = download(backend, batch_row_weight, DType::fp32, static_cast<size_t>(rows));
    }
    CHECK(normalised_error(batches[1], batches[0]) == 0.0);  // the same formula, each rounding alike: exact
    CHECK(batch_labels[1] == batch_labels[0]);
    CHECK(batch_targets[1] == batch_targets[0]);
    CHECK(batch_row_weights[1] == batch_row_weights[0]);
}

// dropout against nn/dropout.h's mask, exactly: each kept value times the scale, rounded once to the
// dtype, the others 0, on ragged counts and misaligned starts with a value past the end that it may
// not touch; the step count in backend memory keys the mask. Into another array (the forward's),
// whose input stays as it was, and in place (the backward's).
void compare_dropout(Backend& reference, Backend& candidate) {
    struct DropoutCase {
        int64_t count, offset, steps, layer;
        float rate;
        int64_t first_index = 0;  // a micro-batch's: where its values lie in the whole batch's
    };
    const DropoutCase cases[] = {{0, 0, 0, 0, 0.5f},        {1, 0, 3, 1, 0.5f},          {4999, 1, 0, 0, 0.1f},
                                 {4999, 3, 12345, 2, 0.9f}, {(int64_t{1} << 20) + 3, 0, 7, 1, 0.3f},
                                 {4999, 1, 5, 1, 0.4f, 3 * 4999}};
    const uint64_t seed = 0x0123456789abcdefULL;
    for (DType dtype : kDTypes) {
        for (const DropoutCase& c : cases) {
            CAPTURE(std::string(dtype_name(dtype)));
            CAPTURE(c.count);
            CAPTURE(c.offset);
            CAPTURE(c.steps);
            CAPTURE(c.rate);
            CAPTURE(c.first_index);
            const size_t size = static_cast<size_t>(c.count + c.offset + 1);
            const std::vector<float> values = rounded(random_values(size, -3, 3), dtype);
            const DropoutDraw draw = dropout_draw(seed, c.layer, c.rate);
            const uint64_t key = dropout_key(seed, c.steps, c.layer);
            std::vector<float> expected = values;
            int64_t kept = 0;
            for (int64_t i = 0; i < c.count; ++i) {
                const bool keeps = dropout_keeps(key, draw.threshold, c.first_index + i);
                kept += keeps;
                float& value = expected[static_cast<size_t>(c.offset + i)];
                value = keeps ? round_to(dtype, value * (1.0f / (1.0f - c.rate))) : 0.0f;
            }
            if (c.count > 1000) {  // the kept share within 6 standard deviations of 1 - rate
                const double mean = static_cast<double>(c.count) * (1.0 - c.rate);
                const double deviation = std::sqrt(static_cast<double>(c.count) * c.rate * (1.0 - c.rate));
                CHECK(std::abs(static_cast<double>(kept) - mean) < 6 * deviation);
            }
            TrainState state = initial_train_state(LossScalerConfig{});
            state.steps = c.steps;
            Backend* backends[2] = {&reference, &candidate};
            for (Backend* backend : backends) {
                for (bool in_place : {false, true}) {
                    CAPTURE(in_place);
                    Buffer input = upload(*backend, dtype, values);
                    Buffer output = upload(*backend, dtype, values);
                    Buffer state_buffer = upload_raw(*backend, std::vector<TrainState>{state});
                    const size_t offset = static_cast<size_t>(c.offset) * backend->storage_size(dtype);
                    DropoutArgs args{};
                    args.input = static_cast<char*>(input.data()) + offset;
                    args.output = static_cast<char*>((in_place ? input : output).data()) + offset;
                    args.dtype = dtype;
                    args.count = c.count;
                    args.draw = draw;
                    args.state = state_buffer.as<TrainState>();
                    args.first_index = c.first_index;
                    backend->dropout(args);
                    CHECK(download(*backend, in_place ? input : output, dtype, size) == expected);
                    if (!in_place) CHECK(download(*backend, input, dtype, size) == values);
                }
            }
        }
    }
}

// All trials of a dtype in one batched call, as a step issues them: ragged tails, misaligned
// starts, a negative maximum, NaN, -Inf, all zeros, an empty tensor, and 4 M elements whose maximum
// lies beyond the first pass of the grid (about 1 M elements in fp32 and 2 M in 16 bits on an H200).
void compare_max_abs(Backend& reference, Backend& candidate) {
    constexpr int kTrials = 8;
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        std::vector<std::vector<float>> values(kTrials);
        int64_t counts[kTrials], offsets[kTrials];
        for (int trial = 0; trial < kTrials; ++trial) {
            counts[trial] = trial == 6 ? 0 : trial == 7 ? (int64_t{4} << 20) + 3 : 4999 + trial;
            offsets[trial] = trial == 7 ? 0 : trial % 2;
            values[trial] = random_values(static_cast<size_t>(counts[trial] + offsets[trial]), -100, 100);
            const size_t o = static_cast<size_t>(offsets[trial]);
            if (trial == 1) values[trial][o + 1234] = -3000.0f;  // the largest is negative
            if (trial == 2) values[trial][o + static_cast<size_t>(counts[trial]) - 1] = std::numeric_limits<float>::quiet_NaN();
            if (trial == 3) values[trial][o + 17] = -std::numeric_limits<float>::infinity();
            if (trial == 4) std::fill(values[trial].begin(), values[trial].end(), 0.0f);
            if (trial == 7) values[trial][static_cast<size_t>(counts[trial]) - 7] = -1000.0f;  // in the last vector
        }
        std::vector<float> results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            std::vector<Buffer> buffers;
            buffers.reserve(kTrials);
            MaxAbsInput inputs[kTrials + 1];
            for (int trial = 0; trial < kTrials; ++trial) {
                buffers.push_back(upload(backend, dtype, values[trial]));
                const char* first = static_cast<const char*>(buffers.back().data()) +
                                    offsets[trial] * static_cast<int64_t>(backend.storage_size(dtype));
                inputs[trial] = MaxAbsInput{first, dtype, counts[trial]};
            }
            // Last, a maximum taken by its tensor's writer: its result left as it was (poison here).
            inputs[kTrials] = MaxAbsInput{nullptr, dtype, kMaxAbsTaken};
            Buffer out = poisoned(backend, DType::fp32, kTrials + 1);
            backend.max_abs(inputs, kTrials + 1, out.as<float>());
            results[b] = download(backend, out, DType::fp32, kTrials + 1);
            CHECK(std::isnan(results[b][kTrials]));
        }
        for (int trial = 0; trial < kTrials; ++trial) {
            CAPTURE(trial);
            float expected = 0.0f;  // independent: over the values as stored in the dtype
            for (int64_t i = offsets[trial]; i < offsets[trial] + counts[trial]; ++i) {
                const float value = round_to(dtype, values[trial][static_cast<size_t>(i)]);
                expected = std::isfinite(value) ? std::max(expected, std::fabs(value)) : INFINITY;
            }
            CHECK(results[0][static_cast<size_t>(trial)] == expected);
            CHECK(results[1][static_cast<size_t>(trial)] == expected);
        }
    }
}

void compare_decide_update(Backend& reference, Backend& candidate) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<std::vector<float>> cases = {
        {1.0f, 1.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 1.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // product overflows
        {1.0f, 1.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {1e37f, 0.1f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient rows * max|dZ| overflows; rows * max|dZ| * max|A| would not
    };
    for (size_t k = 0; k < cases.size(); ++k) {
        CAPTURE(k);
        int32_t found[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer pairs = upload(backend, DType::fp32, cases[k]);
            TrainState initial{};
            initial.loss_scale = 1.0f;
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            backend.decide_update(pairs.as<float>(), 3, 64, state.as<TrainState>());
            found[b] = download_raw<TrainState>(backend, state, 1)[0].found_inf;
        }
        CHECK(found[0] == (k == 0 ? 0 : 1));
        CHECK(found[1] == found[0]);
    }
}

void compare_finish_step(Backend& reference, Backend& candidate) {
    LossScalerConfig scaler;
    scaler.mode = LossScaling::dynamic;
    scaler.growth_interval = 3;
    for (int k = 0; k < 4; ++k) {
        CAPTURE(k);
        TrainState initial = initial_train_state(scaler);
        initial.found_inf = k == 1 ? 1 : 0;
        initial.growth_tracker = k == 2 ? 2 : 0;  // this step reaches the interval: the scale doubles
        initial.loss_scale = k == 3 ? 1.0f : 1024.0f;
        if (k == 3) initial.found_inf = 1;  // halving stops at min_scale
        TrainState results[2];
        Backend* backends[2] = {&reference, &candidate};
        // The running metrics reach the committed ones, bit for bit; without them, nothing is copied.
        std::vector<double> running(kMetricsCount);
        for (int i = 0; i < kMetricsCount; ++i) running[i] = (i % 2 ? -1e300 : 0.1) / (i + 1) + k;
        const std::vector<double> poison(kMetricsCount, -7.0);
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            Buffer metrics = upload_raw(backend, running);
            Buffer committed = upload_raw(backend, poison);
            if (k == 0) backend.finish_step(state.as<TrainState>(), scaler, nullptr, committed.as<double>());
            else backend.finish_step(state.as<TrainState>(), scaler, metrics.as<double>(), committed.as<double>());
            results[b] = download_raw<TrainState>(backend, state, 1)[0];
            const std::vector<double> copied = download_raw<double>(backend, committed, kMetricsCount);
            CHECK(std::memcmp(copied.data(), (k == 0 ? poison : running).data(), sizeof(double) * kMetricsCount) == 0);
        }
        CHECK(results[1].loss_scale == results[0].loss_scale);
        CHECK(results[1].growth_tracker == results[0].growth_tracker);
        CHECK(results[1].skipped_steps == results[0].skipped_steps);
        CHECK(results[1].applied_steps == results[0].applied_steps);
        CHECK(results[1].steps == results[0].steps);
        CHECK(results[1].skipped_at_min_scale == results[0].skipped_at_min_scale);
        CHECK(results[0].skipped_at_min_scale == (k == 3 ? 1 : 0));  // an overflow at the minimum
        const float expected_scale = k == 1 ? 512.0f : k == 2 ? 2048.0f : k == 3 ? 1.0f : 1024.0f;
        CHECK(results[0].loss_scale == expected_scale);
    }
}

void compare_conversions(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        const std::vector<float> values = random_values(1001, -70000.0f, 70000.0f);  // beyond fp16's range too
        std::vector<float> results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer source = upload(backend, DType::fp32, values);
            Buffer low = poisoned(backend, dtype, values.size());
            Buffer back = poisoned(backend, DType::fp32, values.size());
            backend.convert_from_fp32(low.data(), dtype, source.as<float>(), static_cast<int64_t>(values.size()));
            backend.convert_to_fp32(back.as<float>(), low.data(), dtype, static_cast<int64_t>(values.size()));
            results[b] = download(backend, back, DType::fp32, values.size());
        }
        REQUIRE(results[0].size() == results[1].size());
        for (size_t i = 0; i < values.size(); ++i) {
            CAPTURE(i);
            const float expected = round_to(dtype, values[i]);  // tested on its own in test_dtype
            CHECK(std::memcmp(&results[0][i], &expected, sizeof(float)) == 0);
            CHECK(std::memcmp(&results[1][i], &expected, sizeof(float)) == 0);
        }
    }
}

}  // namespace mpt::testing

TEST_CASE("CUDA gather_batch matches the CPU bit for bit") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    for (DType dtype : kDTypes) {
        for (bool standardized : {false, true}) {
            compare_gather(*cpu, *cuda, true, dtype, standardized);
            compare_gather(*cpu, *cuda, false, dtype, standardized);
            compare_gather(*cpu, *cuda, true, dtype, standardized, 64, 64);  // in 16-byte chunks
        }
    }
}

TEST_CASE("CUDA max_abs, decide_update, clip_factor, average_weights and finish_step match the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_max_abs(*cpu, *cuda);
    compare_decide_update(*cpu, *cuda);
    compare_clip_factor(*cpu, *cuda);
    compare_weight_averaging(*cpu, *cuda);
    compare_finish_step(*cpu, *cuda);
}

// Recorded (a compute task: its first sighting, its capture and its replays), a max_abs pass and the
// decide_update right after it that reads exactly its results are one launch, whose last block
// reads every tensor's maximum (raised by the blocks' atomics) and then takes the decision. The same tensors' maxima
// and decisions as issued op by op (graphs off), round after round, on tensors of many blocks with the largest value
// moving, and the decision flipping between rounds as the values change in place. Also with maxima
// taken (kMaxAbsTaken: written before the pass, as a backward that wrote its tensors does, and
// their tensors filled with larger values the pass must not read): the pass leaves them and the
// decision reads them; a second pass of taken inputs only launches nothing.
TEST_CASE("a recorded max_abs pass decides the update in its own launch, as decide_update does") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const float inf = std::numeric_limits<float>::infinity();
    // (max|dZ|, max|A_prev|) of three layers, as compare_decide_update's cases.
    const std::vector<std::vector<float>> cases = {
        {1.0f, 1.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 1.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // product overflows
        {1.0f, 1.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},    // all zero: finite
        {1e37f, 0.1f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient's bound overflows
    };
    const int64_t rows = 64;
    const int64_t sizes[6] = {300001, 7, 120000, 64, 4096, 1};  // many blocks, one, a ragged tail
    // Recorded, issued op by op, and recorded with programmatic dependent launch (9.0 and up); the
    // maxima in one pass, and in two (the decision a kernel of its own then).
    const auto is_taken = [](bool taken, int t) { return taken && (t == 2 || t == 4 || t == 5); };
    for (const bool taken : {false, true})
        for (const bool two_passes : {false, true})
            for (const IssueMode& mode : kIssueModes) {
                const bool graphs = mode.graphs, dependent_launch = mode.dependent_launch;
                CAPTURE(taken);
                CAPTURE(graphs);
                CAPTURE(dependent_launch);
                CAPTURE(two_passes);
                auto backend = cuda_backend_issuing(mode);
                if (!backend) continue;
                std::vector<Buffer> tensors;
                DecisionTask task{};
                task.backend = backend.get();
                task.two_passes = two_passes;
                for (int t = 0; t < 6; ++t) {
                    tensors.emplace_back(*backend, static_cast<size_t>(sizes[t]) * sizeof(float));
                    task.inputs[t] = is_taken(taken, t) ? MaxAbsInput{nullptr, DType::fp32, kMaxAbsTaken}
                                                        : MaxAbsInput{tensors.back().data(), DType::fp32, sizes[t]};
                }
                Buffer maxima = poisoned(*backend, DType::fp32, 6);
                TrainState initial{};
                initial.loss_scale = 1.0f;
                Buffer state = upload_raw(*backend, std::vector<TrainState>{initial});
                task.maxima = maxima.as<float>();
                task.state = state.as<TrainState>();
                task.rows = rows;
                std::mt19937 generator(11);
                for (int round = 0; round < 12; ++round) {
                    const std::vector<float>& pairs = cases[static_cast<size_t>(round) % cases.size()];
                    CAPTURE(round);
                    for (int t = 0; t < 6; ++t) {
                        // Values below the maximum, of both signs, and the maximum (negated half the time) somewhere.
                        std::uniform_real_distribution<float> below(-pairs[t] * 0.5f, pairs[t] * 0.5f);
                        std::vector<float> values(static_cast<size_t>(sizes[t]));
                        for (float& value : values) value = std::isfinite(pairs[t]) ? below(generator) : 1.0f;
                        const size_t at = generator() % values.size();
                        values[at] = (generator() % 2 ? -1.0f : 1.0f) * pairs[t];
                        if (is_taken(taken, t)) {
                            // Written before the pass, as by the backward; its tensor holds more, unread.
                            backend->copy_to_device(maxima.as<float>() + t, &pairs[static_cast<size_t>(t)],
                                                    sizeof(float));
                            values[at] = 3e38f;
                        }
                        backend->copy_to_device(tensors[static_cast<size_t>(t)].data(), values.data(),
                                                values.size() * sizeof(float));
                    }
                    backend->scheduler().submit(Lane::compute, &run_decision_task, &task);
                    backend->scheduler().synchronize();
                    CHECK(download(*backend, maxima, DType::fp32, 6) == pairs);
                    const TrainState after = download_raw<TrainState>(*backend, state, 1)[0];
                    const bool finite = gradient_bounds_finite(pairs.data(), 3, rows);
                    CHECK(finite == (pairs[2] != 1e30f && std::isfinite(pairs[4]) && pairs[0] != 1e37f));
                    CHECK(after.found_inf == (finite ? 0 : 1));
                    CHECK(after.steps == round + 1);
                }
                // Recorded: the first sighting runs eagerly and the second is captured, each through one
                // fused launch; the ten replays launch the graph. Op by op: never fused.
                const CudaOpPaths paths = cuda_backend_op_paths(*backend);
                CHECK(paths.max_abs_deciding == (graphs && !two_passes ? 2u : 0u));
                CHECK((paths.dependent_launches > 0) == dependent_launch);
                if (graphs) {
                    INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
                    CHECK(cuda_backend_graph_refusals(*backend) == 0);
                    CHECK(cuda_backend_graph_replays(*backend) == 10);
                } else {
                    CHECK(cuda_backend_graph_replays(*backend) == 0);
                }
            }
#endif
}

// Recorded, a begin_step followed by its loss head (nothing between them touches found_inf) needs no
// memset: the head clears found_inf itself before its check. A step's found_inf is then its own
// head's verdict, whatever the step before it left: finite after non-finite, and non-finite again,
// round after round through the first sighting, the capture and the replays; issued op by op, the
// memset runs as before.
TEST_CASE("a recorded begin_step is folded into its loss head, which leaves found_inf as the memset would") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const int64_t width = 16, classes = 10;
    // 32 rows: the head is one block; 200: several, the last one combining them. Recorded, issued op
    // by op, and recorded with programmatic dependent launch (9.0 and up). With a dropout between
    // the begin_step and the head (folded all the same), and with a max_abs pass there (not folded).
    for (const int64_t rows : {int64_t{32}, int64_t{200}})
        for (const IssueMode& mode : kIssueModes)
            for (const BetweenStepAndHead between :
                 {BetweenStepAndHead::nothing, BetweenStepAndHead::dropout, BetweenStepAndHead::max_abs}) {
                const bool graphs = mode.graphs, dependent_launch = mode.dependent_launch;
                CAPTURE(rows);
                CAPTURE(graphs);
                CAPTURE(dependent_launch);
                CAPTURE(static_cast<int>(between));
                auto backend = cuda_backend_issuing(mode);
                if (!backend) continue;
                std::vector<float> finite = random_values(static_cast<size_t>(rows * width), -2.0f, 2.0f);
                std::vector<float> poisoned_logits = finite;
                poisoned_logits[static_cast<size_t>(3 * width + 2)] = std::numeric_limits<float>::quiet_NaN();
                Buffer logits = upload(*backend, DType::fp32, finite);
                std::vector<int32_t> label_values(static_cast<size_t>(rows));
                for (int64_t r = 0; r < rows; ++r)
                    label_values[static_cast<size_t>(r)] = static_cast<int32_t>(r % classes);
                Buffer labels = upload_raw(*backend, label_values);
                Buffer gradient = poisoned(*backend, DType::bf16, static_cast<size_t>(rows * width));
                TrainState initial{};
                initial.loss_scale = 1.0f;
                initial.found_inf = 1;  // as a skipped step leaves it: the first round must clear it
                Buffer state = upload_raw(*backend, std::vector<TrainState>{initial});
                Buffer maximum = poisoned(*backend, DType::fp32, 1);
                HeadTask task{};
                task.backend = backend.get();
                task.head.logits = logits.as<float>();
                task.head.labels = labels.as<int32_t>();
                task.head.logits_grad = gradient.data();
                task.head.logits_grad_dtype = DType::bf16;
                task.head.state = state.as<TrainState>();
                task.head.rows = rows;
                task.head.width = width;
                task.head.classes = classes;
                task.head.activation = Activation::softmax;
                task.head.loss = LossKind::sparse_categorical_crossentropy;
                task.input = MaxAbsInput{gradient.data(), DType::bf16, rows * width};
                task.maximum = maximum.as<float>();
                Buffer dropped_in = upload(*backend, DType::fp32, finite);
                Buffer dropped_out = poisoned(*backend, DType::fp32, finite.size());
                Buffer between_maximum = poisoned(*backend, DType::fp32, 1);
                task.between = between;
                task.dropout.input = dropped_in.data();
                task.dropout.output = dropped_out.data();
                task.dropout.dtype = DType::fp32;
                task.dropout.count = rows * width;
                task.dropout.draw = DropoutDraw{7, 0, 0x80000000u, 2.0f};
                task.dropout.state = state.as<TrainState>();
                task.between_input = MaxAbsInput{dropped_in.data(), DType::fp32, rows * width};
                task.between_maximum = between_maximum.as<float>();
                for (int round = 0; round < 8; ++round) {
                    CAPTURE(round);
                    const bool nan_round = round % 3 == 2;
                    const std::vector<float>& values = nan_round ? poisoned_logits : finite;
                    backend->copy_to_device(logits.data(), values.data(), values.size() * sizeof(float));
                    backend->scheduler().submit(Lane::compute, &run_head_task, &task);
                    backend->scheduler().synchronize();
                    const TrainState after = download_raw<TrainState>(*backend, state, 1)[0];
                    CHECK(after.found_inf == (nan_round ? 1 : 0));
                    CHECK(after.steps == round + 1);
                }
                const CudaOpPaths paths = cuda_backend_op_paths(*backend);
                CHECK(paths.begin_steps_folded == (graphs && between != BetweenStepAndHead::max_abs ? 2u : 0u));
                CHECK((paths.dependent_launches > 0) == dependent_launch);
                if (graphs) CHECK(cuda_backend_graph_replays(*backend) == 6);
            }
#endif
}

TEST_CASE("CUDA dropout drops and scales the values the CPU does, bit for bit") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_dropout(*cpu, *cuda);
}

TEST_CASE("CUDA conversions round like the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_conversions(*cpu, *cuda);
}
