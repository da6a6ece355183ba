// See cuda_cublaslt_library.cuh.
#include "backend/cuda/cuda_cublaslt_library.cuh"

#include <cublas_api.h>
#include <dlfcn.h>

#include <mutex>

namespace mpt {

namespace {

struct Loaded {
    CublasLt api{};
    bool ok = false;
    std::string why;
};

#define MPT_STRINGIFY_(x) #x
#define MPT_STRINGIFY(x) MPT_STRINGIFY_(x)
constexpr const char* kLibrary = "libcublasLt.so." MPT_STRINGIFY(CUBLAS_VER_MAJOR);

void* open_library(std::string& why) {
    // The loader's search (LD_LIBRARY_PATH, the ldconfig cache, ...) first, then the toolkit this
    // build was linked against, which is where a linked cuBLASLt would have been found (RUNPATH).
    if (void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL)) return handle;
    why = dlerror();
#ifdef MPTRAIN_CUDA_LIBRARY_DIR
    const std::string path = std::string(MPTRAIN_CUDA_LIBRARY_DIR) + "/" + kLibrary;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    why += "; " + std::string(dlerror());
#endif
    return nullptr;
}

template <typename Function>
bool resolve(void* library, const char* name, Function& function, std::string& why) {
    function = reinterpret_cast<Function>(dlsym(library, name));
    if (!function) why = std::string(kLibrary) + " lacks " + name;
    return function != nullptr;
}

Loaded load() {
    Loaded loaded;
    void* library = open_library(loaded.why);
    if (!library) return loaded;
    CublasLt& api = loaded.api;
    loaded.ok = true;
#define MPT_CUBLASLT_RESOLVE(member, symbol) loaded.ok = loaded.ok && resolve(library, #symbol, api.member, loaded.why);
    MPT_CUBLASLT_FUNCTIONS(MPT_CUBLASLT_RESOLVE)
#undef MPT_CUBLASLT_RESOLVE
    // The library stays loaded for the life of the process: plans and handles may outlive any owner.
    return loaded;
}

}  // namespace

const CublasLt* cublaslt(std::string* why) {
    // Never destroyed: contexts that outlive static destruction (held in statics, or alive at an
    // interpreter's exit) still release their plans through the table.
    static const Loaded* loaded = nullptr;
    static std::once_flag once;
    std::call_once(once, [] { loaded = new Loaded(load()); });
    if (!loaded->ok && why) *why = loaded->why;
    return loaded->ok ? &loaded->api : nullptr;
}

}  // namespace mpt
