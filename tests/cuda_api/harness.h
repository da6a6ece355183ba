// What tests/test_cuda_api.cpp and its cases in tests/cuda_api/ share: the backend a case runs on
// (MPTRAIN_CUDA_API_TEST_BACKEND, or a skip with the reason CUDA is unusable), the bounds its
// comparisons take, contexts, models, trainers and blob data sets built through the C API, weights
// and predictions read back, a double-precision forward pass, and a whole session of the four.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/normalised_error.h"
#include "support/temp_dir.h"

namespace mpt_test::cuda_api {

// Predictions of mpt_model_predict run in fp32 on every backend (CUBLAS_COMPUTE_32F on the GPU, no
// TF32), from the fp32 master weights whatever precision trained them. Two fp32 forward passes that
// differ only in summation order (another backend, another GEMM algorithm or epilogue) differ per
// dot product of K <= 16 terms by at most about K * 2^-24 = 1e-6 of sum |w x|; through two layers and
// the softmax (which moves a probability by at most its logit's error) that stays near 1e-6 of the
// outputs for the small logits of these models. 1e-4 leaves a margin of 100; a wrong weight, layout,
// activation or row gives errors of order 1.
inline constexpr double kFp32Bound = 1e-4;
// bf16 keeps 8 significant bits: unit roundoff 2^-8. training/prediction_cases.cpp bounds mixed-bf16
// probabilities within 8u of fp32 ones for models of this size.
inline constexpr double kBf16Roundoff = 1.0 / 256.0;
// A resumed run repeats the uninterrupted one's kernels on the same rows in the same order: on the
// CPU bit for bit; on a GPU only reductions whose order may vary between launches can differ, by a
// few fp32 ulps per step, which 30 Adam steps cannot grow anywhere near 1e-5.
inline constexpr double kResumeBound = 1e-5;

using mpt_test::gpu_required;

// MPTRAIN_CUDA_API_TEST_BACKEND: "cuda" (the default) or "cpu".
inline mpt_backend backend_under_test() {
    const char* value = std::getenv("MPTRAIN_CUDA_API_TEST_BACKEND");
    if (!value || *value == '\0' || std::strcmp(value, "cuda") == 0) return MPT_BACKEND_CUDA;
    if (std::strcmp(value, "cpu") == 0) return MPT_BACKEND_CPU;
    FAIL("MPTRAIN_CUDA_API_TEST_BACKEND must be \"cuda\" or \"cpu\", not \"" << std::string(value) << "\"");
    return MPT_BACKEND_AUTO;  // not reached: FAIL throws
}

// A std::string: doctest prints a char pointer as an address.
inline std::string backend_name(mpt_backend backend) { return backend == MPT_BACKEND_CPU ? "cpu" : "cuda"; }

// Why a CUDA context cannot be created here: its status and mpt_last_error().
inline std::string cuda_unavailable_reason() {
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
inline mpt_backend backend_for_case() {
    const mpt_backend backend = backend_under_test();
    if (backend == MPT_BACKEND_CUDA && mpt_cuda_device_count() == 0) {
        const std::string reason = cuda_unavailable_reason();
        if (gpu_required()) FAIL("MPTRAIN_REQUIRE_GPU is set, but no CUDA device is usable: " << reason);
        MESSAGE("skipped: no CUDA device (" << reason << ")");
        return MPT_BACKEND_AUTO;
    }
    return backend;
}

#define BACKEND_OR_SKIP(name)                    \
    const mpt_backend name = backend_for_case(); \
    if (name == MPT_BACKEND_AUTO) return;        \
    CAPTURE(backend_name(name))

using mpt_test::Blobs;
using mpt_test::make_blobs;
using mpt_test::TestRng;
inline constexpr int64_t kFeatures = mpt_test::kBlobFeatures;
inline constexpr int32_t kClasses = mpt_test::kBlobClasses;

inline mpt_context_t* new_context(mpt_backend backend, uint64_t seed = 7) {
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
inline const std::vector<LayerSpec> kSmallModel = {{8, MPT_ACTIVATION_RELU}, {kClasses, MPT_ACTIVATION_SOFTMAX}};

inline mpt_model_t* new_model(mpt_context_t* context, int64_t inputs, const std::vector<LayerSpec>& layers) {
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, inputs, &model));
    for (const LayerSpec& layer : layers) REQUIRE_OK(mpt_model_add_dense(model, layer.units, layer.activation));
    return model;
}

inline mpt_trainer_t* new_trainer(mpt_model_t* model, mpt_precision precision, mpt_optimizer optimizer,
                                  float learning_rate) {
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

inline mpt_dataset_t* new_dataset(mpt_context_t* context, const Blobs& blobs) {
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

inline std::vector<LayerWeights> layers_of(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
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
inline std::vector<float> weights_of(mpt_model_t* model, int64_t inputs, const std::vector<LayerSpec>& specs) {
    std::vector<float> all;
    for (const LayerWeights& layer : layers_of(model, inputs, specs)) {
        all.insert(all.end(), layer.w.begin(), layer.w.end());
        all.insert(all.end(), layer.b.begin(), layer.b.end());
    }
    return all;
}

// The forward pass in double precision from the definitions, sharing no code with the library.
inline std::vector<float> reference_predict(const std::vector<LayerWeights>& layers, const std::vector<float>& x,
                                            int64_t rows) {
    std::vector<float> out;
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> a(x.begin() + r * layers.front().inputs, x.begin() + (r + 1) * layers.front().inputs);
        for (const LayerWeights& layer : layers) {
            std::vector<double> z(static_cast<size_t>(layer.units));
            for (int64_t u = 0; u < layer.units; ++u) {
                double sum = layer.b[static_cast<size_t>(u)];
                for (int64_t i = 0; i < layer.inputs; ++i)
                    sum += static_cast<double>(layer.w[static_cast<size_t>(u * layer.inputs + i)]) *
                           a[static_cast<size_t>(i)];
                z[static_cast<size_t>(u)] = sum;
            }
            switch (layer.activation) {
                case MPT_ACTIVATION_RELU:
                    for (double& v : z) v = std::max(v, 0.0);
                    break;
                case MPT_ACTIVATION_TANH:
                    for (double& v : z) v = std::tanh(v);
                    break;
                case MPT_ACTIVATION_SIGMOID:
                    for (double& v : z) v = 1.0 / (1.0 + std::exp(-v));
                    break;
                default:
                    FAIL("reference_predict covers the activations of the models it is used with");
                    break;
                case MPT_ACTIVATION_SOFTMAX: {
                    const double top = *std::max_element(z.begin(), z.end());
                    double total = 0.0;
                    for (double& v : z) total += (v = std::exp(v - top));
                    for (double& v : z) v /= total;
                    break;
                }
                case MPT_ACTIVATION_LINEAR:
                    break;
            }
            a = std::move(z);
        }
        for (double v : a) out.push_back(static_cast<float>(v));
    }
    return out;
}

using mpt_test::normalised_error;

inline double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double largest = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
        if (!(d <= largest)) largest = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
    }
    return largest;
}

using mpt_test::same_bits;

inline std::vector<float> model_predict(mpt_model_t* model, const std::vector<float>& x, int64_t rows,
                                        int64_t outputs) {
    std::vector<float> out(static_cast<size_t>(rows * outputs), -7.0f);
    REQUIRE_OK(mpt_model_predict(model, x.data(), rows, out.data(), rows * outputs));
    return out;
}

inline std::vector<float> trainer_predict(mpt_trainer_t* trainer, const std::vector<float>& x, int64_t rows,
                                          int64_t outputs) {
    std::vector<float> out(static_cast<size_t>(rows * outputs), -7.0f);
    REQUIRE_OK(mpt_trainer_predict(trainer, x.data(), rows, out.data(), rows * outputs));
    return out;
}

// The first largest class, as both backends' loss heads pick it.
inline int64_t argmax(const float* values, int64_t count) {
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
struct Session : mpt_test::Handles {
    Blobs blobs;

    Session(mpt_backend backend, int64_t rows, mpt_precision precision = MPT_PRECISION_FP32,
            mpt_optimizer optimizer = MPT_OPTIMIZER_SGD, float learning_rate = 0.1f)
        : blobs(make_blobs(rows, 1234)) {
        context = new_context(backend);
        model = new_model(context, kFeatures, kSmallModel);
        dataset = new_dataset(context, blobs);
        trainer = new_trainer(model, precision, optimizer, learning_rate);
    }

    std::vector<float> weights() const { return weights_of(model, kFeatures, kSmallModel); }
};

}  // namespace mpt_test::cuda_api
