// See environment_settings.h.
#include "core/environment_settings.h"

#include <algorithm>
#include <cstdlib>

namespace mpt {

std::string unknown_environment_settings(const std::vector<EnvironmentSwitch>& switches) {
    std::string unknown;
    for (const EnvironmentSwitch& variable : switches) {
        const char* setting = std::getenv(variable.name);
        if (!setting || !*setting) continue;
        const std::string value = setting;
        if (std::find(variable.values.begin(), variable.values.end(), value) != variable.values.end()) continue;
        std::string known;
        for (const std::string& allowed : variable.values) known += (known.empty() ? "" : ", ") + allowed;
        unknown += std::string(unknown.empty() ? "" : "; ") + variable.name + "=" + value + " is ignored (known: " +
                   known + ")";
    }
    return unknown;
}

}  // namespace mpt
