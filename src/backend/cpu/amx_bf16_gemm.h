// The CPU's native bf16 GEMM: Intel AMX tiles (TDPBF16PS: bf16 products summed in fp32), on CPUs
// that have AMX-TILE and AMX-BF16 (Xeon since Sapphire Rapids) and a Linux that grants this
// process the tile state. It takes its operands in the CPU backend's emulated storage, bf16 values
// held in fp32 (cpu_backend.h), so it is a drop-in for cpu_sgemm on a layer that computes in bf16:
// every product is exact in both, only the order of the fp32 sums differs. mixed-bf16 runs on it
// where it exists, instead of paying for emulation in fp32 GEMMs.
#pragma once

#include <cstdint>
#include <string>

namespace mpt {

class ThreadPool;

// Whether amx_bf16_gemm can run here: the CPU has AMX-TILE and AMX-BF16, the kernel granted the
// tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process), and MPTRAIN_CPU_AMX is not
// "0" in the environment. Decided on the first call.
bool amx_bf16_gemm_available();
// Why it cannot, in words ("MPTRAIN_CPU_AMX=0", "no AMX-BF16 on this CPU", ...); empty when it can.
const std::string& amx_bf16_gemm_unavailable_reason();

// Row-major C = alpha * op(A) * op(B) + beta * C, like cblas_sgemm (beta == 0 ignores C's old
// contents, NaN included), with A and B read as bf16: values that are not bf16 already are rounded
// to the nearest, ties to even. As TDPBF16PS does, subnormal inputs count as zero and subnormal
// products and sums are flushed to zero. Every element of C is summed in one fixed order whatever
// the thread count. Only when amx_bf16_gemm_available().
void amx_bf16_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, ThreadPool& pool);

}  // namespace mpt
