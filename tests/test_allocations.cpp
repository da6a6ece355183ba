// A training step allocates nothing: heap allocations anywhere in the process (library, libstdc++,
// OpenBLAS) are counted between consecutive steady-state steps and must be zero.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <vector>

#include "data/dataset.h"
#include "nn/trainer.h"
#include "support/allocation_counter.h"

using namespace mpt;

namespace {

struct StepAllocations {
    std::vector<uint64_t> counts;  // allocation counter at each progress callback
};

int record_allocations(int64_t, int64_t, int64_t, float, float, void* user_data) {
    auto* record = static_cast<StepAllocations*>(user_data);
    if (record->counts.size() < record->counts.capacity()) record->counts.push_back(testing::allocation_count());
    return 0;
}

struct Setup {
    std::shared_ptr<Context> context;
    std::shared_ptr<Model> model;
    std::shared_ptr<Dataset> dataset;
};

Setup make_setup(int threads) {
    ContextConfig config;
    config.backend = MPT_BACKEND_CPU;
    config.threads = threads;
    Setup setup;
    setup.context = std::make_shared<Context>(config);
    setup.model = std::make_shared<Model>(setup.context, 300);
    setup.model->add_dense(256, Activation::relu);
    setup.model->add_dense(64, Activation::tanh);
    setup.model->add_dense(10, Activation::softmax);
    std::mt19937 generator(3);
    const int64_t rows = 640;
    std::vector<uint8_t> samples(static_cast<size_t>(rows * 300));
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (auto& sample : samples) sample = static_cast<uint8_t>(generator());
    for (auto& label : labels) label = static_cast<int32_t>(generator() % 10);
    setup.dataset = Dataset::from_u8(setup.context, samples.data(), rows, 300, labels.data(), 10, 1.0f / 255, 0.0f);
    return setup;
}

void check_fit_allocates_nothing_per_step(mpt_precision precision, OptimizerKind optimizer, float momentum, int threads,
                                          int64_t micro_batch_size = 0, float clipnorm = 0.0f) {
    Setup setup = make_setup(threads);
    TrainerConfig config;
    config.precision = precision;
    config.optimizer.kind = optimizer;
    config.optimizer.momentum = momentum;
    config.optimizer.global_clipnorm = clipnorm;
    config.micro_batch_size = micro_batch_size;
    Trainer trainer(setup.model, config);
    trainer.fit(*setup.dataset, 1, 32, true);  // warm-up: plans the arenas
    StepAllocations record;
    record.counts.reserve(64);
    trainer.set_callbacks(TrainerCallbacks{&record_allocations, nullptr, &record});
    trainer.fit(*setup.dataset, 1, 32, true);
    REQUIRE(record.counts.size() == 20);
    for (size_t step = 1; step < record.counts.size(); ++step) {
        CAPTURE(step);
        CHECK(record.counts[step] - record.counts[step - 1] == 0);
    }
}

}  // namespace

TEST_CASE("fp32 SGD steps allocate nothing, single- and multi-threaded") {
    check_fit_allocates_nothing_per_step(MPT_PRECISION_FP32, OptimizerKind::sgd, 0.0f, 1);
    check_fit_allocates_nothing_per_step(MPT_PRECISION_FP32, OptimizerKind::sgd, 0.0f, 2);
}

TEST_CASE("mixed-precision steps with stateful optimizers allocate nothing") {
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_FP16, OptimizerKind::sgd, 0.9f, 2);
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_BF16, OptimizerKind::sgd, 0.0f, 2);  // AMX's fused SGD
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_BF16, OptimizerKind::adam, 0.0f, 2);
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_BF16, OptimizerKind::adamw, 0.0f, 2);
}

