// The C API as a user drives it, on the CUDA backend (libmptrain.so only): checkpoints resume, model
// files cross backends, bad input fails with the CPU's status and harms nothing, a progress callback
// cancels, and evaluate / predict agree. MPTRAIN_CUDA_API_TEST_BACKEND=cpu runs the same cases on the
// CPU, so CI checks this file's logic on every machine; without a usable GPU each CUDA case skips with
// the reason, or fails with it where MPTRAIN_REQUIRE_GPU is set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>  // environ
#include <nlohmann/json.hpp>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/environment_setting.h"
#include "support/normalised_error.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace {

// ---- helpers ---------------------------------------------------------------------------------


// Predictions of mpt_model_predict run in fp32 on every backend (CUBLAS_COMPUTE_32F on the GPU, no
// TF32), from the fp32 master weights whatever precision trained them. Two fp32 forward passes that
// differ only in summation order (another backend, another GEMM algorithm or epilogue) differ per
// dot product of K <= 16 terms by at most about K * 2^-24 = 1e-6 of sum |w x|; through two layers and
// the softmax (which moves a probability by at most its logit's error) that stays near 1e-6 of the
// outputs for the small logits of these models. 1e-4 leaves a margin of 100; a wrong weight, layout,
// activation or row gives errors of order 1.
constexpr double kFp32Bound = 1e-4;
// bf16 keeps 8 significant bits: unit roundoff 2^-8. training/prediction_cases.cpp bounds mixed-bf16
// probabilities within 8u of fp32 ones for models of this size.
constexpr double kBf16Roundoff = 1.0 / 256.0;
// A resumed run repeats the uninterrupted one's kernels on the same rows in the same order: on the
// CPU bit for bit; on a GPU only reductions whose order may vary between launches can differ, by a
// few fp32 ulps per step, which 30 Adam steps cannot grow anywhere near 1e-5.
constexpr double kResumeBound = 1e-5;

using mpt_test::gpu_required;

// MPTRAIN_CUDA_API_TEST_BACKEND: "cuda" (the default) or "cpu".
mpt_backend backend_under_test() {
    const char* value = std::getenv("MPTRAIN_CUDA_API_TEST_BACKEND");
    if (!value || *value == '\0' || std::strcmp(value, "cuda") == 0) return MPT_BACKEND_CUDA;
    if (std::strcmp(value, "cpu") == 0) return MPT_BACKEND_CPU;
    FAIL("MPTRAIN_CUDA_API_TEST_BACKEND must be \"cuda\" or \"cpu\", not \"" << std::string(value) << "\"");
    return MPT_BACKEND_AUTO;  // not reached: FAIL throws
}

// A std::string: doctest prints a char pointer as an address.
std::string backend_name(mpt_backend backend) { return backend == MPT_BACKEND_CPU ? "cpu" : "cuda"; }

// Why a CUDA context cannot be created here: its status and mpt_last_error().
std::string cuda_unavailable_reason() {
    mpt_context_options_t* options = nullptr;
    if (mpt_context_options_create(&options) != MPT_STATUS_OK) return std::string("options: ") + mpt_last_error();
    mpt_context_options_set_backend(options, MPT_BACKEND_CUDA);
    mpt_context_t* context = nullptr;
    const mpt_status status = mpt_context_create(options, &context);
    std::string reason = std::string(mpt_status_string(status)) + ": " + mpt_last_error();
    mpt_context_options_destroy(options);
    if (status == MPT_STATUS_OK) {
        reason = "mpt_cuda_device_count() is 0, yet a CUDA context was created";
        mpt_context_destroy(context);
    }
    return reason;
}

// The backend to run a case on, or AUTO when the case must return: CUDA without a usable device
// skips with the reason, or fails with it where MPTRAIN_REQUIRE_GPU is set.
mpt_backend backend_for_case() {
    const mpt_backend backend = backend_under_test();
    if (backend == MPT_BACKEND_CUDA && mpt_cuda_device_count() == 0) {
        const std::string reason = cuda_unavailable_reason();
        if (gpu_required()) FAIL("MPTRAIN_REQUIRE_GPU is set, but no CUDA device is usable: " << reason);
        MESSAGE("skipped: no CUDA device (" << reason << ")");
        return MPT_BACKEND_AUTO;
    }
    return backend;
}

#define BACKEND_OR_SKIP(name)                          \
    const mpt_backend name = backend_for_case();       \
    if (name == MPT_BACKEND_AUTO) return;              \
    CAPTURE(backend_name(name))

using mpt_test::Blobs;
using mpt_test::make_blobs;
using mpt_test::TestRng;
constexpr int64_t kFeatures = mpt_test::kBlobFeatures;
constexpr int32_t kClasses = mpt_test::kBlobClasses;

mpt_context_t* new_context(mpt_backend backend, uint64_t seed = 7) {
    mpt_context_t* context = mpt_test::create_context(backend, seed);
    mpt_backend actual = MPT_BACKEND_AUTO;
    REQUIRE_OK(mpt_context_get_backend(context, &actual));
    REQUIRE(actual == backend);
    return context;
}

struct LayerSpec {
    int64_t units;
    mpt_activation activation;
};

// 4 -> 8 relu -> 3 softmax.
const std::vector<LayerSpec> kSmallModel = {{8, MPT_ACTIVATION_RELU}, {kClasses, MPT_ACTIVATION_SOFTMAX}};

mpt_model_t* new_model(mpt_context_t* context, int64_t inputs, const std::vector<LayerSpec>& layers) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, inputs, &model));
    for (const LayerSpec& layer : layers) REQUIRE_OK(mpt_model_add_dense(model, layer.units, layer.activation));
    return model;
}

mpt_trainer_t* new_trainer(mpt_model_t* model, mpt_precision precision, mpt_optimizer optimizer, float learning_rate) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, precision));
    REQUIRE_OK(mpt_trainer_options_set_optimizer(options, optimizer));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, learning_rate));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    mpt_precision actual = MPT_PRECISION_AUTO;
    REQUIRE_OK(mpt_trainer_get_precision(trainer, &actual));
    REQUIRE((actual == precision || precision == MPT_PRECISION_AUTO));  // AUTO: the caller's to check
    return trainer;
}

mpt_dataset_t* new_dataset(mpt_context_t* context, const Blobs& blobs) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, blobs.x.data(), blobs.rows(), kFeatures, blobs.y.data(), kClasses, 1,
                                      &dataset));
    return dataset;
}

// One layer's fp32 master weights ([units, inputs], row-major) and bias.
struct LayerWeights {
    int64_t units = 0, inputs = 0;
    mpt_activation activation = MPT_ACTIVATION_LINEAR;
    std::vector<float> w, b;
};

std::vector<LayerWeights> layers_of(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<LayerWeights> layers;
    int64_t fan_in = inputs;
    for (size_t i = 0; i < specs.size(); ++i) {
        LayerWeights layer;
        layer.units = specs[i].units;
        layer.inputs = fan_in;
        layer.activation = specs[i].activation;
        layer.w.resize(static_cast<size_t>(layer.units * layer.inputs));
        layer.b.resize(static_cast<size_t>(layer.units));
        REQUIRE_OK(mpt_model_get_weights(model, static_cast<int64_t>(i), layer.w.data(), layer.units * layer.inputs,
                                         layer.b.data(), layer.units));
        fan_in = layer.units;
        layers.push_back(std::move(layer));
    }
    return layers;
}

// All weights and biases, concatenated.
std::vector<float> weights_of(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<float> all;
    for (const LayerWeights& layer : layers_of(model, inputs, specs)) {
        all.insert(all.end(), layer.w.begin(), layer.w.end());
        all.insert(all.end(), layer.b.begin(), layer.b.end());
    }
    return all;
}

// The forward pass in double precision from the definitions, sharing no code with the library.
std::vector<float> reference_predict(const std::vector<LayerWeights>& layers, const std::vector<float>& x, int64_t rows) {
    std::vector<float> out;
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> a(x.begin() + r * layers.front().inputs, x.begin() + (r + 1) * layers.front().inputs);
        for (const LayerWeights& layer : layers) {
            std::vector<double> z(static_cast<size_t>(layer.units));
            for (int64_t u = 0; u < layer.units; ++u) {
                double sum = layer.b[static_cast<size_t>(u)];
                for (int64_t i = 0; i < layer.inputs; ++i)
                    sum += static_cast<double>(layer.w[static_cast<size_t>(u * layer.inputs + i)]) * a[static_cast<size_t>(i)];
                z[static_cast<size_t>(u)] = sum;
            }
            switch (layer.activation) {
                case MPT_ACTIVATION_RELU: for (double& v : z) v = std::max(v, 0.0); break;
                case MPT_ACTIVATION_TANH: for (double& v : z) v = std::tanh(v); break;
                case MPT_ACTIVATION_SIGMOID: for (double& v : z) v = 1.0 / (1.0 + std::exp(-v)); break;
                default: FAIL("reference_predict covers the activations of the models it is used with"); break;
                case MPT_ACTIVATION_SOFTMAX: {
                    const double top = *std::max_element(z.begin(), z.end());
                    double total = 0.0;
                    for (double& v : z) total += (v = std::exp(v - top));
                    for (double& v : z) v /= total;
                    break;
                }
                case MPT_ACTIVATION_LINEAR: break;
            }
            a = std::move(z);
        }
        for (double v : a) out.push_back(static_cast<float>(v));
    }
    return out;
}

using mpt_test::normalised_error;

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double largest = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
        if (!(d <= largest)) largest = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
    }
    return largest;
}

