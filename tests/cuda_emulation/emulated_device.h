// What a kernel's source needs from CUDA's device side, for the host compiler: included before a
// backend .cu file (tests/cuda_emulation/emulated_*.cpp), it lets that file compile as C++ and its
// launches run on emulated threads (emulated_threads.h). The CUDA headers are the toolkit's own,
// seen as a host compiler sees them; this adds the rest:
// - the execution-space keywords (the built-in variables are emulated_threads.h's); __shared__ as a
//   static that each OS thread has its own of, i.e. each emulated block (its threads are fibers on
//   one OS thread). Unlike a GPU's, such a variable starts at 0 and keeps its value from one block to
//   the next on the same OS thread: a read before any write is not caught (dynamic shared memory
//   starts as 0xff);
// - barriers and warp collectives over the fibers, shuffles by PTX's definition of their lanes, and
//   atomics as real atomics (a cluster's blocks run on OS threads side by side);
// - the intrinsics with explicit rounding as the IEEE operations they name (the host code is built
//   with -ffp-contract=off: no fused multiply-add where the source did not write one);
// - mma.m16n8k16 by the PTX ISA's fragment layout;
// - cudaLaunchKernelEx as the emulated launch (the backend launches every kernel through it,
//   cuda_launch.cuh), and MPT_CUDA_EMULATION, under which the backend's headers declare their device
//   functions as they do for nvcc, and the few instructions without a C++ form (the mma, the cluster
//   barrier and map, the bulk-copy kernel's PTX) call the emulation.
// __CUDA_ARCH__ stays undefined: other code for a given architecture is left out as for the host pass
// of nvcc, so a kernel whose work lives only there cannot be emulated.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/mma_m16n8k16.h"
#include "cuda_emulation/race_check.h"

#define MPT_CUDA_EMULATION 1

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __launch_bounds__
#undef __forceinline__
#undef __noinline__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __forceinline__ inline
#define __noinline__

#define warpSize 32

// ---- barriers and warp collectives ----------------------------------------------------------------
inline void __syncthreads() { ::mpt_emulation::sync_block(); }
inline int __syncthreads_count(int predicate) { return ::mpt_emulation::sync_block(predicate); }
inline int __syncthreads_or(int predicate) { return ::mpt_emulation::sync_block(predicate) != 0; }
inline int __syncthreads_and(int predicate) {
    return ::mpt_emulation::sync_block(predicate) ==
           static_cast<int>(blockDim.x * blockDim.y * blockDim.z);  // (exited threads would count as false)
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::mpt_emulation::sync_lanes(mask); }
inline unsigned __activemask() { return 0xffffffffu; }  // every lane converges in the emulation
inline unsigned __ballot_sync(unsigned mask, int predicate) { return ::mpt_emulation::ballot(mask, predicate != 0); }
inline int __any_sync(unsigned mask, int predicate) { return ::mpt_emulation::ballot(mask, predicate != 0) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
    return ::mpt_emulation::ballot(mask, predicate == 0) == 0;  // no lane of the mask voted false
}

namespace mpt_emulation {
template <typename T>
T shuffle(unsigned mask, T value, int source) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
    uint64_t offer = 0;
    std::memcpy(&offer, &value, sizeof(T));
    const uint64_t received = exchange(mask, offer, source);
    T result;
    std::memcpy(&result, &received, sizeof(T));
    return result;
}
}  // namespace mpt_emulation

// The source lane as PTX's shfl.sync defines it (its pseudo-code in the ISA), with the clamp and
// segment mask that CUDA's intrinsics pass for `width` (a power of two up to 32): b's low 5 bits; up
// reads within the caller's segment from its start, down and bfly up to the segment's end (bfly may
// read an earlier segment, as the CUDA guide says), idx the lane of the caller's segment; an invalid
// source gives the caller its own value (-1).
namespace mpt_emulation {
enum class ShuffleMode { up, down, bfly, idx };
inline int shuffle_source(ShuffleMode mode, int b, int width) {
    const int lane = static_cast<int>(lane_index());
    const int segment_mask = (32 - width) & 31;
    const int clamp = mode == ShuffleMode::up ? 0 : 31;
    const int max_lane = (lane & segment_mask) | (clamp & ~segment_mask);
    const int min_lane = lane & segment_mask;
    const int bval = b & 31;
    int j = lane;
    bool valid = false;
    switch (mode) {
        case ShuffleMode::up:
            j = lane - bval;
            valid = j >= max_lane;
            break;
        case ShuffleMode::down:
            j = lane + bval;
            valid = j <= max_lane;
            break;
        case ShuffleMode::bfly:
            j = lane ^ bval;
            valid = j <= max_lane;
            break;
        case ShuffleMode::idx:
            j = min_lane | (bval & ~segment_mask);
            valid = j <= max_lane;
            break;
    }
    return valid ? j : -1;
}
}  // namespace mpt_emulation

