// The C API as a user drives it, on the CUDA backend (libmptrain.so only). This file: model files
// cross backends, evaluate / predict agree, what auto chooses on the device, and the every-switch
// run's list; the same program's other cases, by subject, are in tests/cuda_api/ (checkpoints and
// resumption, the trainer's options against the CPU, progress callbacks, bad input).
// MPTRAIN_CUDA_API_TEST_BACKEND=cpu runs the same cases on the CPU, so CI checks their logic on every
// machine; without a usable GPU each CUDA case skips with the reason, or fails with it where
// MPTRAIN_REQUIRE_GPU is set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>  // environ
#include <nlohmann/json.hpp>

#include "cuda_api/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/environment_setting.h"
#include "support/normalised_error.h"
#include "support/temp_dir.h"

using namespace mpt_test::cuda_api;

TEST_CASE("a model trained and saved on the backend loads into CPU and same-backend contexts with identical weights and predictions") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    const Blobs held_out = make_blobs(60, 77);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(precision);
        Session session(backend, 96, precision, MPT_OPTIMIZER_SGD, 0.1f);
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 5, 16, 1));
        const std::string path = (directory.path / ("model-" + std::to_string(precision) + ".safetensors")).string();
        REQUIRE_OK(mpt_model_save(session.model, path.c_str()));

        mpt_context_t* cpu = new_context(MPT_BACKEND_CPU);
        mpt_context_t* same = new_context(backend);
        mpt_model_t* on_cpu = nullptr;
        mpt_model_t* on_same = nullptr;
        REQUIRE_OK(mpt_model_load(cpu, path.c_str(), &on_cpu));
        REQUIRE_OK(mpt_model_load(same, path.c_str(), &on_same));

        const std::vector<float> trained_weights = session.weights();
        for (mpt_model_t* loaded : {on_cpu, on_same}) {
            int64_t layers = 0, inputs = 0, outputs = 0, parameters = 0;
            REQUIRE_OK(mpt_model_get_layer_count(loaded, &layers));
            REQUIRE_OK(mpt_model_get_input_features(loaded, &inputs));
            REQUIRE_OK(mpt_model_get_output_features(loaded, &outputs));
            REQUIRE_OK(mpt_model_get_parameter_count(loaded, &parameters));
            CHECK(layers == 2);
            CHECK(inputs == kFeatures);
            CHECK(outputs == kClasses);
            CHECK(parameters == 8 * kFeatures + 8 + kClasses * 8 + kClasses);
            // The file holds the fp32 masters: they come back exactly, on either backend.
            CHECK(same_bits(weights_of(loaded, kFeatures, kSmallModel), trained_weights));
        }

        const int64_t rows = held_out.rows();
        const std::vector<float> reference =
            reference_predict(layers_of(session.model, kFeatures, kSmallModel), held_out.x, rows);
        const std::vector<float> trained = model_predict(session.model, held_out.x, rows, kClasses);
        const std::vector<float> from_cpu = model_predict(on_cpu, held_out.x, rows, kClasses);
        const std::vector<float> from_same = model_predict(on_same, held_out.x, rows, kClasses);
        CHECK(normalised_error(trained, reference) <= kFp32Bound);
        CHECK(normalised_error(from_cpu, trained) <= kFp32Bound);
        CHECK(normalised_error(from_same, trained) <= kFp32Bound);
        MESSAGE(backend_name(backend) << ", trained in precision " << precision << ": the CPU-loaded model predicts "
                                      << std::string(same_bits(from_cpu, trained) ? "bit-identically" : "not bit-identically")
                                      << " (normalised error " << normalised_error(from_cpu, trained)
                                      << "), the same-backend one "
                                      << std::string(same_bits(from_same, trained) ? "bit-identically" : "not bit-identically")
                                      << " (" << normalised_error(from_same, trained) << "); against double precision "
                                      << normalised_error(trained, reference));
        // One backend, the same kernels: bit-identical (checkpoint/model_file_cases.cpp).
        if (backend == MPT_BACKEND_CPU) {
            CHECK(same_bits(from_cpu, trained));
            CHECK(same_bits(from_same, trained));
        }
        // The trained model classifies the held-out blobs (the predictions are not just close, but useful).
        int64_t correct = 0;
        for (int64_t r = 0; r < rows; ++r) correct += argmax(&from_cpu[static_cast<size_t>(r * kClasses)], kClasses) == held_out.y[r];
        CHECK(correct >= rows * 9 / 10);

        mpt_model_destroy(on_same);
        mpt_model_destroy(on_cpu);
        mpt_context_destroy(same);
        mpt_context_destroy(cpu);
    }
}

