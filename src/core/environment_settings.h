// The library's switches in the environment (MPTRAIN_CPU_AMX=0, MPTRAIN_CUDA_GRAPHS=0, ...): a value
// a switch does not know is ignored, and said so in the backend's setup warning, since a typo
// (MPTRAIN_CPU_AMX=off) would otherwise look like a path turned off.
#pragma once

#include <string>
#include <vector>

namespace mpt {

struct EnvironmentSwitch {
    const char* name;
    std::vector<std::string> values;  // the values it knows; unset and empty are always allowed
};

// "NAME=value is ignored (known: a, b)" for each switch set to a value it does not know, joined by
// "; "; empty when there is none.
std::string unknown_environment_settings(const std::vector<EnvironmentSwitch>& switches);

}  // namespace mpt
