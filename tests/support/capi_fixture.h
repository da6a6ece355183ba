// Shared by the C API test suites (which link libmptrain.so only): status checks that print the
// call, its status and mpt_last_error(); deterministic random numbers independent of the library;
// and the small labelled data set most cases train on.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"

#define REQUIRE_OK(call)                                                                                  \
    do {                                                                                                  \
        const mpt_status status_ = (call);                                                                \
        const std::string error_ = mpt_last_error();                                                      \
        REQUIRE_MESSAGE(status_ == MPT_STATUS_OK,                                                         \
                        #call << " -> " << std::string(mpt_status_string(status_)) << ": " << error_);    \
    } while (0)

// The call fails with `expected` and leaves a non-empty message.
#define CHECK_FAILS(expected, call)                                                                       \
    do {                                                                                                  \
        const mpt_status status_ = (call);                                                                \
        const std::string error_ = mpt_last_error();                                                      \
        CHECK_MESSAGE(status_ == (expected), #call << " -> " << std::string(mpt_status_string(status_))   \
                                                   << " (expected " << std::string(mpt_status_string(expected)) \
                                                   << "): " << error_);                                   \
        CHECK_MESSAGE(!error_.empty(), #call << " left no message in mpt_last_error()");                 \
    } while (0)

namespace mpt_test {

// Whether a GPU is meant to be here (the device check sets MPTRAIN_REQUIRE_GPU=1): a CUDA case that
// finds none then fails with the reason instead of skipping (skip_without_gpu.h's rule, for the
// suites that link libmptrain.so only).
inline bool gpu_required() {
    const char* value = std::getenv("MPTRAIN_REQUIRE_GPU");
    return value && *value != '\0' && std::strcmp(value, "0") != 0;
}

// Deterministic data independent of the library: splitmix64 + Box-Muller.
class TestRng {
public:
    explicit TestRng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    double uniform(double low, double high) { return low + (high - low) * uniform(); }
    double normal() {
        const double u1 = uniform() + 1e-300, u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    uint64_t state_;
};

// Three Gaussian blobs in 4 dimensions, well separated at the default spread; row r has label r % 3.
constexpr int64_t kBlobFeatures = 4;
constexpr int32_t kBlobClasses = 3;

struct Blobs {
    std::vector<float> x;
    std::vector<int32_t> y;
    int64_t rows() const { return static_cast<int64_t>(y.size()); }
};

inline Blobs make_blobs(int64_t rows, uint64_t seed, double spread = 0.5) {
    static const double centres[kBlobClasses][kBlobFeatures] = {{2, 0, -1, 0}, {-2, 1, 1, 0}, {0, -2, 0, 2}};
    TestRng rng(seed);
    Blobs blobs;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t label = static_cast<int32_t>(r % kBlobClasses);
        for (int64_t f = 0; f < kBlobFeatures; ++f)
            blobs.x.push_back(static_cast<float>(centres[label][f] + spread * rng.normal()));
        blobs.y.push_back(label);
    }
    return blobs;
}

// The blobs as a data set of integer labels, or of their one-hot rows (float targets).
inline mpt_dataset_t* blob_labels(mpt_context_t* context, const Blobs& blobs) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, blobs.x.data(), blobs.rows(), kBlobFeatures, blobs.y.data(), kBlobClasses,
                                      1, &dataset));
    return dataset;
}
inline mpt_dataset_t* blob_one_hot_rows(mpt_context_t* context, const Blobs& blobs) {
    std::vector<float> targets(static_cast<size_t>(blobs.rows() * kBlobClasses), 0.0f);
    for (int64_t r = 0; r < blobs.rows(); ++r) targets[static_cast<size_t>(r * kBlobClasses + blobs.y[r])] = 1.0f;
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(context, blobs.x.data(), blobs.rows(), kBlobFeatures, targets.data(),
                                              kBlobClasses, 1, &dataset));
    return dataset;
}

