// Label smoothing through the C API: what it trains towards (sparse labels as their one-hot rows,
// bit for bit), the loss evaluate reports (PyTorch's and Keras's definitions, recomputed here from
// the trainer's own predictions), what it does to a model's confidence, and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::Blobs;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;
using mpt_test::same_bits;

constexpr int64_t kRows = 96;

// The blob model (4 -> 16 relu -> `outputs` `head`) under Adam at rate 0.01 with label smoothing.
struct Trainer : mpt_test::BlobTrainer {
    Trainer(mpt_precision precision, mpt_loss loss, float smoothing, mpt_activation head = MPT_ACTIVATION_SOFTMAX,
            int64_t outputs = kBlobClasses)
        : BlobTrainer(setup(precision, loss, smoothing, head, outputs)) {}
    int64_t output_count() const { return outputs; }

    static mpt_test::BlobTrainerSetup setup(mpt_precision precision, mpt_loss loss, float smoothing,
                                            mpt_activation head, int64_t outputs) {
        mpt_test::BlobTrainerSetup setup;
        setup.precision = precision;
        setup.loss = loss;
        setup.optimizer = MPT_OPTIMIZER_ADAM;
        setup.learning_rate = 0.01f;
        setup.label_smoothing = smoothing;
        setup.head = head;
        setup.outputs = outputs;
        return setup;
    }
};

struct Evaluation {
    float loss = NAN, accuracy = NAN;
};

Evaluation evaluate(const Trainer& trainer, const mpt_dataset_t* dataset) {
    Evaluation result;
    REQUIRE_OK(mpt_trainer_evaluate(trainer.trainer, dataset, 32, &result.loss, &result.accuracy));
    return result;
}

}  // namespace

TEST_CASE("under label smoothing, integer labels train bit for bit as their one-hot rows, in every precision") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 3, 1.5);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        Trainer sparse(precision, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 0.1f);
        Trainer one_hot(precision, MPT_LOSS_CATEGORICAL_CROSSENTROPY, 0.1f);
        Trainer unsmoothed(precision, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 0.0f);
        mpt_dataset_t* labels = mpt_test::blob_labels(sparse.context, blobs);
        mpt_dataset_t* rows = mpt_test::blob_one_hot_rows(one_hot.context, blobs);
        mpt_dataset_t* plain = mpt_test::blob_labels(unsmoothed.context, blobs);
        REQUIRE_OK(mpt_trainer_fit(sparse.trainer, labels, 3, 16, 1));
        REQUIRE_OK(mpt_trainer_fit(one_hot.trainer, rows, 3, 16, 1));
        REQUIRE_OK(mpt_trainer_fit(unsmoothed.trainer, plain, 3, 16, 1));
        CHECK(same_bits(sparse.weights(), one_hot.weights()));
        CHECK_FALSE(same_bits(sparse.weights(), unsmoothed.weights()));
        const Evaluation a = evaluate(sparse, labels), b = evaluate(one_hot, rows);
        CHECK(a.loss == b.loss);
        CHECK(a.accuracy == b.accuracy);
        mpt_dataset_destroy(labels);
        mpt_dataset_destroy(rows);
        mpt_dataset_destroy(plain);
    }
}

TEST_CASE("evaluate reports the smoothed cross-entropy, (1 - s) CE + s mean(-log p), and the labels' accuracy") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 5, 1.5);
    constexpr float smoothing = 0.2f;
    Trainer smoothed(MPT_PRECISION_FP32, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, smoothing);
    mpt_dataset_t* dataset = mpt_test::blob_labels(smoothed.context, blobs);
    REQUIRE_OK(mpt_trainer_fit(smoothed.trainer, dataset, 2, 16, 1));
    // A second trainer on the same model, without smoothing: the same weights, the plain loss.
    mpt_trainer_t* plain = nullptr;
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_precision(options, MPT_PRECISION_FP32));
    REQUIRE_OK(mpt_trainer_create(smoothed.model, options, &plain));
    mpt_trainer_options_destroy(options);

    const std::vector<float> p = smoothed.predict(blobs);
    double cross_entropy = 0.0, uniform = 0.0, correct = 0.0;
    for (int64_t r = 0; r < blobs.rows(); ++r) {
        const float* row = &p[static_cast<size_t>(r * kBlobClasses)];
        cross_entropy -= std::log(static_cast<double>(row[blobs.y[r]]));
        for (int64_t c = 0; c < kBlobClasses; ++c) uniform -= std::log(static_cast<double>(row[c])) / kBlobClasses;
        correct += std::max_element(row, row + kBlobClasses) - row == blobs.y[r];
    }
    const double rows = static_cast<double>(blobs.rows());
    const Evaluation with = evaluate(smoothed, dataset);
    Evaluation without;
    REQUIRE_OK(mpt_trainer_evaluate(plain, dataset, 32, &without.loss, &without.accuracy));
    CHECK(with.loss == doctest::Approx(((1 - smoothing) * cross_entropy + smoothing * uniform) / rows).epsilon(1e-5));
    CHECK(without.loss == doctest::Approx(cross_entropy / rows).epsilon(1e-5));
    CHECK(with.accuracy == doctest::Approx(correct / rows));
    CHECK(with.accuracy == without.accuracy);
    mpt_trainer_destroy(plain);
    mpt_dataset_destroy(dataset);
}

