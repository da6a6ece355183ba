// test_capi_errors: callbacks that stop fit (a progress callback's CANCELLED, a failure at an epoch's
// last step, an epoch-end callback's stop) and a log callback that calls back into its context.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>

#include "capi_errors/harness.h"
#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"
#include "support/temp_dir.h"

using namespace mpt_test::capi_errors;

namespace {

struct CallbackLog {
    mpt_trainer_t* trainer = nullptr;
    int64_t cancel_at_call = -1;  // progress call (1-based) that returns 1; -1 never
    int64_t stop_at_epoch_end = -1;
    int64_t progress_calls = 0;
    int64_t epoch_end_calls = 0;
    int64_t last_step = 0;
    int64_t steps_per_epoch = 0;
    bool nested_call_ok = true;
    bool arguments_ok = true;
};

int on_progress(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss, float accuracy, void* user_data) {
    CallbackLog& log = *static_cast<CallbackLog*>(user_data);
    ++log.progress_calls;
    log.arguments_ok &= epoch >= 0 && step >= 1 && step <= steps_per_epoch && std::isfinite(loss) && loss >= 0.0f &&
                        accuracy >= 0.0f && accuracy <= 1.0f;
    log.last_step = step;
    log.steps_per_epoch = steps_per_epoch;
    // Other mptrain functions may be called from a callback.
    int64_t steps = -1;
    log.nested_call_ok &= mpt_trainer_get_progress(log.trainer, &steps, nullptr) == MPT_STATUS_OK && steps >= 1;
    return log.progress_calls == log.cancel_at_call ? 1 : 0;
}

int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) {
    CallbackLog& log = *static_cast<CallbackLog*>(user_data);
    ++log.epoch_end_calls;
    log.arguments_ok &= epoch >= 0 && std::isfinite(loss) && accuracy >= 0.0f && accuracy <= 1.0f;
    return log.epoch_end_calls == log.stop_at_epoch_end ? 1 : 0;
}

}  // namespace

TEST_CASE("a progress callback that returns non-zero cancels fit with CANCELLED, and fit works again afterwards") {
    Session session;
    CallbackLog log;
    log.trainer = session.trainer;
    log.cancel_at_call = 3;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
    int64_t steps_before = 0;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps_before, nullptr));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 5, 16, 1));
    CHECK(log.progress_calls == 3);
    CHECK(log.epoch_end_calls == 0);
    int64_t steps = 0, epochs = -1;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(steps - steps_before == 3);  // the cancelled fit stopped right after the third step
    CHECK(epochs == 0);

    // The same trainer fits again; the callbacks see every step of both epochs. (Another batch size,
    // so that the interrupted epoch is not resumed but abandoned: two whole epochs follow.)
    log.cancel_at_call = -1;
    log.progress_calls = 0;
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 2, 32, 1));
    CHECK(log.progress_calls == 2 * (96 / 32));
    CHECK(log.steps_per_epoch == 96 / 32);
    CHECK(log.last_step == 96 / 32);
    CHECK(log.epoch_end_calls == 2);
    CHECK(log.arguments_ok);
    CHECK(log.nested_call_ok);
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, nullptr, &epochs));
    CHECK(epochs == 2);

    // Clearing the callbacks stops the calls.
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, nullptr, nullptr));
    require_usable(session);
    CHECK(log.progress_calls == 2 * (96 / 32));
}

TEST_CASE("a failure at an epoch's last step closes that epoch: the next fit trains a whole new one") {
    // 96 rows, batch 16: 6 steps an epoch. Every step of the failing epoch ran, so nothing is left to
    // resume; the next fit(1) must train 6 steps, not "finish" an epoch that has none left.
    SUBCASE("NaN in the last batch of an unshuffled epoch") {
        Session session;
        Blobs poisoned = session.blobs;
        poisoned.x[95 * kFeatures] = std::numeric_limits<float>::quiet_NaN();
        mpt_dataset_t* dataset = nullptr;
        REQUIRE_OK(mpt_dataset_create_f32(session.context, poisoned.x.data(), 96, kFeatures, poisoned.y.data(),
                                          kClasses, 0, &dataset));
        // The epoch is complete: its epoch-end callback and checkpoint come before the failure.
        CallbackLog log;
        log.trainer = session.trainer;
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, on_epoch_end, &log));
        mpt_test::TempDir checkpoints("mptrain-last-step");
        REQUIRE_OK(mpt_trainer_set_checkpointing(session.trainer, checkpoints.path.c_str(), 0, 1, 1));
        CHECK_FAILS(MPT_STATUS_NON_FINITE, mpt_trainer_fit(session.trainer, dataset, 1, 16, 0));
        CHECK(log.epoch_end_calls == 1);
        CHECK(std::filesystem::exists(checkpoints.path / "checkpoint-000000000006.safetensors"));
        REQUIRE_OK(mpt_trainer_set_checkpointing(session.trainer, nullptr, 0, 0, 0));
        int64_t steps = 0, epochs = -1;
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 6);
        CHECK(epochs == 1);
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 0));
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 12);
        CHECK(epochs == 2);
        mpt_dataset_destroy(dataset);
        require_usable(session);
    }
    SUBCASE("a progress callback cancelling at the last step") {
        Session session;
        CallbackLog log;
        log.trainer = session.trainer;
        log.cancel_at_call = 6;
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, on_progress, on_epoch_end, &log));
        CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1));
        CHECK(log.epoch_end_calls == 1);  // the epoch is complete: its callback is owed, as in Keras
        int64_t steps = 0, epochs = -1;
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 6);
        CHECK(epochs == 1);
        log.cancel_at_call = -1;
        log.progress_calls = 0;
        REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1));
        CHECK(log.progress_calls == 6);
        CHECK(log.epoch_end_calls == 2);
        REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
        CHECK(steps == 12);
        CHECK(epochs == 2);
    }
    SUBCASE("the trainer destroyed by the progress callback of the last step: no epoch-end callback") {
        Session session;
        struct Destroying {
            mpt_trainer_t* trainer;
            int epoch_end_calls = 0;
        } state{session.trainer};
        auto destroy_at_last_step = [](int64_t, int64_t step, int64_t steps_per_epoch, float, float,
                                       void* user) -> int {
            if (step == steps_per_epoch) mpt_trainer_destroy(static_cast<Destroying*>(user)->trainer);
            return 0;
        };
        auto count_epoch_end = [](int64_t, float, float, void* user) -> int {
            ++static_cast<Destroying*>(user)->epoch_end_calls;
            return 0;
        };
        REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, destroy_at_last_step, count_epoch_end, &state));
        CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1));
        session.trainer = nullptr;  // freed as fit returned
        CHECK(state.epoch_end_calls == 0);
    }
}

