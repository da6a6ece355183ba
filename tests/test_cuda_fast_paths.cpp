// The CUDA backend's fast paths are taken, not only correct: cuBLASLt accepts every fused epilogue
// (bias + ReLU with the mask, dReLU, bias gradient) of the MLP's steps in mixed precision, and
// steady-state steps replay captured graphs. The op comparisons cannot see either: the unfused
// fallbacks and eager execution give the same numbers, only slower. Each case skips with a message
// when no CUDA device is present.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/environment_setting.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_cublaslt_library.cuh"
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "backend/cuda/head_layer_case.h"
#endif

#if defined(MPTRAIN_WITH_CUDA)

namespace {

using namespace mpt;
using namespace mpt::testing;

// Two epochs of mixed-bf16 training of the seed MLP on `data` at `batch`; the loss on it after.
float train_seed_mlp_two_bf16_epochs(const std::shared_ptr<Context>& context, const SyntheticData& data,
                                     int64_t batch) {
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(make_seed_mlp(context), config);
    trainer.fit(*dataset, 2, batch, true);
    REQUIRE(trainer.epochs_completed() == 2);
    return trainer.evaluate(*dataset, 256).loss;
}

// Trains at batch 32 (the fused SGD kernel's case) and at batch 96 and 256 (the weight-gradient
// GEMM with its bias-gradient epilogue), so every GEMM kind of a step is planned.
void train_at_every_batch_kind(const std::shared_ptr<Model>& model, Dataset& dataset, mpt_precision precision) {
    TrainerConfig config;
    config.precision = precision;
    Trainer trainer(model, config);
    for (int64_t batch : {32, 96, 256}) trainer.fit(dataset, 1, batch, true);
    trainer.evaluate(dataset, 128);
}

// Two epochs of training a small MLP on `rows` synthetic rows at `precision`; the loss on them after.
float train_two_epochs(const std::shared_ptr<Context>& context, mpt_precision precision, int64_t rows, int64_t batch,
                       unsigned seed, const LrSchedule& schedule = LrSchedule{}) {
    const SyntheticData data = synthetic_data(rows, 100, seed);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = precision;
    config.optimizer.schedule = schedule;
    Trainer trainer(make_mlp(context, data.features), config);
    trainer.fit(*dataset, 2, batch, true);
    REQUIRE(trainer.epochs_completed() == 2);
    return trainer.evaluate(*dataset, 64).loss;
}

// Two epochs of mixed-bf16 training (20 steps each at batch 32) of a small MLP on synthetic data; the
// loss on it after.
float train_two_bf16_epochs(const std::shared_ptr<Context>& context, unsigned seed,
                            const LrSchedule& schedule = LrSchedule{}, int64_t batch = 32) {
    return train_two_epochs(context, MPT_PRECISION_MIXED_BF16, 640, batch, seed, schedule);
}

// train_two_bf16_epochs, whose steps must all have been captured without a refusal and replayed.
float train_two_bf16_epochs_replayed(const std::shared_ptr<Context>& context, unsigned seed,
                                     const LrSchedule& schedule = LrSchedule{}) {
    const float loss = train_two_bf16_epochs(context, seed, schedule);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(context->backend()));
    CHECK(cuda_backend_graph_refusals(context->backend()) == 0);
    CHECK(cuda_backend_graph_replays(context->backend()) >= 30);
    return loss;
}

// A rate that changes at every step (warm-up, then a cosine to 0 over 30 steps), evaluated by the
// update kernels from the step count in device memory.
LrSchedule per_step_cosine() {
    LrSchedule cosine;
    cosine.kind = LrScheduleKind::cosine;
    cosine.warmup_steps = 5;
    cosine.decay_steps = 30;
    cosine.decay_factor = 0.0f;
    return cosine;
}

// Two epochs of mixed-fp16 training under dynamic loss scaling from a scale of 2^24: the first
// steps' scaled gradients overflow fp16, so those updates are skipped and each halves the scale on
// the device. The paths that fold the scaler's work into other kernels (begin_step into the loss
// head, the decision into the max pass, finish_step into the grouped update) must skip the same
// steps and leave the same scale, bit for bit, as the unfolded ones.
struct OverflowingRun {
    float loss;
    TrainState state;
};
OverflowingRun train_two_fp16_epochs_from_overflow(const std::shared_ptr<Context>& context, unsigned seed,
                                                   int64_t batch = 32) {
    const SyntheticData data = synthetic_data(20 * batch, 100, seed);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;
    config.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    config.scaler.initial_scale = 16777216.0f;
    Trainer trainer(make_mlp(context, data.features), config);
    trainer.fit(*dataset, 2, batch, true);
    return OverflowingRun{trainer.evaluate(*dataset, 64).loss, trainer.state()};
}

