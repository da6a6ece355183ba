// The CUDA backend's fast paths are taken, not only correct: cuBLASLt accepts every fused epilogue
// (bias + ReLU with the mask, dReLU, bias gradient) of the MLP's steps in mixed precision, and
// steady-state steps replay captured graphs. The op comparisons cannot see either: the unfused
// fallbacks and eager execution give the same numbers, only slower. Each case skips with a message
// when no CUDA device is present.
// This file: cuBLASLt's entry points and epilogues, captured graphs and refused captures, and the fast
// paths turned off; the same program's cases of each switch, by what it switches, are in
// tests/fast_paths/ (the layers' kernels, the updates, the launches).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "support/skip_without_gpu.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_cublaslt_library.cuh"
#include "fast_paths/harness.h"

using namespace mpt;
using namespace mpt::testing;
using namespace mpt::testing::fast_paths;

TEST_CASE("cuBLASLt is opened at run time with every entry point, or the CUDA backend says why not") {
    // Runs on every machine with a CUDA build: the toolkit that built it has the library.
    std::string why;
    const CublasLt* lt = cublaslt(&why);
    if (lt) {
#define MPT_CHECK_RESOLVED(member, symbol) CHECK_MESSAGE(static_cast<bool>(lt->member), #symbol);
        MPT_CUBLASLT_FUNCTIONS(MPT_CHECK_RESOLVED)
#undef MPT_CHECK_RESOLVED
        CHECK(std::string(lt->get_status_name(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
    } else {
        MESSAGE("cuBLASLt not loadable here: " << why);
        CHECK(cuda_device_count() == 0);
        CHECK_FALSE(cuda_unavailable_reason().empty());
    }
}

TEST_CASE("cuBLASLt accepts every fused epilogue of a mixed-precision step (no unfused fallback)") {
    SKIP_WITHOUT_GPU();
    for (mpt_precision precision : {MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_FP32}) {
        CAPTURE(static_cast<int>(precision));
        auto context = make_context(MPT_BACKEND_CUDA);
        const SyntheticData small = synthetic_data(512, 100, 21);
        auto small_set = to_dataset(context, small);
        train_at_every_batch_kind(make_mlp(context, small.features), *small_set, precision);
        const SyntheticData seed_shaped = synthetic_data(512, 3072, 22);
        auto seed_set = to_dataset(context, seed_shaped);
        train_at_every_batch_kind(make_seed_mlp(context), *seed_set, precision);

        const uint64_t refused = cuda_backend_refused_epilogue_plans(context->backend());
        const std::string last = cuda_backend_last_refused_epilogue(context->backend());
        const CudaOpPaths paths = cuda_backend_op_paths(context->backend());
        const std::string counts = "forward " + std::to_string(paths.forward_fused) + " fused / " +
                                   std::to_string(paths.forward_unfused) + " unfused, backward_data " +
                                   std::to_string(paths.backward_data_fused) + " / " +
                                   std::to_string(paths.backward_data_unfused) + ", weight gradient " +
                                   std::to_string(paths.weight_gradient_fused) + " / " +
                                   std::to_string(paths.weight_gradient_unfused) + ", fused SGD " +
                                   std::to_string(paths.fused_sgd);
        if (precision == MPT_PRECISION_FP32) {
            // fp32 GEMMs may run on SIMT kernels without every epilogue: reported, not required.
            MESSAGE("fp32: " << refused << " fused plans refused" << (refused ? " (last: " + last + ")" : "") << "; "
                             << counts);
        } else {
            INFO("last refused: " << last);
            INFO("op paths: " << counts);
            CHECK(refused == 0);
            // No refusal is not enough: an op that never tried its fused epilogue refuses nothing.
            // The hidden layers' input gradients must take DRELU with the forward's mask, and the
            // weight gradients (batch 96 and 256) the bias-gradient epilogue.
            CHECK(paths.forward_fused > 0);
            CHECK(paths.backward_data_fused > 0);
            CHECK(paths.backward_data_unfused == 0);
            CHECK(paths.backward_data_relu_from_output == 0);  // every mask valid: DRELU reads it
            CHECK(paths.weight_gradient_fused > 0);
            CHECK(paths.weight_gradient_unfused == 0);
            CHECK(paths.fused_sgd > 0);  // batch 32
        }
    }
}

TEST_CASE("plain SGD with weight decay keeps the fused small-batch SGD kernel") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    const SyntheticData data = synthetic_data(512, 100, 23);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.optimizer.weight_decay = 0.01f;
    Trainer trainer(make_mlp(context, data.features), config);
    trainer.fit(*dataset, 1, 32, true);
    CHECK(cuda_backend_op_paths(context->backend()).fused_sgd > 0);
}

TEST_CASE("steady-state steps replay captured graphs, and no capture is refused") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    train_two_bf16_epochs(context, 23);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(context->backend()));
    CHECK(cuda_backend_graph_refusals(context->backend()) == 0);
    CHECK(cuda_backend_graph_captures(context->backend()) >= 1);
    CHECK(cuda_backend_graph_replays(context->backend()) >= 30);
}