using mpt_test::same_bits;

std::vector<float> model_predict(mpt_model_t* model, const std::vector<float>& x, int64_t rows, int64_t outputs) {
    std::vector<float> out(static_cast<size_t>(rows * outputs), -7.0f);
    REQUIRE_OK(mpt_model_predict(model, x.data(), rows, out.data(), rows * outputs));
    return out;
}

std::vector<float> trainer_predict(mpt_trainer_t* trainer, const std::vector<float>& x, int64_t rows, int64_t outputs) {
    std::vector<float> out(static_cast<size_t>(rows * outputs), -7.0f);
    REQUIRE_OK(mpt_trainer_predict(trainer, x.data(), rows, out.data(), rows * outputs));
    return out;
}

// The first largest class, as both backends' loss heads pick it.
int64_t argmax(const float* values, int64_t count) {
    int64_t best = 0;
    for (int64_t c = 1; c < count; ++c)
        if (values[c] > values[best]) best = c;
    return best;
}

// A directory under /tmp, removed with its files at the end of the scope.
struct TempDir : mpt_test::TempDir {
    TempDir() : mpt_test::TempDir("mptrain-cuda-api") {}
};

// A context on `backend`, the 4-8-3 model, a blob dataset and a trainer; destroyed in reverse.
struct Session {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;
    Blobs blobs;

    Session(mpt_backend backend, int64_t rows, mpt_precision precision = MPT_PRECISION_FP32,
            mpt_optimizer optimizer = MPT_OPTIMIZER_SGD, float learning_rate = 0.1f)
        : blobs(make_blobs(rows, 1234)) {
        context = new_context(backend);
        model = new_model(context, kFeatures, kSmallModel);
        dataset = new_dataset(context, blobs);
        trainer = new_trainer(model, precision, optimizer, learning_rate);
    }
    ~Session() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    std::vector<float> weights() const { return weights_of(model, kFeatures, kSmallModel); }
};

// ---- (1) checkpoint and resume ----------------------------------------------------------------

constexpr int64_t kResumeRows = 160, kResumeFeatures = 12, kResumeClasses = 4, kResumeBatch = 16;  // 10 steps an epoch
constexpr float kInitialScale = 16777216.0f;  // 2^24: the first fp16 steps overflow and the scale moves
const std::vector<LayerSpec> kResumeModel = {{20, MPT_ACTIVATION_RELU}, {kResumeClasses, MPT_ACTIVATION_SOFTMAX}};

struct ScalerState {
    float scale = 0.0f;
    int64_t growth = -1, skipped = -1, steps = -1, epochs = -1;
};

// A learning-rate schedule as mpt_trainer_options_set_lr_schedule takes it.
struct Schedule {
    mpt_lr_schedule kind = MPT_LR_SCHEDULE_CONSTANT;
    int64_t warmup_steps = 0, decay_steps = 0;
    float factor = 1.0f;
};

// Mixed-fp16 Adam with a dynamic loss scaler that starts at 2^24 and grows every 4 finite steps.
struct ResumeRun {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;

    explicit ResumeRun(mpt_backend backend, const Schedule& schedule = Schedule{}) {
        TestRng rng(8);
        std::vector<float> samples(kResumeRows * kResumeFeatures);
        std::vector<int32_t> labels(kResumeRows);
        for (int64_t r = 0; r < kResumeRows; ++r) {
            labels[r] = static_cast<int32_t>(r % kResumeClasses);
            for (int64_t f = 0; f < kResumeFeatures; ++f)
                samples[r * kResumeFeatures + f] =
                    static_cast<float>(rng.normal() + 2.0 * (f % kResumeClasses == labels[r]));
        }
        context = new_context(backend);
        model = new_model(context, kResumeFeatures, kResumeModel);
        REQUIRE_OK(mpt_dataset_create_f32(context, samples.data(), kResumeRows, kResumeFeatures, labels.data(),
                                          kResumeClasses, 1, &dataset));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_FP16));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, MPT_OPTIMIZER_ADAM));
        REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.01f));
        REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, kInitialScale));
        REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 4, 1.0f, kInitialScale));
        REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, schedule.kind, schedule.warmup_steps,
                                                       schedule.decay_steps, schedule.factor));
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
    }
    ~ResumeRun() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    ResumeRun(const ResumeRun&) = delete;
    ResumeRun& operator=(const ResumeRun&) = delete;

    std::vector<float> weights() const { return weights_of(model, kResumeFeatures, kResumeModel); }
    ScalerState state() const {
        ScalerState s;
        REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &s.scale, &s.growth, &s.skipped));
        REQUIRE_OK(mpt_trainer_get_progress(trainer, &s.steps, &s.epochs));
        return s;
    }
};

}  // namespace

TEST_CASE("a mixed-fp16 Adam run resumed from each automatic checkpoint ends with the uninterrupted run's scaler, progress and weights") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> uninterrupted;
    ScalerState final_state;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 0, 100));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        uninterrupted = run.weights();
        final_state = run.state();
    }
    CHECK(final_state.steps == 30);
    CHECK(final_state.epochs == 3);
    CHECK(final_state.skipped > 0);  // 2^24 overflowed fp16: the scaler backed off
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    REQUIRE(checkpoints.size() == 4);  // steps 7, 14, 21, 28 of 30
    bool saw_moved_scale = false;
    for (size_t i = 0; i < checkpoints.size(); ++i) {
        CAPTURE(checkpoints[i].string());
        const int64_t step = 7 * static_cast<int64_t>(i + 1);
        char expected_name[64];
        std::snprintf(expected_name, sizeof expected_name, "checkpoint-%012lld.safetensors", static_cast<long long>(step));
        CHECK(checkpoints[i].filename().string() == expected_name);

        ResumeRun resumed(backend);  // a fresh context, model and trainer
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoints[i].c_str()));
        const ScalerState at_checkpoint = resumed.state();
        CHECK(at_checkpoint.steps == step);
        CHECK(at_checkpoint.epochs == step / 10);  // inside epoch step / 10
        saw_moved_scale |= at_checkpoint.scale != kInitialScale && at_checkpoint.scale != 1.0f;
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kResumeBatch, 1));

        const ScalerState state = resumed.state();
        CHECK(state.scale == final_state.scale);
        CHECK(state.growth == final_state.growth);
        CHECK(state.skipped == final_state.skipped);
        CHECK(state.steps == final_state.steps);
        CHECK(state.epochs == final_state.epochs);
        const std::vector<float> weights = resumed.weights();
        const bool identical = same_bits(weights, uninterrupted);
        const double error = normalised_error(weights, uninterrupted);
        MESSAGE(backend_name(backend) << ": resumed from step " << step << ", weights "
                                      << std::string(identical ? "bit-identical" : "not bit-identical") << " (normalised error "
                                      << error << ")");
        CHECK(error <= kResumeBound);
        if (backend == MPT_BACKEND_CPU) CHECK(identical);  // the CPU resumes bit-exactly (header, test_checkpoint.cpp)
    }
    CHECK(saw_moved_scale);
}

namespace {

// The epoch-end callback of a schedule that halves the rate after every epoch.
int halve_rate_at_epoch_end(int64_t, float, float, void* user) {
    mpt_trainer_t* trainer = static_cast<mpt_trainer_t*>(user);
    float rate = 0.0f;
    return mpt_trainer_get_learning_rate(trainer, &rate) != MPT_STATUS_OK ||
           mpt_trainer_set_learning_rate(trainer, rate / 2) != MPT_STATUS_OK;
}

}  // namespace

TEST_CASE("a learning rate halved by the epoch-end callback reaches the steps (graphs included) and resumes from a checkpoint") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> scheduled;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_set_callbacks(run.trainer, nullptr, halve_rate_at_epoch_end, run.trainer));
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 14, 0, 1));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        float rate = 0.0f;
        REQUIRE_OK(mpt_trainer_get_learning_rate(run.trainer, &rate));
        CHECK(rate == 0.01f / 8);
        scheduled = run.weights();
    }
    std::vector<float> between_fits, constant;
    {  // the same schedule, set between fits of one epoch each
        ResumeRun run(backend);
        for (int epoch = 0; epoch < 3; ++epoch) {
            REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 1, kResumeBatch, 1));
            REQUIRE_OK(mpt_trainer_set_learning_rate(run.trainer, std::ldexp(0.01f, -(epoch + 1))));
        }
        between_fits = run.weights();
    }
    {  // no schedule: a step replaying a graph captured at the first rate would train this
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 1));
        constant = run.weights();
    }
    const double schedule_error = normalised_error(between_fits, scheduled);
    const double constant_error = normalised_error(constant, scheduled);
    MESSAGE(backend_name(backend) << ": schedule from the callback against between fits " << schedule_error
                                  << ", against a constant rate " << constant_error);
    CHECK(schedule_error <= kResumeBound);
    CHECK(constant_error > 100 * kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(between_fits, scheduled));

    // The newest checkpoint, at step 28 (inside epoch 2), holds epoch 2's rate; a trainer set to
    // another rate takes it and, finishing that epoch, ends where the uninterrupted run did.
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    REQUIRE(checkpoints.size() == 1);
    CHECK(checkpoints[0].filename().string() == "checkpoint-000000000028.safetensors");
    ResumeRun resumed(backend);
    REQUIRE_OK(mpt_trainer_set_learning_rate(resumed.trainer, 0.5f));
    REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoints[0].c_str()));
    float rate = 0.0f;
    REQUIRE_OK(mpt_trainer_get_learning_rate(resumed.trainer, &rate));
    CHECK(rate == 0.01f / 4);  // step 28 lies inside epoch 2
    REQUIRE_OK(mpt_trainer_set_callbacks(resumed.trainer, nullptr, halve_rate_at_epoch_end, resumed.trainer));
    REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 1, kResumeBatch, 1));
    CHECK(normalised_error(resumed.weights(), scheduled) <= kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(resumed.weights(), scheduled));
}

