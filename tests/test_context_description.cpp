// mpt_context_describe: the JSON object that says what a context runs on and how. Its buffer contract
// (length first, then a buffer of at least length + 1 bytes, SHAPE_MISMATCH and nothing written when
// it is smaller), its members against what the other calls and the log say, and, on a GPU, that the
// CUDA members report what the backend did (graphs captured and replayed, ops on each path) and the
// switches as they are, not as the environment asked.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;

std::string describe(const mpt_context_t* context) {
    size_t length = 0;
    REQUIRE_OK(mpt_context_describe(context, nullptr, 0, &length));
    std::vector<char> text(length + 1, '\x7f');
    size_t written = 0;
    REQUIRE_OK(mpt_context_describe(context, text.data(), text.size(), &written));
    REQUIRE(written == length);
    REQUIRE(text[length] == '\0');
    return std::string(text.data(), length);
}

nlohmann::json described(const mpt_context_t* context) {
    const std::string text = describe(context);
    INFO(text);
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    REQUIRE_FALSE(parsed.is_discarded());
    REQUIRE(parsed.is_object());
    return parsed;
}

// The device the context's INFO line names ("mptrain <version> on <device>").
struct LoggedDevice {
    std::string device;
};
void remember_device(mpt_log_level level, const char* message, void* user_data) {
    const std::string text = message;
    const size_t on = text.find(" on ");
    if (level == MPT_LOG_LEVEL_INFO && text.rfind("mptrain ", 0) == 0 && on != std::string::npos)
        static_cast<LoggedDevice*>(user_data)->device = text.substr(on + 4);
}

// A CUDA context, or nullptr (the case then skips, or fails where MPTRAIN_REQUIRE_GPU is set).
mpt_context_t* cuda_context_or_skip() {
    if (mpt_cuda_device_count() > 0) return mpt_test::create_context(MPT_BACKEND_CUDA, 3);
    if (mpt_test::gpu_required()) FAIL("MPTRAIN_REQUIRE_GPU is set, but no CUDA device is usable");
    MESSAGE("skipped: no CUDA device");
    return nullptr;
}

}  // namespace

TEST_CASE("the description's length comes first; a buffer one byte short is refused and left as it was") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 1);
    size_t length = 0;
    REQUIRE_OK(mpt_context_describe(context, nullptr, 0, &length));
    REQUIRE(length > 2);

    std::vector<char> short_buffer(length, 'x');
    size_t untouched = 12345;
    CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_context_describe(context, short_buffer.data(), length, &untouched));
    CHECK(untouched == 12345);
    CHECK(std::string(short_buffer.begin(), short_buffer.end()) == std::string(length, 'x'));

    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_describe(context, short_buffer.data(), length, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_context_describe(nullptr, nullptr, 0, &untouched));

    // Exactly length + 1 bytes take it, and describing again changes nothing.
    const std::string first = describe(context);
    CHECK(first.size() == length);
    CHECK(describe(context) == first);
    mpt_context_destroy(context);
}

TEST_CASE("a CPU context's description names its version, backend, device, threads and memory as the other calls do") {
    LoggedDevice logged;
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_CPU));
    REQUIRE_OK(mpt_context_options_set_threads(options, 2));
    REQUIRE_OK(mpt_context_options_set_memory_budget(options, size_t{3} << 30));
    REQUIRE_OK(mpt_context_options_set_log_callback(options, &remember_device, &logged));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);

    const nlohmann::json before = described(context);
    CHECK(before.at("version") == std::string(mpt_version()));
    CHECK(before.at("backend") == "cpu");
    REQUIRE_FALSE(logged.device.empty());
    CHECK(before.at("device") == logged.device);
    CHECK(before.at("auto_fallback") == "");
    CHECK(before.at("threads") == 2);
    CHECK(before.at("memory_budget_bytes") == (uint64_t{3} << 30));
    CHECK_FALSE(before.at("gemm_library").get<std::string>().empty());
    const std::string amx = before.at("amx").get<std::string>();
    CHECK((amx == "supported" || amx == "refused by Linux" || amx == "absent"));
    const std::string bf16_gemm = before.at("bf16_gemm").get<std::string>();
    CHECK((bf16_gemm == "amx tiles" || bf16_gemm == "avx512-bf16 dot products" || bf16_gemm == "emulated in fp32"));
    const std::string fp16_gemm = before.at("fp16_gemm").get<std::string>();
    CHECK((fp16_gemm == "amx tiles" || fp16_gemm == "emulated in fp32"));  // dot products take bf16 only
    CHECK((fp16_gemm == "amx tiles") == (bf16_gemm == "amx tiles"));
    const std::string small_gemm = before.at("small_gemm").get<std::string>();
    CHECK((small_gemm == "avx512" || small_gemm == "avx512f" || small_gemm == "avx2" || small_gemm == "none"));

    // A trainer's arena shows in the memory members as in mpt_context_get_memory.
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, 64, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 256, MPT_ACTIVATION_RELU));
    REQUIRE_OK(mpt_model_add_dense(model, 4, MPT_ACTIVATION_SOFTMAX));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, nullptr, &trainer));
    size_t used = 0, peak = 0;
    REQUIRE_OK(mpt_context_get_memory(context, &used, &peak));
    const nlohmann::json with_trainer = described(context);
    CHECK(used > before.at("memory_used_bytes").get<size_t>());
    CHECK(with_trainer.at("memory_used_bytes") == used);
    CHECK(with_trainer.at("memory_peak_bytes") == peak);

    mpt_trainer_destroy(trainer);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

