// The CUDA backend's data path and its asynchronous host interface, checked against the CPU
// reference where there is one: the epoch order built on the device, datasets streamed from host
// memory through pinned buffers against resident ones, step reports that reach the progress callback
// for every step in order, and epoch times from CUDA events. Every GPU case skips with a message
// when no CUDA device is present.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "data/epoch_order.h"
#include "nn/trainer.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;

std::shared_ptr<Context> make_cuda_context(size_t dataset_device_budget) {
    return make_context(MPT_BACKEND_CUDA, 7, dataset_device_budget);
}

struct Run {
    std::vector<float> final;
    EvaluationResult evaluation;
    TrainState state;
    bool streamed;
};

// The small MLP in mixed bf16 on the GPU, with its data set.
struct GpuSetup {
    std::shared_ptr<Context> context;
    std::shared_ptr<Model> model;
    std::shared_ptr<Dataset> dataset;
    std::unique_ptr<Trainer> trainer;
};

GpuSetup gpu_setup(size_t dataset_device_budget, const SyntheticData& data) {
    GpuSetup setup;
    setup.context = make_cuda_context(dataset_device_budget);
    setup.model = make_mlp(setup.context, data.features);
    setup.dataset = to_dataset(setup.context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    setup.trainer = std::make_unique<Trainer>(setup.model, config);
    return setup;
}

// `standardized`: on the dataset standardized by its own feature statistics. `dependent_launch`:
// with programmatic dependent launch (cuda_launch.cuh), which the device must then offer.
Run train_on_gpu(size_t dataset_device_budget, const SyntheticData& data, bool standardized = false,
                 bool dependent_launch = false) {
    GpuSetup setup = gpu_setup(dataset_device_budget, data);
#if defined(MPTRAIN_WITH_CUDA)
    // (Off by name when not asked for, whatever its default.)
    REQUIRE(cuda_backend_set_dependent_launch(setup.context->backend(), dependent_launch) == dependent_launch);
#else
    (void)dependent_launch;  // (no GPU case runs without the CUDA backend)
#endif
    if (standardized) {
        const int64_t features = setup.dataset->features();
        std::vector<float> mean(static_cast<size_t>(features)), stddev(static_cast<size_t>(features));
        setup.dataset->feature_statistics(mean.data(), stddev.data());
        setup.dataset = Dataset::standardized(*setup.dataset, mean.data(), stddev.data(), features);
    }
    Trainer& trainer = *setup.trainer;
    Model* model = setup.model.get();
    Dataset* dataset = setup.dataset.get();
    trainer.fit(*dataset, 3, 32, true);
    trainer.step(*dataset, 64, 32);
    Run run{master_block(*model), trainer.evaluate(*dataset, 100), trainer.state(), dataset->streamed()};
    return run;
}

// The plain run on the data three cases share (resident or streamed), trained once a program: the
// cases compare other runs with it, and a run is the same run each time (the pipeline race check
// and the emulated programs spent a third of their cases' time repeating it).
const SyntheticData& shared_data() {
    static const SyntheticData data = synthetic_data(512, 100, 3);
    return data;
}

const Run& plain_run(size_t dataset_device_budget) {
    static std::map<size_t, Run> runs;
    auto found = runs.find(dataset_device_budget);
    if (found == runs.end())
        found = runs.emplace(dataset_device_budget, train_on_gpu(dataset_device_budget, shared_data())).first;
    return found->second;
}

struct ProgressLog {
    std::vector<int64_t> steps;
    std::vector<float> losses;
    float epoch_loss = 0.0f;
};

int log_progress(int64_t, int64_t step, int64_t, float loss, float, void* user_data) {
    auto& log = *static_cast<ProgressLog*>(user_data);
    log.steps.push_back(step);
    log.losses.push_back(loss);
    return 0;
}

int log_epoch_end(int64_t, float loss, float, void* user_data) {
    static_cast<ProgressLog*>(user_data)->epoch_loss = loss;
    return 0;
}

}  // namespace

TEST_CASE("the device builds the epoch order the CPU reference builds") {
    SKIP_WITHOUT_GPU();
    auto backend = create_cuda_backend(0);
    for (int64_t rows : {1, 5, 4097, 50000}) {
        for (bool shuffle : {false, true}) {
            CAPTURE(rows);
            CAPTURE(shuffle);
            void* device = backend->allocate(static_cast<size_t>(rows) * sizeof(int32_t));
            backend->fill_order(static_cast<int32_t*>(device), rows, shuffle, 0xfeedULL + static_cast<uint64_t>(rows));
            std::vector<int32_t> written(static_cast<size_t>(rows), -1), expected(static_cast<size_t>(rows));
            backend->copy_to_host(written.data(), device, written.size() * sizeof(int32_t));
            std::vector<uint64_t> keys;
            make_epoch_order(expected.data(), rows, shuffle, 0xfeedULL + static_cast<uint64_t>(rows), keys);
            CHECK(written == expected);
            backend->release(device);
        }
    }
}