// The two runs skipped the same steps, left the same scale and trained to the same loss (`epsilon`:
// within that relative error; 0, bit for bit), and some steps were skipped.
void check_same_overflow_run(const OverflowingRun& run, const OverflowingRun& reference, double epsilon = 0.0) {
    CHECK(run.state.skipped_steps > 0);
    CHECK(run.state.skipped_steps == reference.state.skipped_steps);
    CHECK(run.state.applied_steps == reference.state.applied_steps);
    CHECK(run.state.steps == reference.state.steps);
    CHECK(run.state.loss_scale == reference.state.loss_scale);
    CHECK(run.state.growth_tracker == reference.state.growth_tracker);
    CHECK(std::isfinite(run.loss));
    if (epsilon == 0.0)
        CHECK(run.loss == reference.loss);
    else
        CHECK(run.loss == doctest::Approx(reference.loss).epsilon(epsilon));
}

// A CUDA context made with `variable` set to `value` (read when the backend is made), the
// environment as it was for the contexts made after it, however the making ends.
std::shared_ptr<Context> cuda_context_under(const char* variable, const char* value) {
    const EnvironmentSetting setting(variable, value);
    return make_context(MPT_BACKEND_CUDA);
}

}  // namespace

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

// MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 keeps the GEMMs whose outputs have a tile per multiprocessor or
// more whole along K (the seed MLP at batch 2048: the first layer's forward and the second's input
// gradient, 3000 wide, have 384 tiles of 128 x 128, the first layer's weight gradient 576) and leaves
// the small ones to the heuristic (the logits'): the same sums split elsewhere, so the run trains to
// the default's loss within rounding.
TEST_CASE("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 keeps the large GEMMs whole and trains as the default does") {
    SKIP_WITHOUT_GPU();
    const EnvironmentSetting split_k("MPTRAIN_CUDA_SPLIT_K", "1");  // the rule acts only where K may split
    const SyntheticData data = synthetic_data(4096, 3072, 37);
    auto ruled = cuda_context_under("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS", "1");
    auto plain = cuda_context_under("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS", "0");
    const float ruled_loss = train_seed_mlp_two_bf16_epochs(ruled, data, 2048);
    const float plain_loss = train_seed_mlp_two_bf16_epochs(plain, data, 2048);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(ruled->backend()));
    CHECK(cuda_backend_graph_refusals(ruled->backend()) == 0);
    CHECK(cuda_backend_plans_kept_whole_by_size(ruled->backend()) > 0);
    CHECK(cuda_backend_plans_kept_whole_by_size(plain->backend()) == 0);
    CHECK(std::isfinite(ruled_loss));
    CHECK(ruled_loss == doctest::Approx(plain_loss).epsilon(5e-3));
}

// MPTRAIN_CUDA_RELU_FROM_OUTPUT=1: the hidden layers' forwards keep no ReLU mask (cuBLASLt's RELU_BIAS)
// and their input gradients take ReLU's derivative from the stored outputs, in place after a plain
// GEMM. The derivative is the same 0 or 1 (from the rounded output instead of the fp32 sum: they
// differ below the dtype's least subnormal only) and the GEMMs may sum in another order, so the run
// trains to the default's loss within rounding: the small MLP at batch 32 with its steps replayed,
// the seed MLP at batch 2048 (where cuBLASLt's mask epilogue may run as a pass of its own), and an
// fp16 run whose first steps overflow skips as many steps and ends at the same scale.
TEST_CASE("MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 takes ReLU's derivative from the outputs and trains as the default does") {
    SKIP_WITHOUT_GPU();
    auto from_output = cuda_context_under("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1");
    auto with_masks = cuda_context_under("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "0");
    const float small_from_output = train_two_bf16_epochs_replayed(from_output, 59);
    const float small_with_masks = train_two_bf16_epochs(with_masks, 59);
    const SyntheticData data = synthetic_data(4096, 3072, 61);
    const float seed_from_output = train_seed_mlp_two_bf16_epochs(from_output, data, 2048);
    const float seed_with_masks = train_seed_mlp_two_bf16_epochs(with_masks, data, 2048);
    const CudaOpPaths on = cuda_backend_op_paths(from_output->backend());
    const CudaOpPaths off = cuda_backend_op_paths(with_masks->backend());
    INFO("last refused: " << cuda_backend_last_refused_epilogue(from_output->backend()));
    CHECK(cuda_backend_refused_epilogue_plans(from_output->backend()) == 0);
    CHECK(on.backward_data_relu_from_output > 0);
    // Each of those took the maxima of dZ_prev and A_prev for the finiteness proof (no dropout here),
    // which the overflowing runs below depend on: the same steps skipped as with the max_abs pass's.
    CHECK(on.backward_data_max_abs == on.backward_data_relu_from_output);
    // With the head's maximum of the logits gradient, the small MLP's step has nothing left for a max
    // pass to read: its first fused SGD update takes the decision (batch 32; not the seed MLP's 2048).
    CHECK(on.updates_deciding > 0);
    CHECK(off.updates_deciding == 0);
    CHECK(on.backward_data_unfused == 0);
    CHECK(on.forward_unfused == 0);
    CHECK(off.backward_data_relu_from_output == 0);
    CHECK(off.backward_data_max_abs == 0);
    CHECK(std::isfinite(small_from_output));
    CHECK(std::isfinite(seed_from_output));
    CHECK(small_from_output == doctest::Approx(small_with_masks).epsilon(5e-3));
    CHECK(seed_from_output == doctest::Approx(seed_with_masks).epsilon(5e-3));

    const OverflowingRun overflow_from_output =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1"), 63);
    const OverflowingRun overflow_with_masks =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "0"), 63);
    check_same_overflow_run(overflow_from_output, overflow_with_masks, 5e-3);
}

// MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1: at batches of at most 64 rows the last layer's forward and input
// gradient run in the loss head's launch (K split across a cluster's blocks where it has more than 128
// inputs), their dot products summed in another order than cuBLASLt's, so each run trains to the
// separate launches' loss within rounding: the small MLP (40 inputs to 16 outputs: one block) in
// mixed-bf16 replayed from graphs, the layer below's ReLU mask read as the DRELU plan reads it; with
// ReLU's derivative from the outputs, where the launch also takes the step's maxima of dZ and A below
// it; with every fused GEMM refused when it runs; at batch 64; fp32 (which it leaves to the separate
// launches); one hidden layer (another arena plan); and mixed-fp16 through overflowing steps (the same
// steps skipped, the same scale left).
TEST_CASE("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 trains as the separate launches do") {
    SKIP_WITHOUT_GPU();
    auto fused = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    auto separate = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0");
    const float fused_bf16 = train_two_bf16_epochs_replayed(fused, 61);
    const float separate_bf16 = train_two_bf16_epochs(separate, 61);
    const CudaOpPaths paths = cuda_backend_op_paths(fused->backend());
    CHECK(paths.head_layers_in_cluster > 0);
    CHECK(paths.backward_data_relu_from_output == 0);  // the masks' plan
    CHECK(cuda_backend_op_paths(separate->backend()).head_layers_in_cluster == 0);
    CHECK(std::isfinite(fused_bf16));
    CHECK(fused_bf16 == doctest::Approx(separate_bf16).epsilon(5e-3));

    std::shared_ptr<Context> from_output;
    {
        const EnvironmentSetting relu("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1");
        from_output = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    }
    const float from_output_bf16 = train_two_bf16_epochs(from_output, 61);
    const CudaOpPaths from_output_paths = cuda_backend_op_paths(from_output->backend());
    CHECK(from_output_paths.head_layers_in_cluster > 0);
    CHECK(std::isfinite(from_output_bf16));
    CHECK(from_output_bf16 == doctest::Approx(separate_bf16).epsilon(5e-3));

    // Every fused GEMM refused when it runs: the ops from the refused one on are planned again one by
    // one, and the fold is not taken on the plans they had (the layer below's forward then writes no
    // mask, which the backward's first plan read). The first step, where the refusals meet the
    // recorded plans, updates the weights as the separate launches' step does (within rounding), and
    // training goes on near the unrefused run.
    const auto first_step_update = [](const std::shared_ptr<Context>& context) {
        cuda_backend_refuse_fused_runs(context->backend(), true);
        const SyntheticData data = synthetic_data(64, 100, 73);
        auto dataset = to_dataset(context, data);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        config.optimizer.learning_rate = 0.1f;
        auto model = make_mlp(context, data.features);
        Trainer trainer(model, config);
        const std::vector<float> before = master_block(*model);
        trainer.step(*dataset, 0, 32);
        std::vector<float> update = master_block(*model);
        for (size_t i = 0; i < update.size(); ++i) update[i] -= before[i];
        return update;
    };
    {
        const std::vector<float> fused_update =
            first_step_update(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1"));
        const std::vector<float> separate_update =
            first_step_update(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0"));
        double difference = 0.0, size = 0.0;
        for (size_t i = 0; i < fused_update.size(); ++i) {
            difference = std::max(difference, std::fabs(static_cast<double>(fused_update[i]) - separate_update[i]));
            size = std::max(size, std::fabs(static_cast<double>(separate_update[i])));
        }
        REQUIRE(size > 0.0);
        CHECK(difference <= 0.02 * size);
    }
    auto refused = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    cuda_backend_refuse_fused_runs(refused->backend(), true);
    const float refused_bf16 = train_two_bf16_epochs(refused, 61);
    CHECK(cuda_backend_refused_epilogue_runs(refused->backend()) > 0);
    CHECK(std::isfinite(refused_bf16));
    CHECK(refused_bf16 == doctest::Approx(separate_bf16).epsilon(0.02));

    auto fused_64 = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    const float fused_64_loss = train_two_bf16_epochs(fused_64, 65, LrSchedule{}, 64);
    CHECK(cuda_backend_op_paths(fused_64->backend()).head_layers_in_cluster > 0);
    CHECK(fused_64_loss ==
          doctest::Approx(
              train_two_bf16_epochs(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0"), 65, LrSchedule{}, 64))
              .epsilon(5e-3));

    // One hidden layer (100 -> 128 -> 10): without the logits kept live until the input gradient below
    // them is written, the executor's arena would put the two on the same bytes (head_layer_case.h).
    const auto train_one_hidden_layer = [](const std::shared_ptr<Context>& context) {
        const SyntheticData data = synthetic_data(640, 100, 69);
        auto dataset = to_dataset(context, data);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        Trainer trainer(make_one_hidden_layer_mlp(context, data.features, 128), config);
        trainer.fit(*dataset, 2, 32, true);
        return trainer.evaluate(*dataset, 64).loss;
    };
    auto fused_one_hidden = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    const float fused_one_hidden_loss = train_one_hidden_layer(fused_one_hidden);
    CHECK(cuda_backend_op_paths(fused_one_hidden->backend()).head_layers_in_cluster > 0);
    CHECK(std::isfinite(fused_one_hidden_loss));
    CHECK(fused_one_hidden_loss ==
          doctest::Approx(train_one_hidden_layer(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0")))
              .epsilon(5e-3));

    auto fused_fp32 = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    const float fused_fp32_loss = train_two_epochs(fused_fp32, MPT_PRECISION_FP32, 640, 32, 67);
    CHECK(cuda_backend_op_paths(fused_fp32->backend()).head_layers_in_cluster == 0);  // 16-bit layers only
    CHECK(fused_fp32_loss == train_two_epochs(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0"),
                                              MPT_PRECISION_FP32, 640, 32, 67));

    auto overflowing = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    const OverflowingRun fused_overflow = train_two_fp16_epochs_from_overflow(overflowing, 63);
    const OverflowingRun separate_overflow =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0"), 63);
    CHECK(cuda_backend_op_paths(overflowing->backend()).head_layers_in_cluster > 0);
    check_same_overflow_run(fused_overflow, separate_overflow, 5e-3);
}

// The seed MLP at batch 32 under MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1: its last layer (1000 inputs) in a
// cluster of 8 blocks where the device has clusters (compute capability 9.0), replayed from graphs,
// trains to the separate launches' loss within rounding.
TEST_CASE("the seed MLP's last layer in a cluster of 8 blocks trains as the separate launches do") {
    SKIP_WITHOUT_GPU();
    auto fused = cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    if (cuda_backend_head_layer_max_blocks(fused->backend()) < kHeadLayerMaxBlocks) {
        MESSAGE("skipped: no clusters of 8 blocks here (compute capability 9.0 and a build with its code)");
        return;
    }
    const SyntheticData data = synthetic_data(320, 3072, 71);
    const float fused_loss = train_seed_mlp_two_bf16_epochs(fused, data, 32);
    const float separate_loss =
        train_seed_mlp_two_bf16_epochs(cuda_context_under("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "0"), data, 32);
    CHECK(cuda_backend_op_paths(fused->backend()).head_layers_in_cluster > 0);
    INFO("last refusal: " << cuda_backend_last_graph_refusal(fused->backend()));
    CHECK(cuda_backend_graph_refusals(fused->backend()) == 0);
    CHECK(std::isfinite(fused_loss));
    CHECK(fused_loss == doctest::Approx(separate_loss).epsilon(5e-3));
}

// MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1: plain SGD's updates over 64 rows as one GEMM into the fp32
// masters (alpha -rate / scale and beta 1 - rate * decay from device memory), with no weight gradient
// in memory. The GEMM rounds once where the default rounds the gradient and then the update, so the
// runs train to the default's loss within rounding: the small MLP at batch 128 under a per-step rate
// with its steps replayed, with weight decay, in fp32, the seed MLP at batch 2048, and an fp16 run from
// a scale of 2^24 at batch 128, whose overflowing steps (the GEMM then adds zeros) are skipped as the
// default skips them, to the same scale.
TEST_CASE(
    "MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 updates plain SGD's masters in the GEMM and trains as the default does") {
    SKIP_WITHOUT_GPU();
    auto into = cuda_context_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    auto through = cuda_context_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "0");
    const auto train = [](const std::shared_ptr<Context>& context, mpt_precision precision, float weight_decay,
                          const LrSchedule& schedule) {
        const SyntheticData data = synthetic_data(1280, 100, 71);
        auto dataset = to_dataset(context, data);
        TrainerConfig config;
        config.precision = precision;
        config.optimizer.weight_decay = weight_decay;
        config.optimizer.schedule = schedule;
        Trainer trainer(make_mlp(context, data.features), config);
        trainer.fit(*dataset, 2, 128, true);
        REQUIRE(trainer.epochs_completed() == 2);
        return trainer.evaluate(*dataset, 64).loss;
    };
    const float scheduled_into = train(into, MPT_PRECISION_MIXED_BF16, 0.0f, per_step_cosine());
    INFO("last refusal: " << cuda_backend_last_graph_refusal(into->backend()));
    CHECK(cuda_backend_graph_refusals(into->backend()) == 0);
    // (20 steps in two batch slots: the first partly eager, where the backend's scratch grows for the
    // scalars, then a sighting and a capture of each slot's graph, and at least 14 replays.)
    CHECK(cuda_backend_graph_replays(into->backend()) >= 12);
    const float scheduled_through = train(through, MPT_PRECISION_MIXED_BF16, 0.0f, per_step_cosine());
    const float decayed_into = train(into, MPT_PRECISION_MIXED_FP16, 0.05f, LrSchedule{});
    const float decayed_through = train(through, MPT_PRECISION_MIXED_FP16, 0.05f, LrSchedule{});
    const float fp32_into = train(into, MPT_PRECISION_FP32, 0.0f, LrSchedule{});
    const float fp32_through = train(through, MPT_PRECISION_FP32, 0.0f, LrSchedule{});
    const SyntheticData data = synthetic_data(4096, 3072, 73);
    const float seed_into = train_seed_mlp_two_bf16_epochs(into, data, 2048);
    const float seed_through = train_seed_mlp_two_bf16_epochs(through, data, 2048);
    const CudaOpPaths on = cuda_backend_op_paths(into->backend());
    const CudaOpPaths off = cuda_backend_op_paths(through->backend());
    CHECK(on.gradient_into_masters > 0);
    CHECK(on.weight_gradient_fused + on.weight_gradient_unfused == 0);
    CHECK(off.gradient_into_masters == 0);
    CHECK(off.weight_gradient_fused > 0);
    MESSAGE("plain SGD into the masters in training: fused plans refused "
            << cuda_backend_refused_epilogue_plans(into->backend()));
    for (float loss : {scheduled_into, decayed_into, fp32_into, seed_into}) CHECK(std::isfinite(loss));
    CHECK(scheduled_into == doctest::Approx(scheduled_through).epsilon(5e-3));
    CHECK(decayed_into == doctest::Approx(decayed_through).epsilon(5e-3));
    CHECK(fp32_into == doctest::Approx(fp32_through).epsilon(1e-4));
    CHECK(seed_into == doctest::Approx(seed_through).epsilon(5e-3));

    const OverflowingRun overflow_into =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1"), 79, 128);
    const OverflowingRun overflow_through =
        train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "0"), 79, 128);
    check_same_overflow_run(overflow_into, overflow_through, 5e-3);
}

// MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1: the fused SGD kernel compiled for 3 blocks an SM, the same
// arithmetic in the same order for every weight (a thread sums its weights' gradients over the rows
// whatever the grid), so the run trains to the default's loss bit for bit, a layer a launch and, with
// MPTRAIN_CUDA_GROUPED_SGD=1, the layers in one launch (the grouped kernel, which spills more). Its
// occupancy, with the carveout the backend asked for: 3 blocks where an SM has the shared memory
// for three (48 KiB of static shared memory each, and the driver's 1 KiB a block), never fewer than
// the default's.
TEST_CASE("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 trains exactly as the default does, 3 blocks an SM") {
    SKIP_WITHOUT_GPU();
    auto context = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", "1");
    const float three_blocks = train_two_bf16_epochs_replayed(context, 67);
    CHECK(cuda_backend_op_paths(context->backend()).fused_sgd_three_blocks > 0);
    auto default_context = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", "0");
    const float default_blocks = train_two_bf16_epochs(default_context, 67);
    CHECK(cuda_backend_op_paths(default_context->backend()).fused_sgd_three_blocks == 0);
    CHECK(std::isfinite(three_blocks));
    CHECK(three_blocks == default_blocks);
    {
        const EnvironmentSetting grouped("MPTRAIN_CUDA_GROUPED_SGD", "1");
        auto grouped_three = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", "1");
        const float grouped_three_blocks = train_two_bf16_epochs_replayed(grouped_three, 67);
        CHECK(cuda_backend_op_paths(grouped_three->backend()).fused_sgd_grouped > 0);
        CHECK(grouped_three_blocks == default_blocks);
    }

    int device = 0, shared_per_multiprocessor = 0;
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&shared_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) ==
            cudaSuccess);
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
        CAPTURE(std::string(dtype_name(dtype)));
        for (bool single : {true, false}) {
            CAPTURE(single);
            const int three = fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{true, false}, single);
            const int two = fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{}, single);
            MESSAGE(std::string(dtype_name(dtype)) << std::string(single ? ", a layer" : ", a group") << ": " << three
                                      << " blocks an SM compiled for 3, " << two << " by default");
            CHECK(three >= two);
            if (shared_per_multiprocessor >= 3 * (48 * 1024 + 1024)) CHECK(three >= 3);
        }
    }
}

// MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: the fused SGD kernel compiled for batches of exactly 32 rows (the
// row loops unrolled whole, shared memory for 32 rows, whole tiles without edge checks), the same sums
// in the same order: every run trains to the default's loss bit for bit. The small MLP at batch 32 in
// each precision, replayed; the seed MLP, whose layers have partial tiles and strips at every edge
// (3000 outputs, 3000 inputs, 16 logits); with 3 blocks an SM and grouped; a batch of 48 rows takes
// the kernel for any rows. Its occupancy is never below the default's.
TEST_CASE("MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 trains exactly as the default does") {
    SKIP_WITHOUT_GPU();
    auto exact = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "1");
    auto generic = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "0");
    const float exact_bf16 = train_two_bf16_epochs_replayed(exact, 83);
    const float generic_bf16 = train_two_bf16_epochs(generic, 83);
    CHECK(std::isfinite(exact_bf16));
    CHECK(exact_bf16 == generic_bf16);
    for (mpt_precision precision : {MPT_PRECISION_MIXED_FP16, MPT_PRECISION_FP32}) {
        CAPTURE(static_cast<int>(precision));
        CHECK(train_two_epochs(exact, precision, 640, 32, 89) == train_two_epochs(generic, precision, 640, 32, 89));
    }
    const SyntheticData data = synthetic_data(512, 3072, 97);
    CHECK(train_seed_mlp_two_bf16_epochs(exact, data, 32) == train_seed_mlp_two_bf16_epochs(generic, data, 32));
    const uint64_t planned = cuda_backend_op_paths(exact->backend()).fused_sgd_32_rows;
    CHECK(planned > 0);
    CHECK(cuda_backend_op_paths(generic->backend()).fused_sgd_32_rows == 0);
    CHECK(train_two_epochs(exact, MPT_PRECISION_MIXED_BF16, 480, 48, 101) ==
          train_two_epochs(generic, MPT_PRECISION_MIXED_BF16, 480, 48, 101));
    CHECK(cuda_backend_op_paths(exact->backend()).fused_sgd_32_rows == planned);  // none at 48 rows
    {
        const EnvironmentSetting three("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", "1");
        const EnvironmentSetting grouped("MPTRAIN_CUDA_GROUPED_SGD", "1");
        auto exact_three = cuda_context_under("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "1");
        CHECK(train_two_bf16_epochs_replayed(exact_three, 83) == generic_bf16);
        // (The seed MLP's 3000- and 3072-wide layers: whole strips and tiles, unchecked, in the grouped
        // kernel that spills; the small MLP's layers are narrower than a strip.)
        CHECK(train_seed_mlp_two_bf16_epochs(exact_three, data, 32) ==
              train_seed_mlp_two_bf16_epochs(generic, data, 32));
        CHECK(cuda_backend_op_paths(exact_three->backend()).fused_sgd_32_rows > 0);
        CHECK(cuda_backend_op_paths(exact_three->backend()).fused_sgd_three_blocks > 0);
    }
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
        CAPTURE(std::string(dtype_name(dtype)));
        for (bool single : {true, false}) {
            CAPTURE(single);
            CHECK(fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{false, true}, single) >=
                  fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{}, single));
            CHECK(fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{true, true}, single) >=
                  fused_sgd_blocks_per_multiprocessor(dtype, FusedSgdKernelChoice{true, false}, single));
        }
    }
}