TEST_CASE("an epoch-end callback that returns non-zero stops fit with CANCELLED after that epoch") {
    Session session;
    CallbackLog log;
    log.trainer = session.trainer;
    log.stop_at_epoch_end = 2;
    REQUIRE_OK(mpt_trainer_set_callbacks(session.trainer, nullptr, on_epoch_end, &log));
    CHECK_FAILS(MPT_STATUS_CANCELLED, mpt_trainer_fit(session.trainer, session.dataset, 10, 32, 1));
    CHECK(log.epoch_end_calls == 2);
    int64_t steps = 0, epochs = 0;
    REQUIRE_OK(mpt_trainer_get_progress(session.trainer, &steps, &epochs));
    CHECK(epochs == 2);
    CHECK(steps == 2 * (96 / 32));
    log.stop_at_epoch_end = -1;
    REQUIRE_OK(mpt_trainer_fit(session.trainer, session.dataset, 3, 32, 1));
    CHECK(log.epoch_end_calls == 5);
    CHECK(log.arguments_ok);
    require_usable(session);
}

// What a log callback's calls back into mptrain returned.
struct ReentryLog {
    mpt_model_t* same_context_model = nullptr;
    mpt_model_t* other_context_model = nullptr;
    int calls = 0;
    mpt_status same_context = MPT_STATUS_OK;
    std::string same_context_message;
    mpt_status other_context = MPT_STATUS_INTERNAL;
};

void log_and_call_back(mpt_log_level, const char*, void* user_data) {
    ReentryLog& log = *static_cast<ReentryLog*>(user_data);
    ++log.calls;
    int64_t layers = 0;
    log.same_context = mpt_model_get_layer_count(log.same_context_model, &layers);
    log.same_context_message = mpt_last_error();
    log.other_context = mpt_model_get_layer_count(log.other_context_model, &layers);
}

TEST_CASE("a log callback's calls back into its own context are refused (INVALID_STATE); other contexts work") {
    ReentryLog log;
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, MPT_BACKEND_CPU));
    REQUIRE_OK(mpt_context_options_set_threads(options, 1));
    REQUIRE_OK(mpt_context_options_set_log_level(options, MPT_LOG_LEVEL_DEBUG));
    REQUIRE_OK(mpt_context_options_set_log_callback(options, log_and_call_back, &log));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);
    mpt_context_t* other = mpt_test::create_context(MPT_BACKEND_CPU, 7);
    REQUIRE_OK(mpt_model_create(context, 4, &log.same_context_model));
    REQUIRE_OK(mpt_model_add_dense(log.same_context_model, 3, MPT_ACTIVATION_SOFTMAX));
    REQUIRE_OK(mpt_model_create(other, 4, &log.other_context_model));

    const int calls_before = log.calls;
    mpt_trainer_t* trainer = nullptr;
    REQUIRE_OK(mpt_trainer_create(log.same_context_model, nullptr, &trainer));  // logs its precision (DEBUG)
    REQUIRE(log.calls > calls_before);
    CHECK(log.same_context == MPT_STATUS_INVALID_STATE);
    CHECK(log.same_context_message.find("log callback") != std::string::npos);
    CHECK(log.other_context == MPT_STATUS_OK);

    // Outside the callback the context is usable again.
    int64_t layers = 0;
    REQUIRE_OK(mpt_model_get_layer_count(log.same_context_model, &layers));
    CHECK(layers == 1);
    mpt_trainer_destroy(trainer);
    mpt_model_destroy(log.other_context_model);
    mpt_model_destroy(log.same_context_model);
    mpt_context_destroy(other);
    mpt_context_destroy(context);
}
