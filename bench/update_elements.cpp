// The CPU optimizer update's element loop, alone: the shared rule called per element (as the CPU
// backend ran it before cpu_update_elements.cpp) against update_elements, the loop with the rule's
// branches decided outside it, over the seed MLP's 12.3M parameters on one thread, for each
// optimizer. Both start from the same arrays and must end with the same bits (checked); the time is
// the least of the repeats, which the VM's noise only lengthens. Prints ms per pass and the ratio.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_update_elements.h"
#include "nn/optimizer.h"

namespace {

using namespace mpt;

constexpr int64_t kParameters = 3072 * 3000 + 3000 + 3000 * 1000 + 1000 + 1000 * 10 + 10;
constexpr int kRepeats = 7;

struct Arrays {
    std::vector<float> master, gradient, states[kMaxOptimizerStates];
};

// The rule per element, with states selected per element: the loop the CPU backend had.
void per_element(const OptimizerConfig& config, const OptimizerStepScalars& scalars, Arrays& a) {
    float* states[kMaxOptimizerStates] = {};
    for (int k = 0; k < optimizer_state_count(config); ++k) states[k] = a.states[k].data();
    float unused1 = 0.0f, unused2 = 0.0f, unused3 = 0.0f;
    for (int64_t i = 0; i < kParameters; ++i) {
        float& s1 = states[0] ? states[0][i] : unused1;
        float& s2 = states[1] ? states[1][i] : unused2;
        float& s3 = states[2] ? states[2][i] : unused3;
        a.master[i] = optimizer_update_element(config, scalars, a.master[i], a.gradient[i], s1, s2, s3);
    }
}

void vectorised(const OptimizerConfig& config, const OptimizerStepScalars& scalars, Arrays& a) {
    float* states[kMaxOptimizerStates] = {};
    for (int k = 0; k < optimizer_state_count(config); ++k) states[k] = a.states[k].data();
    update_elements(config, scalars, a.master.data(), a.gradient.data(), states, 0, kParameters);
}

template <typename Pass>
double least_ms(const OptimizerConfig& config, const OptimizerStepScalars& scalars, const Arrays& start, Arrays& out,
                Pass pass) {
    double best = 1e30;
    for (int r = 0; r < kRepeats; ++r) {
        out = start;
        const auto begin = std::chrono::steady_clock::now();
        pass(config, scalars, out);
        const auto end = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::milli>(end - begin).count());
    }
    return best;
}

bool same_bits(const Arrays& a, const Arrays& b) {
    const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
        return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    bool result = same(a.master, b.master);
    for (int k = 0; k < kMaxOptimizerStates; ++k) result = result && same(a.states[k], b.states[k]);
    return result;
}

}  // namespace

int main() {
    std::mt19937 generator(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Arrays start;
    start.master.resize(kParameters);
    start.gradient.resize(kParameters);
    for (int64_t i = 0; i < kParameters; ++i) {
        start.master[i] = 0.05f * normal(generator);
        start.gradient[i] = 1024.0f * 0.01f * normal(generator);  // multiplied by a loss scale of 1024
    }
    for (auto& state : start.states) state.assign(kParameters, 0.0f);
    for (int64_t i = 0; i < kParameters; ++i) {  // states as after some steps: v > 0, averages either sign
        start.states[0][i] = 1e-4f * (1.0f + std::abs(normal(generator)));
        start.states[1][i] = 1e-3f * normal(generator);
        start.states[2][i] = 1e-3f * normal(generator);
    }
    struct Case {
        const char* name;
        OptimizerConfig config;
    };
    std::vector<Case> cases(8);
    cases[0].name = "sgd momentum 0.9";
    cases[0].config.momentum = 0.9f;
    cases[1].name = "sgd nesterov, decay";
    cases[1].config.momentum = 0.9f;
    cases[1].config.nesterov = true;
    cases[1].config.weight_decay = 0.01f;
    cases[2].name = "adam";
    cases[2].config.kind = OptimizerKind::adam;
    cases[3].name = "adamw";
    cases[3].config.kind = OptimizerKind::adamw;
    cases[3].config.weight_decay = 0.004f;
    cases[4].name = "rmsprop";
    cases[4].config.kind = OptimizerKind::rmsprop;
    cases[5].name = "rmsprop centered";
    cases[5].config.kind = OptimizerKind::rmsprop;
    cases[5].config.centered = true;
    cases[6].name = "rmsprop momentum centered";
    cases[6].config.kind = OptimizerKind::rmsprop;
    cases[6].config.momentum = 0.9f;
    cases[6].config.centered = true;
    cases[7].name = "lion";
    cases[7].config.kind = OptimizerKind::lion;
    cases[7].config.beta2 = 0.99f;
    std::printf("optimizer element loop, %lld parameters, one thread, least of %d passes\n",
                static_cast<long long>(kParameters), kRepeats);
    std::printf("%-28s %14s %14s %8s %10s\n", "optimizer", "per element ms", "vectorised ms", "ratio", "same bits");
    int failed = 0;
    Arrays scalar_out, vector_out;
    for (const Case& c : cases) {
        const OptimizerStepScalars scalars = optimizer_step_scalars(c.config, 1024.0f, 3, 3);
        const double scalar_ms = least_ms(c.config, scalars, start, scalar_out, per_element);
        const double vector_ms = least_ms(c.config, scalars, start, vector_out, vectorised);
        const bool same = same_bits(scalar_out, vector_out);
        failed += !same;
        std::printf("%-28s %14.1f %14.1f %7.2fx %10s\n", c.name, scalar_ms, vector_ms, scalar_ms / vector_ms,
                    same ? "yes" : "NO");
    }
    return failed ? 1 : 0;
}
