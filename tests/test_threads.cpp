// Threads and callbacks through the C API: separate contexts train in parallel to the same bits as
// alone; a trainer used from two threads at once, or re-entered from its own callback, is refused,
// and so are calls on a context's other handles from a thread other than the one using it;
// callbacks that throw stop training with a status; a callback may destroy the handles of its fit
// and save a checkpoint. Run under ThreadSanitizer by MPTRAIN_SANITIZE=thread.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/capi_fixture.h"

namespace {

constexpr int64_t kRows = 256, kFeatures = 16, kClasses = 3;

struct Data {
    std::vector<float> samples = std::vector<float>(kRows * kFeatures);
    std::vector<int32_t> labels = std::vector<int32_t>(kRows);
    Data() {
        std::mt19937 generator(21);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (int64_t r = 0; r < kRows; ++r) {
            labels[r] = static_cast<int32_t>(r % kClasses);
            for (int64_t f = 0; f < kFeatures; ++f) samples[r * kFeatures + f] = normal(generator) + (f % kClasses == labels[r]);
        }
    }
};

struct Session : mpt_test::Handles {
    explicit Session(const Data& data, int threads = 1) {
        mpt_context_options_t* options = nullptr;
        REQUIRE(mpt_context_options_create(&options) == MPT_STATUS_OK);
        REQUIRE(mpt_context_options_set_backend(options, MPT_BACKEND_CPU) == MPT_STATUS_OK);
        REQUIRE(mpt_context_options_set_threads(options, threads) == MPT_STATUS_OK);
        REQUIRE(mpt_context_create(options, &context) == MPT_STATUS_OK);
        mpt_context_options_destroy(options);
        REQUIRE(mpt_model_create(context, kFeatures, &model) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, 32, MPT_ACTIVATION_RELU) == MPT_STATUS_OK);
        REQUIRE(mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
        REQUIRE(mpt_dataset_create_f32(context, data.samples.data(), kRows, kFeatures, data.labels.data(), kClasses, 1,
                                       &dataset) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_create(model, nullptr, &trainer) == MPT_STATUS_OK);
    }
    std::vector<float> weights() const {
        std::vector<float> w(32 * kFeatures);
        mpt_model_get_weights(model, 0, w.data(), static_cast<int64_t>(w.size()), nullptr, 0);
        return w;
    }
};

}  // namespace

TEST_CASE("separate contexts train in parallel threads to the same bits as alone") {
    Data data;
    std::vector<float> alone;
    {
        Session session(data);
        REQUIRE(mpt_trainer_fit(session.trainer, session.dataset, 3, 16, 1) == MPT_STATUS_OK);
        alone = session.weights();
    }
    std::vector<std::vector<float>> results(4);
    std::vector<mpt_status> statuses(4, MPT_STATUS_INTERNAL);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t)
        threads.emplace_back([&, t] {
            mpt_context_t* context = nullptr;
            mpt_context_options_t* options = nullptr;
            mpt_context_options_create(&options);
            mpt_context_options_set_backend(options, MPT_BACKEND_CPU);
            mpt_context_options_set_threads(options, 1);
            mpt_context_create(options, &context);
            mpt_context_options_destroy(options);
            mpt_model_t* model = nullptr;
            mpt_model_create(context, kFeatures, &model);
            mpt_model_add_dense(model, 32, MPT_ACTIVATION_RELU);
            mpt_model_add_dense(model, kClasses, MPT_ACTIVATION_SOFTMAX);
            mpt_dataset_t* dataset = nullptr;
            mpt_dataset_create_f32(context, data.samples.data(), kRows, kFeatures, data.labels.data(), kClasses, 1, &dataset);
            mpt_trainer_t* trainer = nullptr;
            mpt_trainer_create(model, nullptr, &trainer);
            statuses[t] = mpt_trainer_fit(trainer, dataset, 3, 16, 1);
            results[t].resize(32 * kFeatures);
            mpt_model_get_weights(model, 0, results[t].data(), static_cast<int64_t>(results[t].size()), nullptr, 0);
            mpt_trainer_destroy(trainer);
            mpt_dataset_destroy(dataset);
            mpt_model_destroy(model);
            mpt_context_destroy(context);
        });
    for (auto& thread : threads) thread.join();
    for (size_t t = 0; t < results.size(); ++t) {
        CHECK(statuses[t] == MPT_STATUS_OK);
        CHECK(std::memcmp(results[t].data(), alone.data(), alone.size() * sizeof(float)) == 0);
    }
}