TEST_CASE("binary cross-entropy smooths its targets towards 1/2, as Keras's BinaryCrossentropy(label_smoothing)") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 9, 1.5);
    constexpr float smoothing = 0.3f;
    constexpr int64_t outputs = 2;  // two independent yes/no questions: label 0? label 1?
    std::vector<float> targets(static_cast<size_t>(blobs.rows() * outputs));
    for (int64_t r = 0; r < blobs.rows(); ++r)
        for (int64_t o = 0; o < outputs; ++o) targets[static_cast<size_t>(r * outputs + o)] = blobs.y[r] == o ? 1.0f : 0.0f;
    Trainer trainer(MPT_PRECISION_FP32, MPT_LOSS_BINARY_CROSSENTROPY, smoothing, MPT_ACTIVATION_SIGMOID, outputs);
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(trainer.context, blobs.x.data(), blobs.rows(), kBlobFeatures,
                                              targets.data(), outputs, 1, &dataset));
    REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 2, 16, 1));
    const std::vector<float> p = trainer.predict(blobs);
    double expected = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
        const double t = targets[i] * (1.0 - smoothing) + smoothing / 2, q = p[i];
        expected -= (t * std::log(q) + (1 - t) * std::log(1 - q)) / outputs;
    }
    const Evaluation result = evaluate(trainer, dataset);
    CHECK(result.loss == doctest::Approx(expected / static_cast<double>(blobs.rows())).epsilon(1e-4));
    mpt_dataset_destroy(dataset);
}

TEST_CASE("label smoothing keeps a model from certainty: its probabilities settle near 1 - s + s/n, not 1") {
    const Blobs blobs = mpt_test::make_blobs(kRows, 11);  // well separated: a plain model grows certain
    constexpr float smoothing = 0.2f;
    const double optimum = 1.0 - smoothing + smoothing / kBlobClasses;  // the smoothed loss's minimum
    struct Confidence {
        double mean, most;  // over the rows, of the predicted class's probability
    };
    auto confidence = [&](float s) {
        Trainer trainer(MPT_PRECISION_FP32, MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, s);
        mpt_dataset_t* dataset = mpt_test::blob_labels(trainer.context, blobs);
        REQUIRE_OK(mpt_trainer_fit(trainer.trainer, dataset, 60, 16, 1));
        CHECK(evaluate(trainer, dataset).accuracy == 1.0f);
        mpt_dataset_destroy(dataset);
        const std::vector<float> p = trainer.predict(blobs);
        Confidence result{0.0, 0.0};
        for (int64_t r = 0; r < blobs.rows(); ++r) {
            const float* row = &p[static_cast<size_t>(r * kBlobClasses)];
            const double top = *std::max_element(row, row + kBlobClasses);
            result.mean += top / static_cast<double>(blobs.rows());
            result.most = std::max(result.most, top);
        }
        return result;
    };
    const Confidence plain = confidence(0.0f), smoothed = confidence(smoothing);
    MESSAGE("mean top probability ", plain.mean, " plain, ", smoothed.mean, " smoothed (optimum ", optimum,
            "); the most confident row: ", smoothed.most);
    CHECK(plain.mean > 0.99);
    // Rows deep inside a cluster sit a little above the optimum and rows near a boundary below it.
    CHECK(smoothed.mean == doctest::Approx(optimum).epsilon(0.03));
    CHECK(smoothed.most < 0.97);
}

TEST_CASE("label smoothing is refused outside [0, 1) and with mean squared error, and the refusals change nothing") {
    mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 1);
    mpt_model_t* model = nullptr;
    REQUIRE_OK(mpt_model_create(context, kBlobFeatures, &model));
    REQUIRE_OK(mpt_model_add_dense(model, 2, MPT_ACTIVATION_LINEAR));
    mpt_trainer_options_t* options = nullptr;
    REQUIRE_OK(mpt_trainer_options_create(&options));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_MEAN_SQUARED_ERROR));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_label_smoothing(nullptr, 0.1f));
    for (float bad : {-0.1f, 1.0f, 1.5f, std::nanf(""), INFINITY, -INFINITY})
        CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_label_smoothing(options, bad));
    // Mean squared error takes no smoothing: a trainer is made only if no refused value was kept.
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    trainer = nullptr;
    REQUIRE_OK(mpt_trainer_options_set_label_smoothing(options, 0.1f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, options, &trainer));
    CHECK(trainer == nullptr);
    CHECK(std::string(mpt_last_error()).find("label smoothing") != std::string::npos);
    // A refusal keeps the value set before it (0.1 here, so creation is still refused), and a
    // cross-entropy takes it.
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_options_set_label_smoothing(options, 2.0f));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_trainer_create(model, options, &trainer));
    REQUIRE_OK(mpt_trainer_options_set_loss(options, MPT_LOSS_CATEGORICAL_CROSSENTROPY));
    REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
    mpt_trainer_destroy(trainer);
    mpt_trainer_options_destroy(options);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
}