TEST_CASE("a dataset streamed through pinned buffers trains exactly like a resident one") {
    SKIP_WITHOUT_GPU();
    const Run& resident = plain_run(SIZE_MAX);
    const Run& streamed = plain_run(0);
    CHECK_FALSE(resident.streamed);
    CHECK(streamed.streamed);
    // The same bytes reach the same gather kernel in the same order: the runs are the same run.
    CHECK(streamed.final == resident.final);
    CHECK(streamed.evaluation.loss == resident.evaluation.loss);
    CHECK(streamed.evaluation.accuracy == resident.evaluation.accuracy);
    CHECK(streamed.state.steps == resident.state.steps);
    // It trained: chance is 0.1 over 10 classes. (The CPU reference ends this run at 0.285 from
    // the raw bytes / 255; standardized inputs, below, learn faster.)
    CHECK(resident.evaluation.accuracy > 0.2f);
}

// A kernel launched with programmatic dependent launch may start before the kernel ahead of it in
// its stream ends; what orders it after work on another stream is an event, which must hold all the
// same. A resident data set's gathers run on the copy lane, each after a wait on a compute-lane event
// and launched with the attribute; a streamed one's after the pinned upload's event. Either way the
// run with it is the run without it.
TEST_CASE("with dependent launch, resident and streamed data sets train exactly as without it") {
    SKIP_WITHOUT_GPU();
    if (compute_capability_major(*create_cuda_backend(0)) < 9) {
        MESSAGE("compute capability below 9.0: no programmatic dependent launch");
        return;
    }
    for (size_t budget : {SIZE_MAX, size_t{0}}) {
        CAPTURE(budget);
        const Run& stream_ordered = plain_run(budget);
        const Run dependent = train_on_gpu(budget, shared_data(), false, true);
        CHECK(dependent.streamed == (budget == 0));
        CHECK(dependent.final == stream_ordered.final);
        CHECK(dependent.evaluation.loss == stream_ordered.evaluation.loss);
        CHECK(dependent.evaluation.accuracy == stream_ordered.evaluation.accuracy);
        CHECK(dependent.state.steps == stream_ordered.state.steps);
    }
}

TEST_CASE("a standardized dataset streamed through pinned buffers trains exactly like a resident one") {
    SKIP_WITHOUT_GPU();
    const Run resident = train_on_gpu(SIZE_MAX, shared_data(), true);
    const Run streamed = train_on_gpu(0, shared_data(), true);  // its means and divisors are on the device all the same
    const Run& plain = plain_run(SIZE_MAX);
    CHECK_FALSE(resident.streamed);
    CHECK(streamed.streamed);
    CHECK(streamed.final == resident.final);
    CHECK(streamed.evaluation.loss == resident.evaluation.loss);
    CHECK(streamed.evaluation.accuracy == resident.evaluation.accuracy);
    CHECK(resident.final != plain.final);  // the standardization reached the batches
    CHECK(resident.evaluation.accuracy > 0.5f);
}

TEST_CASE("a resident dataset is charged to the context's memory, and one over the budget is streamed") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(300, 100, 4);
    auto context = make_cuda_context(SIZE_MAX);
    auto dataset = to_dataset(context, data);
    const size_t before = context->memory().used();
    dataset->device_view();
    CHECK(context->memory().used() == before + dataset->storage_bytes());
    CHECK_FALSE(dataset->streamed());

    auto small = make_cuda_context(dataset->storage_bytes() - 1);
    auto over = to_dataset(small, data);
    const size_t small_before = small->memory().used();
    CHECK(over->device_view().streamed);
    CHECK(small->memory().used() == small_before);
}