namespace {

struct Reentry {
    Session* session;
    mpt_status from_callback = MPT_STATUS_OK;
    mpt_status from_other_thread = MPT_STATUS_OK;
    bool tried = false;
};

int try_reentry(int64_t, int64_t, int64_t, float, float, void* user_data) {
    auto* reentry = static_cast<Reentry*>(user_data);
    if (reentry->tried) return 0;
    reentry->tried = true;
    float loss = 0.0f;
    reentry->from_callback = mpt_trainer_step(reentry->session->trainer, reentry->session->dataset, 0, 16, &loss);
    std::thread other([&] {
        reentry->from_other_thread = mpt_trainer_evaluate(reentry->session->trainer, reentry->session->dataset, 0, nullptr, nullptr);
    });
    other.join();
    return 0;
}

int throw_from_callback(int64_t, float, float, void*) { throw std::runtime_error("host failure"); }

}  // namespace

TEST_CASE("a trainer in use refuses a second use from its own callback or another thread") {
    Data data;
    Session session(data);
    Reentry reentry{&session};
    REQUIRE(mpt_trainer_set_callbacks(session.trainer, &try_reentry, nullptr, &reentry) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1) == MPT_STATUS_OK);
    CHECK(reentry.from_callback == MPT_STATUS_INVALID_STATE);
    CHECK(reentry.from_other_thread == MPT_STATUS_INVALID_STATE);
    // Once fit has returned the trainer is free again.
    float accuracy = 0.0f;
    CHECK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, nullptr, &accuracy) == MPT_STATUS_OK);
}

namespace {

// While the session's fit runs (in its first progress callback), another thread uses other handles
// of the same context: a second model, trainer and data set.
struct SharedContext {
    Session* session;
    mpt_model_t* other_model = nullptr;
    mpt_trainer_t* other_trainer = nullptr;
    mpt_status other_fit = MPT_STATUS_OK, other_weights = MPT_STATUS_OK, other_create = MPT_STATUS_OK;
    std::string message;
    bool tried = false;
};

int use_context_from_another_thread(int64_t, int64_t, int64_t, float, float, void* user_data) {
    auto* shared = static_cast<SharedContext*>(user_data);
    if (shared->tried) return 0;
    shared->tried = true;
    std::thread other([&] {
        shared->other_fit = mpt_trainer_fit(shared->other_trainer, shared->session->dataset, 1, 16, 1);
        shared->message = mpt_last_error();
        float weight = 0.0f;
        shared->other_weights = mpt_model_get_weights(shared->other_model, 1, nullptr, 0, &weight, 0);
        mpt_dataset_t* dataset = nullptr;
        shared->other_create = mpt_dataset_create_f32(shared->session->context, nullptr, 0, 0, nullptr, 0, 0, &dataset);
    });
    other.join();  // would deadlock if the other thread's calls waited for this fit
    return 0;
}

}  // namespace

