// test_cuda_fast_paths: the switches of the updates, each trained against the default: plain SGD's
// gradient into the masters, fused SGD at 3 blocks an SM and compiled for 32 rows, by bulk copies
// (with no gradient scratch planned), and grouped.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_fused_sgd.cuh"
#include "backend/cuda/cuda_fused_sgd_bulk_copy.cuh"
#include "fast_paths/harness.h"

using namespace mpt;
using namespace mpt::testing;
using namespace mpt::testing::fast_paths;

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

#endif  // MPTRAIN_WITH_CUDA
