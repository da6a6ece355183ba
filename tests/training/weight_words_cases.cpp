// test_training: weight words, the 16-bit copies of the weights that predictions on a few rows read
// on a CPU with AMX: the same bits as from the masters, stale after a step or new weights, and
// their memory given back to whatever else in the context needs it.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "training/harness.h"

using namespace mpt_test::training;

// Where the CPU multiplies a low dtype natively (AMX tiles: bf16 and fp16; AVX512-BF16: bf16),
// predictions on a few rows in it read the weights as 16-bit words once two predictions have met the
// same weights.
TEST_CASE("predictions on a few rows give the same bits from weight words, which a step or new weights make stale") {
    const Task data = make_blobs(64, 40, 10, 1.0, 0.8, 61);
    const std::vector<LayerSpec> specs = {
        {64, MPT_ACTIVATION_RELU}, {48, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    for (mpt_precision precision : {MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16}) {
        CAPTURE(precision_name(precision));
        // Two contexts: one without a budget, one whose budget leaves no room for the words (there
        // predictions only: a training step needs more than the words).
        size_t used_after_first = 0;
        for (bool tight : {false, true}) {
            CAPTURE(tight);
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, tight ? used_after_first + 4096 : 0);
            const bool words_expected = cpu_multiplies_natively(precision) && !tight;
            mpt_model_t* model = new_model(context, 40, specs);
            randomise_weights(model, 40, specs, 62, 0.3, 0.1);
            int64_t parameters = 0;
            REQUIRE_OK(mpt_model_get_parameter_count(model, &parameters));
            TrainerSetup setup;
            setup.precision = precision;
            mpt_trainer_t* trainer = new_trainer(model, setup);
            mpt_dataset_t* dataset = labels_dataset(context, data);
            const int64_t rows = 3;
            const auto predict = [&] {
                std::vector<float> out(static_cast<size_t>(rows * 10));
                REQUIRE_OK(
                    mpt_trainer_predict(trainer, data.x.data(), rows, out.data(), static_cast<int64_t>(out.size())));
                return out;
            };
            const auto allocated = [&] {
                size_t planned = 0, bytes = 0;
                REQUIRE_OK(mpt_trainer_get_memory(trainer, &planned, &bytes));
                return bytes;
            };
            const std::vector<float> first = predict();
            const size_t allocated_first = allocated();
            if (!tight) REQUIRE_OK(mpt_context_get_memory(context, &used_after_first, nullptr));
            const std::vector<float> second = predict();  // writes the words, then reads them
            const size_t words_bytes = allocated() - allocated_first;
            const std::vector<float> third = predict();
            CHECK(same_bits(first, second));
            CHECK(same_bits(first, third));
            if (words_expected)
                CHECK(words_bytes >= static_cast<size_t>(parameters) * sizeof(uint16_t));
            else
                CHECK(words_bytes == 0);
            if (!tight) {
                // A step changes the weights: the next prediction reads them, not the words of the old ones,
                // and the one after writes words of the new ones.
                float loss = 0.0f;
                REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 16, &loss));
                const std::vector<float> after_step = predict();
                const size_t without_words = allocated();
                CHECK_FALSE(same_bits(after_step, first));
                CHECK(same_bits(predict(), after_step));
                CHECK(allocated() == without_words + words_bytes);
                CHECK(same_bits(predict(), after_step));
                // So do new weights: the first prediction on them gives the old words back (nothing
                // reads them again), the second makes words of the new ones.
                randomise_weights(model, 40, specs, 63, 0.3, 0.1);
                const std::vector<float> after_set = predict();
                CHECK_FALSE(same_bits(after_set, after_step));
                CHECK(allocated() == without_words);
                CHECK(same_bits(predict(), after_set));
                CHECK(allocated() == without_words + words_bytes);
                // A step (here of the batch size planned already) gives the words' memory back.
                REQUIRE_OK(mpt_trainer_step(trainer, dataset, 16, 16, &loss));
                CHECK(allocated() == without_words);
                // So does planning for more rows: then the trainer holds what one that never made
                // words holds.
                const std::vector<float> after_second_step = predict();
                CHECK(same_bits(predict(), after_second_step));
                CHECK(allocated() == without_words + words_bytes);
                mpt_trainer_t* other = new_trainer(model, setup);
                std::vector<float> all_rows(static_cast<size_t>(data.rows * 10));
                for (mpt_trainer_t* each : {trainer, other})
                    REQUIRE_OK(mpt_trainer_predict(each, data.x.data(), data.rows, all_rows.data(),
                                                   static_cast<int64_t>(all_rows.size())));
                size_t planned = 0, other_allocated = 0;
                REQUIRE_OK(mpt_trainer_get_memory(other, &planned, &other_allocated));
                CHECK(allocated() == other_allocated);
                mpt_trainer_destroy(other);
            }
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
    }
}

