// What the CPU offers to the backend's hand-written kernels, read from CPUID once per question.
#pragma once

namespace mpt {

// AVX512F, AVX512BW, AVX512VL and AVX512-BF16 (VCVTNEPS2BF16, the rounding the AMX packing and small_gemm
// use): Cooper Lake, Sapphire Rapids and later; Zen 4 and later. False off x86-64.
bool cpu_has_avx512_bf16();
// AVX512F and FMA (Skylake-SP, Ice Lake and later; Zen 4 and later), with the OS saving the ZMM
// state. False off x86-64.
bool cpu_has_avx512f();
// AVX2 and FMA (Haswell, Zen 1 and later), with the OS saving the YMM state. False off x86-64.
bool cpu_has_avx2_fma();

}  // namespace mpt