namespace {

// Warm-up over 5 steps, then a cosine down to a tenth over 20: the 30 steps of three epochs cross
// both ends, and the first steps are skipped ones (2^24 overflows fp16), which the schedule counts.
const Schedule kCosine{MPT_LR_SCHEDULE_COSINE, 5, 20, 0.1f};

double cosine_rate(int64_t step) {
    const double base = 0.01;
    if (step < kCosine.warmup_steps) return base * static_cast<double>(step + 1) / kCosine.warmup_steps;
    const double progress = std::min(1.0, static_cast<double>(step - kCosine.warmup_steps) / kCosine.decay_steps);
    const double pi = 3.14159265358979323846;
    return base * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(pi * progress)));
}

}  // namespace

TEST_CASE("a per-step learning-rate schedule trains as the same rates set before each step, graphs included, and resumes mid-schedule") {
    BACKEND_OR_SKIP(backend);
    TempDir directory;
    std::vector<float> fitted;
    {  // fit, unshuffled, with a checkpoint every 7 steps
        ResumeRun run(backend, kCosine);
        REQUIRE_OK(mpt_trainer_set_checkpointing(run.trainer, directory.path.c_str(), 7, 0, 100));
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 0));
        CHECK(run.state().skipped > 0);
        fitted = run.weights();
    }
    std::vector<float> stepped, by_hand;
    {  // the same steps one by one, beside a constant-rate trainer given each step's rate by hand
        ResumeRun scheduled(backend, kCosine), manual(backend);
        for (int64_t step = 0; step < 30; ++step) {
            CAPTURE(step);
            float rate = 0.0f, base = 0.0f;
            REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(scheduled.trainer, &rate));
            REQUIRE_OK(mpt_trainer_get_learning_rate(scheduled.trainer, &base));
            CHECK(base == 0.01f);
            CHECK(rate == doctest::Approx(cosine_rate(step)).epsilon(1e-6));
            REQUIRE_OK(mpt_trainer_set_learning_rate(manual.trainer, rate));
            const int64_t first = (step % 10) * kResumeBatch;
            REQUIRE_OK(mpt_trainer_step(scheduled.trainer, scheduled.dataset, first, kResumeBatch, nullptr));
            REQUIRE_OK(mpt_trainer_step(manual.trainer, manual.dataset, first, kResumeBatch, nullptr));
        }
        stepped = scheduled.weights();
        by_hand = manual.weights();
        CHECK(scheduled.state().skipped == manual.state().skipped);
    }
    std::vector<float> constant;
    {
        ResumeRun run(backend);
        REQUIRE_OK(mpt_trainer_fit(run.trainer, run.dataset, 3, kResumeBatch, 0));
        constant = run.weights();
    }
    const double stepped_error = normalised_error(by_hand, stepped), fitted_error = normalised_error(by_hand, fitted);
    const double constant_error = normalised_error(constant, fitted);
    MESSAGE(backend_name(backend) << ": scheduled steps against rates set by hand " << stepped_error
                                  << ", scheduled fit against them " << fitted_error << ", against a constant rate "
                                  << constant_error);
    CHECK(stepped_error <= kResumeBound);
    CHECK(fitted_error <= kResumeBound);
    CHECK(constant_error > 100 * kResumeBound);
    if (backend == MPT_BACKEND_CPU) {
        CHECK(same_bits(by_hand, stepped));
        CHECK(same_bits(by_hand, fitted));
    }

    // Each checkpoint resumes the schedule where it was: its step count is the schedule's.
    std::vector<fs::path> checkpoints;
    for (const auto& entry : fs::directory_iterator(directory.path)) checkpoints.push_back(entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    REQUIRE(checkpoints.size() == 4);  // steps 7, 14, 21, 28
    for (const fs::path& checkpoint : checkpoints) {
        CAPTURE(checkpoint.string());
        ResumeRun resumed(backend, kCosine);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed.trainer, checkpoint.c_str()));
        const ScalerState at_checkpoint = resumed.state();
        float rate = 0.0f;
        REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(resumed.trainer, &rate));
        CHECK(rate == doctest::Approx(cosine_rate(at_checkpoint.steps)).epsilon(1e-6));
        REQUIRE_OK(mpt_trainer_fit(resumed.trainer, resumed.dataset, 3 - at_checkpoint.epochs, kResumeBatch, 0));
        CHECK(normalised_error(resumed.weights(), fitted) <= kResumeBound);
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(resumed.weights(), fitted));
    }
    // A trainer without the schedule, or with another, refuses the checkpoint and names the difference.
    ResumeRun constant_run(backend);
    CHECK(mpt_trainer_load_checkpoint(constant_run.trainer, checkpoints[0].c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    const std::string message = mpt_last_error();
    CHECK_MESSAGE(message.find("lr_schedule cosine (this trainer: constant)") != std::string::npos, message);
    CHECK_MESSAGE(message.find("lr_schedule decay_steps 20 (this trainer: 0)") != std::string::npos, message);
    ResumeRun shorter(backend, Schedule{MPT_LR_SCHEDULE_COSINE, 5, 10, 0.1f});
    CHECK(mpt_trainer_load_checkpoint(shorter.trainer, checkpoints[0].c_str()) == MPT_STATUS_INVALID_ARGUMENT);
    const std::string shorter_message = mpt_last_error();
    CHECK_MESSAGE(shorter_message.find("lr_schedule decay_steps 20 (this trainer: 10)") != std::string::npos, shorter_message);
    CHECK_MESSAGE(shorter_message.find("lr_schedule cosine") == std::string::npos, shorter_message);
}

namespace {

struct EpochValidation {
    mpt_trainer_t* trainer;
    mpt_dataset_t* dataset;
    std::vector<float> losses;
    std::vector<mpt_status> statuses;
};

int validate_each_epoch(int64_t, float, float, void* user_data) {
    auto* v = static_cast<EpochValidation*>(user_data);
    float loss = -1.0f;
    v->statuses.push_back(mpt_trainer_evaluate(v->trainer, v->dataset, 0, &loss, nullptr));
    v->losses.push_back(loss);
    return 0;
}

}  // namespace

TEST_CASE("an evaluation from the epoch-end callback gives what one between fits gives and leaves the run as it was") {
    BACKEND_OR_SKIP(backend);
    ResumeRun validated(backend), between(backend), plain(backend);
    EpochValidation v{validated.trainer, validated.dataset, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(validated.trainer, nullptr, validate_each_epoch, &v));
    REQUIRE_OK(mpt_trainer_fit(validated.trainer, validated.dataset, 3, kResumeBatch, 1));
    REQUIRE(v.statuses.size() == 3);
    for (mpt_status status : v.statuses) CHECK(status == MPT_STATUS_OK);
    for (int epoch = 0; epoch < 3; ++epoch) {
        CAPTURE(epoch);
        REQUIRE_OK(mpt_trainer_fit(between.trainer, between.dataset, 1, kResumeBatch, 1));
        float loss = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(between.trainer, between.dataset, 0, &loss, nullptr));
        CHECK(loss == doctest::Approx(v.losses[static_cast<size_t>(epoch)]).epsilon(kResumeBound));
        if (backend == MPT_BACKEND_CPU) CHECK(loss == v.losses[static_cast<size_t>(epoch)]);
    }
    REQUIRE_OK(mpt_trainer_fit(plain.trainer, plain.dataset, 3, kResumeBatch, 1));
    const double error = normalised_error(plain.weights(), validated.weights());
    MESSAGE(backend_name(backend) << ": validated run against a plain one " << error);
    CHECK(error <= kResumeBound);
    CHECK(validated.state().scale == plain.state().scale);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(plain.weights(), validated.weights()));
}