TEST_CASE("a CUDA context's description counts graphs and each path's ops, and names the switches as they are") {
    mpt_context_t* probe = cuda_context_or_skip();
    if (!probe) return;
    const nlohmann::json fresh = described(probe);
    mpt_context_destroy(probe);
    CHECK(fresh.at("backend") == "cuda");
    const std::string capability = fresh.at("compute_capability").get<std::string>();
    CHECK(fresh.at("device").get<std::string>().find("compute capability " + capability) != std::string::npos);
    CHECK(fresh.at("multiprocessors").get<int>() > 0);
    for (const char* group : {"switches", "graphs", "ops", "gemm"}) REQUIRE(fresh.at(group).is_object());
    CHECK(fresh.at("graphs").at("captures") == 0);
    CHECK(fresh.at("ops").at("fused_sgd") == 0);

    // Dependent launch asked for through the environment: on from compute capability 9.0 (where the
    // build has code for it, as the device check's sm_90 build has), off below, whatever was asked.
    BlobTrainerSetup setup;
    setup.backend = MPT_BACKEND_CUDA;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    struct AskForDependentLaunch {  // while the context is created, however that ends
        AskForDependentLaunch() { setenv("MPTRAIN_CUDA_DEPENDENT_LAUNCH", "1", 1); }
        ~AskForDependentLaunch() { unsetenv("MPTRAIN_CUDA_DEPENDENT_LAUNCH"); }
    };
    auto asked = std::make_unique<AskForDependentLaunch>();
    BlobTrainer trainer(setup);
    asked.reset();
    const bool hopper = std::atoi(capability.c_str()) >= 9;
    CHECK(described(trainer.context).at("switches").at("dependent_launch") == hopper);

    const mpt_test::Blobs blobs = mpt_test::make_blobs(96, 5);
    mpt_test::take_blob_steps(trainer, blobs, 0, 6, 16);
    const nlohmann::json trained = described(trainer.context);
    INFO(trained.dump());
    const nlohmann::json& graphs = trained.at("graphs");
    // The first sighting of a step runs eagerly, the second is captured, the rest replay its graph.
    CHECK(graphs.at("captures").get<uint64_t>() >= 1);
    CHECK(graphs.at("replays").get<uint64_t>() >= 3);
    CHECK(graphs.at("refusals") == 0);
    CHECK(graphs.at("last_refusal") == "");
    // The host's part of the replayed steps: some issuing and a launch each, measured (not zero), the
    // mean launch never below the shortest. A fresh context has replayed nothing: zeros.
    CHECK(fresh.at("graphs").at("replay_issue_ns_mean") == 0);
    CHECK(fresh.at("graphs").at("launch_ns_shortest") == 0);
    CHECK(graphs.at("replay_issue_ns_mean").get<int64_t>() > 0);
    CHECK(graphs.at("launch_ns_shortest").get<int64_t>() > 0);
    CHECK(graphs.at("launch_ns_mean").get<int64_t>() >= graphs.at("launch_ns_shortest").get<int64_t>());
    CHECK(trained.at("switches").at("graphs") == true);
    // The dense ops' paths are counted as each op is issued (planned), replayed steps' too: each of
    // the two layers' forward once a step. The folds are counted where a recorded task is executed
    // (its eager first sighting, its capture), never per replay.
    const nlohmann::json& ops = trained.at("ops");
    const auto count = [&](const char* path) { return ops.at(path).get<uint64_t>(); };
    CHECK(count("forward_fused") + count("forward_unfused") == 2 * 6);
    CHECK(count("fused_sgd") + count("weight_gradient_fused") + count("weight_gradient_unfused") == 2 * 6);
    CHECK(count("max_abs_deciding") >= 1);
    CHECK(count("max_abs_deciding") < 6);
    if (hopper) CHECK(trained.at("ops").at("dependent_launches").get<uint64_t>() > 0);
    CHECK(trained.at("memory_used_bytes").get<uint64_t>() > 0);
}