TEST_CASE("steps in micro-batches allocate nothing, the last micro-batch shorter") {
    // Batches of 32 in micro-batches of 12, 12 and 8: the update scratch is reserved for two row
    // counts in turn, every step.
    check_fit_allocates_nothing_per_step(MPT_PRECISION_FP32, OptimizerKind::sgd, 0.9f, 2, 12, 1.0f);
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_BF16, OptimizerKind::adam, 0.0f, 2, 12);
    check_fit_allocates_nothing_per_step(MPT_PRECISION_MIXED_FP16, OptimizerKind::sgd, 0.0f, 1, 12);
}

TEST_CASE("steps with frozen layers allocate nothing, the flags changing between steps") {
    // Layer 0 frozen throughout (no input gradient below layer 1), layer 1 frozen every other step,
    // with clipping and averaging, whose layouts follow the flags.
    struct Toggle {
        StepAllocations record;
        Model* model = nullptr;
        static int progress(int64_t, int64_t step, int64_t, float, float, void* user_data) {
            auto* toggle = static_cast<Toggle*>(user_data);
            record_allocations(0, 0, 0, 0.0f, 0.0f, &toggle->record);
            toggle->model->set_layer_trainable(1, step % 2 == 0);
            return 0;
        }
    };
    for (const int64_t micro_batch : {int64_t{0}, int64_t{12}}) {
        CAPTURE(micro_batch);
        Setup setup = make_setup(2);
        setup.model->set_layer_trainable(0, false);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        config.optimizer.kind = OptimizerKind::adam;
        config.optimizer.global_clipnorm = 1.0f;
        config.optimizer.ema_momentum = 0.9f;
        config.micro_batch_size = micro_batch;
        Trainer trainer(setup.model, config);
        trainer.fit(*setup.dataset, 1, 32, true);  // warm-up: plans the arenas
        Toggle toggle;
        toggle.model = setup.model.get();
        toggle.record.counts.reserve(64);
        trainer.set_callbacks(TrainerCallbacks{&Toggle::progress, nullptr, &toggle});
        trainer.fit(*setup.dataset, 1, 32, true);
        REQUIRE(toggle.record.counts.size() == 20);
        for (size_t step = 1; step < toggle.record.counts.size(); ++step) {
            CAPTURE(step);
            CHECK(toggle.record.counts[step] - toggle.record.counts[step - 1] == 0);
        }
    }
}

TEST_CASE("mixed-fp16 steps that the dynamic scaler skips allocate nothing either") {
    // From 2^24 with growth after every finite step, the scale keeps overflowing again: every few
    // steps one is skipped, which the trainer checks (a message only at the minimum scale).
    Setup setup = make_setup(2);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;
    config.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    config.scaler.initial_scale = 16777216.0f;
    config.scaler.growth_interval = 1;
    Trainer trainer(setup.model, config);
    trainer.fit(*setup.dataset, 1, 32, true);
    const int64_t skipped_before = trainer.state().skipped_steps;
    StepAllocations record;
    record.counts.reserve(64);
    trainer.set_callbacks(TrainerCallbacks{&record_allocations, nullptr, &record});
    trainer.fit(*setup.dataset, 1, 32, true);
    REQUIRE(trainer.state().skipped_steps - skipped_before >= 3);
    REQUIRE(record.counts.size() == 20);
    for (size_t step = 1; step < record.counts.size(); ++step) {
        CAPTURE(step);
        CHECK(record.counts[step] - record.counts[step - 1] == 0);
    }
}

TEST_CASE("repeated single steps for custom loops allocate nothing after the first") {
    Setup setup = make_setup(2);
    Trainer trainer(setup.model, TrainerConfig{});
    trainer.step(*setup.dataset, 0, 64);
    const uint64_t before = testing::allocation_count();
    for (int64_t first = 64; first + 64 <= setup.dataset->rows(); first += 64) trainer.step(*setup.dataset, first, 64);
    CHECK(testing::allocation_count() - before == 0);
}

TEST_CASE("the allocation counter sees allocations made inside the library") {
    // Guards the test itself: if interposition stopped working, the checks above would pass vacuously.
    const uint64_t before = testing::allocation_count();
    Setup setup = make_setup(1);
    CHECK(testing::allocation_count() - before > 0);
}