TEST_CASE("a context in use by one thread refuses calls on its other handles from another thread; a destroy waits") {
    Data data;
    Session session(data);
    SharedContext shared;
    shared.session = &session;
    REQUIRE(mpt_model_create(session.context, kFeatures, &shared.other_model) == MPT_STATUS_OK);
    REQUIRE(mpt_model_add_dense(shared.other_model, kClasses, MPT_ACTIVATION_SOFTMAX) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_create(shared.other_model, nullptr, &shared.other_trainer) == MPT_STATUS_OK);
    REQUIRE(mpt_trainer_set_callbacks(session.trainer, &use_context_from_another_thread, nullptr, &shared) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1) == MPT_STATUS_OK);
    CHECK(shared.other_fit == MPT_STATUS_INVALID_STATE);
    CHECK(shared.message.find("in use by another thread") != std::string::npos);
    CHECK(shared.other_weights == MPT_STATUS_INVALID_STATE);
    CHECK(shared.other_create == MPT_STATUS_INVALID_STATE);

    // A destroy from another thread while fit runs waits for fit to return. The first progress
    // callback waits (up to 5 s) until the destroy has been called, then gives it 50 ms to finish
    // wrongly; every later callback checks that it has not.
    struct Progress {
        std::atomic<bool> fitting{false}, fit_over{false}, destroy_called{false}, destroyed{false};
        std::atomic<bool> destroyed_during_fit{false};
    } progress;
    std::thread destroyer([&] {
        while (!progress.fitting.load() && !progress.fit_over.load()) std::this_thread::yield();
        progress.destroy_called = true;
        mpt_trainer_destroy(shared.other_trainer);
        progress.destroyed = true;
    });
    REQUIRE(mpt_trainer_set_callbacks(
                session.trainer,
                [](int64_t, int64_t step, int64_t, float, float, void* user_data) {
                    auto* state = static_cast<Progress*>(user_data);
                    state->fitting = true;
                    if (step == 1) {
                        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                        while (!state->destroy_called.load() && std::chrono::steady_clock::now() < deadline)
                            std::this_thread::yield();
                        std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    }
                    if (state->destroyed.load()) state->destroyed_during_fit = true;
                    return 0;
                },
                nullptr, &progress) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1) == MPT_STATUS_OK);
    progress.fit_over = true;
    destroyer.join();
    CHECK(progress.destroy_called.load());
    CHECK(progress.destroyed.load());
    CHECK_FALSE(progress.destroyed_during_fit.load());
    mpt_model_destroy(shared.other_model);
    // Once fit has returned, the context is free for any thread.
    std::thread later([&] { CHECK(mpt_trainer_evaluate(session.trainer, session.dataset, 0, nullptr, nullptr) == MPT_STATUS_OK); });
    later.join();
}

TEST_CASE("a callback that throws stops training with MPT_STATUS_CANCELLED and the trainer stays usable") {
    Data data;
    Session session(data);
    REQUIRE(mpt_trainer_set_callbacks(session.trainer, nullptr, &throw_from_callback, nullptr) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1) == MPT_STATUS_CANCELLED);
    CHECK(std::strstr(mpt_last_error(), "host failure") != nullptr);
    REQUIRE(mpt_trainer_set_callbacks(session.trainer, nullptr, nullptr, nullptr) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, session.dataset, 1, 16, 1) == MPT_STATUS_OK);
}

// What a callback may do to its own fit besides reading: destroy the handles it trains with, and
// save a checkpoint.
namespace {

struct CallbackAction {
    Session* session;
    int64_t at_call = 2;  // the progress call that acts (1-based)
    int64_t calls = 0;
    const char* checkpoint = nullptr;  // saved there, when set
    bool destroy_dataset = false;
    bool destroy_trainer = false;
    mpt_status saved = MPT_STATUS_INTERNAL;
};

int act_on_progress(int64_t, int64_t, int64_t, float, float, void* user_data) {
    CallbackAction& action = *static_cast<CallbackAction*>(user_data);
    if (++action.calls != action.at_call) return 0;
    if (action.checkpoint) action.saved = mpt_trainer_save_checkpoint(action.session->trainer, action.checkpoint);
    if (action.destroy_dataset) {
        mpt_dataset_destroy(action.session->dataset);
        action.session->dataset = nullptr;
    }
    if (action.destroy_trainer) {
        mpt_trainer_destroy(action.session->trainer);
        action.session->trainer = nullptr;
    }
    return 0;
}

int save_at_first_epoch_end(int64_t epoch, float, float, void* user_data) {
    CallbackAction& action = *static_cast<CallbackAction*>(user_data);
    if (epoch == 0) action.saved = mpt_trainer_save_checkpoint(action.session->trainer, action.checkpoint);
    return 0;
}

std::string checkpoint_path(const char* name) {
    return (std::filesystem::temp_directory_path() / (std::string("mptrain_test_threads_") + name)).string();
}

// Loads `path` into a fresh session's trainer and fits it on to `epochs` epochs in all (an epoch the
// checkpoint is inside counts as one); returns the first layer's weights.
std::vector<float> resumed_weights(const Data& data, const std::string& path, int64_t epochs,
                                   int64_t expected_epochs_done) {
    Session resumed(data);
    REQUIRE(mpt_trainer_load_checkpoint(resumed.trainer, path.c_str()) == MPT_STATUS_OK);
    int64_t done = -1;
    REQUIRE(mpt_trainer_get_progress(resumed.trainer, nullptr, &done) == MPT_STATUS_OK);
    CHECK(done == expected_epochs_done);
    REQUIRE(mpt_trainer_fit(resumed.trainer, resumed.dataset, epochs - done, 16, 1) == MPT_STATUS_OK);
    return resumed.weights();
}

}  // namespace