// The words hold 2 bytes per parameter of the budget; fit, step and evaluate give them back before
// they allocate, so that predictions never make training fail a budget it fits without them.
TEST_CASE("weight words give their budget back to fit, step and evaluate") {
    if (!auto_is_native_bf16()) {
        MESSAGE("weight words not tested: no native bf16 GEMM here");
        return;
    }
    // 2048 rows: each operation's first call allocates more than 4 KiB (a row order of 8 KiB).
    const int64_t features = 64, rows = 2048;
    const Task data = make_blobs(rows, features, 10, 1.0, 0.8, 81);
    const std::vector<LayerSpec> specs = {
        {2048, MPT_ACTIVATION_RELU}, {2048, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    enum class Operation { fit, step, evaluate };
    // Predictions (with words when `make_words`), then the operation; the context's used bytes after
    // the predictions, and the operation's status.
    struct Outcome {
        size_t used = 0;
        mpt_status status = MPT_STATUS_OK;
    };
    const auto run = [&](size_t budget, bool make_words, Operation operation) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
        mpt_model_t* model = new_model(context, features, specs);
        TrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, data);
        std::vector<float> out(32 * 10);
        REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), 32, out.data(), 320));  // plans 32 rows
        if (make_words)
            for (int i = 0; i < 2; ++i) REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), 1, out.data(), 10));
        Outcome outcome;
        REQUIRE_OK(mpt_context_get_memory(context, &outcome.used, nullptr));
        float loss = 0.0f;
        switch (operation) {
            case Operation::fit:
                outcome.status = mpt_trainer_fit(trainer, dataset, 1, 32, 0);
                break;
            case Operation::step:
                outcome.status = mpt_trainer_step(trainer, dataset, 0, 32, &loss);
                break;
            case Operation::evaluate:
                outcome.status = mpt_trainer_evaluate(trainer, dataset, 32, nullptr, nullptr);
                break;
        }
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return outcome;
    };
    for (Operation operation : {Operation::fit, Operation::step, Operation::evaluate}) {
        CAPTURE(static_cast<int>(operation));
        // The budget: what the predictions leave in use, words included, and 4 KiB. Without the
        // words the operation fits in it with room to spare; with them, only once they are gone.
        const size_t budget = run(0, true, operation).used + 4096;
        CHECK(run(budget, false, operation).status == MPT_STATUS_OK);
        CHECK(run(budget, true, operation).status == MPT_STATUS_OK);
    }
}

