// What tests/test_cuda_emulated_kernels.cpp and its cases in tests/emulated_kernels/ share: floats'
// bits, tensors in emulated device memory (faulting past their ends) filled at random, the emulated
// GPU's compute capability and multiprocessors for a scope, the max pass's scratch and reference,
// elements of 16-bit arrays, and the bound a kernel's outputs are held to against the reference.
#pragma once

#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_max_abs.cuh"
#include "core/float_bits.h"
#include "cuda_emulation/emulated_threads.h"
#include "nn/activation.h"

namespace mpt_test::emulated_kernels {

using mpt::Activation;
using mpt::DType;
using mpt::LossKind;
using mpt_emulation::DeviceBuffer;

using mpt::bits_float;  // core/float_bits.h
using mpt::float_bits;

// A tensor in the emulated device's memory, its elements kept as floats too (the values its dtype
// stores) for the reference.
struct DeviceTensor {
    DType dtype = DType::fp32;
    int64_t count = 0;
    DeviceBuffer buffer;
    std::vector<float> values;

    DeviceTensor(DType type, int64_t elements, size_t misalignment = 0)
        : dtype(type),
          count(elements),
          buffer(static_cast<size_t>(elements) * (type == DType::fp32 ? 4 : 2), 256, misalignment),
          values(static_cast<size_t>(elements)) {}

