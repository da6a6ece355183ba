// The warp-level tensor-core instruction the hand-written tensor-core kernels use
// (cuda_small_batch_forward.cu, cuda_small_batch_backward_data.cu): mma.m16n8k16 with fp16/bf16
// operands and fp32 sums, compute capability 8.0 and up. Its fragment layouts are the PTX ISA's,
// checked on the CPU by tests/test_small_batch_mma_layout.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

// D += A_m B_m on one 16 x 8 x 16 tile (fp32 sums). T: __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
#elif defined(MPT_CUDA_EMULATION)  // the host compiler's, for tests/cuda_emulation: the ISA's layout
    ::mpt_emulation::mma_m16n8k16<std::is_same_v<T, __nv_bfloat16> >(d, a, b);
#else
    __trap();  // never launched below compute capability 8.0: mma_runs_on_current_device() says no there
#endif
}

// Whether `kernel` (one that uses mma_16x8x16) can run on the current device: compute capability
// 8.0 and up, and its code for the device compiled for 8.0 or later.
inline bool mma_runs_on_current_device(const void* kernel) { return kernel_code_runs_on_current_device(kernel, 8); }

}  // namespace mpt
