// test_cuda_fast_paths: the switches of the launches, each trained against the default: dependent
// launch (and a refused capture that turns it off), the step's small ops unfolded, and GEMM
// autotuning.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#if defined(MPTRAIN_WITH_CUDA)
#include "backend/backend.h"
#include "fast_paths/harness.h"

using namespace mpt;
using namespace mpt::testing;
using namespace mpt::testing::fast_paths;

// MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 (compute capability 9.0, a build with code for it): the backend's
// kernels launch while the kernel before them still runs, and wait for it before touching memory.
// The same kernels in the same order compute the same numbers: the loss is the default's exactly, so
// a difference means some kernel read or wrote memory before its wait. Graph capture keeps the
// programmatic edges (no refusal, steps replay), and eager launches carry them too.
TEST_CASE("MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 trains exactly as the default does, captured and eagerly") {
    SKIP_WITHOUT_GPU();
    auto context = cuda_context_under("MPTRAIN_CUDA_DEPENDENT_LAUNCH", "1");
    if (!mpt::testing::turn_on_device_path(context->backend(), cuda_backend_set_dependent_launch,
                                           "programmatic dependent launch", 9))
        return;
    const float dependent = train_two_bf16_epochs_replayed(context, 41);
    CHECK(cuda_backend_op_paths(context->backend()).dependent_launches > 0);
    // The step's max pass took the update decision in its launch, and its loss head the begin_step
    // (the trainer's op order allows both).
    CHECK(cuda_backend_op_paths(context->backend()).max_abs_deciding > 0);
    CHECK(cuda_backend_op_paths(context->backend()).begin_steps_folded > 0);
    auto default_context = cuda_context_under("MPTRAIN_CUDA_DEPENDENT_LAUNCH", "0");
    const float stream_ordered = train_two_bf16_epochs(default_context, 41);
    CHECK(cuda_backend_op_paths(default_context->backend()).dependent_launches == 0);
    CHECK(std::isfinite(dependent));
    CHECK(dependent == stream_ordered);

    // Eagerly (each op launched as it is issued), against the same without it: a graph run may sum
    // in another order than an eager one (cuBLASLt), so eager is compared with eager.
    float eager_losses[2];
    for (bool dependent_launch : {true, false}) {
        auto eager = make_context(MPT_BACKEND_CUDA);
        cuda_backend_set_graphs(eager->backend(), false);
        REQUIRE(cuda_backend_set_dependent_launch(eager->backend(), dependent_launch) == dependent_launch);
        eager_losses[dependent_launch ? 0 : 1] = train_two_bf16_epochs(eager, 41);
        CHECK(cuda_backend_graph_replays(eager->backend()) == 0);
        CHECK((cuda_backend_op_paths(eager->backend()).dependent_launches > 0) == dependent_launch);
    }
    CHECK(eager_losses[0] == eager_losses[1]);

    // With every small-batch switch on as well: the step is then the backend's kernels alone.
    auto all = make_context(MPT_BACKEND_CUDA);
    auto all_stream_ordered = make_context(MPT_BACKEND_CUDA);
    for (Backend* backend : {&all->backend(), &all_stream_ordered->backend()}) {
        if (!mpt::testing::turn_on_tensor_core_path(*backend, cuda_backend_set_small_batch_forward,
                                                    "small-batch forward kernel") ||
            !mpt::testing::turn_on_tensor_core_path(*backend, cuda_backend_set_small_batch_backward_data,
                                                    "small-batch backward-data kernel"))
            return;
    }
    REQUIRE(cuda_backend_set_dependent_launch(all->backend(), true));
    REQUIRE_FALSE(cuda_backend_set_dependent_launch(all_stream_ordered->backend(), false));
    CHECK(train_two_bf16_epochs(all, 43) == train_two_bf16_epochs(all_stream_ordered, 43));
    CHECK(cuda_backend_graph_refusals(all->backend()) == 0);
    CHECK(cuda_backend_op_paths(all->backend()).forward_small_batch > 0);
    CHECK(cuda_backend_op_paths(all->backend()).dependent_launches > 0);
}

// MPTRAIN_CUDA_STEP_FOLDS=0: the begin_step's memset and the update decision's kernel run as launches
// of their own, as eager steps have them (and the decision is never taken by an update launch). The folds move no
// arithmetic, so the run trains to the default's loss bit for bit; a fold that read or wrote the step state at the
// wrong point would differ (the per-step rate reads the step count, which the finish advances).
TEST_CASE("MPTRAIN_CUDA_STEP_FOLDS=0 trains exactly as the default does, the step's small ops unfolded") {
    SKIP_WITHOUT_GPU();
    const LrSchedule cosine = per_step_cosine();
    auto context = cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "0");
    const float unfolded = train_two_bf16_epochs_replayed(context, 53, cosine);
    CHECK(cuda_backend_op_paths(context->backend()).max_abs_deciding == 0);
    CHECK(cuda_backend_op_paths(context->backend()).begin_steps_folded == 0);
    auto default_context = cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "1");
    const float folded = train_two_bf16_epochs(default_context, 53, cosine);
    CHECK(cuda_backend_op_paths(default_context->backend()).max_abs_deciding > 0);
    CHECK(cuda_backend_op_paths(default_context->backend()).begin_steps_folded > 0);
    CHECK(std::isfinite(unfolded));
    CHECK(unfolded == folded);

    // Steps that overflow: the folded begin_step must clear found_inf and the folded decision set
    // it exactly where the memset and the decision kernel do.
    const OverflowingRun unfolded_overflow =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "0"), 55);
    check_same_overflow_run(train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "1"), 55),
                            unfolded_overflow);

    // With ReLU's derivative from the outputs every maximum is taken where it is written, and the
    // decision rides in the first fused SGD update: its blocks must skip exactly the steps the
    // unfolded pass and decision kernel skip, and set found_inf for the scaler as they do.
    const EnvironmentSetting relu("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1");
    auto deciding = cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "1");
    const OverflowingRun deciding_overflow = train_two_fp16_epochs_from_overflow(deciding, 55);
    CHECK(cuda_backend_op_paths(deciding->backend()).updates_deciding > 0);
    CHECK(cuda_backend_op_paths(deciding->backend()).max_abs_deciding == 0);
    check_same_overflow_run(
        deciding_overflow, train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", "0"), 55));
}

