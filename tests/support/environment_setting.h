// An environment variable set for a scope: the CUDA backend reads its switches (MPTRAIN_CUDA_*) from
// the environment when it is made, so the GPU cases make contexts under settings and put the
// environment back for the contexts made after them, however the making ends.
#pragma once

#include <cstdlib>
#include <string>

namespace mpt::testing {

// Sets an environment variable (`value` nullptr: unsets it) for its lifetime, then puts back what was
// there (or nothing). `variable` must outlive it.
class EnvironmentSetting {
public:
    EnvironmentSetting(const char* variable, const char* value) : variable_(variable) {
        const char* before = std::getenv(variable);
        had_value_ = before != nullptr;
        if (had_value_) before_ = before;
        if (value)
            setenv(variable, value, 1);
        else
            unsetenv(variable);
    }
    ~EnvironmentSetting() {
        if (had_value_)
            setenv(variable_, before_.c_str(), 1);
        else
            unsetenv(variable_);
    }
    EnvironmentSetting(const EnvironmentSetting&) = delete;
    EnvironmentSetting& operator=(const EnvironmentSetting&) = delete;

private:
    const char* variable_;
    bool had_value_ = false;
    std::string before_;
};

}  // namespace mpt::testing