TEST_CASE("the buffers beside the arenas (row orders, staging slots, sort keys) are charged to the context's memory") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(512, 100, 6);
    GpuSetup setup = gpu_setup(0, data);  // streamed
    Context& context = *setup.context;
    setup.trainer->fit(*setup.dataset, 0, 32, true);  // plans the step arena only: no epoch runs
    const size_t planned = context.memory().used();
    setup.trainer->fit(*setup.dataset, 1, 32, true);
    REQUIRE(setup.dataset->streamed());
    // The epoch's row order, two staging slots of 32 rows of at least a byte per feature, and the
    // sort's two key arrays.
    const size_t at_least = 512 * sizeof(int32_t) + 2 * 32 * 100 + 2 * 512 * sizeof(uint64_t);
    CHECK(context.memory().used() >= planned + at_least);
    CHECK(context.memory().peak() >= context.memory().used());

    // A budget with room for the trainer's arenas and its row order, but not for the backend's sort
    // keys and staging slots: fit fails with OUT_OF_MEMORY before allocating them.
    ContextConfig tight;
    tight.backend = MPT_BACKEND_CUDA;
    tight.seed = 7;
    tight.dataset_device_budget = 0;
    tight.memory_budget = planned + 512 * sizeof(int32_t) + 1024;
    auto tight_context = std::make_shared<Context>(tight);
    auto model = make_mlp(tight_context, data.features);
    auto dataset = to_dataset(tight_context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, config);
    trainer.fit(*dataset, 0, 32, true);  // its step arena, as in `planned`
    const size_t before = tight_context->memory().used();
    REQUIRE(before == planned);
    try {
        trainer.fit(*dataset, 1, 32, true);
        FAIL("fit ran within a budget without room for its sort keys and staging slots");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_OUT_OF_MEMORY);
    }
    // The trainer keeps its row order; nothing of the refused buffers stays reserved.
    CHECK(tight_context->memory().used() == before + 512 * sizeof(int32_t));
}

TEST_CASE("every step's progress reaches the host in order, and epochs are timed on the device") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(640, 100, 5);
    GpuSetup setup = gpu_setup(SIZE_MAX, data);
    Trainer& trainer = *setup.trainer;
    Dataset* dataset = setup.dataset.get();
    ProgressLog log;
    trainer.set_callbacks(TrainerCallbacks{&log_progress, &log_epoch_end, &log});
    const auto started = std::chrono::steady_clock::now();
    trainer.fit(*dataset, 1, 32, true);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    REQUIRE(log.steps.size() == 20);
    for (size_t i = 0; i < log.steps.size(); ++i) CHECK(log.steps[i] == static_cast<int64_t>(i + 1));
    // The last report is the epoch's running mean at its last step: the epoch's loss.
    CHECK(log.losses.back() == doctest::Approx(log.epoch_loss).epsilon(1e-6));
    const EpochTiming timing = trainer.last_epoch_timing();
    CHECK(timing.steps == 20);
    CHECK(timing.seconds > 0.0);
    CHECK(timing.seconds < wall);
}

TEST_CASE("an event polled before it has passed leaves no error behind for the next kernel launch") {
    SKIP_WITHOUT_GPU();
    // cudaEventQuery's "not ready" stays the thread's last error unless cleared, and every launch is
    // checked with cudaGetLastError. A long memset keeps the compute lane busy while it is polled.
    auto backend = create_cuda_backend(0);
    Scheduler& scheduler = backend->scheduler();
    const size_t busy_bytes = size_t{2} << 30;
    void* busy = backend->allocate(busy_bytes);
    void* order = backend->allocate(1024 * sizeof(int32_t));

    backend->fill_zero(busy, busy_bytes);
    const Event pending = scheduler.record(Lane::compute);
    const bool passed_at_once = scheduler.completed(pending);
    CHECK_NOTHROW(backend->fill_order(static_cast<int32_t*>(order), 1024, false, 0));  // one checked launch
    scheduler.wait_host(pending);
    CHECK(scheduler.completed(pending));
    if (passed_at_once) MESSAGE("the memset finished before the poll: the not-ready path went unexercised");

    // The streamed gather polls its slot's event before reusing it (the third batch reuses the
    // first one's slot, whose gather is queued behind the memset), then launches the gather kernel.
    const SyntheticData data = synthetic_data(64, 100, 6);
    const int64_t rows = 8, padded = 104;
    void* batch = backend->allocate(static_cast<size_t>(rows * padded) * sizeof(float));
    void* labels = backend->allocate(static_cast<size_t>(rows) * sizeof(int32_t));
    backend->fill_zero(busy, busy_bytes);
    for (int64_t b = 0; b < 3; ++b) {
        CAPTURE(b);
        GatherArgs args{};
        args.samples = data.samples.data();
        args.samples_are_u8 = true;
        args.scale = 1.0f;
        args.streamed = true;
        args.first = b * rows;
        args.rows = rows;
        args.features = data.features;
        args.padded_features = padded;
        args.batch = batch;
        args.batch_dtype = DType::fp32;
        args.labels = data.labels.data();
        args.batch_labels = static_cast<int32_t*>(labels);
        CHECK_NOTHROW(backend->gather_batch(args));
    }
    std::vector<int32_t> gathered(static_cast<size_t>(rows));
    backend->copy_to_host(gathered.data(), labels, gathered.size() * sizeof(int32_t));
    CHECK(gathered == std::vector<int32_t>(data.labels.begin() + 2 * rows, data.labels.begin() + 3 * rows));
    backend->release(labels);
    backend->release(batch);
    backend->release(order);
    backend->release(busy);
}
