// test_cuda_ops: whole training runs on the GPU: against the CPU from the same seed, in
// micro-batches, graph replay against eager issue, an injected overflow, no device allocation or
// host synchronisation in steady-state steps, and a progress callback that never waits.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/context.h"
#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
#include "data/dataset.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;
using mpt_test::normalised_error;

struct TrainingRun {
    std::vector<float> initial, final;
    EvaluationResult evaluation;
    TrainState state;
};

// Trains `epochs` epochs at each batch size in turn (a new batch size plans the arenas again), in
// micro-batches of `micro_batch_size` rows where that is smaller (0: whole batches).
TrainingRun train(mpt_backend backend, mpt_precision precision, const SyntheticData& data, int64_t epochs,
                  const std::vector<int64_t>& batches, bool graphs = true, int64_t micro_batch_size = 0) {
    auto context = make_context(backend);
#if defined(MPTRAIN_WITH_CUDA)
    if (context->backend().kind() == BackendKind::cuda) {
        cuda_backend_set_graphs(context->backend(), graphs);
        // The head layer in a cluster (should it become a default) runs in recorded tasks only, its sums
        // in another order: off, so that the runs these cases compare, graphed and eager, compute alike.
        cuda_backend_set_head_layer_cluster(context->backend(), false);
    }
#else
    (void)graphs;
#endif
    auto model = make_mlp(context, data.features);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = precision;
    config.optimizer.learning_rate = 0.05f;
    config.micro_batch_size = micro_batch_size;
    Trainer trainer(model, config);
    TrainingRun run;
    run.initial = master_block(*model);
    for (int64_t batch : batches) trainer.fit(*dataset, epochs, batch, true);
    run.final = master_block(*model);
    run.evaluation = trainer.evaluate(*dataset, 64);
    run.state = trainer.state();
    return run;
}

TrainingRun train(mpt_backend backend, mpt_precision precision, const SyntheticData& data, int64_t epochs,
                  int64_t batch, bool graphs = true, int64_t micro_batch_size = 0) {
    return train(backend, precision, data, epochs, std::vector<int64_t>{batch}, graphs, micro_batch_size);
}

}  // namespace

TEST_CASE("training on the GPU ends where training on the CPU ends, from the same seed") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(512, 100, 11);
    const mpt_precision precisions[] = {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16};
    // Batch 32: plain SGD in the fused kernel. Batch 96: the weight-gradient GEMM into the
    // executor's gradient scratch, then the update kernel.
    const std::pair<int64_t, int64_t> batches_and_epochs[] = {{32, 3}, {96, 8}};
    for (const auto& [batch, epochs] : batches_and_epochs) {
        for (mpt_precision precision : precisions) {
            CAPTURE(batch);
            CAPTURE(static_cast<int>(precision));
            const TrainingRun cpu = train(MPT_BACKEND_CPU, precision, data, epochs, batch);
            const TrainingRun gpu = train(MPT_BACKEND_CUDA, precision, data, epochs, batch);
            CHECK(gpu.initial == cpu.initial);  // the same seed gives the same initial weights
            // What training changed, compared: fp32 differs only by accumulation order; mixed
            // precision adds last-place flips of the 16-bit activations along 40 or 48 steps.
            const double bound = precision == MPT_PRECISION_FP32 ? 1e-3 : 5e-2;
            CHECK(normalised_error(difference(gpu.final, gpu.initial), difference(cpu.final, cpu.initial)) <= bound);
            CHECK(gpu.evaluation.loss == doctest::Approx(cpu.evaluation.loss).epsilon(0.02));
            CHECK(gpu.evaluation.accuracy == doctest::Approx(cpu.evaluation.accuracy).epsilon(0.02));
            CHECK(gpu.state.steps == cpu.state.steps);
            CHECK(gpu.state.skipped_steps == cpu.state.skipped_steps);
            CHECK(gpu.evaluation.accuracy > 0.5f);  // it learned the bands
        }
    }
}

