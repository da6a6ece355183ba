// The CUDA backend's switched-off paths, on together. Each switch has its cases
// (test_cuda_fast_paths, test_cuda_ops), most of them with that switch alone; a device check then
// chooses its candidate defaults as the union of the switches that made the step faster
// (bench/peers/best_switches.py), and a session may commit that union as the defaults. Paths that
// fold ops into one another (the begin_step into the loss head, the decision into the max pass,
// finish_step into the grouped update, with dependent launch and the small-batch kernels around
// them) meet only there. So this case trains with a set of switches on at once against every one of
// them off by name, and requires the same training within rounding, no refused graph, and each
// switch that the device kept on to have run its path somewhere.
//
// The set: the switches the environment sets (the device check runs this case again under its
// candidate's settings, bench/device_check.sh), or, where it sets none, every one of them (the GPU
// test stage's run: the widest union a choice can make).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/environment_setting.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"

namespace {

using namespace mpt;
using namespace mpt::testing;

// A switch a device check may choose: its variable, the settings that turn it on and off, its
// member in mpt_context_describe's "switches" and that member's value when on, and the counters
// ("section.key" of the description) of which one above 0 shows that its path ran.
struct Switch {
    std::string variable, on, off, described;
    bool described_when_on;
    std::vector<std::string> evidence;
};

// bench/switches.json, the one list of the switches, which best_switches.py and summary.py read too
// (MPTRAIN_SWITCH_TABLE: its path, from tests/CMakeLists.txt). The counters are its "evidence", or
// its "test_evidence" where it has one (the GEMM autotuning, shown here by the plans it timed: a plan
// whose heuristic's first choice won is tuned too). Split K off has no counter; every set on together
// takes the small-outputs rule in its place (a choice holds one or the other).
const std::vector<Switch>& switches() {
    static const std::vector<Switch> all = [] {
        std::ifstream file(MPTRAIN_SWITCH_TABLE);
        const nlohmann::json table = nlohmann::json::parse(file, nullptr, false);
        if (table.is_discarded()) throw std::runtime_error("cannot read the switches from " MPTRAIN_SWITCH_TABLE);
        std::vector<Switch> list;
        for (const nlohmann::json& s : table.at("switches"))
            list.push_back({s.at("variable"), s.at("on"), s.at("off"), s.at("field"), s.at("on_value"),
                            s.value("test_evidence", s.at("evidence")).get<std::vector<std::string>>()});
        return list;
    }();
    return all;
}

// Whether the environment sets any of the switches: then the context under test is made as the
// environment has it (the candidate's settings, and the defaults of the others), else with every
// switch on but split K off (a choice holds the small-outputs rule or split K off, not both).
bool environment_sets_switches() {
    for (const Switch& s : switches())
        if (std::getenv(s.variable.c_str()) != nullptr) return true;
    return false;
}

std::vector<const Switch*> every_switch() {
    std::vector<const Switch*> all;
    for (const Switch& s : switches())
        if (s.variable != "MPTRAIN_CUDA_SPLIT_K") all.push_back(&s);
    return all;
}

// A CUDA context with `on` switched on and every other switch of the table off, by name.
std::shared_ptr<Context> context_with(const std::vector<const Switch*>& on) {
    std::vector<std::unique_ptr<EnvironmentSetting>> settings;
    for (const Switch& s : switches()) {
        bool wanted = false;
        for (const Switch* w : on) wanted = wanted || w == &s;
        settings.push_back(
            std::make_unique<EnvironmentSetting>(s.variable.c_str(), wanted ? s.on.c_str() : s.off.c_str()));
    }
    return make_context(MPT_BACKEND_CUDA);
}

nlohmann::json described(const Context& context) {
    nlohmann::json parsed = nlohmann::json::parse(context.describe(), nullptr, false);
    REQUIRE_FALSE(parsed.is_discarded());
    return parsed;
}

uint64_t counter(const nlohmann::json& description, const std::string& dotted) {
    const size_t dot = dotted.find('.');
    const auto section = description.find(dotted.substr(0, dot));
    if (section == description.end()) return 0;
    const auto value = section->find(dotted.substr(dot + 1));
    return value == section->end() ? 0 : value->get<uint64_t>();
}

// What a run trained to: the loss on its data after, and the loss scaler's record of the steps.
struct RunResult {
    float loss;
    TrainState state;
};

// One of the runs: its name, the tolerance of its loss against the reference's, and the training.
struct Run {
    const char* name;
    double loss_epsilon;
    std::function<RunResult(const std::shared_ptr<Context>&)> train;
};

RunResult train(const std::shared_ptr<Context>& context, const std::shared_ptr<Model>& model, const SyntheticData& data,
                TrainerConfig config, int64_t batch) {
    auto dataset = to_dataset(context, data);
    Trainer trainer(model, config);
    trainer.fit(*dataset, 2, batch, true);
    REQUIRE(trainer.epochs_completed() == 2);
    return RunResult{trainer.evaluate(*dataset, 256).loss, trainer.state()};
}

TrainerConfig config_for(mpt_precision precision) {
    TrainerConfig config;
    config.precision = precision;
    return config;
}

// The small MLP (100 -> 48 -> 40 -> 10) trained at `batch` in mixed-bf16 on `data`, with `options`
// applied to its layers (before it is built) and to its trainer's configuration.
using TrainingOptions = std::function<void(Model&, TrainerConfig&)>;
RunResult train_small_mlp_with(const std::shared_ptr<Context>& context, const SyntheticData& data,
                               const TrainingOptions& options, int64_t batch = 32) {
    TrainerConfig config = config_for(MPT_PRECISION_MIXED_BF16);
    auto model = make_mlp(context, data.features, [&](Model& unbuilt) { options(unbuilt, config); });
    return train(context, model, data, config, batch);
}

// The paths each switch takes, in the step shapes where they act: the seed MLP at batch 32 (the
// small-batch kernels, fused SGD, grouped), at 64 (fused SGD's largest batch, the small-batch
// kernels' too) under a per-step rate that the grouped launch's finishing block advances, and at
// 512 (the weight-gradient GEMMs, with the large outputs kept whole); the small MLP in mixed-fp16
// from a scale of 2^24, whose first steps overflow and are skipped (the folds of the scaler's work),
// one hidden layer (another arena plan) and fp32; then the trainer's options that put other ops
// around those paths (dropout, micro-batches, a frozen layer, clipping, weight averaging,
// standardized inputs, momentum with weight decay, Adam), which every GPU test exercises once a
// switch is a default, but only this case under a candidate's.
std::vector<Run> runs() {
    static const SyntheticData seed_rows = synthetic_data(640, 3072, 83);
    static const SyntheticData seed_rows_large = synthetic_data(2048, 3072, 89);
    static const SyntheticData small_rows = synthetic_data(640, 100, 97);
    return {
        {"seed MLP, mixed-bf16, batch 32", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train(c, make_seed_mlp(c), seed_rows, config_for(MPT_PRECISION_MIXED_BF16), 32);
         }},
        {"seed MLP, mixed-bf16, batch 64, a rate that changes every step", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             TrainerConfig config = config_for(MPT_PRECISION_MIXED_BF16);
             config.optimizer.schedule.kind = LrScheduleKind::cosine;
             config.optimizer.schedule.warmup_steps = 2;
             config.optimizer.schedule.decay_steps = 10;
             config.optimizer.schedule.decay_factor = 0.0f;
             return train(c, make_seed_mlp(c), seed_rows, config, 64);
         }},
        {"seed MLP, mixed-bf16, batch 512", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train(c, make_seed_mlp(c), seed_rows_large, config_for(MPT_PRECISION_MIXED_BF16), 512);
         }},
        {"small MLP, mixed-fp16 from a loss scale of 2^24, batch 32", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             TrainerConfig config = config_for(MPT_PRECISION_MIXED_FP16);
             config.loss_scaling = MPT_LOSS_SCALING_DYNAMIC;
             config.scaler.initial_scale = 16777216.0f;
             return train(c, make_mlp(c, small_rows.features), small_rows, config, 32);
         }},
        {"one hidden layer (100 -> 128 -> 10), mixed-bf16, batch 32", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train(c, make_one_hidden_layer_mlp(c, small_rows.features, 128), small_rows,
                          config_for(MPT_PRECISION_MIXED_BF16), 32);
         }},
        {"small MLP, fp32, batch 32", 1e-3,
         [](const std::shared_ptr<Context>& c) {
             return train(c, make_mlp(c, small_rows.features), small_rows, config_for(MPT_PRECISION_FP32), 32);
         }},
        {"small MLP, mixed-bf16, dropout on the inputs and both hidden layers", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(c, small_rows, [](Model& model, TrainerConfig&) {
                 model.set_input_dropout(0.1f);
                 model.set_layer_dropout(0, 0.2f);
                 model.set_layer_dropout(1, 0.2f);
             });
         }},
        {"small MLP, mixed-bf16, batches of 64 in micro-batches of 32", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(
                 c, small_rows, [](Model&, TrainerConfig& config) { config.micro_batch_size = 32; }, 64);
         }},
        {"small MLP, mixed-bf16, the first layer frozen", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(c, small_rows,
                                         [](Model& model, TrainerConfig&) { model.set_layer_trainable(0, false); });
         }},
        {"small MLP, mixed-bf16, clipped to a global norm of 0.5, weights averaged", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(c, small_rows, [](Model&, TrainerConfig& config) {
                 config.optimizer.global_clipnorm = 0.5f;
                 config.optimizer.ema_momentum = 0.9f;
             });
         }},
        {"small MLP, mixed-bf16, standardized inputs, momentum 0.9 with weight decay", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(c, small_rows, [](Model& model, TrainerConfig& config) {
                 const std::vector<float> mean(100, 100.0f), stddev(100, 60.0f);
                 model.set_input_standardization(mean.data(), stddev.data(), 100);
                 config.optimizer.momentum = 0.9f;
                 config.optimizer.weight_decay = 0.01f;
             });
         }},
        {"small MLP, mixed-bf16, Adam", 5e-3,
         [](const std::shared_ptr<Context>& c) {
             return train_small_mlp_with(c, small_rows, [](Model&, TrainerConfig& config) {
                 config.optimizer.kind = OptimizerKind::adam;
                 config.optimizer.learning_rate = 0.001f;
             });
         }},
    };
}