TEST_CASE("a callback may destroy the data set being fitted: fit keeps it until it returns") {
    Data data;
    Session session(data);
    CallbackAction action{&session};
    action.destroy_dataset = true;
    const mpt_dataset_t* fitted = session.dataset;
    REQUIRE(mpt_trainer_set_callbacks(session.trainer, &act_on_progress, nullptr, &action) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(session.trainer, fitted, 1, 16, 1) == MPT_STATUS_OK);  // (ASan: no use after free)
    CHECK(session.dataset == nullptr);
    CHECK(action.calls == kRows / 16);  // the whole epoch trained
}

TEST_CASE("a callback that destroys its own trainer stops fit with CANCELLED; the trainer goes when fit returns") {
    Data data;
    Session session(data);
    CallbackAction action{&session};
    action.destroy_trainer = true;
    mpt_trainer_t* trainer = session.trainer;
    REQUIRE(mpt_trainer_set_callbacks(trainer, &act_on_progress, nullptr, &action) == MPT_STATUS_OK);
    CHECK(mpt_trainer_fit(trainer, session.dataset, 3, 16, 1) == MPT_STATUS_CANCELLED);
    CHECK(std::strstr(mpt_last_error(), "destroyed from a callback") != nullptr);
    CHECK(action.calls == 2);  // stopped right after the callback (LeakSanitizer: and deleted)
    // The model it trained lives on.
    std::vector<float> out(kClasses);
    CHECK(mpt_model_predict(session.model, data.samples.data(), 1, out.data(), kClasses) == MPT_STATUS_OK);
}

TEST_CASE("a progress or epoch-end callback may save a checkpoint, which resumes as an automatic one would") {
    Data data;
    SUBCASE("inside an epoch, and at its last step") {
        // At the last step every step of the epoch has run: the checkpoint books it, as fit does next.
        for (int64_t at_call : {int64_t{5}, kRows / 16}) {
            CAPTURE(at_call);
            const std::string path = checkpoint_path("progress.safetensors");
            Session session(data);
            CallbackAction action{&session};
            action.at_call = at_call;
            action.checkpoint = path.c_str();
            REQUIRE(mpt_trainer_set_callbacks(session.trainer, &act_on_progress, nullptr, &action) == MPT_STATUS_OK);
            REQUIRE(mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1) == MPT_STATUS_OK);
            CHECK(action.saved == MPT_STATUS_OK);
            // The loaded checkpoint, fitted on to two epochs: the same bits as the run that saved it.
            CHECK(resumed_weights(data, path, 2, at_call == kRows / 16 ? 1 : 0) == session.weights());
            std::remove(path.c_str());
        }
    }
    SUBCASE("at an epoch's end") {
        const std::string path = checkpoint_path("epoch_end.safetensors");
        Session session(data);
        CallbackAction action{&session};
        action.checkpoint = path.c_str();
        REQUIRE(mpt_trainer_set_callbacks(session.trainer, nullptr, &save_at_first_epoch_end, &action) == MPT_STATUS_OK);
        REQUIRE(mpt_trainer_fit(session.trainer, session.dataset, 2, 16, 1) == MPT_STATUS_OK);
        CHECK(action.saved == MPT_STATUS_OK);
        CHECK(resumed_weights(data, path, 2, 1) == session.weights());
        std::remove(path.c_str());
    }
}
