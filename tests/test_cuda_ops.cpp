// The CUDA backend against the CPU reference backend, op by op, for fp32, fp16 and bf16: fresh
// random inputs each run, outputs poisoned (NaN) before each run, results compared with a
// normalised error bound per dtype. Then whole training runs: GPU vs CPU from the same seed, an
// injected overflow, and zero device allocations and host syncs in steady-state steps. Every GPU
// case skips with a message when no CUDA device is present; the comparison harness itself is
// checked CPU against CPU so it is exercised on every machine.
//
// One program, its cases by op in tests/cuda_ops/ (dense layers, loss heads, updates, the ops around
// a step, whole training runs) over a shared harness (cuda_ops/harness.h); here the cases that run
// everywhere and those of the backend as a whole (its description, misuse, the GEMM workspace).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/head_layer_case.h"
#include "core/context.h"
#include "core/error.h"
#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
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

}  // namespace

// ---- cases that run everywhere --------------------------------------------------------------------

TEST_CASE("cuda_device_count never throws, and a CUDA context without a device is reported unavailable") {
    int count = -1;
    CHECK_NOTHROW(count = cuda_device_count());
    CHECK(count >= 0);
    if (count > 0) return;
    try {
        make_context(MPT_BACKEND_CUDA);
        FAIL("a CUDA context was created without a device");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_BACKEND_UNAVAILABLE);
    }
    auto context = make_context(MPT_BACKEND_AUTO);  // AUTO falls back to the CPU
    CHECK(context->backend().kind() == BackendKind::cpu);
}

TEST_CASE("the CPU's dense_backward_data takes the maxima of dZ_prev and A_prev that max_abs would give") {
    auto cpu = make_cpu();
    for (DType dtype : kDTypes) check_backward_data_maxima(*cpu, dtype, true);
}

TEST_CASE("the op comparison harness agrees CPU against CPU") {
    auto reference = make_cpu();
    auto candidate = make_cpu();
    compare_dense_forward_cases(*reference, *candidate);
    compare_dense_backward_data_cases(*reference, *candidate);
    compare_dense_update_cases(*reference, *candidate);
    compare_loss_head_cases(*reference, *candidate);
    compare_gather(*reference, *candidate, true, DType::bf16);
    compare_gather(*reference, *candidate, false, DType::fp16, true);
    compare_max_abs(*reference, *candidate);
    compare_decide_update(*reference, *candidate);
    compare_finish_step(*reference, *candidate);
    compare_clip_factor(*reference, *candidate);
    compare_weight_averaging(*reference, *candidate);
    compare_dropout(*reference, *candidate);
    compare_conversions(*reference, *candidate);
    compare_head_layer_cases(*reference, *candidate, kHeadLayerMaxBlocks);
}

TEST_CASE("the CPU's gradient norm from the batch is the norm of the gradients its updates write") {
    auto cpu = make_cpu();
    compare_clip_paths(*cpu);
}

// The measure itself: poison and non-finite results fail it, an infinity both sides hold does not
// (fp16 gradients both backends overflow; a 0.1% chance per run of the NaN-logit tanh case).
TEST_CASE("the normalised error fails poison and stray infinities, not infinities both sides hold") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(normalised_error({3.0f, 4.0f}, {3.0f, 4.0f}) == 0.0);
    CHECK(normalised_error({3.0f, 4.0f + 5e-4f}, {3.0f, 4.0f}) == doctest::Approx(1e-4).epsilon(1e-3));
    CHECK(normalised_error({3.0f, -inf, 4.0f}, {3.0f, -inf, 4.0f}) == 0.0);
    CHECK(normalised_error({3.0f, -inf, 4.0f + 5e-4f}, {3.0f, -inf, 4.0f}) == doctest::Approx(1e-4).epsilon(1e-3));
    CHECK(std::isinf(normalised_error({3.0f, inf}, {3.0f, 4.0f})));
    CHECK(std::isinf(normalised_error({3.0f, nan}, {3.0f, 4.0f})));
    CHECK_FALSE(normalised_error({3.0f, inf}, {3.0f, -inf}) <= 1.0);
    CHECK_FALSE(normalised_error({3.0f, 4.0f}, {3.0f, inf}) <= 1.0);
    CHECK_FALSE(normalised_error({3.0f, nan}, {3.0f, nan}) <= 1.0);
}

// ---- GPU cases ------------------------------------------------------------------------------------