TEST_CASE("evaluate and trainer predict agree with model predict on the same rows") {
    BACKEND_OR_SKIP(backend);
    // 200 rows: one batch for evaluate and for predict (which batches by max(last batch, 256)), so
    // both run the same forward pass on the same GEMM shapes. Spread wide enough that some rows
    // are misclassified, so that the accuracies compared are not all 1.
    const Blobs test = make_blobs(200, 99, 1.5);
    const int64_t rows = test.rows();
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(precision);
        Session session(backend, 96, precision, MPT_OPTIMIZER_SGD, 0.1f);
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 3, 16, 1));
        mpt_dataset_t* dataset = new_dataset(session.context, test);
        float loss = -1.0f, accuracy = -1.0f;
        REQUIRE_OK(mpt_trainer_evaluate(session.trainer, dataset, rows, &loss, &accuracy));
        const std::vector<float> low = trainer_predict(session.trainer, test.x, rows, kClasses);
        const std::vector<float> exact = model_predict(session.model, test.x, rows, kClasses);
        const std::vector<float> reference =
            reference_predict(layers_of(session.model, kFeatures, kSmallModel), test.x, rows);

        // Rows whose top two probabilities (in the trainer's precision) lie within the rounding of the
        // comparison may flip their class between fp32 and the trainer's precision, and on a GPU
        // between evaluate and predict should their inputs reach the device by different paths
        // (gather versus host upload). Such rows are counted and excused.
        const double margin = precision == MPT_PRECISION_FP32 ? kFp32Bound : 8 * kBf16Roundoff;
        int64_t correct = 0, correct_exact = 0, near_ties = 0;
        double exact_loss = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
            const float* p = &low[static_cast<size_t>(r * kClasses)];
            const float* q = &exact[static_cast<size_t>(r * kClasses)];
            correct += argmax(p, kClasses) == test.y[r];
            correct_exact += argmax(q, kClasses) == test.y[r];
            std::vector<float> sorted(p, p + kClasses);
            std::sort(sorted.begin(), sorted.end());
            near_ties += sorted[kClasses - 1] - sorted[kClasses - 2] <= margin;
            exact_loss -= std::log(std::max(static_cast<double>(q[test.y[r]]), 1e-30));
        }
        exact_loss /= static_cast<double>(rows);
        const float predicted_accuracy = static_cast<float>(static_cast<double>(correct) / static_cast<double>(rows));
        MESSAGE(backend_name(backend) << ", precision " << precision << ": evaluate accuracy " << accuracy << ", loss "
                                      << loss << "; from trainer predict " << predicted_accuracy << ", from model "
                                      << "predict " << static_cast<double>(correct_exact) / static_cast<double>(rows)
                                      << ", loss " << exact_loss << "; near ties " << near_ties
                                      << "; trainer vs model predict: normalised " << normalised_error(low, exact)
                                      << ", largest " << largest_difference(low, exact));
        CHECK(accuracy > 0.6f);  // chance is 1/3; the blobs overlap at this spread
        if (backend == MPT_BACKEND_CPU || near_ties == 0)
            CHECK(predicted_accuracy == accuracy);  // on the CPU the same code path, bit for bit
        else
            CHECK(std::fabs(predicted_accuracy - accuracy) <= static_cast<double>(near_ties) / static_cast<double>(rows));
        // fp32 against the trainer's precision: rows within the rounding of a tie may flip.
        CHECK(std::llabs(correct_exact - correct) <= near_ties);
        for (int64_t r = 0; r < rows; ++r) {
            double sum = 0.0;
            for (int64_t c = 0; c < kClasses; ++c) sum += low[static_cast<size_t>(r * kClasses + c)];
            CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));  // the softmax head runs in fp32
        }
        CHECK(normalised_error(exact, reference) <= kFp32Bound);
        if (precision == MPT_PRECISION_FP32) {
            CHECK(normalised_error(low, exact) <= kFp32Bound);
            // evaluate's loss from the logits, against -log p from fp32 probabilities: the same within
            // fp32 rounding of well-classified rows (p near 1, -log p near 1 - p).
            CHECK(loss == doctest::Approx(exact_loss).epsilon(1e-3).scale(1e-4));
        } else {
            // Probabilities from logits with a relative error of a few bf16 roundoffs (training/prediction_cases.cpp).
            CHECK(largest_difference(low, exact) <= 8 * kBf16Roundoff);
            CHECK(loss == doctest::Approx(exact_loss).epsilon(8 * kBf16Roundoff).scale(0.1));
        }
        mpt_dataset_destroy(dataset);
    }
}

namespace {

nlohmann::json described(const mpt_context_t* context) {
    size_t length = 0;
    REQUIRE_OK(mpt_context_describe(context, nullptr, 0, &length));
    std::vector<char> text(length + 1);
    REQUIRE_OK(mpt_context_describe(context, text.data(), text.size(), &length));
    return nlohmann::json::parse(std::string(text.data(), length));
}

// The compute capability a context's description reports ("7.5"), as major * 10 + minor.
int compute_capability_of(const nlohmann::json& description) {
    const std::string capability = description.at("compute_capability").get<std::string>();
    const size_t dot = capability.find('.');
    REQUIRE(dot != std::string::npos);
    return 10 * std::stoi(capability.substr(0, dot)) + std::stoi(capability.substr(dot + 1));
}

int described_compute_capability(const mpt_context_t* context) { return compute_capability_of(described(context)); }

}  // namespace