namespace {

struct LossOptionsRun {
    std::vector<float> initial;  // the weights before fit
    std::vector<float> weights;
    float loss = NAN, accuracy = NAN;
    // With weight averaging: the averages (the weights once exchanged) and evaluate's loss on them.
    std::vector<float> averages;
    float averaged_loss = NAN;
    // With an input standardization: mpt_model_predict's outputs for the blobs' raw features (the
    // host applies it), mpt_trainer_predict_dataset's (the gather does), and evaluate's loss once
    // the standardization is removed.
    std::vector<float> predictions;
    std::vector<float> dataset_predictions;
    float unstandardized_loss = NAN;
};

struct LossOptions {
    float label_smoothing = 0.0f;
    std::vector<float> class_weights;
    std::vector<float> row_weights;  // empty: none
    size_t dataset_device_budget = SIZE_MAX;
    float global_clipnorm = 0.0f;
    float ema_momentum = 0.0f;
    float dropout = 0.0f;  // on the hidden layer
    float input_dropout = 0.0f;
    mpt_activation hidden = MPT_ACTIVATION_RELU;
    int64_t frozen_layer = -1;  // -1: none
    // The model standardizes its inputs by the dataset's statistics, and after fit by others for
    // one more epoch (the gather's values changed between fits; steps replayed from graphs).
    bool standardize_inputs = false;
};

LossOptions smoothed_by(float label_smoothing) {
    LossOptions options;
    options.label_smoothing = label_smoothing;
    return options;
}

LossOptions weighted_by(const std::vector<float>& class_weights, const std::vector<float>& row_weights = {},
                        size_t dataset_device_budget = SIZE_MAX) {
    LossOptions options;
    options.class_weights = class_weights;
    options.row_weights = row_weights;
    options.dataset_device_budget = dataset_device_budget;
    return options;
}

// 4 epochs of 12 fp32 SGD steps (graphs replayed on a GPU), shuffled alike on every backend, on the
// blobs weighted by `row_weights` when given (from a context with that dataset device budget),
// clipping the gradients' global norm to `global_clipnorm`, averaging the weights and dropping the
// hidden layer's outputs at `dropout` and the inputs at `input_dropout` when not 0; the hidden layer
// has the `hidden` activation.
LossOptionsRun train_with_loss_options(mpt_backend backend, const Blobs& blobs, const LossOptions& loss_options) {
    const float label_smoothing = loss_options.label_smoothing;
    const std::vector<float>& class_weights = loss_options.class_weights;
    const std::vector<float>& row_weights = loss_options.row_weights;
    mpt_context_t* context = mpt_test::create_context(backend, 7, 0, loss_options.dataset_device_budget);
    const std::vector<LayerSpec> specs = {{kSmallModel[0].units, loss_options.hidden}, kSmallModel[1]};
    mpt_model_t* model = new_model(context, kFeatures, specs);
    REQUIRE_OK(mpt_model_set_layer_dropout(model, 0, loss_options.dropout));
    REQUIRE_OK(mpt_model_set_input_dropout(model, loss_options.input_dropout));
    if (loss_options.frozen_layer >= 0) REQUIRE_OK(mpt_model_set_layer_trainable(model, loss_options.frozen_layer, 0));
    mpt_dataset_t* dataset = new_dataset(context, blobs);
    if (!row_weights.empty()) {
        mpt_dataset_t* weighted = nullptr;
        REQUIRE_OK(mpt_dataset_create_weighted(dataset, row_weights.data(), static_cast<int64_t>(row_weights.size()),
                                               &weighted));
        mpt_dataset_destroy(dataset);
        dataset = weighted;
    }
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.1f));
    REQUIRE_OK(mpt_trainer_options_set_label_smoothing(options, label_smoothing));
    REQUIRE_OK(mpt_trainer_options_set_class_weights(options, class_weights.data(),
                                                     static_cast<int64_t>(class_weights.size())));
    REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, loss_options.global_clipnorm));
    REQUIRE_OK(mpt_trainer_options_set_ema(options, loss_options.ema_momentum));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    LossOptionsRun run;
    run.initial = weights_of(model, kFeatures, kSmallModel);
    std::vector<float> mean(kFeatures), stddev(kFeatures);
    if (loss_options.standardize_inputs) {
        REQUIRE_OK(mpt_dataset_get_feature_statistics(dataset, mean.data(), stddev.data(), kFeatures));
        REQUIRE_OK(mpt_model_set_input_standardization(model, mean.data(), stddev.data(), kFeatures));
    }
    REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 4, 16, 1));
    if (loss_options.standardize_inputs) {
        for (float& value : mean) value += 0.25f;
        REQUIRE_OK(mpt_model_set_input_standardization(model, mean.data(), stddev.data(), kFeatures));
        REQUIRE_OK(mpt_trainer_fit(trainer, dataset, 1, 16, 1));
        run.predictions.resize(static_cast<size_t>(blobs.rows() * kSmallModel[1].units));
        REQUIRE_OK(mpt_model_predict(model, blobs.x.data(), blobs.rows(), run.predictions.data(),
                                     static_cast<int64_t>(run.predictions.size())));
        run.dataset_predictions.resize(run.predictions.size());
        REQUIRE_OK(mpt_trainer_predict_dataset(trainer, dataset, 0, run.dataset_predictions.data(),
                                               static_cast<int64_t>(run.dataset_predictions.size())));
        REQUIRE_OK(mpt_model_set_input_standardization(model, nullptr, nullptr, 0));
        REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, &run.unstandardized_loss, nullptr));
        REQUIRE_OK(mpt_model_set_input_standardization(model, mean.data(), stddev.data(), kFeatures));
    }
    REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, &run.loss, &run.accuracy));
    run.weights = weights_of(model, kFeatures, kSmallModel);
    if (loss_options.ema_momentum != 0.0f) {
        REQUIRE_OK(mpt_trainer_swap_ema_weights(trainer, nullptr));
        run.averages = weights_of(model, kFeatures, kSmallModel);
        REQUIRE_OK(mpt_trainer_evaluate(trainer, dataset, 0, &run.averaged_loss, nullptr));
        REQUIRE_OK(mpt_trainer_swap_ema_weights(trainer, nullptr));
        CHECK(same_bits(run.weights, weights_of(model, kFeatures, kSmallModel)));  // back, bit for bit
    }
    mpt_trainer_destroy(trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
    return run;
}

}  // namespace

TEST_CASE("label smoothing trains on the backend as on the CPU, graphs included, and evaluate reports its loss") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 77);
    const LossOptionsRun smoothed = train_with_loss_options(backend, blobs, smoothed_by(0.1f));
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, smoothed_by(0.1f));
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    const double cpu_error = normalised_error(smoothed.weights, on_cpu.weights);
    const double plain_error = normalised_error(plain.weights, smoothed.weights);
    MESSAGE(backend_name(backend) << ": smoothed weights against the CPU's " << cpu_error << ", against no smoothing "
                                  << plain_error);
    // fp32 differs between backends only by accumulation order (test_cuda_ops bounds what training
    // changed by 1e-3); smoothing moves these weights by some 10%.
    CHECK(cpu_error <= 1e-3);
    CHECK(plain_error > 2e-2);  // smoothing reached the backend's steps (eager and replayed alike)
    CHECK(smoothed.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));
    CHECK(smoothed.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(smoothed.weights, on_cpu.weights));
}

TEST_CASE("class weights train on the backend as on the CPU, graphs included") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 78);
    const std::vector<float> class_weights = {0.5f, 3.0f, 1.0f};
    const LossOptionsRun weighted = train_with_loss_options(backend, blobs, weighted_by(class_weights));
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, weighted_by(class_weights));
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    const double cpu_error = normalised_error(weighted.weights, on_cpu.weights);
    const double plain_error = normalised_error(plain.weights, weighted.weights);
    MESSAGE(backend_name(backend) << ": weighted weights against the CPU's " << cpu_error << ", against no weights "
                                  << plain_error);
    CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
    CHECK(plain_error > 2e-2);
    CHECK(weighted.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));
    CHECK(weighted.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(weighted.weights, on_cpu.weights));
}

TEST_CASE("row weights train and evaluate on the backend as on the CPU, resident or streamed, graphs included") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 79);
    std::vector<float> row_weights;
    for (int64_t r = 0; r < blobs.rows(); ++r) row_weights.push_back(r % 9 == 2 ? 0.0f : 0.1f + 0.02f * static_cast<float>(r));
    const std::vector<float> class_weights = {0.5f, 3.0f, 1.0f};
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, weighted_by(class_weights, row_weights));
    const LossOptionsRun class_only = train_with_loss_options(backend, blobs, weighted_by(class_weights));
    for (size_t dataset_device_budget : {SIZE_MAX, size_t{0}}) {
        CAPTURE(dataset_device_budget);
        const LossOptionsRun weighted =
            train_with_loss_options(backend, blobs, weighted_by(class_weights, row_weights, dataset_device_budget));
        const double cpu_error = normalised_error(weighted.weights, on_cpu.weights);
        const double unweighted_error = normalised_error(class_only.weights, weighted.weights);
        MESSAGE(backend_name(backend) << ", dataset device budget " << dataset_device_budget
                                      << ": row-weighted weights against the CPU's " << cpu_error
                                      << ", against class weights alone " << unweighted_error);
        CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
        CHECK(unweighted_error > 2e-2);  // the row weights reached the steps (eager and replayed alike)
        CHECK(weighted.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));  // evaluate: row-weighted
        CHECK(weighted.loss != doctest::Approx(class_only.loss).epsilon(1e-2));
        CHECK(weighted.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(weighted.weights, on_cpu.weights));
    }
}

TEST_CASE("a model that standardizes its inputs trains and predicts on the backend as on the CPU, resident or streamed") {
    BACKEND_OR_SKIP(backend);
    Blobs blobs = make_blobs(192, 85);
    for (float& x : blobs.x) x = x * 4.0f + 3.0f;  // far from standardized: standardizing matters
    LossOptions standardizing;
    standardizing.standardize_inputs = true;
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, standardizing);
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    for (size_t dataset_device_budget : {SIZE_MAX, size_t{0}}) {
        CAPTURE(dataset_device_budget);
        standardizing.dataset_device_budget = dataset_device_budget;
        const LossOptionsRun run = train_with_loss_options(backend, blobs, standardizing);
        const double cpu_error = normalised_error(run.weights, on_cpu.weights);
        const double plain_error = normalised_error(plain.weights, run.weights);
        const double prediction_error = normalised_error(run.predictions, on_cpu.predictions);
        const double gathered_error = normalised_error(run.dataset_predictions, run.predictions);
        MESSAGE(backend_name(backend) << ", dataset device budget " << dataset_device_budget
                                      << ": weights against the CPU's " << cpu_error << ", predictions "
                                      << prediction_error << ", gathered predictions against host ones "
                                      << gathered_error << ", weights against no standardization " << plain_error);
        CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
        CHECK(prediction_error <= 1e-3);
        // The same rows standardized on the device by the gather and on the host by predict: fp32
        // trainer against fp32 model, a GEMM's accumulation order apart.
        CHECK(gathered_error <= 1e-4);
        CHECK(run.unstandardized_loss == doctest::Approx(on_cpu.unstandardized_loss).epsilon(1e-3));
        CHECK(run.unstandardized_loss != doctest::Approx(run.loss).epsilon(1e-2));  // removal reached the gather
        CHECK(plain_error > 2e-2);  // the standardization reached the steps (eager and replayed alike)
        CHECK(run.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));
        CHECK(run.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
        if (backend == MPT_BACKEND_CPU) {
            CHECK(same_bits(run.weights, on_cpu.weights));
            CHECK(same_bits(run.predictions, on_cpu.predictions));
        }
    }
}

