// Datasets through the C++ wrapper: slices, subsets and row weights, predictions over a dataset and its
// labels, and load_cifar10's path.

#include "wrapper_test_support.h"

#include <algorithm>
#include <optional>

TEST_CASE("a validation split of slices trains and validates as datasets of copied rows, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(160, 63, labels);
    const int64_t held_out = 40, kept = 160 - held_out;  // Keras's validation_split 0.25: the last rows
    auto run = [&](bool sliced) {
        auto context = cpu_context(19);
        auto model = mlp(context);
        mptrain::Trainer trainer(model, adam());
        std::optional<mptrain::Dataset> training, validation;
        if (sliced) {
            const auto whole = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
            training = whole.slice(0, kept);
            validation = whole.slice(kept, held_out);
        } else {  // the slices outlive `whole` above; these are copies of the same rows
            auto rows = [&](int64_t first, int64_t count) {
                return mptrain::Dataset::from_f32(
                    context, std::vector<float>(samples.begin() + first * kFeatures, samples.begin() + (first + count) * kFeatures),
                    kFeatures, std::vector<int32_t>(labels.begin() + first, labels.begin() + first + count), kClasses);
            };
            training = rows(0, kept);
            validation = rows(kept, held_out);
        }
        std::vector<float> metrics;
        trainer.set_callbacks(nullptr, [&](int64_t, float loss, float accuracy) {
            const mptrain::Evaluation evaluation = trainer.evaluate(*validation);
            metrics.insert(metrics.end(), {loss, accuracy, evaluation.loss, evaluation.accuracy});
            return false;
        });
        trainer.fit(*training, 3, 16);
        CHECK(training->rows() == kept);
        CHECK(validation->rows() == held_out);
        return std::make_pair(weight_bits(model), bits_of(metrics));
    };
    const auto sliced = run(true), copied = run(false);
    CHECK(sliced.first == copied.first);
    REQUIRE(sliced.second.size() == 12);
    CHECK(sliced.second == copied.second);
}

TEST_CASE("row weights of 2 through the wrapper train one SGD step as twice the learning rate, bit for bit") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 65, labels);
    auto one_step = [&](float learning_rate, const std::vector<float>& row_weights, float& loss) {
        const SgdStep step = one_sgd_step(samples, labels, learning_rate, {}, row_weights);
        loss = step.loss;
        return step.after;
    };
    float plain_loss = 0.0f, doubled_rate_loss = 0.0f, weighted_loss = 0.0f;
    const std::vector<uint32_t> plain = one_step(0.05f, {}, plain_loss);
    const std::vector<uint32_t> doubled_rate = one_step(0.1f, {}, doubled_rate_loss);
    const std::vector<uint32_t> weighted = one_step(0.05f, std::vector<float>(30, 2.0f), weighted_loss);
    CHECK(weighted == doubled_rate);
    CHECK(weighted != plain);
    CHECK(weighted_loss == 2.0f * plain_loss);
}

TEST_CASE("row weights of the wrong count or value throw with the library's status") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 66);
    CHECK(status_of([&] { data.weighted(std::vector<float>(29, 1.0f)); }) == MPT_STATUS_SHAPE_MISMATCH);
    std::vector<float> negative(30, 1.0f);
    negative[4] = -1.0f;
    CHECK(status_of([&] { data.weighted(negative); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.weighted(std::vector<float>(30, 0.5f)).slice(10, 5).rows() == 5);
}

TEST_CASE("predictions over a dataset and its labels through the wrapper give evaluate's accuracy") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(90, 67, labels);
    auto context = cpu_context(3);
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    trainer.fit(data, 4, 16);
    CHECK(data.labels() == labels);
    CHECK(data.slice(30, 10).labels() == std::vector<int32_t>(labels.begin() + 30, labels.begin() + 40));
    const std::vector<float> probabilities = trainer.predict(data, 90);
    CHECK(bits_of(probabilities) == bits_of(trainer.predict(samples)));  // one batch: bit for bit
    int64_t correct = 0;
    for (size_t r = 0; r < labels.size(); ++r) {
        const auto row = probabilities.begin() + static_cast<std::ptrdiff_t>(r * kClasses);
        correct += std::max_element(row, row + kClasses) - row == labels[r];
    }
    CHECK(static_cast<double>(correct) / 90.0 == doctest::Approx(trainer.evaluate(data).accuracy).epsilon(1e-6));
    const auto targets = mptrain::Dataset::from_f32_targets(context, samples, kFeatures, std::vector<float>(90 * kClasses, 0.0f),
                                                            kClasses);
    CHECK(status_of([&] { targets.labels(); }) == MPT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("a slice out of its dataset's rows throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 64);
    CHECK(status_of([&] { data.slice(0, 31); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(-1, 5); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(30, 1); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(10, 0); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.slice(29, 1).rows() == 1);
}

TEST_CASE("a subset of a slice has the listed rows in order, repeats included: their labels and predictions") {
    std::vector<int32_t> labels;
    const std::vector<float> samples = blob_samples(30, 68, labels);
    auto context = cpu_context();
    auto model = mlp(context);
    mptrain::Trainer trainer(model, adam());
    const auto data = mptrain::Dataset::from_f32(context, samples, kFeatures, labels, kClasses);
    const auto subset = data.slice(10, 12).subset({5, 0, 5, 2});  // rows 15, 10, 15, 12 of `data`
    std::vector<float> copied_samples;
    std::vector<int32_t> copied_labels;
    for (int64_t row : {15, 10, 15, 12}) {
        copied_samples.insert(copied_samples.end(), samples.begin() + row * kFeatures, samples.begin() + (row + 1) * kFeatures);
        copied_labels.push_back(labels[static_cast<size_t>(row)]);
    }
    const auto copies = mptrain::Dataset::from_f32(context, copied_samples, kFeatures, copied_labels, kClasses);
    CHECK(subset.rows() == 4);
    CHECK(subset.labels() == copied_labels);
    CHECK(bits_of(trainer.predict(subset)) == bits_of(trainer.predict(copies)));
}

TEST_CASE("a subset of an index out of its dataset's rows or of no rows throws INVALID_ARGUMENT") {
    auto context = cpu_context();
    const auto data = blobs(context, 30, 69);
    CHECK(status_of([&] { data.subset({0, 1, 30}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(20, 10).subset({-1}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.slice(20, 10).subset({10}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { data.subset({}); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(data.subset({29}).rows() == 1);
}

TEST_CASE("load_cifar10 refuses a directory path holding NUL") {
    TempDir directory;  // exists but holds no CIFAR-10 files
    auto context = cpu_context();
    CHECK(status_of([&] { mptrain::Dataset::load_cifar10(context, directory.path.string(), true); }) ==
          MPT_STATUS_IO_ERROR);
    // C would stop reading at the NUL and fail on the bare directory, as above.
    const std::string with_nul = directory.path.string() + std::string(1, '\0') + "/cifar-10-batches-bin";
    CHECK(status_of([&] { mptrain::Dataset::load_cifar10(context, with_nul, true); }) == MPT_STATUS_INVALID_ARGUMENT);
}
