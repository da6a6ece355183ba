// test_capi_errors: the context's memory budget: trainers, GEMM scratch and batches past it fail
// with OUT_OF_MEMORY and harm nothing; used bytes fall as trainers go, the peak stays.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

using namespace mpt_test::capi_errors;

TEST_CASE("a tiny memory budget fails trainer creation with OUT_OF_MEMORY and the context still trains a small model") {
    constexpr size_t kBudget = 96 * 1024;
    mpt_context_t* context = new_context(7, kBudget);

    SUBCASE("a model too large for the budget") {
        // 512 x 256 fp32 weights alone are 512 KiB.
        mpt_model_t* big = nullptr;
        REQUIRE_OK(mpt_model_create(context, 512, &big));
        REQUIRE_OK(mpt_model_add_dense(big, 256, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(big, 10, MPT_ACTIVATION_SOFTMAX));
        mpt_trainer_t* trainer = sentinel_handle<mpt_trainer_t>();
        CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_create(big, nullptr, &trainer));
        CHECK(trainer == sentinel_handle<mpt_trainer_t>());
        mpt_model_destroy(big);
    }
    SUBCASE("a model that fits, with optimizer state that does not") {
        // 64 -> 128 -> 8: about 38 KiB of fp32 parameters; Adam's two moments do not fit beside them,
        // plain SGD needs no state and does.
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(context, 64, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 128, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 8, MPT_ACTIVATION_SOFTMAX));
        REQUIRE_OK(mpt_model_get_weights(model, 1, nullptr, 0, nullptr, 0));  // builds the model
        mpt_trainer_options_t* adam = new_trainer_options(MPT_OPTIMIZER_ADAM, 0.01f);
        mpt_trainer_t* trainer = sentinel_handle<mpt_trainer_t>();
        CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_create(model, adam, &trainer));
        CHECK(trainer == sentinel_handle<mpt_trainer_t>());
        mpt_trainer_options_destroy(adam);
        trainer = new_trainer(model, MPT_OPTIMIZER_SGD);
        TestRng rng(3);
        std::vector<float> x(64 * 64);
        std::vector<int32_t> y(64);
        for (size_t r = 0; r < 64; ++r) {
            y[r] = static_cast<int32_t>(r % 8);
            for (size_t f = 0; f < 64; ++f) x[r * 64 + f] = static_cast<float>((f % 8 == r % 8 ? 2.0 : 0.0) + 0.3 * rng.normal());
        }
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(context, x.data(), 64, 64, y.data(), 8, 1, &dataset));
        REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 2, 16, 1));
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
    }

    // The small model trains on the same context, within the budget.
    mpt_model_t* small = new_model(context);
    mpt_trainer_t* trainer = new_trainer(small);
    mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 12));
    require_trains_to_accuracy(trainer, dataset, 0.95f);
    size_t used = 0, peak = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
    CHECK(used > 0);
    CHECK(used <= kBudget);
    CHECK(peak <= kBudget);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(small);
    mpt_context_destroy(context);
}