TEST_CASE("gradient clipping trains on the backend as on the CPU, graphs included") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 80);
    const float clipnorm = 0.05f;  // below most steps' norms: clipping shapes the run
    LossOptions clipping;
    clipping.global_clipnorm = clipnorm;
    const auto clipped_run = [&](mpt_backend on) { return train_with_loss_options(on, blobs, clipping); };
    const LossOptionsRun clipped = clipped_run(backend);
    const LossOptionsRun on_cpu = clipped_run(MPT_BACKEND_CPU);
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    const double cpu_error = normalised_error(clipped.weights, on_cpu.weights);
    const double plain_error = normalised_error(plain.weights, clipped.weights);
    MESSAGE(backend_name(backend) << ": clipped weights against the CPU's " << cpu_error << ", against no clipping "
                                  << plain_error);
    CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
    CHECK(plain_error > 2e-2);  // the clip factor reached the steps (eager and replayed alike)
    CHECK(clipped.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));
    CHECK(clipped.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(clipped.weights, on_cpu.weights));

    // Against the bound itself, which a backend wrong the CPU's way would still miss: one plain SGD
    // step over the blobs, clipped to half its gradient's norm, moves the weights lr * half as far.
    const Blobs batch = make_blobs(32, 81);
    const auto step_length = [&](float bound) {
        mpt_test::BlobTrainerSetup setup;
        setup.backend = backend;
        setup.hidden = 8;  // the model whose layout once summed the logits into the norm
        setup.learning_rate = 0.5f;
        setup.global_clipnorm = bound;
        const mpt_test::BlobTrainer trainer(setup);
        const std::vector<float> before = trainer.weights();
        mpt_dataset_t* dataset = trainer.labels(batch);
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, 32, nullptr));
        mpt_dataset_destroy(dataset);
        const std::vector<float> after = trainer.weights();
        double sum = 0.0;
        for (size_t i = 0; i < before.size(); ++i) sum += (double{before[i]} - after[i]) * (double{before[i]} - after[i]);
        return std::sqrt(sum) / setup.learning_rate;
    };
    const double gradient = step_length(0.0f);
    const float half = static_cast<float>(gradient / 2.0);
    CHECK(step_length(half) == doctest::Approx(half).epsilon(1e-4));
}

TEST_CASE("weight averaging on the backend averages as on the CPU, graphs included, and exchanges bit for bit") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 82);
    LossOptions averaging;
    averaging.ema_momentum = 0.9f;
    const LossOptionsRun averaged = train_with_loss_options(backend, blobs, averaging);
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, averaging);
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    const double cpu_error = normalised_error(averaged.averages, on_cpu.averages);
    const double weights_error = normalised_error(averaged.weights, averaged.averages);
    MESSAGE(backend_name(backend) << ": averages against the CPU's " << cpu_error << ", against the weights "
                                  << weights_error);
    CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
    CHECK(weights_error > 1e-3);  // the averages lag the weights (the kernel ran, eager and replayed)
    CHECK(normalised_error(averaged.weights, plain.weights) <= 1e-6);  // averaging changes no step
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(averaged.weights, plain.weights));
    CHECK(averaged.averaged_loss == doctest::Approx(on_cpu.averaged_loss).epsilon(1e-3));
    CHECK(averaged.averaged_loss != averaged.loss);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(averaged.averages, on_cpu.averages));
}

TEST_CASE("a frozen layer stays bit for bit on the backend while the other trains as on the CPU, graphs included") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 84);
    // 4 -> 8 relu -> 3: layer 0's weights and bias come first in the flat weights, then layer 1's.
    const size_t layer_0_values = kFeatures * 8 + 8;
    for (const int64_t frozen : {int64_t{0}, int64_t{1}}) {
        CAPTURE(frozen);
        LossOptions options;
        options.frozen_layer = frozen;
        options.global_clipnorm = 0.05f;  // the norm over the trainable layer only
        options.ema_momentum = 0.9f;      // the frozen layer's average is its weights
        const LossOptionsRun run = train_with_loss_options(backend, blobs, options);
        const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, options);
        const auto part = [&](const std::vector<float>& values, bool first) {
            return first ? std::vector<float>(values.begin(), values.begin() + layer_0_values)
                         : std::vector<float>(values.begin() + layer_0_values, values.end());
        };
        const bool first = frozen == 0;
        CHECK(same_bits(part(run.weights, first), part(run.initial, first)));
        CHECK(same_bits(part(run.averages, first), part(run.initial, first)));
        const double cpu_error = normalised_error(part(run.weights, !first), part(on_cpu.weights, !first));
        const double trained = normalised_error(part(run.weights, !first), part(run.initial, !first));
        MESSAGE(backend_name(backend) << ": the trainable layer against the CPU's " << cpu_error << ", moved "
                                      << trained);
        CHECK(cpu_error <= 1e-3);  // fp32: accumulation order only, as for label smoothing above
        CHECK(trained > 1e-2);
        CHECK(normalised_error(part(run.averages, !first), part(on_cpu.averages, !first)) <= 1e-3);
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(run.weights, on_cpu.weights));
    }
}

TEST_CASE("dropout on the backend drops what the CPU drops, graphs included, and evaluation uses every output") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 83);
    LossOptions dropping;
    dropping.dropout = 0.3f;
    const LossOptionsRun dropped = train_with_loss_options(backend, blobs, dropping);
    const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, dropping);
    const LossOptionsRun plain = train_with_loss_options(backend, blobs, {});
    const double cpu_error = normalised_error(dropped.weights, on_cpu.weights);
    const double plain_error = normalised_error(plain.weights, dropped.weights);
    MESSAGE(backend_name(backend) << ": weights trained with dropout against the CPU's " << cpu_error
                                  << ", against no dropout " << plain_error);
    // The masks are the same bits on every backend (a hash of seed, step, layer and index), so fp32
    // differs only by accumulation order, as for label smoothing above; a mask drawn apart, a step
    // count read wrong under graph replay or a backward without the mask lands far beyond.
    CHECK(cpu_error <= 1e-3);
    CHECK(plain_error > 2e-2);  // the masks reached the steps (eager and replayed alike)
    CHECK(dropped.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));  // evaluate: every output
    CHECK(dropped.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(dropped.weights, on_cpu.weights));

    // The inputs too: the mask over the gathered batch (resident or staged) is the CPU's.
    LossOptions inputs_dropped;
    inputs_dropped.input_dropout = 0.3f;
    const LossOptionsRun input_run = train_with_loss_options(backend, blobs, inputs_dropped);
    const LossOptionsRun input_on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, inputs_dropped);
    CHECK(normalised_error(input_run.weights, input_on_cpu.weights) <= 1e-3);
    CHECK(normalised_error(plain.weights, input_run.weights) > 2e-2);
    CHECK(input_run.loss == doctest::Approx(input_on_cpu.loss).epsilon(1e-3));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(input_run.weights, input_on_cpu.weights));
}

TEST_CASE("every hidden activation trains on the backend as on the CPU, graphs included") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(192, 84);
    for (mpt_activation hidden : {MPT_ACTIVATION_SIGMOID, MPT_ACTIVATION_TANH, MPT_ACTIVATION_LEAKY_RELU, MPT_ACTIVATION_ELU,
                                  MPT_ACTIVATION_SELU, MPT_ACTIVATION_SOFTPLUS, MPT_ACTIVATION_SOFTSIGN}) {
        CAPTURE(hidden);
        LossOptions options;
        options.hidden = hidden;
        const LossOptionsRun trained = train_with_loss_options(backend, blobs, options);
        const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, options);
        const double cpu_error = normalised_error(trained.weights, on_cpu.weights);
        MESSAGE(backend_name(backend) << ", hidden activation " << hidden << ": weights against the CPU's " << cpu_error);
        // The activation runs in the GEMM's fp32 epilogue kernel on a GPU (libdevice's expm1f, log1pf
        // against glibc's: an ulp or two), so fp32 differs by little more than accumulation order.
        CHECK(cpu_error <= 1e-3);
        CHECK(trained.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(trained.weights, on_cpu.weights));
    }
}

