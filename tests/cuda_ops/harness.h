// What the CUDA op tests (test_cuda_ops and tests/cuda_ops/) share: random inputs from one printed
// seed, backend memory holding values in a dtype's storage (uploaded, poisoned, read back), the
// error bound per dtype, and the backends compared (the CPU reference, CUDA on its baseline paths).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "support/environment_setting.h"
#include "support/skip_without_gpu.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace mpt::testing {

inline constexpr DType kDTypes[] = {DType::fp32, DType::fp16, DType::bf16};

// Normalised error bound by the dtype the compared output is stored in: a few last-place flips of
// that dtype (accumulation order differs between cuBLASLt and OpenBLAS) stay far below it, a wrong
// result (transposed operand, missing bias, wrong mask) lands near 1.
inline double error_bound(DType dtype) {
    switch (dtype) {
        case DType::fp16: return 2e-3;
        case DType::bf16: return 1.6e-2;
        case DType::fp32: break;
    }
    return 2e-5;
}

// A fresh seed each run (printed, so that a failure on random inputs can be repeated), or the one
// MPTRAIN_TEST_SEED names.
inline std::mt19937& random_engine() {
    static std::mt19937 engine([] {
        const char* named = std::getenv("MPTRAIN_TEST_SEED");
        const unsigned seed = named ? static_cast<unsigned>(std::strtoul(named, nullptr, 10)) : std::random_device{}();
        std::printf("random inputs from seed %u (MPTRAIN_TEST_SEED=%u repeats them)\n", seed, seed);
        return std::mt19937(seed);
    }());
    return engine;
}

inline std::vector<float> random_values(size_t count, float low, float high) {
    std::uniform_real_distribution<float> distribution(low, high);
    std::vector<float> values(count);
    for (float& value : values) value = distribution(random_engine());
    return values;
}

// A dense layer's pre-activation z = bias[f] + sum_k input[row, k] W[f, k], exactly (in double, from
// the values as given: already rounded to their dtype), and the sum of its terms' magnitudes, which
// bounds how far a float sum of them can stray from it.
struct ExactPreActivation {
    double z = 0.0;
    double magnitude = 0.0;
};
inline ExactPreActivation exact_pre_activation(const std::vector<float>& input, const std::vector<float>& weights,
                                               const std::vector<float>& bias, int64_t inputs, int64_t row, int64_t f) {
    ExactPreActivation out{bias[static_cast<size_t>(f)], std::fabs(bias[static_cast<size_t>(f)])};
    for (int64_t k = 0; k < inputs; ++k) {
        const double term = static_cast<double>(input[static_cast<size_t>(row * inputs + k)]) *
                            weights[static_cast<size_t>(f * inputs + k)];
        out.z += term;
        out.magnitude += std::fabs(term);
    }
    return out;
}

inline std::vector<float> rounded(std::vector<float> values, DType dtype) {
    for (float& value : values) value = round_to(dtype, value);
    return values;
}

// Backend memory holding values in a dtype's storage (2 bytes on a GPU, rounded fp32 on the CPU).
class Buffer {
public:
    Buffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(std::max<size_t>(bytes, 16)) {
        data_ = backend.allocate(bytes_);
    }
    ~Buffer() {
        if (data_) backend_->release(data_);
    }
    Buffer(Buffer&& other) noexcept : backend_(other.backend_), data_(other.data_), bytes_(other.bytes_) {
        other.data_ = nullptr;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    size_t bytes() const { return bytes_; }

private:
    Backend* backend_;
    void* data_;
    size_t bytes_;
};

inline std::vector<uint8_t> encode(const Backend& backend, DType dtype, const std::vector<float>& values) {
    const size_t element = backend.storage_size(dtype);
    std::vector<uint8_t> bytes(values.size() * element);
    for (size_t i = 0; i < values.size(); ++i) {
        if (element == 4) {
            const float value = round_to(dtype, values[i]);
            std::memcpy(bytes.data() + i * 4, &value, 4);
        } else {
            const uint16_t bits = dtype == DType::fp16 ? float_to_half(values[i]) : float_to_bfloat16(values[i]);
            std::memcpy(bytes.data() + i * 2, &bits, 2);
        }
    }
    return bytes;
}

// An element given as its bits, as a float: a float's 32 (`wide`), else the low 16 of an fp16 or
// bf16 element of `dtype`.
inline float element_value(bool wide, DType dtype, uint32_t bits) {
    if (wide) {
        float value = 0.0f;
        std::memcpy(&value, &bits, 4);
        return value;
    }
    return dtype == DType::fp16 ? half_to_float(static_cast<uint16_t>(bits))
                                : bfloat16_to_float(static_cast<uint16_t>(bits));
}

inline std::vector<float> decode(const Backend& backend, DType dtype, const std::vector<uint8_t>& bytes) {
    const size_t element = backend.storage_size(dtype);  // 4 for every dtype on the CPU
    std::vector<float> values(bytes.size() / element);
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, bytes.data() + i * element, element);  // little-endian: the low bytes
        values[i] = element_value(element == 4, dtype, bits);
    }
    return values;
}

inline Buffer upload(Backend& backend, DType dtype, const std::vector<float>& values) {
    const std::vector<uint8_t> bytes = encode(backend, dtype, values);
    Buffer buffer(backend, bytes.size());
    backend.copy_to_device(buffer.data(), bytes.data(), bytes.size());
    return buffer;
}

template <typename T>
Buffer upload_raw(Backend& backend, const std::vector<T>& values) {
    Buffer buffer(backend, values.size() * sizeof(T));
    backend.copy_to_device(buffer.data(), values.data(), values.size() * sizeof(T));
    return buffer;
}