TEST_CASE("a context's used bytes fall when a trainer goes, its peak keeps the high-water mark") {
    mpt_context_t* context = new_context();
    mpt_model_t* model = new_model(context);
    mpt_dataset_t* dataset = new_dataset(context, make_blobs(96, 12));
    mpt_trainer_t* trainer = new_trainer(model);
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
    size_t with_trainer = 0, peak_with_trainer = 0, planned = 0, allocated = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &with_trainer, &peak_with_trainer));
    REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &allocated));
    CHECK(allocated > 0);
    CHECK(allocated <= with_trainer);
    CHECK(peak_with_trainer >= with_trainer);
    mpt_trainer_destroy(trainer);
    size_t without_trainer = 0, peak_after = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &without_trainer, &peak_after));
    CHECK(without_trainer + allocated <= with_trainer);  // its arenas, and its row orders besides
    CHECK(peak_after == peak_with_trainer);
    CHECK(peak_after > without_trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// The CPU GEMMs' scratch (packed operands per thread) counts against the budget as it grows: a
// budget that holds a batch's arenas but not all of its GEMM scratch fails that call with
// OUT_OF_MEMORY, leaves every weight as it was, and a smaller batch (less scratch) trains on; the
// scratch the failed call had grown is freed with it. A few features and a large batch make the
// weight-gradient GEMMs (depth: the batch) the ones that need the most: without the update scratch
// reserved before the first layer's update, budgets in the upper half of that range failed the
// step after layer 0 was updated (plain SGD writes the weights in its GEMM). Without AMX (bf16
// emulated in fp32 GEMMs through OpenBLAS) the GEMMs keep next to no scratch: skipped.
TEST_CASE("GEMM scratch past the memory budget fails the call with OUT_OF_MEMORY, weights untouched, and smaller batches still train") {
    const int64_t rows = 4096, features = 32;
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{512, features}, {512, 512}, {10, 512}};
    std::vector<float> x(static_cast<size_t>(rows * features));
    std::vector<int32_t> y(static_cast<size_t>(rows));
    TestRng rng(5);
    for (int64_t r = 0; r < rows; ++r) {
        y[static_cast<size_t>(r)] = static_cast<int32_t>(r % 10);
        for (int64_t f = 0; f < features; ++f)
            x[static_cast<size_t>(r * features + f)] = static_cast<float>((f % 10 == r % 10 ? 2.0 : 0.0) + rng.normal());
    }
    // Mixed-bf16 (AMX's bf16 packs its operands); one step over the whole set. `arenas`: what the
    // step's arenas take (known after the unlimited run).
    const auto run = [&](size_t budget, size_t arenas, size_t& peak, size_t& scratch) {
        mpt_context_t* context = new_context(7, budget);
        mpt_model_t* model = nullptr;
        REQUIRE_OK(mpt_model_create(context, features, &model));
        REQUIRE_OK(mpt_model_add_dense(model, 512, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 512, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, 10, MPT_ACTIVATION_SOFTMAX));
        mpt_trainer_options_t* options = new_trainer_options(MPT_OPTIMIZER_SGD, 0.05f);
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_BF16));
        mpt_trainer_t* trainer = nullptr;
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(context, x.data(), rows, features, y.data(), 10, 1, &dataset));
        const std::vector<float> before = weights_of(model, shapes);
        float loss = -1.0f;
        const mpt_status status = mpt_trainer_step(trainer, dataset, 0, rows, &loss);
        const std::string message = mpt_last_error();
        if (budget != 0) {
            CAPTURE(budget);
            CHECK(status == MPT_STATUS_OUT_OF_MEMORY);
            CHECK(message.find("GEMM scratch") != std::string::npos);
            CHECK(same_bits(before, weights_of(model, shapes)));
            size_t after_failure = 0;
            REQUIRE_OK(mpt_context_get_memory(context, &after_failure, nullptr));
            CHECK(after_failure <= arenas + 64 * 1024);  // no scratch kept (a few KiB of bias rounding at most)
            // Smaller batches pack less: they train on, within the budget.
            REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
            float accuracy = -1.0f;
            REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 256, &loss, &accuracy));
            CHECK(accuracy > 0.5f);
        } else {
            REQUIRE(status == MPT_STATUS_OK);
        }
        size_t used = 0;
        REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        REQUIRE_OK(mpt_context_get_memory(context, &scratch, nullptr));  // all that is left
        mpt_context_destroy(context);
    };
    // AUTO resolves to bf16 where bf16 runs natively, on AMX, whose GEMM packs its operands.
    mpt_context_t* probe = new_context();
    mpt_precision resolved = MPT_PRECISION_FP32;
    REQUIRE_OK(mpt_context_resolve_precision(probe, MPT_PRECISION_AUTO, &resolved));
    mpt_context_destroy(probe);
    size_t peak = 0, scratch = 0;
    run(0, 0, peak, scratch);
    if (resolved != MPT_PRECISION_MIXED_BF16) {
        MESSAGE("not tested: no AMX here, so the GEMMs keep only " << scratch << " bytes of scratch");
        return;
    }
    REQUIRE(scratch >= (size_t{1} << 20));  // what is left once all but the context is gone
    for (size_t eighths = 1; eighths <= 7; eighths += 2) {
        size_t limited_peak = 0, limited_scratch = 0;
        run(peak - scratch + scratch * eighths / 8, peak - scratch, limited_peak, limited_scratch);
    }
}

// Kept last in the file: before the fix it crashed the process rather than failing a check.
TEST_CASE("a batch whose arena exceeds the memory budget fails with OUT_OF_MEMORY and smaller batches still train") {
    constexpr size_t kBudget = 64 * 1024;
    mpt_context_t* context = new_context(7, kBudget);
    mpt_model_t* model = new_model(context);
    mpt_trainer_t* trainer = new_trainer(model);
    const Blobs blobs = make_blobs(4096, 21);
    mpt_dataset_t* dataset = new_dataset(context, blobs);
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 16, 1));
    const std::vector<float> before = weights_of(model, kSmallShapes);
    // 4096 rows x 8 padded features x 4 bytes x 2 batch slots alone are 256 KiB.
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_fit(trainer, dataset, 1, 4096, 0));
    CHECK(same_bits(before, weights_of(model, kSmallShapes)));
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_step(trainer, dataset, 0, 4096, nullptr));
    CHECK_FAILS(MPT_STATUS_OUT_OF_MEMORY, mpt_trainer_evaluate(trainer, dataset, 4096, nullptr, nullptr));
    // Smaller batches work again (the trainer must re-plan, not keep a released arena).
    float loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 16, &loss));
    CHECK(std::isfinite(loss));
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 32, 1));
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 64, &loss, &accuracy));
    CHECK(accuracy >= 0.95f);
    size_t used = 0, peak = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
    CHECK(peak <= kBudget);
    mpt_dataset_destroy(dataset);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}