// The rule for `auto` on a GPU: bf16 where its tensor cores have it (8.0 and up), else fp16,
// which needs dynamic loss scaling for its range. Run on each emulated capability as well as on the
// device check's GPU, so that the seed's RTX 2060 (7.5) path trains somewhere.
TEST_CASE(
    "auto on a GPU is mixed-bf16 from compute capability 8.0, below it mixed-fp16 with dynamic loss scaling, and "
    "trains") {
    BACKEND_OR_SKIP(backend);
    if (backend != MPT_BACKEND_CUDA) {
        MESSAGE("the CPU's auto is test_autocast's and test_training's");
        return;
    }
    mpt_context_t* context = new_context(backend);
    const int capability = described_compute_capability(context);
    const mpt_precision expected = capability >= 80 ? MPT_PRECISION_MIXED_BF16 : MPT_PRECISION_MIXED_FP16;
    mpt_precision resolved = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_context_resolve_precision(context, MPT_PRECISION_AUTO, &resolved));
    CHECK(resolved == expected);

    const Blobs blobs = make_blobs(192, 31);
    mpt_model_t* model = new_model(context, kFeatures, kSmallModel);
    mpt_dataset_t* dataset = new_dataset(context, blobs);
    mpt_trainer_t* trainer = new_trainer(model, MPT_PRECISION_AUTO, MPT_OPTIMIZER_SGD, 0.1f);
    mpt_precision actual = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &actual));
    CHECK(actual == expected);
    float scale = 0.0f;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &scale, nullptr, nullptr));
    // Dynamic scaling starts at 2^15; without scaling the scale is 1.
    CHECK(scale == (expected == MPT_PRECISION_MIXED_FP16 ? 32768.0f : 1.0f));

    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 6, 16, 1));  // 12 steps an epoch
    float loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, &loss, &accuracy));
    int64_t skipped = -1;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &scale, nullptr, &skipped));
    const std::string chosen = actual == MPT_PRECISION_MIXED_BF16   ? "mixed-bf16"
                               : actual == MPT_PRECISION_MIXED_FP16 ? "mixed-fp16"
                                                                    : "neither mixed precision";
    MESSAGE("compute capability " << capability << ": auto is " << chosen << "; after 6 epochs loss " << loss
                                  << ", accuracy " << accuracy << ", loss scale " << scale << ", skipped steps "
                                  << skipped);
    CHECK(skipped == 0);
    CHECK(accuracy >= 0.9f);  // well-separated blobs: fp32 on the CPU reaches 1
    mpt_trainer_destroy(trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}

// ctest runs this program once more with every switch that is off by default turned on through the
// environment (cuda_api_emulated_every_switch, which sets MPTRAIN_TEST_EVERY_SWITCH): this case makes
// sure that entry's list names them all, so that a switch added later is trained there too. A default
// context is made with every MPTRAIN_CUDA_* variable unset, and each switch its description has off
// must be on in a context made under the entry's environment.
TEST_CASE("under the every-switch run, each switch a default context has off is on") {
    BACKEND_OR_SKIP(backend);
    if (backend != MPT_BACKEND_CUDA || std::getenv("MPTRAIN_TEST_EVERY_SWITCH") == nullptr) {
        MESSAGE("only in the every-switch run (MPTRAIN_TEST_EVERY_SWITCH) on the CUDA backend");
        return;
    }
    mpt_context_t* context = new_context(backend);
    const nlohmann::json asked = described(context);
    mpt_context_destroy(context);
    if (compute_capability_of(asked) < 90) {
        MESSAGE("below compute capability 9.0 some switches stay off whatever is asked");
        return;
    }
    std::vector<std::string> variables;
    for (char** entry = environ; *entry != nullptr; ++entry) {
        const std::string name(*entry, std::strcspn(*entry, "="));
        if (name.rfind("MPTRAIN_CUDA_", 0) == 0) variables.push_back(name);
    }
    nlohmann::json defaults;
    {
        std::vector<std::unique_ptr<mpt::testing::EnvironmentSetting>> unset;
        for (const std::string& variable : variables)
            unset.push_back(std::make_unique<mpt::testing::EnvironmentSetting>(variable.c_str(), nullptr));
        mpt_context_t* plain = new_context(backend);
        defaults = described(plain);
        mpt_context_destroy(plain);
    }
    int off_by_default = 0;
    for (const auto& [name, on] : defaults.at("switches").items()) {
        if (on.get<bool>()) continue;
        ++off_by_default;
        CAPTURE(name);
        CHECK(asked.at("switches").at(name).get<bool>());
    }
    MESSAGE(off_by_default << " switches are off by default; the every-switch run has them on");
    CHECK(off_by_default > 0);
}