// MPTRAIN_CUDA_BULK_COPY_SGD=1: fused SGD's fp16 and bf16 updates on compute capability 9.0 with the
// masters streamed into shared memory by bulk copies and the weight gradient on tensor cores, whose
// sums come in another order than the CUDA-core kernel's: the runs train to the default's loss
// within rounding. The small MLP at batch 32 replayed, in fp16 (loss scaling, the same skips) and
// fp32 (the CUDA-core kernel: bit for bit), at batch 48 (the 64-row compilation) and 256 (the 256-row
// one, in place of the weight-gradient GEMM and the update kernel), and the seed MLP at 32 and 256,
// alone and grouped with finish_step in the last block. Where it runs: 3 blocks an SM at 32 rows, 2
// at 64 and 1 at 256, as its launch bounds and 67, 83 and 179 KiB of shared memory allow on an H100
// or H200.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1 trains as the default does, within rounding") {
    SKIP_WITHOUT_GPU();
    auto bulk = cuda_context_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    auto cuda_cores = cuda_context_under("MPTRAIN_CUDA_BULK_COPY_SGD", "0");
    const float bulk_bf16 = train_two_bf16_epochs_replayed(bulk, 83);
    const float cores_bf16 = train_two_bf16_epochs(cuda_cores, 83);
    CHECK(std::isfinite(bulk_bf16));
    CHECK(bulk_bf16 == doctest::Approx(cores_bf16).epsilon(5e-3));
    const float bulk_fp16 = train_two_epochs(bulk, MPT_PRECISION_MIXED_FP16, 640, 32, 89);
    CHECK(std::isfinite(bulk_fp16));
    CHECK(bulk_fp16 ==
          doctest::Approx(train_two_epochs(cuda_cores, MPT_PRECISION_MIXED_FP16, 640, 32, 89)).epsilon(5e-3));
    CHECK(train_two_epochs(bulk, MPT_PRECISION_FP32, 640, 32, 89) ==
          train_two_epochs(cuda_cores, MPT_PRECISION_FP32, 640, 32, 89));
    CHECK(train_two_epochs(bulk, MPT_PRECISION_MIXED_BF16, 480, 48, 101) ==
          doctest::Approx(train_two_epochs(cuda_cores, MPT_PRECISION_MIXED_BF16, 480, 48, 101)).epsilon(5e-3));
    const uint64_t weight_gradients = cuda_backend_op_paths(bulk->backend()).weight_gradient_fused +
                                      cuda_backend_op_paths(bulk->backend()).weight_gradient_unfused;
    CHECK(train_two_epochs(bulk, MPT_PRECISION_MIXED_BF16, 1280, 256, 103) ==
          doctest::Approx(train_two_epochs(cuda_cores, MPT_PRECISION_MIXED_BF16, 1280, 256, 103)).epsilon(5e-3));
    if (compute_capability_major(bulk->backend()) >= 9)  // no weight-gradient GEMM at batch 256 either
        CHECK(cuda_backend_op_paths(bulk->backend()).weight_gradient_fused +
                  cuda_backend_op_paths(bulk->backend()).weight_gradient_unfused ==
              weight_gradients);
    const SyntheticData data = synthetic_data(512, 3072, 97);
    const float seed_cores = train_seed_mlp_two_bf16_epochs(cuda_cores, data, 32);
    CHECK(train_seed_mlp_two_bf16_epochs(bulk, data, 32) == doctest::Approx(seed_cores).epsilon(5e-3));
    const float seed_cores_256 = train_seed_mlp_two_bf16_epochs(cuda_cores, data, 256);
    CHECK(train_seed_mlp_two_bf16_epochs(bulk, data, 256) == doctest::Approx(seed_cores_256).epsilon(5e-3));
    {
        const EnvironmentSetting grouped("MPTRAIN_CUDA_GROUPED_SGD", "1");
        auto bulk_grouped = cuda_context_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
        CHECK(train_seed_mlp_two_bf16_epochs(bulk_grouped, data, 32) == doctest::Approx(seed_cores).epsilon(5e-3));
        // (At batch 256 the three layers too are one launch of the 256-row compilation, one block an
        // SM, which then finishes the step in its last block.)
        CHECK(train_seed_mlp_two_bf16_epochs(bulk_grouped, data, 256) == doctest::Approx(seed_cores_256).epsilon(5e-3));
        if (compute_capability_major(bulk_grouped->backend()) >= 9) {
            CHECK(cuda_backend_op_paths(bulk_grouped->backend()).fused_sgd_bulk_copy > 0);
            CHECK(cuda_backend_op_paths(bulk_grouped->backend()).fused_sgd_grouped > 0);
            CHECK(cuda_backend_op_paths(bulk_grouped->backend()).steps_finished_by_update > 0);
        }
    }
    CHECK(cuda_backend_op_paths(cuda_cores->backend()).fused_sgd_bulk_copy == 0);
    if (compute_capability_major(bulk->backend()) < 9) {
        CHECK(cuda_backend_op_paths(bulk->backend()).fused_sgd_bulk_copy == 0);
        return;
    }
    CHECK(cuda_backend_op_paths(bulk->backend()).fused_sgd_bulk_copy > 0);
    int device = 0, shared_per_multiprocessor = 0;
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&shared_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) ==
            cudaSuccess);
    for (DType dtype : {DType::bf16, DType::fp16})
        for (bool single : {true, false}) {
            CAPTURE(std::string(dtype_name(dtype)));
            CAPTURE(single);
            if (shared_per_multiprocessor >= 228 * 1024) {
                CHECK(fused_sgd_bulk_copy_blocks_per_multiprocessor(dtype, 32, single) == 3);
                CHECK(fused_sgd_bulk_copy_blocks_per_multiprocessor(dtype, 64, single) == 2);
                CHECK(fused_sgd_bulk_copy_blocks_per_multiprocessor(dtype, 256, single) == 1);
            }
        }
}