std::string names_of(const std::vector<const Switch*>& set) {
    std::ostringstream names;
    for (const Switch* s : set) names << (names.tellp() > 0 ? " " : "") << s->variable << "=" << s->on;
    return names.str();
}

}  // namespace

// The runs themselves, on the CPU in every build: each trains to a finite loss, and the mixed-fp16
// run from 2^24 skips its first steps, so that a GPU session finds the case's runs as meant.
TEST_CASE("the runs of the switches-together case train on the CPU") {
    for (const Run& run : runs()) {
        const std::string name = run.name;
        CAPTURE(name);
        const RunResult result = run.train(make_context(MPT_BACKEND_CPU));
        CHECK(std::isfinite(result.loss));
        CHECK(result.state.steps > 0);
        CHECK(result.state.applied_steps + result.state.skipped_steps == result.state.steps);
        if (name.find("2^24") != std::string::npos) CHECK(result.state.skipped_steps > 0);
    }
}

// (bench/peers/best_switches.py knows this case by the start of its name: keep them alike.)
TEST_CASE("the CUDA switches set on together train as with all of them off") {
    SKIP_WITHOUT_GPU();
    const bool from_environment = environment_sets_switches();
    const auto make_together = [&] {
        return from_environment ? make_context(MPT_BACKEND_CUDA) : context_with(every_switch());
    };
    // The switches on as the context is made: those asked for that the device kept on (below compute
    // capability 8.0 the tensor-core paths stay off, dependent launch below 9.0), and any that are
    // defaults by then.
    std::vector<const Switch*> on;
    {
        const nlohmann::json made = described(*make_together());
        for (const Switch& s : switches()) {
            const bool is_on = made["switches"].value(s.described, !s.described_when_on) == s.described_when_on;
            if (is_on) on.push_back(&s);
            const char* asked = std::getenv(s.variable.c_str());
            const bool was_asked = from_environment ? asked != nullptr && std::string(asked) == s.on
                                                    : s.variable != "MPTRAIN_CUDA_SPLIT_K";
            if (was_asked && !is_on) MESSAGE(s.variable << "=" << s.on << ": off on this device");
        }
    }
    MESSAGE("switches on together (" << std::string(from_environment ? "the environment's" : "every one")
                                     << "): " << (on.empty() ? std::string("none") : names_of(on)));
    std::vector<bool> path_ran(on.size(), false);
    uint64_t updates_deciding = 0;  // steps whose max pass the switches left nothing to read (a fold, not a switch)
    for (const Run& run : runs()) {
        const std::string name = run.name;
        CAPTURE(name);
        auto together = make_together();
        const RunResult result = run.train(together);
        const RunResult reference = run.train(context_with({}));
        const nlohmann::json description = described(*together);
        INFO("last refusal: " << description["graphs"].value("last_refusal", std::string("?")));
        CHECK(description["graphs"].value("refusals", uint64_t{1}) == 0);
        CHECK(description["graphs"].value("replays", uint64_t{0}) > 0);
        for (size_t i = 0; i < on.size(); ++i) {
            const bool still_on =
                description["switches"].value(on[i]->described, !on[i]->described_when_on) == on[i]->described_when_on;
            // Still on after the run (a refused capture turns dependent launch off, and fails above).
            CHECK_MESSAGE(still_on, on[i]->variable << " was turned off during the run");
            for (const std::string& place : on[i]->evidence)
                if (counter(description, place) > 0) path_ran[i] = true;
        }
        updates_deciding += counter(description, "ops.updates_deciding");
        CHECK(std::isfinite(result.loss));
        CHECK(result.loss == doctest::Approx(reference.loss).epsilon(run.loss_epsilon));
        // The same steps applied and skipped, and the scale left where the reference's is.
        CHECK(result.state.steps == reference.state.steps);
        CHECK(result.state.applied_steps == reference.state.applied_steps);
        CHECK(result.state.skipped_steps == reference.state.skipped_steps);
        CHECK(result.state.loss_scale == reference.state.loss_scale);
    }
    // (Split K off keeps every GEMM whole: the small-outputs rule then has none left to keep.)
    bool split_k_off = false;
    for (const Switch* s : on) split_k_off = split_k_off || s->variable == "MPTRAIN_CUDA_SPLIT_K";
    for (size_t i = 0; i < on.size(); ++i) {
        if (on[i]->evidence.empty()) continue;  // (split K off: no counter)
        if (split_k_off && on[i]->described == "split_k_small_outputs") continue;
        CHECK_MESSAGE(path_ran[i], on[i]->variable << "=" << on[i]->on << ": its path ran in none of the runs ("
                                                   << on[i]->evidence.front() << ")");
    }
    // With every switch on, ReLU's derivative from the outputs (any device) takes the maxima below the
    // loss head, which takes the logits gradient's: at fused SGD's batches the max pass has nothing
    // to read, and the first update's launch decides.
    MESSAGE("decisions taken by an update's launch: " << updates_deciding);
    if (!from_environment) CHECK(updates_deciding > 0);
}