template <typename T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
    using namespace ::mpt_emulation;
    return shuffle(mask, value, shuffle_source(ShuffleMode::idx, source_lane, width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    using namespace ::mpt_emulation;
    return shuffle(mask, value, shuffle_source(ShuffleMode::bfly, lane_mask, width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    using namespace ::mpt_emulation;
    return shuffle(mask, value, shuffle_source(ShuffleMode::down, static_cast<int>(delta), width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    using namespace ::mpt_emulation;
    return shuffle(mask, value, shuffle_source(ShuffleMode::up, static_cast<int>(delta), width));
}

// ---- memory ordering and atomics ----------------------------------------------------------------
// Real atomics: a cluster's blocks run on OS threads side by side (emulated_threads.h), and under the
// race check a grid's blocks run in two lanes.
// Under ThreadSanitizer (race_check.h), which does not model a fence on its own, CUDA's rule is made
// by hand: an atomic (relaxed in PTX) orders nothing by itself. A thread's writes before its
// __threadfence are released by its atomic writes after it (release_fenced_writes), and a fence
// acquires what was released at the addresses of the thread's atomics before it, and of the atomics
// its block's threads made before a __syncthreads it has passed since (note_atomic_for_race_check: the
// last block's thread 0 takes the ticket, the barrier tells the others, and each fences). So a block
// that hands its writes to another through an atomic without a fence before it is reported, and a
// block that reads what it was handed with no fence after the atomic. The fences' scopes are not told
// apart.
#if defined(__SANITIZE_THREAD__)
inline void __threadfence() { ::mpt_emulation::fence_for_race_check(); }
inline void __threadfence_block() { ::mpt_emulation::fence_for_race_check(); }
inline void __threadfence_system() { ::mpt_emulation::fence_for_race_check(); }
#define MPT_EMULATED_ATOMIC_ORDER __ATOMIC_RELAXED
#else
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#define MPT_EMULATED_ATOMIC_ORDER __ATOMIC_SEQ_CST
#endif

namespace mpt_emulation {
// Around an atomic at `address`, under the race check: before it, what the calling thread wrote
// before its last fence is released there; after it, the address is noted for the thread's next
// fence to acquire (above). Otherwise nothing.
struct AtomicOrdering {
    const void* address;
    explicit AtomicOrdering(const void* address_) : address(address_) {
#if defined(__SANITIZE_THREAD__)
        release_fenced_writes(address);
#endif
    }
    ~AtomicOrdering() {
#if defined(__SANITIZE_THREAD__)
        note_atomic_for_race_check(address);
#endif
    }
    AtomicOrdering(const AtomicOrdering&) = delete;
    AtomicOrdering& operator=(const AtomicOrdering&) = delete;
};

// *address = update(old) atomically; returns old.
template <typename T, typename Update>
T atomic_update(T* address, const Update& update) {
    const AtomicOrdering ordering(address);
    T old;
    __atomic_load(address, &old, MPT_EMULATED_ATOMIC_ORDER);
    for (;;) {
        T desired = update(old);
        if (__atomic_compare_exchange(address, &old, &desired, false, MPT_EMULATED_ATOMIC_ORDER,
                                      MPT_EMULATED_ATOMIC_ORDER))
            return old;
    }
}
}  // namespace mpt_emulation

template <typename T>
T atomicAdd(T* address, T value) {
    if constexpr (std::is_integral_v<T>) {
        const ::mpt_emulation::AtomicOrdering ordering(address);
        return __atomic_fetch_add(address, value, MPT_EMULATED_ATOMIC_ORDER);
    } else {
        return ::mpt_emulation::atomic_update(address, [value](T old) { return old + value; });
    }
}
template <typename T>
T atomicMax(T* address, T value) {
    return ::mpt_emulation::atomic_update(address, [value](T old) { return old < value ? value : old; });
}
template <typename T>
T atomicMin(T* address, T value) {
    return ::mpt_emulation::atomic_update(address, [value](T old) { return value < old ? value : old; });
}
template <typename T>
T atomicExch(T* address, T value) {
    const ::mpt_emulation::AtomicOrdering ordering(address);
    T old;
    __atomic_exchange(address, &value, &old, MPT_EMULATED_ATOMIC_ORDER);
    return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
    const ::mpt_emulation::AtomicOrdering ordering(address);
    __atomic_compare_exchange(address, &compare, &value, false, MPT_EMULATED_ATOMIC_ORDER, MPT_EMULATED_ATOMIC_ORDER);
    return compare;  // the old value either way
}
template <typename T>
T atomicOr(T* address, T value) {
    const ::mpt_emulation::AtomicOrdering ordering(address);
    return __atomic_fetch_or(address, value, MPT_EMULATED_ATOMIC_ORDER);
}
template <typename T>
T atomicAnd(T* address, T value) {
    const ::mpt_emulation::AtomicOrdering ordering(address);
    return __atomic_fetch_and(address, value, MPT_EMULATED_ATOMIC_ORDER);
}
inline unsigned atomicInc(unsigned* address, unsigned limit) {
    return ::mpt_emulation::atomic_update(address, [limit](unsigned old) { return old >= limit ? 0u : old + 1u; });
}

// Cache-hinted loads and stores: plain ones.
#define MPT_EMULATED_LOAD(name) \
    template <typename T>       \
    T name(const T* address) {  \
        return *address;        \
    }
#define MPT_EMULATED_STORE(name)     \
    template <typename T>            \
    void name(T* address, T value) { \
        *address = value;            \
    }
MPT_EMULATED_LOAD(__ldg)
MPT_EMULATED_LOAD(__ldcs)
MPT_EMULATED_LOAD(__ldcg)
MPT_EMULATED_LOAD(__ldca)
MPT_EMULATED_LOAD(__ldlu)
MPT_EMULATED_STORE(__stcs)
MPT_EMULATED_STORE(__stcg)
MPT_EMULATED_STORE(__stwt)
MPT_EMULATED_STORE(__stwb)
#undef MPT_EMULATED_LOAD
#undef MPT_EMULATED_STORE

// A trap fails the emulated launch (a GPU would end the context).
inline void __trap() { throw ::mpt_emulation::EmulationError("the kernel trapped"); }

// ---- arithmetic ---------------------------------------------------------------------------------
inline unsigned __float_as_uint(float x) {
    unsigned bits;
    std::memcpy(&bits, &x, 4);
    return bits;
}
inline float __uint_as_float(unsigned bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
}
inline int __float_as_int(float x) { return static_cast<int>(__float_as_uint(x)); }
inline float __int_as_float(int bits) { return __uint_as_float(static_cast<unsigned>(bits)); }
inline long long __double_as_longlong(double x) {
    long long bits;
    std::memcpy(&bits, &x, 8);
    return bits;
}
inline double __longlong_as_double(long long bits) {
    double x;
    std::memcpy(&x, &bits, 8);
    return x;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// CUDA's overloads of min and max for the integer types (the device's headers give them to device
// code in the global namespace), and for float and double.
#define MPT_EMULATED_MIN_MAX(T)                      \
    inline T max(T a, T b) { return a < b ? b : a; } \
    inline T min(T a, T b) { return b < a ? b : a; }
MPT_EMULATED_MIN_MAX(int)
MPT_EMULATED_MIN_MAX(unsigned)
MPT_EMULATED_MIN_MAX(long)
MPT_EMULATED_MIN_MAX(unsigned long)
MPT_EMULATED_MIN_MAX(long long)
MPT_EMULATED_MIN_MAX(unsigned long long)
#undef MPT_EMULATED_MIN_MAX
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }

// ---- the runtime's C++ forms that nvcc's headers give and a host compiler's do not ------------------
template <typename... Parameters>
cudaError_t cudaFuncSetAttribute(void (*kernel)(Parameters...), cudaFuncAttribute attribute, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

// ---- tensor cores: mma.m16n8k16 (row.col, fp16/bf16 operands, fp32 sums) ---------------------------
namespace mpt_emulation {
template <bool kBf16>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    warp_mma_m16n8k16(kBf16, d, a, b);  // (mma_m16n8k16.h)
}
}  // namespace mpt_emulation

// ---- the launch ---------------------------------------------------------------------------------
namespace mpt_emulation {
// cudaLaunchKernelEx's emulation: the arguments converted to the kernel's parameter types once, as
// the runtime copies them, and every thread calls the kernel with its own copy of them.
template <typename... Parameters, typename... Arguments>
cudaError_t launch_kernel_ex(const cudaLaunchConfig_t* config, void (*kernel)(Parameters...),
                             Arguments&&... arguments) {
    unsigned cluster_blocks = 1;
    for (unsigned a = 0; a < config->numAttrs; ++a) {
        const cudaLaunchAttribute& attribute = config->attrs[a];
        if (attribute.id != cudaLaunchAttributeClusterDimension) continue;
        if (attribute.val.clusterDim.y > 1 || attribute.val.clusterDim.z > 1)
            throw EmulationError("clusters are emulated along x only");
        cluster_blocks = attribute.val.clusterDim.x;
    }
    if (config->dynamicSmemBytes > dynamic_shared_limit(reinterpret_cast<const void*>(kernel)))
        throw EmulationError("a launch with " + std::to_string(config->dynamicSmemBytes) +
                             " bytes of dynamic shared memory, more than the kernel's limit (48 KiB unless raised)");
    // The arguments copied as the launch takes them: a graph that records it replays these.
    const std::tuple<std::decay_t<Parameters>...> parameters(std::forward<Arguments>(arguments)...);
    const dim3 grid = config->gridDim, block = config->blockDim;
    const size_t shared = config->dynamicSmemBytes;
    issue(config->stream, [parameters, kernel, grid, block, shared, cluster_blocks] {
        run_grid(grid, block, shared, cluster_blocks, [&parameters, kernel] {
            std::tuple<std::decay_t<Parameters>...> own = parameters;
            std::apply(kernel, own);
        });
    });
    return cudaSuccess;
}
}  // namespace mpt_emulation
#define cudaLaunchKernelEx ::mpt_emulation::launch_kernel_ex