// Past 64 rows the bulk-copy kernel takes plain SGD's updates whole, so the executor plans no fp32
// gradient scratch for them: the seed MLP's at batch 256 is the first layer's dW and db, 36.9 MB, of
// which liveness lets only buffers dead by the update (the batch's staging, the ReLU masks) share a
// part. Past 256 rows both plans keep it.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1 plans no gradient scratch for the batches it takes") {
    SKIP_WITHOUT_GPU();
    auto bulk = cuda_context_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    if (compute_capability_major(bulk->backend()) < 9) {
        MESSAGE("the bulk-copy kernel needs compute capability 9.0: not checked here");
        return;
    }
    auto cuda_cores = cuda_context_under("MPTRAIN_CUDA_BULK_COPY_SGD", "0");
    const SyntheticData data = synthetic_data(640, 3072, 41);
    const auto planned_bytes_at = [&](const std::shared_ptr<Context>& on, int64_t batch) {
        auto dataset = to_dataset(on, data);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        Trainer trainer(make_seed_mlp(on), config);
        trainer.fit(*dataset, 1, batch, true);
        return trainer.executor().planned_bytes();
    };
    const size_t first_layer_gradient_bytes = (size_t{3000} * 3072 + 3000) * sizeof(float);
    const size_t bulk_256 = planned_bytes_at(bulk, 256);
    CHECK(cuda_backend_op_paths(bulk->backend()).fused_sgd_bulk_copy > 0);
    const size_t default_256 = planned_bytes_at(cuda_cores, 256);
    INFO("planned at batch 256: " << bulk_256 << " bytes with the bulk copies, " << default_256 << " without");
    CHECK(default_256 >= bulk_256 + first_layer_gradient_bytes / 2);
    CHECK(planned_bytes_at(bulk, 320) == planned_bytes_at(cuda_cores, 320));
}

// MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 and MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 (compute capability 8.0 and
// up): batch 32's forward layers (and the evaluation's at batch 64) and its input gradients run as
// one tensor-core kernel each, the same sums in another order, the backward reading the ReLU masks
// the forward wrote: the step trains to the default's loss.
TEST_CASE("MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 and _BACKWARD=1 train as cuBLASLt's GEMMs do") {
    SKIP_WITHOUT_GPU();
    std::shared_ptr<Context> context;
    {
        const EnvironmentSetting backward("MPTRAIN_CUDA_SMALL_BATCH_BACKWARD", "1");
        context = cuda_context_under("MPTRAIN_CUDA_SMALL_BATCH_FORWARD", "1");
    }
    // (Setting them on again changes nothing where the environment turned them on; it says whether they are.)
    if (!mpt::testing::turn_on_tensor_core_path(context->backend(), cuda_backend_set_small_batch_forward,
                                                "small-batch forward kernel") ||
        !mpt::testing::turn_on_tensor_core_path(context->backend(), cuda_backend_set_small_batch_backward_data,
                                                "small-batch backward-data kernel"))
        return;
    const float small_batch = train_two_bf16_epochs(context, 37);
    const CudaOpPaths paths = cuda_backend_op_paths(context->backend());
    CHECK(paths.forward_small_batch > 0);
    CHECK(paths.backward_data_small_batch > 0);
    CHECK(paths.backward_data_small_batch == paths.backward_data_fused);
    CHECK(paths.backward_data_unfused == 0);
    // Each took the step's maxima of dZ_prev and A_prev as it wrote dZ_prev (no dropout here), and
    // with the head's of the logits gradient the max pass had nothing to read: the first update decided.
    CHECK(paths.backward_data_max_abs == paths.backward_data_small_batch);
    CHECK(paths.updates_deciding > 0);
    std::shared_ptr<Context> default_context;
    {
        const EnvironmentSetting backward("MPTRAIN_CUDA_SMALL_BATCH_BACKWARD", "0");
        default_context = cuda_context_under("MPTRAIN_CUDA_SMALL_BATCH_FORWARD", "0");
    }
    const float cublaslt = train_two_bf16_epochs(default_context, 37);
    CHECK(cuda_backend_op_paths(default_context->backend()).forward_small_batch == 0);
    CHECK(cuda_backend_op_paths(default_context->backend()).backward_data_small_batch == 0);
    CHECK(std::isfinite(small_batch));
    CHECK(small_batch == doctest::Approx(cublaslt).epsilon(5e-3));

    // Through overflowing steps the update's decision from the kernel's maxima skips exactly the steps
    // the decision kernel skips from the same maxima (the folds off; the emulated kernel test holds
    // the maxima to max_abs's own).
    const auto small_batch_context = [](const char* folds) {
        const EnvironmentSetting forward("MPTRAIN_CUDA_SMALL_BATCH_FORWARD", "1");
        const EnvironmentSetting backward("MPTRAIN_CUDA_SMALL_BATCH_BACKWARD", "1");
        return cuda_context_under("MPTRAIN_CUDA_STEP_FOLDS", folds);
    };
    auto deciding = small_batch_context("1");
    const OverflowingRun deciding_overflow = train_two_fp16_epochs_from_overflow(deciding, 39);
    CHECK(cuda_backend_op_paths(deciding->backend()).updates_deciding > 0);
    check_same_overflow_run(deciding_overflow, train_two_fp16_epochs_from_overflow(small_batch_context("0"), 39));
}

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