TEST_CASE("a batch in micro-batches trains on the GPU as in one pass, and as on the CPU") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(512, 100, 13);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        // Batches of 96 in micro-batches of 40, 40 and 16: the first writes the sums (the GEMM's
        // BGRADB epilogue), the others add to them (beta 1, the bias sums unfused).
        const TrainingRun whole = train(MPT_BACKEND_CUDA, precision, data, 3, 96);
        const TrainingRun parts = train(MPT_BACKEND_CUDA, precision, data, 3, 96, true, 40);
        const TrainingRun eager = train(MPT_BACKEND_CUDA, precision, data, 3, 96, false, 40);
        const TrainingRun cpu = train(MPT_BACKEND_CPU, precision, data, 3, 96, true, 40);
        const double bound = precision == MPT_PRECISION_FP32 ? 1e-3 : 5e-2;
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(whole.final, whole.initial)) <= bound);
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(eager.final, eager.initial)) <= 1e-3);
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(cpu.final, cpu.initial)) <= bound);
        CHECK(parts.state.steps == whole.state.steps);
        CHECK(parts.state.steps == cpu.state.steps);
        CHECK(parts.evaluation.accuracy == doctest::Approx(whole.evaluation.accuracy).epsilon(0.02));
    }
}

TEST_CASE("graph replay and eager issue train identically on the GPU") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(256, 100, 5);
    // Batch 48 plans the arenas again between two runs at 16: the graphs of the first run at 16 are
    // kept, and must not replay on buffers that moved.
    const std::vector<int64_t> batches = {16, 48, 16};
    const TrainingRun eager = train(MPT_BACKEND_CUDA, MPT_PRECISION_MIXED_BF16, data, 2, batches, false);
    const TrainingRun graphed = train(MPT_BACKEND_CUDA, MPT_PRECISION_MIXED_BF16, data, 2, batches, true);
    // The same kernels on the same data: identical up to cuBLASLt reduction order, if it varies at all.
    CHECK(normalised_error(difference(graphed.final, graphed.initial), difference(eager.final, eager.initial)) <= 1e-3);
    CHECK(graphed.state.steps == eager.state.steps);
}

TEST_CASE("an injected overflow skips exactly that update and halves the scale on the device") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    auto model = make_mlp(context, 64);
    const int64_t rows = 64, features = 64;
    std::vector<float> samples = random_values(static_cast<size_t>(rows * features), 0, 1);
    for (int64_t f = 0; f < features; ++f) samples[static_cast<size_t>(32 * features + f)] = 1e6f;  // fp16: Inf
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % 10);
    auto dataset = Dataset::from_f32(context, samples.data(), rows, features, labels.data(), 10, true);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;  // dynamic loss scaling by default
    Trainer trainer(model, config);
    const TrainState initial = trainer.state();
    REQUIRE(initial.loss_scale == 32768.0f);

    trainer.step(*dataset, 0, 32);  // finite
    const std::vector<float> before = master_block(*model);
    TrainState state = trainer.state();
    CHECK(state.steps == 1);
    CHECK(state.applied_steps == 1);
    CHECK(state.skipped_steps == 0);
    CHECK(state.loss_scale == 32768.0f);

    trainer.step(*dataset, 32, 32);  // row 32 overflows fp16
    const std::vector<float> after = master_block(*model);
    state = trainer.state();
    CHECK(state.steps == 2);
    CHECK(state.applied_steps == 1);
    CHECK(state.skipped_steps == 1);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(state.growth_tracker == 0);
    CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);

    trainer.step(*dataset, 0, 32);  // finite again: applied at the halved scale
    state = trainer.state();
    CHECK(state.applied_steps == 2);
    CHECK(state.skipped_steps == 1);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(master_block(*model) != after);
}