// Bit-identical floats (NaN included), not merely equal.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A context on `backend` with 2 CPU threads, `seed`, a memory budget (0: none) and a dataset device
// budget (SIZE_MAX, the default: every dataset that fits is resident on a GPU; 0: all streamed).
inline mpt_context_t* create_context(mpt_backend backend, uint64_t seed, size_t budget = 0,
                                     size_t dataset_device_budget = SIZE_MAX) {
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, backend));
    REQUIRE_OK(mpt_context_options_set_threads(options, 2));
    REQUIRE_OK(mpt_context_options_set_seed(options, seed));
    REQUIRE_OK(mpt_context_options_set_memory_budget(options, budget));
    REQUIRE_OK(mpt_context_options_set_dataset_device_budget(options, dataset_device_budget));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);
    return context;
}

// A context, a model, a data set and a trainer made through the C API, destroyed together (each
// handle keeps what it needs alive, so the order is free; one left null is skipped, as the destroy
// functions skip NULL). A case's fixtures derive from it and fill what they use in their constructor:
// when one of its checks fails there, what it had made is destroyed all the same.
struct Handles {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;

    Handles() = default;
    ~Handles() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
    Handles(const Handles&) = delete;
    Handles& operator=(const Handles&) = delete;
};

// What a BlobTrainer trains: the blobs' features -> `hidden` (default kBlobHidden) relu -> `outputs` `head`.
constexpr int64_t kBlobHidden = 16;
struct BlobTrainerSetup {
    mpt_backend backend = MPT_BACKEND_CPU;
    mpt_precision precision = MPT_PRECISION_FP32;
    mpt_loss loss = MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    mpt_optimizer optimizer = MPT_OPTIMIZER_SGD;
    float learning_rate = 0.05f;
    float label_smoothing = 0.0f;
    float momentum = 0.0f;
    bool nesterov = false;
    float rho = 0.9f;              // RMSprop's (the default)
    bool rmsprop_centered = false;
    float lion_beta1 = -1.0f, lion_beta2 = -1.0f;  // < 0: unset (Lion's defaults); else set together
    float global_clipnorm = 0.0f;  // 0: no clipping
    float ema_momentum = 0.0f;     // 0: no weight averaging
    float weight_decay = -1.0f;    // < 0: the optimizer's default (AdamW 0.004, the others 0)
    mpt_lr_schedule lr_schedule = MPT_LR_SCHEDULE_CONSTANT;  // another decays to 0 (factor 0)
    int64_t warmup_steps = 0, decay_steps = 0;
    float hidden_dropout = 0.0f;   // the hidden layer's dropout rate
    float input_dropout = 0.0f;    // the inputs' dropout rate
    mpt_loss_scaling loss_scaling = MPT_LOSS_SCALING_DEFAULT;
    float initial_scale = 32768.0f;
    std::vector<float> class_weights;  // empty: none
    mpt_activation head = MPT_ACTIVATION_SOFTMAX;
    int64_t outputs = kBlobClasses;
    int64_t hidden = kBlobHidden;
    uint64_t seed = 7;
    size_t dataset_device_budget = SIZE_MAX;
    int64_t micro_batch_size = 0;  // 0: every batch in one pass
    // Called last on the options, after the setters above: to set options in another order.
    std::function<void(mpt_trainer_options_t*)> configure;
};

// Both layers' fp32 weights and biases, in order, of a model of `features` inputs, one hidden layer
// of `hidden` units and `outputs` outputs.
inline std::vector<float> two_layer_weights(mpt_model_t* model, int64_t features, int64_t hidden, int64_t outputs) {
    std::vector<float> all;
    for (int64_t layer = 0; layer < 2; ++layer) {
        const int64_t units = layer == 0 ? hidden : outputs, inputs = layer == 0 ? features : hidden;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(mpt_model_get_weights(model, layer, w.data(), units * inputs, b.data(), units));
        all.insert(all.end(), w.begin(), w.end());
        all.insert(all.end(), b.begin(), b.end());
    }
    return all;
}

// Those of a blob model (of BlobTrainer's architecture).
inline std::vector<float> blob_model_weights(mpt_model_t* model, int64_t hidden, int64_t outputs) {
    return two_layer_weights(model, kBlobFeatures, hidden, outputs);
}

// A context (2 threads), the blob model and a trainer for it, destroyed together.
struct BlobTrainer : Handles {
    int64_t outputs = 0;
    int64_t hidden = 0;