// Some devices refuse the dependent-launch attribute under capture; the graphs are worth more, so a
// refused capture turns it off, and the same step (a new signature without it) is captured again
// and replayed. Step by step: the first sighting runs eagerly with the attribute, the capture of a
// later one is broken (as one the device refused would be), and the next ones capture and replay.
TEST_CASE("a refused capture turns dependent launch off, and the same step is captured again without it") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    if (!mpt::testing::turn_on_device_path(context->backend(), cuda_backend_set_dependent_launch,
                                           "programmatic dependent launch", 9))
        return;
    const SyntheticData data = synthetic_data(64, 100, 45);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(make_mlp(context, data.features), config);
    Backend& backend = context->backend();
    trainer.step(*dataset, 0, 32);  // first sighting: eagerly, with the attribute
    const uint64_t launches = cuda_backend_op_paths(backend).dependent_launches;
    CHECK(launches > 0);
    // The folds are counted once a run of a recorded task (a step with the max pass deciding and the
    // begin_step in its head): the refused capture's pass, which ran nothing, does not count beside
    // the eager run after it. (Both folds count together from here on; the first step, should its
    // task have been flushed to eager issue partway, may have counted one without the other.)
    const int64_t folds_apart = static_cast<int64_t>(cuda_backend_op_paths(backend).max_abs_deciding) -
                                static_cast<int64_t>(cuda_backend_op_paths(backend).begin_steps_folded);
    const auto runs_counted = [&] {
        const CudaOpPaths paths = cuda_backend_op_paths(backend);
        CHECK(static_cast<int64_t>(paths.max_abs_deciding) - static_cast<int64_t>(paths.begin_steps_folded) ==
              folds_apart);
        return paths.max_abs_deciding;
    };
    CHECK(cuda_backend_graph_captures(backend) == 0);

    // Until a capture is tried (the second sighting of the steady step; a first step that also
    // brings the weights' copies up to date has a signature of its own).
    cuda_backend_break_captures(backend, true);
    int broken_steps = 0;
    while (cuda_backend_graph_refusals(backend) == 0 && broken_steps < 4) {
        const uint64_t counted = runs_counted();
        trainer.step(*dataset, 0, 32);
        ++broken_steps;
        if (cuda_backend_graph_refusals(backend) > 0) CHECK(runs_counted() == counted + 1);
    }
    cuda_backend_break_captures(backend, false);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(backend));
    CHECK(cuda_backend_graph_refusals(backend) == 1);
    CHECK(cuda_backend_last_graph_refusal(backend).find("dependent launch turned off") != std::string::npos);
    CHECK_FALSE(cuda_backend_dependent_launch(backend));
    const uint64_t after_refusal = cuda_backend_op_paths(backend).dependent_launches;
    const uint64_t counted_after_refusal = runs_counted();

    for (int step = 0; step < 5; ++step) trainer.step(*dataset, 0, 32);  // eager, captured, 3 replays
    CHECK(cuda_backend_graph_refusals(backend) == 1);
    CHECK(cuda_backend_graph_captures(backend) >= 1);
    CHECK(cuda_backend_graph_replays(backend) >= 3);
    CHECK(cuda_backend_op_paths(backend).dependent_launches == after_refusal);
    CHECK(runs_counted() == counted_after_refusal + 2);  // eager and captured; replays count none
    CHECK(trainer.state().applied_steps == 6 + broken_steps);
}

// MPTRAIN_CUDA_GEMM_AUTOTUNE=1: each GEMM plan takes the fastest of cuBLASLt's candidates, timed on
// scratch operands when first planned. Another algorithm sums in another order (or splits K), not
// other sums: the step trains to the default's loss. The counts go to the device check's log.
TEST_CASE("MPTRAIN_CUDA_GEMM_AUTOTUNE=1 trains as the default does, every plan with candidates timed") {
    SKIP_WITHOUT_GPU();
    auto context = cuda_context_under("MPTRAIN_CUDA_GEMM_AUTOTUNE", "1");
    const float tuned = train_two_bf16_epochs(context, 31);
    const CudaGemmAutotune report = cuda_backend_gemm_autotune(context->backend());
    MESSAGE("GEMM autotuning: " << report.timed_plans << " plans timed, " << report.retuned_plans
                                << " took another algorithm than the heuristic's first, saving " << report.saved_us
                                << " us over one run of each; last untimed: "
                                << (report.last_untimed.empty() ? "none" : report.last_untimed));
    CHECK(report.enabled);
    CHECK(report.timed_plans > 0);
    CHECK(report.last_untimed.empty());
    CHECK(report.saved_us >= 0.0);
    auto heuristic_context = cuda_context_under("MPTRAIN_CUDA_GEMM_AUTOTUNE", "0");
    const float heuristic = train_two_bf16_epochs(heuristic_context, 31);
    CHECK(std::isfinite(tuned));
    CHECK(tuned == doctest::Approx(heuristic).epsilon(5e-3));
    CHECK_FALSE(cuda_backend_gemm_autotune(heuristic_context->backend()).enabled);
}

#endif  // MPTRAIN_WITH_CUDA
