// Training callbacks through the C++ wrapper: one replacing the callbacks while it runs, an epoch-end
// callback evaluating a validation set, and a trainer destroyed by its own callback.

#include "wrapper_test_support.h"

#include <optional>

TEST_CASE("a callback may replace the callbacks: the running one stays alive and the new ones apply from the next call") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 51);  // 15 steps of 8
    mptrain::Trainer trainer(model, adam());
    std::vector<std::string> seen;
    std::vector<int64_t> later_steps;
    int later_epoch_ends = 0;
    // Longer than std::function's small buffer: the callable lives on the heap, where ASan sees it
    // freed if set_callbacks destroys it while it runs.
    const std::string tag = "the first progress callback, still running";
    trainer.set_callbacks(
        [&, tag](const mptrain::Progress&) {
            trainer.set_callbacks(
                [&](const mptrain::Progress& progress) {
                    later_steps.push_back(progress.step);
                    return false;
                },
                [&](int64_t, float, float) {
                    ++later_epoch_ends;
                    return false;
                });
            seen.push_back(tag);  // reads this callable's capture after it was replaced
            return false;
        },
        [&](int64_t, float, float) {
            seen.push_back("the first epoch-end callback");
            return false;
        });
    trainer.fit(data, 1, 8);
    CHECK(seen == std::vector<std::string>{"the first progress callback, still running"});
    std::vector<int64_t> expected_steps;
    for (int64_t step = 2; step <= 120 / 8; ++step) expected_steps.push_back(step);
    CHECK(later_steps == expected_steps);
    CHECK(later_epoch_ends == 1);
}

TEST_CASE("an epoch-end callback may evaluate a validation set: the numbers of evaluations between one-epoch fits") {
    struct Run {
        mptrain::Context context = cpu_context(17);  // one seed: the same initial weights and shuffles
        mptrain::Model model = mlp(context);
        mptrain::Trainer trainer{model, adam()};
        mptrain::Dataset training = blobs(context, 160, 61);  // 10 steps of 16
        mptrain::Dataset validation = blobs(context, 70, 62);
    };
    Run validated;
    std::vector<mptrain::Evaluation> during_fit;
    std::optional<mpt_status> from_progress;
    validated.trainer.set_callbacks(
        [&](const mptrain::Progress& progress) {
            if (progress.step == 2 && !from_progress)
                from_progress = status_of([&] { validated.trainer.evaluate(validated.validation); });
            return false;
        },
        [&](int64_t, float, float) {
            during_fit.push_back(validated.trainer.evaluate(validated.validation));
            return false;
        });
    validated.trainer.fit(validated.training, 3, 16);
    CHECK(validated.trainer.progress() == std::pair<int64_t, int64_t>{30, 3});
    REQUIRE(from_progress.has_value());
    CHECK(*from_progress == MPT_STATUS_INVALID_STATE);  // mid-epoch: refused by the library
    REQUIRE(during_fit.size() == 3);

    Run between;
    for (size_t epoch = 0; epoch < 3; ++epoch) {
        CAPTURE(epoch);
        between.trainer.fit(between.training, 1, 16);
        const mptrain::Evaluation evaluation = between.trainer.evaluate(between.validation);
        CHECK(bits_of({evaluation.loss, evaluation.accuracy}) ==
              bits_of({during_fit[epoch].loss, during_fit[epoch].accuracy}));
    }
    CHECK(during_fit[2].loss < during_fit[0].loss);
}

TEST_CASE("a trainer destroyed by its own callback stops fit, which throws CANCELLED") {
    auto context = cpu_context();
    auto model = mlp(context);
    auto data = blobs(context, 120, 52);
    std::optional<mptrain::Trainer> trainer(std::in_place, model, adam());
    int calls = 0;
    trainer->set_callbacks([&](const mptrain::Progress&) {
        if (++calls == 2) trainer.reset();
        return false;
    });
    CHECK(status_of([&] { trainer->fit(data, 3, 8); }) == MPT_STATUS_CANCELLED);
    CHECK(calls == 2);  // none after the trainer was gone
    CHECK(!trainer.has_value());
    mptrain::Trainer other(model, adam());  // the model lives on and trains
    other.fit(data, 1, 8);
    CHECK(other.progress() == std::pair<int64_t, int64_t>{120 / 8, 1});
}