TEST_CASE("predictions over a dataset on the backend are mpt_trainer_predict's, resident or streamed") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(150, 81);
    for (size_t dataset_device_budget : {SIZE_MAX, size_t{0}}) {
        CAPTURE(dataset_device_budget);
        mpt_test::BlobTrainerSetup setup;
        setup.backend = backend;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        setup.dataset_device_budget = dataset_device_budget;
        const mpt_test::BlobTrainer trainer(setup);
        mpt_dataset_t* data = trainer.labels(blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, data, 2, 16, 1));
        const std::vector<float> expected = trainer.predict(blobs);  // one batch of 150
        for (int64_t batch : {int64_t{150}, int64_t{32}}) {
            CAPTURE(batch);
            std::vector<float> got(expected.size(), NAN);
            REQUIRE_OK(mpt_trainer_predict_dataset(trainer.trainer, data, batch, got.data(),
                                                   static_cast<int64_t>(got.size())));
            const double error = normalised_error(got, expected);
            MESSAGE(backend_name(backend) << ", dataset device budget " << dataset_device_budget << ", batch " << batch
                                          << ": dataset predictions against mpt_trainer_predict's " << error);
            // The same kernels on the same values; other batch sizes only regroup the GEMMs' sums.
            // On a GPU, batch 32 is another GEMM shape, for which cuBLASLt may pick another
            // algorithm: an fp32 sum differing in its last bit can round a bf16 hidden activation
            // one bf16 step (2^-8 of it) the other way, which moves that row's probabilities by
            // some 1e-3 (about 1e-4 of the outputs' norm). A few such roundings are allowed there;
            // a wrong row, order or slice still lands near 1.
            const bool regrouped = backend != MPT_BACKEND_CPU && batch != 150;
            CHECK(error <= (regrouped ? kBf16Roundoff / 4 : kResumeBound));
            if (batch == 150 && backend == MPT_BACKEND_CPU) CHECK(same_bits(got, expected));
        }
        mpt_dataset_destroy(data);
    }
}

namespace {

// A validation split (the last 40 of 160 rows), as two slices of one dataset or as two datasets of
// copied rows: the whole dataset (or the training set) evaluated, an epoch trained, the validation
// set evaluated, then 3 epochs trained and validated from the epoch-end callback.
struct SplitRun {
    std::vector<float> weights;
    std::vector<float> metrics;  // per validated epoch: loss, accuracy, validation loss, validation accuracy
    size_t memory_after_training = 0, memory_after_validation = 0;  // the context's used bytes
};

struct SplitValidation {
    mpt_trainer_t* trainer;
    const mpt_dataset_t* validation;
    std::vector<float>* metrics;
};

int validate_split(int64_t, float loss, float accuracy, void* user_data) {
    auto& log = *static_cast<SplitValidation*>(user_data);
    float validation_loss = NAN, validation_accuracy = NAN;
    if (mpt_trainer_evaluate(log.trainer, log.validation, 0, &validation_loss, &validation_accuracy) != MPT_STATUS_OK)
        return 1;
    log.metrics->insert(log.metrics->end(), {loss, accuracy, validation_loss, validation_accuracy});
    return 0;
}

SplitRun train_split(mpt_backend backend, size_t dataset_device_budget, const Blobs& blobs, bool sliced) {
    mpt_test::BlobTrainerSetup setup;
    setup.backend = backend;
    setup.precision = MPT_PRECISION_MIXED_BF16;
    setup.optimizer = MPT_OPTIMIZER_ADAM;
    setup.learning_rate = 0.01f;
    setup.dataset_device_budget = dataset_device_budget;
    const mpt_test::BlobTrainer trainer(setup);
    const int64_t train_rows = 120, rows = blobs.rows();
    auto rows_of = [&](int64_t first, int64_t count) {
        Blobs part;
        part.x.assign(blobs.x.begin() + first * kFeatures, blobs.x.begin() + (first + count) * kFeatures);
        part.y.assign(blobs.y.begin() + first, blobs.y.begin() + first + count);
        return part;
    };
    mpt_dataset_t* whole = sliced ? trainer.labels(blobs) : nullptr;
    mpt_dataset_t *training = nullptr, *validation = nullptr;
    if (sliced) {
        REQUIRE_OK(mpt_dataset_create_slice(whole, 0, train_rows, &training));
        REQUIRE_OK(mpt_dataset_create_slice(whole, train_rows, rows - train_rows, &validation));
    } else {
        training = trainer.labels(rows_of(0, train_rows));
        validation = trainer.labels(rows_of(train_rows, rows - train_rows));
    }
    SplitRun run;
    SplitValidation log{trainer.trainer, validation, &run.metrics};
    // The largest set first: evaluate keeps an identity row order as long as the longest it read.
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, whole ? whole : training, 16, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, training, 1, 16, 1));
    REQUIRE_OK(mpt_context_get_memory(trainer.context, &run.memory_after_training, nullptr));
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, validation, 16, nullptr, nullptr));
    REQUIRE_OK(mpt_context_get_memory(trainer.context, &run.memory_after_validation, nullptr));
    REQUIRE_OK(mpt_trainer_set_callbacks(trainer.trainer, nullptr, validate_split, &log));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, training, 3, 16, 1));
    run.weights = trainer.weights();
    for (mpt_dataset_t* dataset : {whole, training, validation}) mpt_dataset_destroy(dataset);
    return run;
}

}  // namespace

TEST_CASE("a validation split of slices trains on the backend as one of copied rows, resident or streamed, placed once") {
    BACKEND_OR_SKIP(backend);
    const Blobs blobs = make_blobs(160, 80);
    for (size_t dataset_device_budget : {SIZE_MAX, size_t{0}}) {
        CAPTURE(dataset_device_budget);
        const SplitRun sliced = train_split(backend, dataset_device_budget, blobs, true);
        const SplitRun copied = train_split(backend, dataset_device_budget, blobs, false);
        const double error = normalised_error(sliced.weights, copied.weights);
        MESSAGE(backend_name(backend) << ", dataset device budget " << dataset_device_budget
                                      << ": sliced weights against copied rows' " << error);
        REQUIRE(sliced.metrics.size() == 12);
        REQUIRE(copied.metrics.size() == 12);
        // The same kernels on the same rows in the same order: on the CPU bit for bit, on a GPU up
        // to reductions whose order may vary between launches (as for a resumed run).
        CHECK(error <= kResumeBound);
        CHECK(normalised_error(sliced.metrics, copied.metrics) <= kResumeBound);
        if (backend == MPT_BACKEND_CPU) CHECK((same_bits(sliced.weights, copied.weights) && same_bits(sliced.metrics, copied.metrics)));
        CHECK(sliced.metrics.back() > 0.9f);  // validation accuracy: the blobs are well separated
        // The validation slice reads the device copy that the whole dataset's first use placed:
        // nothing more is resident after evaluating it. Copied rows are two datasets, and on a GPU
        // the validation set's rows are placed when it is first evaluated.
        CHECK(sliced.memory_after_validation == sliced.memory_after_training);
        if (backend != MPT_BACKEND_CPU && dataset_device_budget == SIZE_MAX)
            CHECK(copied.memory_after_validation > copied.memory_after_training);
    }
}

namespace {

// What a progress callback reads of its step: the scaler state (mpt_trainer_get_loss_scale) and
// the gradient norm (mpt_trainer_get_gradient_norm).
struct StepTrace {
    mpt_trainer_t* trainer;
    std::vector<ScalerState> states;
    std::vector<float> norms;
    mpt_status status = MPT_STATUS_OK;
};

int trace_step(int64_t, int64_t, int64_t, float, float, void* user_data) {
    StepTrace& trace = *static_cast<StepTrace*>(user_data);
    ScalerState state;
    float norm = 0.0f;
    for (mpt_status status : {mpt_trainer_get_loss_scale(trace.trainer, &state.scale, &state.growth, &state.skipped),
                              mpt_trainer_get_gradient_norm(trace.trainer, &norm)})
        if (status != MPT_STATUS_OK) trace.status = status;
    trace.states.push_back(state);
    trace.norms.push_back(norm);
    return 0;
}

}  // namespace

TEST_CASE("the loss scale a progress callback reads is its own step's, as step by step, overflows included") {
    BACKEND_OR_SKIP(backend);
    // Mixed fp16 from a scale of 2^24: the first steps overflow and the scale moves at every step.
    ResumeRun fitted(backend), stepped(backend);
    StepTrace trace{fitted.trainer, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(fitted.trainer, trace_step, nullptr, &trace));
    REQUIRE_OK(mpt_trainer_fit(fitted.trainer, fitted.dataset, 2, kResumeBatch, 0));  // unshuffled: batches in order
    CHECK(trace.status == MPT_STATUS_OK);
    const int64_t steps_per_epoch = kResumeRows / kResumeBatch;
    REQUIRE(trace.states.size() == static_cast<size_t>(2 * steps_per_epoch));
    bool scale_moved = false;
    for (int64_t s = 0; s < 2 * steps_per_epoch; ++s) {
        CAPTURE(s);
        REQUIRE_OK(mpt_trainer_step(stepped.trainer, stepped.dataset, (s % steps_per_epoch) * kResumeBatch, kResumeBatch,
                                    nullptr));
        const ScalerState after = stepped.state();
        const ScalerState& seen = trace.states[static_cast<size_t>(s)];
        CHECK(seen.scale == after.scale);
        CHECK(seen.growth == after.growth);
        CHECK(seen.skipped == after.skipped);
        scale_moved |= s > 0 && seen.scale != trace.states[static_cast<size_t>(s - 1)].scale;
    }
    CHECK(scale_moved);
    CHECK(trace.states.back().skipped > 0);
}