// A schedule is evaluated by the update kernels from the step count in device memory, so its rate
// changing every step changes no kernel argument: the steps replay the graphs a constant rate's do.
TEST_CASE("a per-step learning-rate schedule costs no capture: its steps replay graphs as a constant rate's do") {
    SKIP_WITHOUT_GPU();
    const LrSchedule cosine = per_step_cosine();
    struct Run {
        float loss;
        uint64_t captures, replays, refusals;
    };
    const auto run = [&](const LrSchedule& schedule, bool graphs) {
        auto context = make_context(MPT_BACKEND_CUDA);
        cuda_backend_set_graphs(context->backend(), graphs);
        const float loss = train_two_bf16_epochs(context, 23, schedule);
        return Run{loss, cuda_backend_graph_captures(context->backend()), cuda_backend_graph_replays(context->backend()),
                   cuda_backend_graph_refusals(context->backend())};
    };
    const Run constant = run(LrSchedule{}, true), scheduled = run(cosine, true), eager = run(cosine, false);
    MESSAGE("losses: constant " << constant.loss << ", scheduled " << scheduled.loss << " (eager " << eager.loss
                                << "); captures " << constant.captures << " and " << scheduled.captures << ", replays "
                                << constant.replays << " and " << scheduled.replays);
    CHECK(scheduled.refusals == 0);
    CHECK(scheduled.captures == constant.captures);
    CHECK(scheduled.replays == constant.replays);
    CHECK(scheduled.replays >= 30);
    CHECK(eager.replays == 0);
    // The replayed steps took the scheduled rates: they train what eager steps train, not the constant rate.
    CHECK(std::fabs(scheduled.loss - eager.loss) <= 1e-3 * std::fabs(eager.loss));
    CHECK(std::fabs(scheduled.loss - constant.loss) > 1e-2 * std::fabs(constant.loss));
}

// cuBLASLt may refuse a fused plan only when it runs, after its heuristic offered it. The op is then
// planned again without it (and so are the ops after it in the task: a forward that wrote no mask
// leaves its backward without DRELU, to take ReLU's derivative from the forward's output in place
// after a plain GEMM, a plan no refusal meets) and training goes on, as if the epilogue had been refused at
// planning. Simulated by the test hook, with step graphs on (the refusal meets a recorded task run
// eagerly before its capture) and off (ops issued one by one).
TEST_CASE("a fused GEMM refused only when it runs is planned again unfused, and training goes on") {
    SKIP_WITHOUT_GPU();
    const float expected = train_two_bf16_epochs(make_context(MPT_BACKEND_CUDA), 25);
    for (bool graphs : {true, false}) {
        CAPTURE(graphs);
        auto context = make_context(MPT_BACKEND_CUDA);
        cuda_backend_set_graphs(context->backend(), graphs);
        cuda_backend_refuse_fused_runs(context->backend(), true);
        const float loss = train_two_bf16_epochs(context, 25);
        const CudaOpPaths paths = cuda_backend_op_paths(context->backend());
        INFO("last refused: " << cuda_backend_last_refused_epilogue(context->backend()));
        CHECK(cuda_backend_refused_epilogue_runs(context->backend()) > 0);
        CHECK(paths.forward_unfused > 0);
        CHECK(paths.backward_data_relu_from_output > 0);
        // Unfused epilogues compute the same values in another order: near the fused run's loss.
        CHECK(std::isfinite(loss));
        CHECK(loss == doctest::Approx(expected).epsilon(0.02));
        if (graphs) {
            INFO("last graph refusal: " << cuda_backend_last_graph_refusal(context->backend()));
            CHECK(cuda_backend_graph_refusals(context->backend()) == 0);
            CHECK(cuda_backend_graph_captures(context->backend()) >= 1);
        }
    }
}

