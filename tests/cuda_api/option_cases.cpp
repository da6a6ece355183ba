// test_cuda_api: the trainer's options on the backend as on the CPU, graphs included: label
// smoothing, class and row weights, input standardization, gradient clipping, weight averaging,
// frozen layers, dropout, every hidden activation, predictions over a data set, a validation split.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_api/harness.h"
#include "cuda_api/resume_run.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/normalised_error.h"

using namespace mpt_test::cuda_api;

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
    for (int64_t r = 0; r < blobs.rows(); ++r)
        row_weights.push_back(r % 9 == 2 ? 0.0f : 0.1f + 0.02f * static_cast<float>(r));
    const std::vector<float> class_weights = {0.5f, 3.0f, 1.0f};
    const LossOptionsRun on_cpu =
        train_with_loss_options(MPT_BACKEND_CPU, blobs, weighted_by(class_weights, row_weights));
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
        CHECK(cpu_error <= 1e-3);        // fp32: accumulation order only, as for label smoothing above
        CHECK(unweighted_error > 2e-2);  // the row weights reached the steps (eager and replayed alike)
        CHECK(weighted.loss == doctest::Approx(on_cpu.loss).epsilon(1e-3));  // evaluate: row-weighted
        CHECK(weighted.loss != doctest::Approx(class_only.loss).epsilon(1e-2));
        CHECK(weighted.accuracy == doctest::Approx(on_cpu.accuracy).epsilon(0.02));
        if (backend == MPT_BACKEND_CPU) CHECK(same_bits(weighted.weights, on_cpu.weights));
    }
}

TEST_CASE(
    "a model that standardizes its inputs trains and predicts on the backend as on the CPU, resident or streamed") {
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
    CHECK(cpu_error <= 1e-3);   // fp32: accumulation order only, as for label smoothing above
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
        for (size_t i = 0; i < before.size(); ++i)
            sum += (double{before[i]} - after[i]) * (double{before[i]} - after[i]);
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
    CHECK(cpu_error <= 1e-3);     // fp32: accumulation order only, as for label smoothing above
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
    for (mpt_activation hidden :
         {MPT_ACTIVATION_SIGMOID, MPT_ACTIVATION_TANH, MPT_ACTIVATION_LEAKY_RELU, MPT_ACTIVATION_ELU,
          MPT_ACTIVATION_SELU, MPT_ACTIVATION_SOFTPLUS, MPT_ACTIVATION_SOFTSIGN}) {
        CAPTURE(hidden);
        LossOptions options;
        options.hidden = hidden;
        const LossOptionsRun trained = train_with_loss_options(backend, blobs, options);
        const LossOptionsRun on_cpu = train_with_loss_options(MPT_BACKEND_CPU, blobs, options);
        const double cpu_error = normalised_error(trained.weights, on_cpu.weights);
        MESSAGE(backend_name(backend) << ", hidden activation " << hidden << ": weights against the CPU's "
                                      << cpu_error);
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

TEST_CASE(
    "a validation split of slices trains on the backend as one of copied rows, resident or streamed, placed once") {
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
        if (backend == MPT_BACKEND_CPU)
            CHECK((same_bits(sliced.weights, copied.weights) && same_bits(sliced.metrics, copied.metrics)));
        CHECK(sliced.metrics.back() > 0.9f);  // validation accuracy: the blobs are well separated
        // The validation slice reads the device copy that the whole dataset's first use placed:
        // nothing more is resident after evaluating it. Copied rows are two datasets, and on a GPU
        // the validation set's rows are placed when it is first evaluated.
        CHECK(sliced.memory_after_validation == sliced.memory_after_training);
        if (backend != MPT_BACKEND_CPU && dataset_device_budget == SIZE_MAX)
            CHECK(copied.memory_after_validation > copied.memory_after_training);
    }
}