    // Stores `value` as the dtype does (round to nearest even) and keeps what was stored.
    void set(int64_t index, float value) {
        const size_t i = static_cast<size_t>(index);
        switch (dtype) {
            case DType::fp32:
                buffer.as<float>()[i] = value;
                values[i] = value;
                return;
            case DType::bf16: {
                const __nv_bfloat16 stored = __float2bfloat16_rn(value);
                buffer.as<__nv_bfloat16>()[i] = stored;
                values[i] = __bfloat162float(stored);
                return;
            }
            case DType::fp16: {
                const __half stored = __float2half_rn(value);
                buffer.as<__half>()[i] = stored;
                values[i] = __half2float(stored);
                return;
            }
        }
    }
};

// The emulated device's compute capability for a scope (9.0: the small-batch kernels split K across
// a cluster's blocks).
struct ComputeCapability {
    explicit ComputeCapability(int capability) : saved(mpt_emulation::set_compute_capability(capability)) {}
    ~ComputeCapability() { mpt_emulation::set_compute_capability(saved); }
    int saved;
};

// The emulated device's multiprocessors for a scope: fused SGD's grid is what fits at once, so a
// device of one gives each block a run of several tiles (the CUDA-core kernel's prefetch of the
// next tile, the bulk-copy kernel's ring of stages turning over).
struct Multiprocessors {
    explicit Multiprocessors(int count) : saved(mpt_emulation::set_multiprocessors(count)) {}
    ~Multiprocessors() { mpt_emulation::set_multiprocessors(saved); }
    int saved;
};

// max |x| as the kernels define it: NaN and Inf as +Inf.
inline float reference_max_abs(const std::vector<float>& values) {
    uint32_t largest = 0;
    for (const float value : values) {
        uint32_t bits = float_bits(value) & 0x7fffffffu;
        if (bits > 0x7f800000u) bits = 0x7f800000u;
        if (bits > largest) largest = bits;
    }
    return bits_float(largest);
}

// The max pass's own device memory, zeroed as the backend zeroes it when it allocates it.
struct MaxAbsScratchBuffer {
    DeviceBuffer memory{mpt::max_abs_scratch_bytes()};
    explicit MaxAbsScratchBuffer(int max_blocks) : max_blocks_(max_blocks) {
        std::memset(memory.data(), 0, memory.size());
    }
    mpt::MaxAbsScratch scratch() const {
        unsigned* base = memory.as<unsigned>();
        return mpt::MaxAbsScratch{base, base + 256 / sizeof(unsigned), max_blocks_};
    }
    bool zero() const {
        const unsigned char* bytes = memory.as<unsigned char>();
        for (size_t i = 0; i < memory.size(); ++i)
            if (bytes[i] != 0) return false;
        return true;
    }
    int max_blocks_;
};

inline void fill_random(DeviceTensor& tensor, std::mt19937& random, float scale) {
    std::uniform_real_distribution<float> uniform(-scale, scale);
    for (int64_t i = 0; i < tensor.count; ++i) tensor.set(i, uniform(random));
}

// An element's bits in a 16-bit or 32-bit array.
inline uint32_t element_bits(const DeviceBuffer& buffer, DType dtype, size_t i) {
    return dtype == DType::fp32 ? buffer.as<uint32_t>()[i] : buffer.as<uint16_t>()[i];
}
inline void set_element_bits(DeviceBuffer& buffer, DType dtype, size_t i, uint32_t bits) {
    if (dtype == DType::fp32)
        buffer.as<uint32_t>()[i] = bits;
    else
        buffer.as<uint16_t>()[i] = static_cast<uint16_t>(bits);
}
inline float element_float(DType dtype, uint32_t bits) {
    switch (dtype) {
        case DType::fp32:
            return bits_float(bits);
        case DType::bf16:
            return bits_float(bits << 16);
        case DType::fp16: {
            __half_raw raw;
            raw.x = static_cast<unsigned short>(bits);
            return __half2float(__half(raw));
        }
    }
    return 0.0f;
}
// The bits of an output element of each kind ReLU's backward must tell apart.
inline uint32_t output_bits(DType dtype, int kind, std::mt19937& random) {
    const bool wide = dtype == DType::fp32;
    const uint32_t sign = wide ? 0x80000000u : 0x8000u;
    const uint32_t infinity = wide ? 0x7f800000u : (dtype == DType::bf16 ? 0x7f80u : 0x7c00u);
    const uint32_t finite = 1 + random() % (infinity - 1);  // positive: subnormal to the largest
    switch (kind) {
        case 0:
            return 0;  // +0: not above 0
        case 1:
            return sign;  // -0
        case 2:
            return sign | finite;  // negative
        case 3:
            return infinity + 1;  // NaN: not above 0
        case 4:
            return infinity;  // +Inf: above 0
        case 5:
            return sign | infinity;  // -Inf
        default:
            return finite;  // above 0 (the most common)
    }
}

// A 16-bit or fp32 array of `dtype` in emulated device memory from floats, and the floats it holds.
inline DeviceTensor upload_rounded(DType dtype, const std::vector<float>& values, size_t misalignment = 0) {
    DeviceTensor tensor(dtype, static_cast<int64_t>(values.size()), misalignment);
    for (size_t i = 0; i < values.size(); ++i) tensor.set(static_cast<int64_t>(i), values[i]);
    return tensor;
}

inline std::vector<float> random_vector(size_t n, float low, float high, std::mt19937& random) {
    std::uniform_real_distribution<float> uniform(low, high);
    std::vector<float> values(n);
    for (float& v : values) v = uniform(random);
    return values;
}

// One layer's plain SGD update on the emulated device, and what it must leave: the weight gradient
// summed as the kernel states it sums (fmaf over the batch rows in order from 0), the bias gradient
// as a float sum in the same order, the element rule and the step's scalars the shared inline
// functions'. Masters, bias and copies start from values the update cannot leave (copies 0xff).

// An array of `dtype` as floats (fp32 as is).
inline std::vector<float> download_values(const DeviceBuffer& buffer, DType dtype, size_t n) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i)
        values[i] = dtype == DType::fp32 ? buffer.as<float>()[i] : element_float(dtype, buffer.as<uint16_t>()[i]);
    return values;
}

// Elements of `got` farther from `expected` than the rounding of one value in `dtype` (relative to
// itself: 2^-7 for bf16, 2^-10 for fp16, 1e-5 for fp32) plus 1e-5 of the largest |expected| (the
// fp32 sums' own error): each element held to its own size, small ones too.
inline int64_t outside_rounding(const std::vector<float>& got, const std::vector<float>& expected, DType dtype) {
    double largest = 0.0;
    for (const float e : expected) largest = std::max(largest, std::fabs(static_cast<double>(e)));
    const double relative = dtype == DType::bf16 ? 0x1p-7 : (dtype == DType::fp16 ? 0x1p-10 : 1e-5);
    int64_t outside = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double e = expected[i];
        if (!(std::fabs(got[i] - e) <= relative * std::fabs(e) + 1e-5 * largest)) ++outside;
    }
    return outside;
}

}  // namespace mpt_test::emulated_kernels