TEST_CASE("steady-state steps make no device allocation and no host synchronisation") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    auto context = make_context(MPT_BACKEND_CUDA);
    Backend& backend = context->backend();
    auto model = make_mlp(context, 100);
    const SyntheticData short_data = synthetic_data(64, 100, 1), long_data = synthetic_data(192, 100, 2);
    auto short_set = Dataset::from_u8(context, short_data.samples.data(), short_data.rows, short_data.features,
                                      short_data.labels.data(), 10, 1.0f / 255.0f, 0.0f);
    auto long_set = Dataset::from_u8(context, long_data.samples.data(), long_data.rows, long_data.features,
                                     long_data.labels.data(), 10, 1.0f / 255.0f, 0.0f);
    // Whole batches, then micro-batches of 6, 6 and 4 rows: each pass its own graph.
    for (const int64_t micro : {int64_t{0}, int64_t{6}}) {
        CAPTURE(micro);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        config.micro_batch_size = micro;
        Trainer trainer(model, config);
        // Warm-up: arenas, datasets on the device, GEMM plans, graphs captured.
        trainer.fit(*long_set, 1, 16, true);
        trainer.fit(*short_set, 1, 16, true);

        auto measure = [&](const Dataset& dataset) {
            const uint64_t allocations = cuda_backend_allocation_count(backend);
            const uint64_t syncs = backend.scheduler().host_sync_count();
            trainer.fit(dataset, 1, 16, true);
            return std::make_pair(cuda_backend_allocation_count(backend) - allocations,
                                  backend.scheduler().host_sync_count() - syncs);
        };
        const uint64_t replays_before = cuda_backend_graph_replays(backend);
        const auto four_steps = measure(*short_set);
        const auto twelve_steps = measure(*long_set);
        CHECK(four_steps.first == 0);
        CHECK(twelve_steps.first == 0);
        // Syncs per epoch are a constant (order upload, final drain, metric reads); per step: none.
        CHECK(twelve_steps.second == four_steps.second);
        CHECK(cuda_backend_graph_replays(backend) - replays_before >= 16);
    }
#endif
}

TEST_CASE("a progress callback reads the step count, the scheduled rate and the scaler without waiting for the device") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    auto context = make_context(MPT_BACKEND_CUDA);
    Backend& backend = context->backend();
    auto model = make_mlp(context, 100);
    const SyntheticData data = synthetic_data(192, 100, 3);
    auto dataset = Dataset::from_u8(context, data.samples.data(), data.rows, data.features, data.labels.data(), 10,
                                    1.0f / 255.0f, 0.0f);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.optimizer.schedule.kind = LrScheduleKind::cosine;
    config.optimizer.schedule.decay_steps = 24;
    config.optimizer.schedule.decay_factor = 0.0f;
    Trainer trainer(model, config);
    struct Probe {
        Trainer* trainer;
        Scheduler* scheduler;
        uint64_t syncs_in_reads = 0;
        int64_t calls = 0;
        bool counts_ordered = true;
    } probe{&trainer, &backend.scheduler()};
    auto on_progress = [](int64_t epoch, int64_t step, int64_t steps_per_epoch, float, float, void* user_data) {
        Probe& p = *static_cast<Probe*>(user_data);
        const uint64_t before = p.scheduler->host_sync_count();
        const int64_t issued = p.trainer->steps_taken();
        const float rate = p.trainer->scheduled_learning_rate();
        const TrainState seen = p.trainer->observed_state();  // what mpt_trainer_get_loss_scale reads
        p.syncs_in_reads += p.scheduler->host_sync_count() - before;
        // The step reported has run; the count covers it and at most the steps queued behind it, and
        // the state seen is that step's own.
        const int64_t reported = epoch * steps_per_epoch + step;
        p.counts_ordered = p.counts_ordered && issued >= reported && rate >= 0.0f && seen.steps == reported;
        ++p.calls;
        return 0;
    };
    trainer.set_callbacks(TrainerCallbacks{on_progress, nullptr, &probe});
    trainer.fit(*dataset, 2, 16, true);
    CHECK(probe.calls == 24);
    CHECK(probe.syncs_in_reads == 0);
    CHECK(probe.counts_ordered);
    CHECK(trainer.steps_taken() == trainer.state().steps);
#endif
}