// MPTRAIN_CUDA_GROUPED_SGD=1: a step's fused SGD updates are one launch, each layer's arithmetic as
// in a launch of its own, and that launch's last block finishes the step, so the run trains to the
// default's loss bit for bit. A rate that changes every step (from the step count the finish
// advances) would show a block that read the state after the finishing block wrote it.
TEST_CASE("MPTRAIN_CUDA_GROUPED_SGD=1 trains exactly as the default does") {
    SKIP_WITHOUT_GPU();
    const LrSchedule cosine = per_step_cosine();
    auto context = cuda_context_under("MPTRAIN_CUDA_GROUPED_SGD", "1");
    const float grouped = train_two_bf16_epochs_replayed(context, 47, cosine);
    const CudaOpPaths paths = cuda_backend_op_paths(context->backend());
    CHECK(paths.fused_sgd_grouped > 0);
    CHECK(paths.fused_sgd_grouped <= paths.fused_sgd);
    CHECK(paths.steps_finished_by_update > 0);  // the step's finish_step in its update launch
    auto default_context = cuda_context_under("MPTRAIN_CUDA_GROUPED_SGD", "0");
    const float alone = train_two_bf16_epochs(default_context, 47, cosine);
    CHECK(cuda_backend_op_paths(default_context->backend()).fused_sgd_grouped == 0);
    CHECK(std::isfinite(grouped));
    CHECK(grouped == alone);

    // Steps that overflow: the grouped launch's finish must skip, back the scale off and count as
    // finish_step does.
    auto overflowing = cuda_context_under("MPTRAIN_CUDA_GROUPED_SGD", "1");
    const OverflowingRun grouped_overflow = train_two_fp16_epochs_from_overflow(overflowing, 57);
    CHECK(cuda_backend_op_paths(overflowing->backend()).steps_finished_by_update > 0);
    check_same_overflow_run(
        grouped_overflow, train_two_fp16_epochs_from_overflow(cuda_context_under("MPTRAIN_CUDA_GROUPED_SGD", "0"), 57));
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

#else

TEST_CASE("the CUDA fast-path checks need a build with the CUDA backend") {
    SKIP_WITHOUT_GPU();  // fails under MPTRAIN_REQUIRE_GPU=1, skips otherwise
}

#endif
