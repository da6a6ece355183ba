// See openblas_library.h.
#include "backend/cpu/openblas_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace mpt {

namespace {

constexpr const char* kCoreVariable = "OPENBLAS_CORETYPE";

std::vector<std::string> candidates() {
    if (const char* chosen = std::getenv("MPTRAIN_OPENBLAS"); chosen && *chosen) return {chosen};
    // The loader's search (LD_LIBRARY_PATH, the ldconfig cache, ...) first, then the folder the
    // build found OpenBLAS in, which is where a linked OpenBLAS would have been looked for.
    return {MPTRAIN_OPENBLAS_SONAME, std::string(MPTRAIN_OPENBLAS_DIR) + "/" + MPTRAIN_OPENBLAS_SONAME};
}

void* already_loaded(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
        if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD)) return handle;
    }
    return nullptr;
}

void* open_first(const std::vector<std::string>& names, std::string& why) {
    for (const std::string& name : names) {
        if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
        why += (why.empty() ? "" : "; ") + std::string(dlerror());
    }
    return nullptr;
}

template <typename Function>
bool resolve(void* library, const char* name, Function& function, std::string& why) {
    function = reinterpret_cast<Function>(dlsym(library, name));
    if (!function) why = std::string("the OpenBLAS library lacks ") + name;
    return function != nullptr;
}

struct Loaded {
    OpenBlas api;
    OpenBlasLoad answer;
};

Loaded* load() {
    auto* loaded = new Loaded;
    const std::vector<std::string> names = candidates();
    void* library = already_loaded(names);
    if (!library) {
        // OpenBLAS reads the variable in its load-time constructor and never again, so it is set
        // only around dlopen. setenv is not safe against another thread's getenv; this happens once
        // per process, on the first CPU GEMM, and only when the user has not set the variable.
        const std::string core = openblas_core_for_this_cpu();
        const bool choose = std::getenv(kCoreVariable) == nullptr && !core.empty();
        if (choose && setenv(kCoreVariable, core.c_str(), 0) == 0) loaded->answer.chosen_core = core;
        library = open_first(names, loaded->answer.why);
        if (!loaded->answer.chosen_core.empty()) unsetenv(kCoreVariable);
        if (!library) loaded->answer.chosen_core.clear();
    }
    // The library stays loaded for the life of the process: its threads and buffers are its own.
    if (library && resolve(library, "cblas_sgemm", loaded->api.sgemm, loaded->answer.why) &&
        resolve(library, "cblas_sgemv", loaded->api.sgemv, loaded->answer.why) &&
        resolve(library, "openblas_set_num_threads", loaded->api.set_num_threads, loaded->answer.why) &&
        resolve(library, "openblas_get_corename", loaded->api.get_corename, loaded->answer.why) &&
        resolve(library, "openblas_get_num_threads", loaded->api.get_num_threads, loaded->answer.why) &&
        resolve(library, "openblas_get_num_procs", loaded->api.get_num_procs, loaded->answer.why)) {
        loaded->answer.api = &loaded->api;
        loaded->answer.why.clear();
    }
    return loaded;
}

}  // namespace

std::string openblas_core_for_this_cpu() {
#if defined(__x86_64__)
    // libgcc's checks include the operating system's support (XCR0), not only CPUID's.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return {};
}

const OpenBlasLoad& openblas() {
    // Never destroyed: contexts alive at static destruction (an interpreter's exit) still use it.
    static const Loaded* loaded = nullptr;
    static std::once_flag once;
    std::call_once(once, [] { loaded = load(); });
    return loaded->answer;
}

namespace {

// Load with the library, as a linked OpenBLAS was, so a host that loads mptrain before anything
// else that uses OpenBLAS (a Python `import mptrain` before numpy) gets the kernels mptrain chose.
__attribute__((constructor)) void load_openblas_with_mptrain() { openblas(); }

}  // namespace

}  // namespace mpt