// A capture that fails (here: a cudaStreamSynchronize of the capturing stream, which is not
// permitted there and invalidates it) must end the capture, leave no error behind for the next
// launch, and run that task eagerly now and from then on; training goes on with the numbers of a
// run whose steps were replayed.
TEST_CASE("a capture that fails is refused, its task runs eagerly, and training goes on") {
    SKIP_WITHOUT_GPU();
    const float expected = train_two_bf16_epochs(make_context(MPT_BACKEND_CUDA), 26);
    auto context = make_context(MPT_BACKEND_CUDA);
    cuda_backend_break_captures(context->backend(), true);
    const float loss = train_two_bf16_epochs(context, 26);
    const std::string why = cuda_backend_last_graph_refusal(context->backend());
    INFO("last graph refusal: " << why);
    const uint64_t refusals = cuda_backend_graph_refusals(context->backend());
    // One refusal per distinct task (the steps alternate two batch slots; evaluation has its own),
    // not one per step: a refused task is not captured again.
    CHECK(refusals >= 1);
    CHECK(refusals <= 8);
    CHECK(cuda_backend_graph_captures(context->backend()) == 0);
    CHECK(cuda_backend_graph_replays(context->backend()) == 0);
    CHECK(why.find("cudaStreamSynchronize") != std::string::npos);
    // The same kernels ran, eagerly instead of from a graph (up to cuBLASLt's reduction order).
    CHECK(std::isfinite(loss));
    CHECK(loss == doctest::Approx(expected).epsilon(1e-3));
    // Nothing the failed captures left behind (an error, a stream still capturing) fails later work.
    // At another batch size, so that the tasks are new (the same sizes again could get the same
    // buffers, and so the refused signatures): captured and replayed.
    cuda_backend_break_captures(context->backend(), false);
    const float again = train_two_bf16_epochs(context, 26, LrSchedule{}, 40);
    CHECK(again ==
          doctest::Approx(train_two_bf16_epochs(make_context(MPT_BACKEND_CUDA), 26, LrSchedule{}, 40)).epsilon(1e-3));
    CHECK(cuda_backend_graph_refusals(context->backend()) == refusals);
    CHECK(cuda_backend_graph_captures(context->backend()) > 0);
    CHECK(cuda_backend_graph_replays(context->backend()) > 0);
}

// The switches that turn the fast paths off (to compare, or around a driver that mishandles them): a
// context made with MPTRAIN_CUDA_GRAPHS=0 and MPTRAIN_CUDA_FUSED_EPILOGUES=0 captures no graph and
// plans no fused epilogue, and still trains.
TEST_CASE("MPTRAIN_CUDA_GRAPHS=0 and MPTRAIN_CUDA_FUSED_EPILOGUES=0 turn the fast paths off") {
    SKIP_WITHOUT_GPU();
    std::shared_ptr<Context> context;
    {
        const EnvironmentSetting graphs("MPTRAIN_CUDA_GRAPHS", "0");
        context = cuda_context_under("MPTRAIN_CUDA_FUSED_EPILOGUES", "0");
    }
    CHECK_FALSE(cuda_backend_fused_epilogues(context->backend()));
    CHECK(std::isfinite(train_two_bf16_epochs(context, 24)));
    CHECK(cuda_backend_graph_captures(context->backend()) == 0);
    CHECK(cuda_backend_refused_epilogue_plans(context->backend()) == 0);
    const CudaOpPaths paths = cuda_backend_op_paths(context->backend());
    CHECK(paths.forward_fused == 0);
    CHECK(paths.backward_data_fused == 0);
    CHECK(paths.weight_gradient_fused == 0);
    CHECK(paths.fused_sgd == 0);
    CHECK(paths.forward_unfused > 0);
    auto default_context = make_context(MPT_BACKEND_CUDA);
    CHECK(cuda_backend_fused_epilogues(default_context->backend()));
}

// MPTRAIN_CUDA_SPLIT_K=0 (to compare: cuBLASLt's heuristic offered only kernels that keep K whole)
// changes where the GEMMs' sums are split, not what they are: the step trains to the same loss.
TEST_CASE("MPTRAIN_CUDA_SPLIT_K=0 trains as the default does") {
    SKIP_WITHOUT_GPU();
    auto context = cuda_context_under("MPTRAIN_CUDA_SPLIT_K", "0");
    const float unsplit = train_two_bf16_epochs(context, 27);
    const float split = train_two_bf16_epochs(cuda_context_under("MPTRAIN_CUDA_SPLIT_K", "1"), 27);
    INFO("fused plans refused without split-K: " << cuda_backend_refused_epilogue_plans(context->backend()));
    CHECK(std::isfinite(unsplit));
    CHECK(unsplit == doctest::Approx(split).epsilon(5e-3));
}

#else

TEST_CASE("the CUDA fast-path checks need a build with the CUDA backend") {
    SKIP_WITHOUT_GPU();  // fails under MPTRAIN_REQUIRE_GPU=1, skips otherwise
}

#endif
