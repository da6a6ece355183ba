// The CPU's native low-precision GEMM: Intel AMX tiles (TDPBF16PS: bf16 products summed in fp32), on
// CPUs that have AMX-TILE and AMX-BF16 (Xeon since Sapphire Rapids) and a Linux that grants this
// process the tile state; else, for bf16 alone, AVX512-BF16's dot products (VDPBF16PS) over the same
// packed operands, on CPUs that have it without usable tiles (AMD Zen 4 and later, Intel Cooper
// Lake). It takes its operands in the CPU backend's emulated storage, low-precision values held in
// fp32 (cpu_backend.h), so it is a drop-in for cpu_sgemm on a layer that computes in bf16 or fp16:
// bf16 products are exact in both and only the order of the fp32 sums differs; fp16 products are
// summed as four exact parts (see amx_gemm). Mixed precision runs on it where it exists, instead of
// paying for emulation in fp32 GEMMs.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace mpt {

class ThreadPool;

// Whether the CPU has AMX-TILE, AMX-BF16, AVX512-BF16 and AVX512-BW, Linux supports the tile state,
// and MPTRAIN_CPU_AMX is not "0" in the environment. Asks nothing of the kernel.
bool amx_gemm_supported();
// Whether amx_gemm can run here: supported, and Linux granted this process the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM), which the first call asks for. After that, Linux requires every
// alternate signal stack in the process to be large enough for the tile state (AT_MINSIGSTKSZ,
// about 11 KiB), so only work in bf16 or fp16 asks: a low-precision layer's plan or GEMM, and
// resolving AUTO on the CPU (bf16 only where the permission is granted). Decided once.
bool amx_gemm_available();
// Why it cannot, in words ("MPTRAIN_CPU_AMX=0", "this CPU has no AMX-BF16", ...); empty when it can.
const std::string& amx_gemm_unavailable_reason();
// Whether Linux refused the tile state to this process; false before anything asked for it. Asks
// nothing of the kernel (for descriptions, which must not change the process).
bool amx_gemm_refused();

// Whether AVX512-BF16 dot products can take amx_gemm's bf16 products where AMX tiles cannot (no AMX,
// MPTRAIN_CPU_AMX=0, or Linux refused the tile state): the CPU has AVX512-BF16 and AVX512-BW and
// MPTRAIN_CPU_BF16_DOT is not "0". Asks nothing of the kernel.
bool amx_gemm_dot_products_supported();
// Whether amx_gemm multiplies `operands` here: bf16 or fp16 on AMX tiles (amx_gemm_available), or
// bf16 alone as dot products (an AVX512-BF16 instruction, VDPBF16PS, sums two exact bf16 products
// into each of 16 fp32 sums: twice fp32 FMA's products a cycle on the CPUs that have it, where fp16's
// four bf16 products would make it slower than fp32). Asks for the tile state as amx_gemm_available.
bool native_gemm_available(DType operands);
// Why not, in words; empty when it does.
std::string native_gemm_unavailable_reason(DType operands);
// How the CPU backend multiplies `operands` (bf16 or fp16). Asks nothing of the kernel (for
// descriptions, which must not change the process): where Linux has not been asked for the tile state
// yet, AMX tiles are what it would ask for.
enum class NativeGemm { amx_tiles, dot_products, emulated };
NativeGemm native_gemm_kind(DType operands);
// "amx tiles", "avx512-bf16 dot products" or "emulated in fp32" (the descriptions' words).
const char* native_gemm_name(NativeGemm kind);

// Row-major C = alpha * op(A) * op(B) + beta * C, like cblas_sgemm (beta == 0 ignores C's old
// contents, NaN included), with A and B read as `operands` (bf16 or fp16): values that are not of
// that dtype already are rounded to it, to the nearest, ties to even. bf16: exact products summed in
// fp32; as TDPBF16PS does, subnormal inputs count as zero and subnormal sums are flushed to zero.
// fp16: each value is split into two bf16 values that sum to it exactly and the four exact partial
// products are summed in fp32 (fp16's subnormals kept), each rounded into the sum on its own: up to
// 4k roundings in a sum of k products where an fp16 tensor core has k. A product with an Inf
// operand may come out NaN where IEEE gives Inf (Inf times a zero part: non-finite either way).
// Every element of C is summed in one fixed order whatever the thread count (on AMX tiles and on dot
// products each its own: a dot product adds its pair's two products in its own order). Only when
// native_gemm_available(operands).
void amx_gemm(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              ThreadPool& pool);
// Reserves in `pool`'s scratch what amx_gemm of this shape will use (it reserves it anyway: this
// only lets a caller run out of memory or budget before some earlier work rather than after).
void amx_gemm_reserve(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                      ThreadPool& pool);

}  // namespace mpt
