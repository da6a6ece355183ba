// The context through the C++ wrapper: describe()'s JSON, read with nlohmann's parser (not the
// library's writer), against what the context was created with and what its other getters report.

#include "wrapper_test_support.h"

#include <nlohmann/json.hpp>

TEST_CASE("describe() of a CPU context is one compact JSON object naming the cpu backend, its device and threads") {
    const mptrain::Context context(
        mptrain::ContextOptions().backend(MPT_BACKEND_CPU).threads(1).memory_budget(size_t{1} << 30));
    const std::string text = context.describe();
    const auto description = nlohmann::ordered_json::parse(text);
    REQUIRE(description.is_object());
    // No whitespace and nothing nlohmann would write otherwise: the text is its own compact dump.
    CHECK(description.dump() == text);

    CHECK(description.at("version") == mptrain::version());
    CHECK(description.at("backend") == "cpu");
    CHECK(!description.at("device").get<std::string>().empty());
    CHECK(description.at("auto_fallback") == "");  // the CPU was asked for, not fallen back to
    CHECK(description.at("memory_budget_bytes") == size_t{1} << 30);
    const auto [used, peak] = context.memory();
    CHECK(description.at("memory_used_bytes") == used);
    CHECK(description.at("memory_peak_bytes") == peak);

    CHECK(description.at("threads") == 1);
    CHECK(!description.at("gemm_library").get<std::string>().empty());
    const std::string amx = description.at("amx");
    CHECK((amx == "supported" || amx == "refused by Linux" || amx == "absent"));
    const std::string small_gemm = description.at("small_gemm");
    CHECK((small_gemm == "avx512" || small_gemm == "avx512f" || small_gemm == "avx2" || small_gemm == "none"));
    CHECK(!description.contains("device_index"));  // a CUDA member
}

TEST_CASE("describe() gives the same text twice on an unused context; training moves its memory counters to memory()'s") {
    auto context = cpu_context();
    const std::string first = context.describe();
    CHECK(context.describe() == first);

    auto model = mlp(context);
    auto data = blobs(context, 60, 11);
    mptrain::Trainer trainer(model, adam());
    trainer.fit(data, 1, 20);
    const auto description = nlohmann::json::parse(context.describe());
    const auto [used, peak] = context.memory();
    REQUIRE(peak > 0);
    CHECK(description.at("memory_used_bytes") == used);
    CHECK(description.at("memory_peak_bytes") == peak);
    CHECK(description.at("backend") == "cpu");
}

TEST_CASE("describe() of a moved-from context throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const mptrain::Context owner = std::move(context);
    CHECK(status_of([&] { context.describe(); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(nlohmann::json::parse(owner.describe()).at("threads") == 1);
}