    explicit BlobTrainer(const BlobTrainerSetup& setup) : outputs(setup.outputs), hidden(setup.hidden) {
        context = create_context(setup.backend, setup.seed, 0, setup.dataset_device_budget);
        REQUIRE_OK(mpt_model_create(context, kBlobFeatures, &model));
        REQUIRE_OK(mpt_model_add_dense(model, hidden, MPT_ACTIVATION_RELU));
        REQUIRE_OK(mpt_model_add_dense(model, setup.outputs, setup.head));
        REQUIRE_OK(mpt_model_set_layer_dropout(model, 0, setup.hidden_dropout));
        REQUIRE_OK(mpt_model_set_input_dropout(model, setup.input_dropout));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, setup.precision));
        REQUIRE_OK(mpt_trainer_options_set_loss(options, setup.loss));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, setup.optimizer));
        REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, setup.learning_rate));
        REQUIRE_OK(mpt_trainer_options_set_label_smoothing(options, setup.label_smoothing));
        REQUIRE_OK(mpt_trainer_options_set_momentum(options, setup.momentum, setup.nesterov ? 1 : 0));
        REQUIRE_OK(mpt_trainer_options_set_rmsprop(options, setup.rho, 1e-7f));
        REQUIRE_OK(mpt_trainer_options_set_rmsprop_centered(options, setup.rmsprop_centered ? 1 : 0));
        if (setup.lion_beta1 >= 0.0f) REQUIRE_OK(mpt_trainer_options_set_lion(options, setup.lion_beta1, setup.lion_beta2));
        REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, setup.global_clipnorm));
        REQUIRE_OK(mpt_trainer_options_set_ema(options, setup.ema_momentum));
        if (setup.weight_decay >= 0.0f) REQUIRE_OK(mpt_trainer_options_set_weight_decay(options, setup.weight_decay));
        if (setup.lr_schedule != MPT_LR_SCHEDULE_CONSTANT)  // decaying to 0 after its decay_steps
            REQUIRE_OK(mpt_trainer_options_set_lr_schedule(options, setup.lr_schedule, setup.warmup_steps,
                                                           setup.decay_steps, 0.0f));
        REQUIRE_OK(mpt_trainer_options_set_loss_scaling(options, setup.loss_scaling, setup.initial_scale));
        REQUIRE_OK(mpt_trainer_options_set_class_weights(options, setup.class_weights.data(),
                                                         static_cast<int64_t>(setup.class_weights.size())));
        REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(options, setup.micro_batch_size));
        if (setup.configure) setup.configure(options);
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
    }

    // Both layers' fp32 weights and biases, in order.
    std::vector<float> weights() const { return blob_model_weights(model, hidden, outputs); }
    std::vector<float> predict(const Blobs& blobs) const {
        std::vector<float> out(static_cast<size_t>(blobs.rows() * outputs));
        REQUIRE_OK(mpt_trainer_predict(trainer, blobs.x.data(), blobs.rows(), out.data(),
                                       static_cast<int64_t>(out.size())));
        return out;
    }
    mpt_dataset_t* labels(const Blobs& blobs) const { return blob_labels(context, blobs); }
    mpt_dataset_t* one_hot(const Blobs& blobs) const { return blob_one_hot_rows(context, blobs); }
};

// mpt_trainer_step over the blobs' labels for steps [first, first + steps) of `batch` rows, step s
// from row (batch * s) % rows: a run split at any step resumes with the batches it would have had.
inline void take_blob_steps(const BlobTrainer& trainer, const Blobs& blobs, int first, int steps, int64_t batch) {
    mpt_dataset_t* dataset = trainer.labels(blobs);
    for (int s = first; s < first + steps; ++s)
        REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, (batch * s) % blobs.rows(), batch, nullptr));
    mpt_dataset_destroy(dataset);
}

// fit on the blobs' labels for `epochs` epochs of batch 16 at least halves their loss and reaches
// 95% accuracy (evaluated in batches of 64).
inline void check_fit_learns_blobs(const BlobTrainer& trainer, const Blobs& blobs, int64_t epochs) {
    mpt_dataset_t* dataset = trainer.labels(blobs);
    float loss_before = 0.0f, loss = 0.0f, accuracy = 0.0f;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 64, &loss_before, nullptr));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, epochs, 16, 1));
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 64, &loss, &accuracy));
    CHECK(loss < 0.5f * loss_before);
    CHECK(accuracy >= 0.95f);
    mpt_dataset_destroy(dataset);
}

}  // namespace mpt_test