namespace {

// The model of the weight-word budget tests: 64 inputs and two layers of 1024 units (about 2 MiB of
// words, far more than the plans of a few rows), trained in mixed-bf16.
struct WordsModel {
    int64_t features = 64;
    std::vector<LayerSpec> layers = {
        {1024, MPT_ACTIVATION_RELU}, {1024, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    TrainerSetup setup = [] {
        TrainerSetup bf16;
        bf16.precision = MPT_PRECISION_MIXED_BF16;
        return bf16;
    }();
};

}  // namespace

// The words are a cache: other work in the context that fits the budget only without them (another
// trainer's plan, a data set placed for it) takes their memory, and predictions go on reading the
// masters, with the same bits.
TEST_CASE("weight words give their budget back to other work in the context that needs it") {
    if (!auto_is_native_bf16()) {
        MESSAGE("weight words not tested: no native bf16 GEMM here");
        return;
    }
    const WordsModel words_model;
    const Task few = make_blobs(3, words_model.features, 10, 1.0, 0.8, 91);
    const Task data = make_blobs(600, words_model.features, 10, 1.0, 0.8, 92);  // 150 KiB of floats
    const auto predict = [&](mpt_trainer_t* trainer) {
        std::vector<float> out(static_cast<size_t>(few.rows * 10));
        REQUIRE_OK(mpt_trainer_predict(trainer, few.x.data(), few.rows, out.data(), static_cast<int64_t>(out.size())));
        return out;
    };
    enum class Work { another_trainer, a_data_set };
    for (Work work : {Work::another_trainer, Work::a_data_set}) {
        CAPTURE(static_cast<int>(work));
        // In a context with `budget`: a trainer that predicted twice on the same weights (so holds
        // words), then the work, done by a second trainer of the same model: predicting on 4 rows,
        // or evaluating a data set (placed in the context's memory then) on 4 rows. What the work
        // took of the context, whether it succeeded, and what became of the first trainer.
        struct Outcome {
            size_t words = 0, work_bytes = 0;
            mpt_status status = MPT_STATUS_OK;
            bool words_kept = false, same_predictions = false;
        };
        const auto run = [&](size_t budget) {
            Outcome outcome;
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
            mpt_model_t* model = new_model(context, words_model.features, words_model.layers);
            mpt_trainer_t* trainer = new_trainer(model, words_model.setup);
            const std::vector<float> first = predict(trainer);
            const size_t without_words = trainer_allocated(trainer);
            CHECK(same_bits(predict(trainer), first));
            outcome.words = trainer_allocated(trainer) - without_words;
            const size_t before = context_used(context);
            mpt_trainer_t* other = new_trainer(model, words_model.setup);
            mpt_dataset_t* dataset = labels_dataset(context, data);
            if (work == Work::another_trainer) {
                std::vector<float> out(static_cast<size_t>(4 * 10));
                outcome.status =
                    mpt_trainer_predict(other, data.x.data(), 4, out.data(), static_cast<int64_t>(out.size()));
            } else {
                outcome.status = mpt_trainer_evaluate(other, dataset, 4, nullptr, nullptr);
            }
            outcome.work_bytes =
                context_used(context) - before + (trainer_allocated(trainer) == without_words ? outcome.words : 0);
            outcome.words_kept = trainer_allocated(trainer) == without_words + outcome.words;
            outcome.same_predictions = same_bits(predict(trainer), first) && same_bits(predict(trainer), first);
            mpt_dataset_destroy(dataset);
            mpt_trainer_destroy(other);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
            return outcome;
        };
        const Outcome free = run(0);
        REQUIRE(free.status == MPT_STATUS_OK);
        CHECK(free.words >= 2 * static_cast<size_t>(words_model.features * 1024 + 1024 * 1024));
        CHECK(free.words_kept);
        CHECK(free.same_predictions);
        // The work needs more than the 4 KiB the budget leaves beside the words, and less than
        // the words hold.
        REQUIRE(free.work_bytes > 4096);
        REQUIRE(free.work_bytes < free.words);
        size_t with_words = 0;
        {
            mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7, 0);
            mpt_model_t* model = new_model(context, words_model.features, words_model.layers);
            mpt_trainer_t* trainer = new_trainer(model, words_model.setup);
            predict(trainer);
            predict(trainer);
            with_words = context_used(context);
            mpt_trainer_destroy(trainer);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        }
        const Outcome tight = run(with_words + 4096);
        CHECK(tight.status == MPT_STATUS_OK);
        CHECK(tight.words == free.words);
        CHECK_FALSE(tight.words_kept);
        CHECK(tight.same_predictions);  // from the masters: no room for the words now
    }
}

// Two trainers predicting in turn where the budget has room for one's words: were a cache to take
// another's room, every one-row prediction would rewrite 2 bytes per parameter. One trainer keeps
// its words, the other reads the masters.
TEST_CASE("two trainers predicting in turn do not take each other's weight words") {
    if (!auto_is_native_bf16()) {
        MESSAGE("weight words not tested: no native bf16 GEMM here");
        return;
    }
    const WordsModel words_model;
    const Task one = make_blobs(1, words_model.features, 10, 1.0, 0.8, 91);
    const auto predict = [&](mpt_trainer_t* trainer) {
        std::vector<float> out(10);
        REQUIRE_OK(mpt_trainer_predict(trainer, one.x.data(), 1, out.data(), 10));
        return out;
    };
    // Both trainers, and words for the first: with `budget`, what the context then holds.
    struct Pair {
        mpt_context_t* context;
        mpt_model_t* model;
        mpt_trainer_t* first;
        mpt_trainer_t* second;
    };
    const auto open = [&](size_t budget) {
        Pair pair{};
        pair.context = mpt_test::create_context(MPT_BACKEND_CPU, 7, budget);
        pair.model = new_model(pair.context, words_model.features, words_model.layers);
        pair.first = new_trainer(pair.model, words_model.setup);
        pair.second = new_trainer(pair.model, words_model.setup);
        predict(pair.second);
        predict(pair.first);
        predict(pair.first);
        return pair;
    };
    const auto close = [](Pair& pair) {
        mpt_trainer_destroy(pair.second);
        mpt_trainer_destroy(pair.first);
        mpt_model_destroy(pair.model);
        mpt_context_destroy(pair.context);
    };
    size_t one_set = 0;
    {
        Pair pair = open(0);
        REQUIRE_OK(mpt_context_get_memory(pair.context, &one_set, nullptr));
        close(pair);
    }
    Pair pair = open(one_set + 4096);
    const size_t first_with_words = trainer_allocated(pair.first), second_without = trainer_allocated(pair.second);
    const std::vector<float> expected = predict(pair.second);  // the second's second: it wants words too
    for (int round = 0; round < 10; ++round) {
        CHECK(same_bits(predict(round % 2 ? pair.second : pair.first), expected));
        CHECK(trainer_allocated(pair.first) == first_with_words);
        CHECK(trainer_allocated(pair.second) == second_without);
    }
    close(pair);
}

// bf16 layers read weight words on up to 4 rows, fp16 ones on up to 8: predictions on 8 rows make
// words for both, and every later forward on fewer rows (a prediction, the last chunk of a long
// one, a training step) must read the words of its own weights.
TEST_CASE("a model mixing bf16 and fp16 layers predicts and steps the same after predictions made weight words") {
    const Task data = make_blobs(300, 40, 10, 1.0, 0.8, 71);
    const std::vector<LayerSpec> specs = {
        {64, MPT_ACTIVATION_RELU}, {48, MPT_ACTIVATION_RELU}, {10, MPT_ACTIVATION_SOFTMAX}};
    struct Run {
        std::vector<float> two_rows, all_rows, weights;
        float loss = 0.0f;
    };
    const auto run = [&](bool make_words) {
        mpt_context_t* context = mpt_test::create_context(MPT_BACKEND_CPU, 7);
        mpt_model_t* model = new_model(context, 40, specs);
        REQUIRE_OK(mpt_model_set_layer_dtype(model, 0, MPT_DTYPE_FP16));
        randomise_weights(model, 40, specs, 72, 0.3, 0.1);
        TrainerSetup setup;
        setup.precision = MPT_PRECISION_MIXED_BF16;
        mpt_trainer_t* trainer = new_trainer(model, setup);
        mpt_dataset_t* dataset = labels_dataset(context, data);
        const auto predict = [&](int64_t rows) {
            std::vector<float> out(static_cast<size_t>(rows * 10));
            REQUIRE_OK(mpt_trainer_predict(trainer, data.x.data(), rows, out.data(), static_cast<int64_t>(out.size())));
            return out;
        };
        Run result;
        if (make_words) {
            predict(300);  // plans 256 rows, so that the later long prediction keeps the words
            predict(8);
            predict(8);
        }
        result.two_rows = predict(2);
        result.all_rows = predict(300);  // 256 rows, then 44
        REQUIRE_OK(mpt_trainer_step(trainer, dataset, 0, 2, &result.loss));
        result.weights = flat_weights(model, 40, specs);
        mpt_dataset_destroy(dataset);
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
        return result;
    };
    const Run fresh = run(false), after_words = run(true);
    CHECK(same_bits(after_words.two_rows, fresh.two_rows));
    CHECK(same_bits(after_words.all_rows, fresh.all_rows));
    CHECK(after_words.loss == fresh.loss);
    CHECK(same_bits(after_words.weights, fresh.weights));
}
