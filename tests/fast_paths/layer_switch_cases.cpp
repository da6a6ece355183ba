// test_cuda_fast_paths: the switches of the layers' kernels, each trained against the default:
// split K only for small outputs, ReLU's derivative from the outputs, the last layer in its head's
// cluster (and the seed MLP's in a cluster of 8), and the small-batch forward and backward kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/head_layer_case.h"
#include "fast_paths/harness.h"

using namespace mpt;
using namespace mpt::testing;
using namespace mpt::testing::fast_paths;

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

#endif  // MPTRAIN_WITH_CUDA