TEST_CASE("the CUDA backend describes its device and sizes its storage") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    CHECK(cuda->kind() == BackendKind::cuda);
    CHECK(cuda->device_name().find("cuda:0") == 0);
    CHECK(cuda->storage_size(DType::fp32) == 4);
    CHECK(cuda->storage_size(DType::fp16) == 2);
    CHECK(cuda->storage_size(DType::bf16) == 2);
    CHECK(cuda->relu_mask_bytes(32, 3000) == 32 * 3072 / 8);
    const DType preferred = cuda->preferred_compute_dtype();
    CHECK((preferred == DType::bf16 || preferred == DType::fp16));
}

TEST_CASE("misaligned operands are an error, not a crash") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    Buffer input(*cuda, 64 * 64 * 2 + 64), weights(*cuda, 64 * 64 * 2), bias(*cuda, 64 * 2), output(*cuda, 64 * 64 * 2);
    DenseForwardArgs args{};
    args.input = static_cast<char*>(input.data()) + 2;
    args.weights = weights.data();
    args.bias = bias.data();
    args.output = output.data();
    args.rows = 64;
    args.in_features = 64;
    args.out_features = 64;
    args.valid_out = 64;
    args.activation = Activation::relu;
    args.compute_dtype = args.bias_dtype = args.output_dtype = DType::bf16;
    // Refused with INVALID_ARGUMENT and a message naming the alignment wanted.
    auto check_refused = [&](const char* alignment) {
        CAPTURE(alignment);
        try {
            cuda->dense_forward(args);
            FAIL("misaligned memory was accepted");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(std::string(error.what()).find(alignment) != std::string::npos);
        }
    };
    check_refused("16-byte");
    // cuBLASLt wants its workspace 256-byte aligned.
    args.input = input.data();
    const WorkspaceBuffer workspace(*cuda);
    args.workspace = GemmWorkspace{static_cast<char*>(workspace.buffer.data()) + 16, workspace.bytes - 256};
    check_refused("256-byte");
    args.workspace = workspace.workspace();
    cuda->dense_forward(args);  // the backend is still usable
    cuda->scheduler().synchronize();
}

// An empty layer reaches no kernel (the fused SGD kernel's grid would have no column strips).
TEST_CASE("a dense_update of an empty layer is an error, not a failed launch") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    Buffer masters(*cuda, 256), state(*cuda, sizeof(TrainState)), gradient(*cuda, 256);
    DenseUpdateArgs args{};
    args.output_grad = gradient.data();
    args.input = gradient.data();
    args.weights = static_cast<float*>(masters.data());
    args.bias = static_cast<float*>(masters.data());
    args.state = static_cast<const TrainState*>(state.data());
    args.rows = 32;
    args.in_features = 0;
    args.out_features = 16;
    args.compute_dtype = DType::bf16;
    for (int64_t in_features : {int64_t{0}, int64_t{-3}}) {
        args.in_features = in_features;
        try {
            cuda->dense_update(args, OptimizerConfig{});
            FAIL("an empty layer was accepted");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(std::string(error.what()).find("non-empty") != std::string::npos);
        }
    }
    cuda->scheduler().synchronize();  // nothing was launched that failed
}

TEST_CASE("the cuBLASLt workspace is planned into each executor's arena and charged to the context") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    const size_t workspace_bytes = context->backend().gemm_workspace_bytes();
    CHECK(workspace_bytes >= (size_t{4} << 20));
    auto model = make_mlp(context, 100);  // a few hundred KiB of parameters: far below the workspace
    const size_t before = context->memory().used();
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, config);
    const GemmWorkspace& workspace = trainer.executor().gemm_workspace();
    CHECK(workspace.bytes == workspace_bytes);
    REQUIRE(workspace.data != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(workspace.data) % 256 == 0);
    CHECK(context->memory().used() - before >= workspace_bytes);
}

TEST_CASE("a memory budget without room for the cuBLASLt workspace gives a trainer without one, which trains") {
    SKIP_WITHOUT_GPU();
    ContextConfig config;
    config.backend = MPT_BACKEND_CUDA;
    config.threads = 2;
    config.memory_budget = size_t{2} << 20;  // the small MLP's arenas fit; 4 or 32 MiB of workspace do not
    auto context = std::make_shared<Context>(config);
    REQUIRE(context->backend().gemm_workspace_bytes() > config.memory_budget);
    auto model = make_mlp(context, 100);
    const SyntheticData data = synthetic_data(256, 100, 8);
    auto dataset = to_dataset(context, data);
    TrainerConfig trainer_config;
    trainer_config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, trainer_config);
    CHECK(trainer.executor().gemm_workspace().bytes == 0);
    CHECK(trainer.executor().gemm_workspace().data == nullptr);
    const std::vector<float> before = master_block(*model);
    trainer.fit(*dataset, 2, 32, true);
    CHECK(master_block(*model) != before);
    CHECK(std::isfinite(trainer.evaluate(*dataset, 64).loss));
}
