// cuBLASLt, opened with dlopen when the CUDA backend is first wanted instead of linked: the CUDA
// runtime is linked statically, so with this libmptrain.so has no CUDA library among its load-time
// dependencies, and it loads (and runs on the CPU) on machines with no CUDA libraries at all, not
// only on machines without a GPU or driver.
#pragma once

#include <cublasLt.h>

#include <string>

namespace mpt {

// The entry points mptrain uses, resolved from the loaded library.
struct CublasLt {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
    decltype(&cublasLtMatmulDescCreate) matmul_desc_create;
    decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
    decltype(&cublasLtMatmulPreferenceCreate) preference_create;
    decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
    decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
    decltype(&cublasLtGetStatusName) get_status_name;
    decltype(&cublasLtGetStatusString) get_status_string;
};

// Loads cuBLASLt of the major version mptrain was built against on first call (thread-safe; later
// calls return the same answer). Null when it cannot be loaded; `why`, when given, then says why.
const CublasLt* cublaslt(std::string* why = nullptr);

}  // namespace mpt
