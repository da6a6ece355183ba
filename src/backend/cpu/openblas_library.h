// OpenBLAS, opened with dlopen when libmptrain.so loads instead of linked, for two reasons.
// OpenBLAS chooses its kernels for the CPU once, while it loads, and OpenBLAS 0.3.21 (Debian 12)
// takes CPUs newer than it knows for an SSE3-only Prescott: on an AVX-512 VM the CIFAR-10 sample ran
// 4.5x slower than with the right kernels (bench/NOTES.md). Loading it ourselves lets mptrain name
// the kernels that fit the CPU (OPENBLAS_CORETYPE) before OpenBLAS looks. And libmptrain.so then
// loads where OpenBLAS is not installed, with the portable GEMM and a warning instead.
#pragma once

#include <cblas.h>

#include <string>

namespace mpt {

// The entry points mptrain uses, typed as cblas.h declares them.
struct OpenBlas {
    decltype(&cblas_sgemm) sgemm = nullptr;
    decltype(&cblas_sgemv) sgemv = nullptr;
    decltype(&openblas_set_num_threads) set_num_threads = nullptr;
    decltype(&openblas_get_corename) get_corename = nullptr;
    decltype(&openblas_get_num_threads) get_num_threads = nullptr;
    decltype(&openblas_get_num_procs) get_num_procs = nullptr;
};

struct OpenBlasLoad {
    const OpenBlas* api = nullptr;  // null when OpenBLAS could not be loaded
    std::string why;                // why not, when api is null
    std::string chosen_core;        // the OPENBLAS_CORETYPE mptrain set while loading, or empty
};

// The OpenBLAS kernels for this CPU's instruction set: "SkylakeX" with AVX-512 (F, BW, VL, DQ),
// "Haswell" with AVX2 and FMA, else empty (OpenBLAS's own choice stands). For single-precision GEMM
// these are the kernels OpenBLAS itself picks on every CPU it recognises with those extensions.
std::string openblas_core_for_this_cpu();

// Loads OpenBLAS on first call (thread-safe; later calls return the same answer), which is when
// libmptrain.so itself is loaded. The library is
// MPTRAIN_OPENBLAS when that is set (a file name or path), else the one mptrain was built against.
// An OpenBLAS the process has already loaded is used as it is: its kernels are already chosen.
// Otherwise, when OPENBLAS_CORETYPE is unset, it is set to openblas_core_for_this_cpu() while
// OpenBLAS loads and unset again; a value the user set is never changed.
const OpenBlasLoad& openblas();

}  // namespace mpt