TEST_CASE("a progress callback reads its own step's gradient norm, as step by step, skipped steps' NaN included") {
    BACKEND_OR_SKIP(backend);
    constexpr int64_t kRows = 96;
    const Blobs blobs = make_blobs(kRows, 40, 1.0);
    mpt_test::BlobTrainerSetup setup;
    setup.backend = backend;
    setup.precision = MPT_PRECISION_MIXED_FP16;
    setup.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
    setup.initial_scale = 16777216.0f;  // 2^24: the first steps overflow and are skipped
    setup.global_clipnorm = 0.5f;
    const mpt_test::BlobTrainer fitted(setup), stepped(setup);
    StepTrace trace{fitted.trainer, {}, {}};
    REQUIRE_OK(mpt_trainer_set_callbacks(fitted.trainer, trace_step, nullptr, &trace));
    mpt_dataset_t* fitted_data = fitted.labels(blobs);
    mpt_dataset_t* stepped_data = stepped.labels(blobs);
    REQUIRE_OK(mpt_trainer_fit(fitted.trainer, fitted_data, 2, 16, 0));  // unshuffled: batches in order
    CHECK(trace.status == MPT_STATUS_OK);
    const int64_t steps_per_epoch = kRows / 16;
    REQUIRE(trace.norms.size() == static_cast<size_t>(2 * steps_per_epoch));
    int skipped = 0;
    for (int64_t s = 0; s < 2 * steps_per_epoch; ++s) {
        CAPTURE(s);
        REQUIRE_OK(mpt_trainer_step(stepped.trainer, stepped_data, (s % steps_per_epoch) * 16, 16, nullptr));
        float expected = 0.0f;
        REQUIRE_OK(mpt_trainer_get_gradient_norm(stepped.trainer, &expected));
        const float seen = trace.norms[static_cast<size_t>(s)];
        if (std::isnan(expected)) {
            ++skipped;
            CHECK(std::isnan(seen));
        } else if (backend == MPT_BACKEND_CPU) {
            CHECK(seen == expected);
        } else {  // graph replays against eager steps: the GEMMs may sum in another order
            CHECK(seen == doctest::Approx(expected).epsilon(1e-5));
        }
    }
    CHECK(skipped >= 1);
    CHECK(skipped < 2 * steps_per_epoch);
    mpt_dataset_destroy(fitted_data);
    mpt_dataset_destroy(stepped_data);
}

// ---- (2) model files across backends ----------------------------------------------------------

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
        if (backend == MPT_BACKEND_CPU) {  // one backend, the same kernels: bit-identical (test_checkpoint.cpp)
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

// ---- (3) bad input ----------------------------------------------------------------------------

TEST_CASE("bad input fails with the CPU's status and the same context, model and trainer then train to high accuracy") {
    BACKEND_OR_SKIP(backend);
    Session session(backend, 96);
    const Blobs& blobs = session.blobs;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> before = session.weights();

    SUBCASE("NaN and Inf samples") {
        mpt_dataset_t* dataset = nullptr;
        for (float bad : {nan, inf, -inf}) {
            CAPTURE(bad);
            Blobs poisoned = blobs;
            poisoned.x[5 * kFeatures + 2] = bad;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures,
                                                                      poisoned.y.data(), kClasses, 1, &dataset));
        }
        CHECK(dataset == nullptr);
        // Without the check the data is accepted, and fp32 training refuses the batch instead.
        Blobs poisoned = blobs;
        poisoned.x[0] = nan;  // row 0: in the first batch of an unshuffled epoch
        REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(), kClasses,
                                          0, &dataset));
        float loss = -7.0f;
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, dataset, 0, 16, &loss));
        CHECK(loss == -7.0f);
        CHECK(same_bits(before, session.weights()));  // the update was skipped
        // The CPU stops fit at the bad step, a GPU at the end of the epoch (its other steps run):
        // only the status is common. (The epoch counts as interrupted: a fit on data of the same
        // geometry would finish it, so the bad data is fitted once.)
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        for (float value : session.weights()) CHECK(std::isfinite(value));
        mpt_dataset_destroy(dataset);
    }
    SUBCASE("labels out of range") {
        mpt_dataset_t* dataset = nullptr;
        for (int32_t bad : {-1, kClasses, std::numeric_limits<int32_t>::max()}) {
            CAPTURE(bad);
            std::vector<int32_t> labels = blobs.y;
            labels[95] = bad;
            CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_dataset_create_f32(session.context, blobs.x.data(), 96, kFeatures,
                                                                            labels.data(), kClasses, 1, &dataset));
        }
        CHECK(dataset == nullptr);
        // Labels within their dataset's range but beyond the model's outputs.
        std::vector<int32_t> five(96);
        for (size_t i = 0; i < five.size(); ++i) five[i] = static_cast<int32_t>(i % 5);
        REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 96, kFeatures, five.data(), 5, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, dataset, 0, 16, nullptr));
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(dataset);
    }
    SUBCASE("a dataset whose feature count does not match the model") {
        std::vector<int32_t> labels(192, 1);  // the 4-wide rows read as 2-wide: 192 rows
        mpt_dataset_t* narrow = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(session.context, blobs.x.data(), 192, 2, labels.data(), kClasses, 1, &narrow));
        float loss = -7.0f, accuracy = -7.0f;
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_fit(session.trainer, narrow, 1, 16, 1));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_step(session.trainer, narrow, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_SHAPE_MISMATCH, mpt_trainer_evaluate(session.trainer, narrow, 16, &loss, &accuracy));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(narrow);
    }
    SUBCASE("a batch size of 0") {
        float loss = -7.0f, accuracy = -7.0f;
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, 0, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, session.dataset, 1, -16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, session.dataset, 0, 0, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(session.trainer, session.dataset, -1, &loss, &accuracy));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(same_bits(before, session.weights()));
    }
    SUBCASE("NULL handles and pointers") {
        float loss = -7.0f, accuracy = -7.0f, out[kClasses] = {-7.0f, -7.0f, -7.0f};
        int64_t steps = -7;
        mpt_dataset_t* dataset = nullptr;
        mpt_model_t* model = nullptr;
        mpt_trainer_t* trainer = nullptr;
        const float* x = blobs.x.data();
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(nullptr, session.dataset, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_fit(session.trainer, nullptr, 1, 16, 0));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(nullptr, session.dataset, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_step(session.trainer, nullptr, 0, 16, &loss));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(nullptr, session.dataset, 16, &loss, &accuracy));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_evaluate(session.trainer, nullptr, 16, &loss, &accuracy));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(nullptr, x, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, nullptr, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_predict(session.trainer, x, 1, nullptr, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(nullptr, x, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, nullptr, 1, out, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_predict(session.model, x, 1, nullptr, kClasses));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_get_progress(nullptr, &steps, nullptr));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_set_callbacks(nullptr, nullptr, nullptr, nullptr));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(nullptr, nullptr, &trainer));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_create(nullptr, kFeatures, &model));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_dataset_create_f32(nullptr, x, 4, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT,
                    mpt_dataset_create_f32(session.context, nullptr, 4, kFeatures, blobs.y.data(), kClasses, 1, &dataset));
        CHECK(loss == -7.0f);
        CHECK(accuracy == -7.0f);
        CHECK(steps == -7);
        for (float value : out) CHECK(value == -7.0f);
        CHECK(dataset == nullptr);
        CHECK(model == nullptr);
        CHECK(trainer == nullptr);
        CHECK(same_bits(before, session.weights()));
    }
    SUBCASE("a dataset from another context (on the CPU)") {
        mpt_context_t* cpu = new_context(MPT_BACKEND_CPU);
        mpt_dataset_t* foreign = new_dataset(cpu, blobs);
        // test_capi_errors.cpp asks only for a failure with a message.
        const mpt_status status = mpt_trainer_fit(session.trainer, foreign, 1, 16, 0);
        CHECK(status != MPT_STATUS_OK);
        CHECK(std::string(mpt_last_error()) != "");
        CHECK(mpt_trainer_evaluate(session.trainer, foreign, 16, nullptr, nullptr) != MPT_STATUS_OK);
        CHECK(same_bits(before, session.weights()));
        mpt_dataset_destroy(foreign);
        mpt_context_destroy(cpu);
    }

    // The same handles train the good data to high accuracy.
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 10, 16, 1));
    float loss = -1.0f, accuracy = -1.0f;
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, &loss, &accuracy));
    CHECK(std::isfinite(loss));
    CHECK(accuracy > 0.9f);
    std::vector<float> out = model_predict(session.model, blobs.x, 4, kClasses);
    for (float p : out) CHECK(std::isfinite(p));
}

namespace {

// A mixed-fp16 trainer with dynamic scaling from `initial` down to at least `minimum`, halving.
mpt_trainer_t* new_scaling_trainer(mpt_model_t* model, float initial, float minimum) {
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_MIXED_FP16));
    REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.1f));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, MPT_LOSS_SCALING_DYNAMIC, initial));
    REQUIRE_OK(mpt_trainer_options_set_loss_scaler_dynamics(options, 2.0f, 0.5f, 2000, minimum, 16777216.0f));
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_options_destroy(options);
    return trainer;
}

struct ScaleAndSkips {
    float scale = -1.0f;
    int64_t skipped = -1;
};

ScaleAndSkips scale_and_skips(const mpt_trainer_t* trainer) {
    ScaleAndSkips state;
    REQUIRE_OK(mpt_trainer_get_loss_scale(trainer, &state.scale, nullptr, &state.skipped));
    return state;
}

}  // namespace