// A buffer of `count` elements whose every byte is 0xFF: NaN in fp32, fp16 and bf16 alike.
inline Buffer poisoned(Backend& backend, DType dtype, size_t count) {
    const size_t bytes = count * backend.storage_size(dtype);
    Buffer buffer(backend, bytes);
    const std::vector<uint8_t> poison(buffer.bytes(), 0xFF);
    backend.copy_to_device(buffer.data(), poison.data(), poison.size());
    return buffer;
}

inline std::vector<float> download(Backend& backend, const Buffer& buffer, DType dtype, size_t count) {
    std::vector<uint8_t> bytes(count * backend.storage_size(dtype));
    backend.copy_to_host(bytes.data(), buffer.data(), bytes.size());
    return decode(backend, dtype, bytes);
}

template <typename T>
std::vector<T> download_raw(Backend& backend, const Buffer& buffer, size_t count) {
    std::vector<T> values(count);
    backend.copy_to_host(values.data(), buffer.data(), count * sizeof(T));
    return values;
}

// Weights [units, inputs] whose rows at and beyond `valid_units` are zero, as the model keeps them.
inline std::vector<float> padded_weights(int64_t units, int64_t inputs, int64_t valid_units, float limit) {
    std::vector<float> weights = random_values(static_cast<size_t>(units * inputs), -limit, limit);
    std::fill(weights.begin() + valid_units * inputs, weights.end(), 0.0f);
    return weights;
}

// A CUDA backend on its baseline paths, whatever the switches' defaults: the cases of a switched path
// turn it on themselves, so that a switch a device check finds faster can become a default without
// these comparisons changing what they compare. (Split-K and GEMM autotuning, fixed when the backend
// is made, follow the environment; they change the GEMMs' sums' order only.)
inline std::unique_ptr<Backend> make_cuda() {
    std::unique_ptr<Backend> backend = create_cuda_backend(0);
#if defined(MPTRAIN_WITH_CUDA)
    cuda_backend_set_small_batch_forward(*backend, false);
    cuda_backend_set_small_batch_backward_data(*backend, false);
    cuda_backend_set_dependent_launch(*backend, false);
    cuda_backend_set_grouped_sgd(*backend, false);
    cuda_backend_set_head_layer_cluster(*backend, false);
#endif
    return backend;
}

#if defined(MPTRAIN_WITH_CUDA)
// make_cuda() with `variable` set to `value` while the backend is made (it reads its switches then).
inline std::unique_ptr<Backend> make_cuda_under(const char* variable, const char* value) {
    const EnvironmentSetting setting(variable, value);
    return make_cuda();
}
#endif

// The maximum of |x| so far raised by `value`, as max_abs takes it: NaN and Inf as +Inf.
inline float max_abs_with(float largest, float value) {
    return std::isfinite(value) ? std::max(largest, std::fabs(value)) : std::numeric_limits<float>::infinity();
}

// The GEMM workspace a dense op gets from the executor's arena: gemm_workspace_bytes() of backend
// memory (nothing on the CPU, which needs none).
struct WorkspaceBuffer {
    explicit WorkspaceBuffer(Backend& backend) : bytes(backend.gemm_workspace_bytes()), buffer(backend, bytes) {}
    GemmWorkspace workspace() const { return bytes ? GemmWorkspace{buffer.data(), bytes} : GemmWorkspace{}; }
    size_t bytes;
    Buffer buffer;
};
// (One thread under ThreadSanitizer, the emulated kernels' race check: the CPU reference is not
// instrumented there, and its threads hand work over in ways ThreadSanitizer would not see.)
#if defined(__SANITIZE_THREAD__)
constexpr int kCpuReferenceThreads = 1;
#else
constexpr int kCpuReferenceThreads = 2;
#endif
inline std::unique_ptr<Backend> make_cpu() { return create_cpu_backend(kCpuReferenceThreads); }

inline void set_fused(Backend& backend, bool fused) {
#if defined(MPTRAIN_WITH_CUDA)
    if (backend.kind() == BackendKind::cuda) cuda_backend_set_fused_epilogues(backend, fused);
#else
    (void)backend;
    (void)fused;
#endif
}

// `compare(cpu, cuda)` on CUDA with its fused paths (cuBLASLt's epilogues), then again without them.
template <typename Compare>
void compare_fused_and_unfused(Compare compare) {
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare(*cpu, *cuda);
    set_fused(*cuda, false);
    compare(*cpu, *cuda);
}

inline std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> result(a.size());
    for (size_t i = 0; i < a.size(); ++i) result[i] = a[i] - b[i];
    return result;
}

#if defined(MPTRAIN_WITH_CUDA)
// The three ways the recorded-task cases issue their tasks: recorded (graphs), op by op, and recorded
// with programmatic dependent launch (9.0 and up).
struct IssueMode {
    bool graphs, dependent_launch;
};
inline constexpr IssueMode kIssueModes[] = {{true, false}, {false, false}, {true, true}};

// A CUDA backend issuing that way, or nullptr where the device has no dependent launch (a skip
// below 9.0, a failure from there up).
inline std::unique_ptr<Backend> cuda_backend_issuing(const IssueMode& mode) {
    auto backend = make_cuda();
    cuda_backend_set_graphs(*backend, mode.graphs);
    if (mode.dependent_launch &&
        !turn_on_device_path(*backend, cuda_backend_set_dependent_launch, "programmatic dependent launch", 9))
        return nullptr;
    return backend;
}
#endif

}  // namespace mpt::testing
