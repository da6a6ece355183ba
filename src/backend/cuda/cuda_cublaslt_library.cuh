// cuBLASLt, opened with dlopen when the CUDA backend is first wanted instead of linked: the CUDA
// runtime is linked statically, so with this libmptrain.so has no CUDA library among its load-time
// dependencies, and it loads (and runs on the CPU) on machines with no CUDA libraries at all, not
// only on machines without a GPU or driver.
#pragma once

#include <cublasLt.h>

#include <string>

namespace mpt {

// The entry points mptrain uses, as (member, cuBLASLt symbol): one list for the table and its loader.
#define MPT_CUBLASLT_FUNCTIONS(X)                                       \
    X(create, cublasLtCreate)                                           \
    X(destroy, cublasLtDestroy)                                         \
    X(matmul, cublasLtMatmul)                                           \
    X(algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic)               \
    X(matmul_desc_create, cublasLtMatmulDescCreate)                     \
    X(matmul_desc_destroy, cublasLtMatmulDescDestroy)                   \
    X(matmul_desc_set_attribute, cublasLtMatmulDescSetAttribute)        \
    X(preference_create, cublasLtMatmulPreferenceCreate)                \
    X(preference_destroy, cublasLtMatmulPreferenceDestroy)              \
    X(preference_set_attribute, cublasLtMatmulPreferenceSetAttribute)   \
    X(matrix_layout_create, cublasLtMatrixLayoutCreate)                 \
    X(matrix_layout_destroy, cublasLtMatrixLayoutDestroy)               \
    X(get_status_name, cublasLtGetStatusName)                           \
    X(get_status_string, cublasLtGetStatusString)

// The resolved entry points, typed as cublasLt.h declares them.
struct CublasLt {
#define MPT_CUBLASLT_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
    MPT_CUBLASLT_FUNCTIONS(MPT_CUBLASLT_MEMBER)
#undef MPT_CUBLASLT_MEMBER
};

// Loads cuBLASLt of the major version mptrain was built against on first call (thread-safe; later
// calls return the same answer). Null when it cannot be loaded; `why`, when given, then says why.
const CublasLt* cublaslt(std::string* why = nullptr);

}  // namespace mpt