TEST_CASE("dynamic scaling backs off on NaN data down to its minimum scale; an overflow there fails with NON_FINITE") {
    BACKEND_OR_SKIP(backend);
    Session session(backend, 96);
    Blobs poisoned = session.blobs;
    for (int64_t r = 0; r < 96; ++r) poisoned.x[static_cast<size_t>(r * kFeatures)] = std::numeric_limits<float>::quiet_NaN();
    mpt_dataset_t* nan_rows = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(), kClasses, 0,
                                      &nan_rows));
    mpt_trainer_destroy(session.trainer);
    session.trainer = new_scaling_trainer(session.model, 8.0f, 2.0f);
    const std::vector<float> before = session.weights();

    SUBCASE("step: two back-offs, then every overflow at the minimum fails, and clean data still trains") {
        for (float scale : {4.0f, 2.0f}) {  // 8 -> 4 -> 2, each step skipped without an error
            REQUIRE_OK(mpt_trainer_step(session.trainer, nan_rows, 0, 16, nullptr));
            CHECK(scale_and_skips(session.trainer).scale == scale);
        }
        for (int64_t skipped : {3, 4}) {
            float loss = -7.0f;
            CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(session.trainer, nan_rows, 16, 16, &loss));
            const std::string message = mpt_last_error();
            CHECK(message.find("loss scale already at its minimum (2)") != std::string::npos);
            CHECK(loss == -7.0f);
            CHECK(scale_and_skips(session.trainer).scale == 2.0f);
            CHECK(scale_and_skips(session.trainer).skipped == skipped);
        }
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));
        CHECK_FALSE(same_bits(before, session.weights()));
        CHECK(scale_and_skips(session.trainer).skipped == 4);

        // A checkpoint taken at the minimum resumes there: the resumed trainer's first overflow fails.
        TempDir directory;
        const std::string path = (directory.path / "at-minimum.safetensors").string();
        REQUIRE_OK(mpt_trainer_save_checkpoint(session.trainer, path.c_str()));
        mpt_trainer_t* resumed = new_scaling_trainer(session.model, 8.0f, 2.0f);
        REQUIRE_OK(mpt_trainer_load_checkpoint(resumed, path.c_str()));
        CHECK(scale_and_skips(resumed).scale == 2.0f);
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_step(resumed, nan_rows, 0, 16, nullptr));
        REQUIRE_OK(mpt_trainer_step(resumed, session.dataset, 0, 16, nullptr));  // and still trains
        mpt_trainer_destroy(resumed);
    }
    SUBCASE("fit: the epoch's overflows reach the minimum and fit fails there, the weights unchanged") {
        // The CPU stops at the third step, a GPU at the end of the epoch (its other steps run).
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, nan_rows, 1, 16, 0));
        CHECK(std::string(mpt_last_error()).find("minimum (2)") != std::string::npos);
        const ScaleAndSkips after = scale_and_skips(session.trainer);
        CHECK(after.scale == 2.0f);
        CHECK(after.skipped >= 3);
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));  // still trains
        // Fewer overflows than it takes to reach the minimum skip their steps, and fit succeeds.
        mpt_trainer_t* fresh = new_scaling_trainer(session.model, 65536.0f, 1.0f);
        REQUIRE_OK(mpt_trainer_fit(fresh, nan_rows, 1, 16, 0));
        CHECK(scale_and_skips(fresh).scale == 1024.0f);  // 6 steps, 6 halvings
        CHECK(scale_and_skips(fresh).skipped == 6);
        mpt_trainer_destroy(fresh);
    }
    SUBCASE("fit with a progress callback, 24 steps an epoch: the steps queued behind the failure are no news") {
        // On a GPU the failure is found at the third step's report with later steps already queued,
        // which run (skipped, at the minimum) with their reports dropped: the next call must not fail
        // for them. The CPU stops at the third step.
        int64_t reported = 0;
        const mpt_progress_fn count_steps = [](int64_t, int64_t, int64_t, float, float, void* user) {
            ++*static_cast<int64_t*>(user);
            return 0;
        };
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, count_steps, nullptr, &reported));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, nan_rows, 1, 4, 0));
        CHECK(std::string(mpt_last_error()).find("step 3: ") == 0);
        CHECK(reported == 2);  // the steps before it; the failing step's callback is not called
        CHECK(scale_and_skips(session.trainer).skipped >= 3);
        CHECK(same_bits(before, session.weights()));
        REQUIRE_OK(mpt_trainer_step(session.trainer, session.dataset, 0, 16, nullptr));
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 0));
        CHECK_FALSE(same_bits(before, session.weights()));
    }
    mpt_dataset_destroy(nan_rows);
}

// ---- (4) a cancelling progress callback -------------------------------------------------------

namespace {

struct ProgressLog {
    int64_t cancel_at_step = -1;   // the progress call for this step returns 1; -1: never
    std::vector<int64_t> steps;    // every reported step, in the order reported
    int64_t steps_per_epoch = 0;
    int64_t epoch_end_calls = 0;
    float epoch_loss = NAN, epoch_accuracy = NAN;  // the last epoch-end call's means
    bool arguments_ok = true;      // epoch 0, finite loss, accuracy in [0, 1]
};

int on_progress(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy, void* user_data) {
    ProgressLog& log = *static_cast<ProgressLog*>(user_data);
    log.steps.push_back(step);
    log.steps_per_epoch = steps_per_epoch;
    log.arguments_ok &= epoch == 0 && std::isfinite(loss) && loss >= 0.0f && accuracy >= 0.0f && accuracy <= 1.0f;
    return step == log.cancel_at_step ? 1 : 0;
}

int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) {
    ProgressLog& log = *static_cast<ProgressLog*>(user_data);
    ++log.epoch_end_calls;
    log.epoch_loss = loss;
    log.epoch_accuracy = accuracy;
    log.arguments_ok &= epoch == 0;
    return 0;
}

std::vector<int64_t> step_range(int64_t first, int64_t last) {
    std::vector<int64_t> steps;
    for (int64_t s = first; s <= last; ++s) steps.push_back(s);
    return steps;
}

}  // namespace

TEST_CASE("a progress callback returning non-zero cancels fit, the progress says where, and the next fit finishes the epoch, its means as the uninterrupted one's") {
    BACKEND_OR_SKIP(backend);
    constexpr int64_t kRows = 640, kBatch = 16, kSteps = kRows / kBatch, kCancelAt = 5;
    // On a GPU the call for a step comes once the device has finished it, and the steps queued
    // behind it (at most 8, see mpt_progress_fn) have been issued: they run or are stopped.
    constexpr int64_t kQueuedAtMost = 8;

    std::vector<float> uninterrupted;
    ProgressLog reference_log;
    {
        Session reference(backend, kRows);
        REQUIRE_OK(mpt_trainer_set_callbacks(reference.trainer, nullptr, on_epoch_end, &reference_log));
        REQUIRE_OK(mpt_trainer_fit(reference.trainer, reference.dataset, 1, kBatch, 1));
        uninterrupted = reference.weights();
    }

    Session session(backend, kRows);
    ProgressLog log;
    log.cancel_at_step = kCancelAt;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 3, kBatch, 1));
    CHECK(log.steps == step_range(1, kCancelAt));  // every step up to the cancel, in order, and no more
    CHECK(log.steps_per_epoch == kSteps);
    CHECK(log.epoch_end_calls == 0);
    CHECK(log.arguments_ok);
    int64_t stopped = -1, epochs = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &stopped, &epochs));
    CHECK(epochs == 0);
    MESSAGE(backend_name(backend) << ": cancelled at step " << kCancelAt << ", stopped after " << stopped << " steps");
    if (backend == MPT_BACKEND_CPU) {
        CHECK(stopped == kCancelAt);  // called after each step: nothing runs behind the cancel
    } else {
        CHECK(stopped >= kCancelAt);
        CHECK(stopped <= kCancelAt + kQueuedAtMost);
    }

    // An evaluation in between borrows the metric sums the epoch keeps (graphs included: the
    // finished steps' sums are the ones a replayed step committed).
    float evaluated_loss = NAN;
    REQUIRE_OK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, &evaluated_loss, nullptr));
    CHECK(std::isfinite(evaluated_loss));

    // The next fit on the same data, batch size and shuffling finishes the interrupted epoch from
    // the step after the last one taken: one epoch in all.
    log = ProgressLog{};
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, kBatch, 1));
    CHECK(log.steps == step_range(stopped + 1, kSteps));
    CHECK(log.epoch_end_calls == 1);
    CHECK(log.arguments_ok);
    int64_t steps = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps == kSteps);
    CHECK(epochs == 1);
    // ... and ends where the uninterrupted epoch did.
    const std::vector<float> weights = session.weights();
    const double error = normalised_error(weights, uninterrupted);
    MESSAGE(backend_name(backend) << ": cancelled and finished epoch "
                                  << std::string(same_bits(weights, uninterrupted) ? "bit-identical" : "not bit-identical")
                                  << " to the uninterrupted one (normalised error " << error << ")");
    CHECK(error <= kResumeBound);
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits(weights, uninterrupted));
    // Its means are the uninterrupted epoch's: every step's loss counted once, the evaluation's not.
    CHECK(log.epoch_loss == doctest::Approx(reference_log.epoch_loss).epsilon(1e-4));
    CHECK(log.epoch_accuracy == doctest::Approx(reference_log.epoch_accuracy).epsilon(1e-4));
    if (backend == MPT_BACKEND_CPU) CHECK(same_bits({log.epoch_loss}, {reference_log.epoch_loss}));

    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, kBatch, 1));
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps == 2 * kSteps);
    CHECK(epochs == 2);
    CHECK(log.steps.size() == static_cast<size_t>(kSteps - stopped));  // no calls once cleared
}

// ---- (5) evaluate, trainer predict and model predict ------------------------------------------

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

// ---- (6) what auto chooses on the device ------------------------------------------------------

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

// The issue's rule for `auto` on a GPU: bf16 where its tensor cores have it (8.0 and up), else fp16,
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

// ---- (7) every switch on ---------------------------------------------------------------------------

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
