// The CUDA backend against the CPU reference backend, op by op, for fp32, fp16 and bf16: fresh
// random inputs each run, outputs poisoned (NaN) before each run, results compared with a
// normalised error bound per dtype. Then whole training runs: GPU vs CPU from the same seed, an
// injected overflow, and zero device allocations and host syncs in steady-state steps. Every GPU
// case skips with a message when no CUDA device is present; the comparison harness itself is
// checked CPU against CPU so it is exercised on every machine.
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
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/head_layer_case.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "data/dataset.h"
#include "nn/activation.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/environment_setting.h"
#include "support/loss_head_case.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
#include "support/training_fixture.h"
#if defined(MPTRAIN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_dense_backward_data.cuh"
#include "backend/cuda/cuda_dense_forward.cuh"
#include "backend/cuda/cuda_small_batch_backward_data.cuh"
#include "backend/cuda/cuda_small_batch_forward.cuh"
#endif

namespace {

using namespace mpt;
using namespace mpt::testing;

const DType kDTypes[] = {DType::fp32, DType::fp16, DType::bf16};

// Normalised error bound by the dtype the compared output is stored in: a few last-place flips of
// that dtype (accumulation order differs between cuBLASLt and OpenBLAS) stay far below it, a wrong
// result (transposed operand, missing bias, wrong mask) lands near 1.
double error_bound(DType dtype) {
    switch (dtype) {
        case DType::fp16: return 2e-3;
        case DType::bf16: return 1.6e-2;
        case DType::fp32: break;
    }
    return 2e-5;
}

// A fresh seed each run (printed, so that a failure on random inputs can be repeated), or the one
// MPTRAIN_TEST_SEED names.
std::mt19937& random_engine() {
    static std::mt19937 engine([] {
        const char* named = std::getenv("MPTRAIN_TEST_SEED");
        const unsigned seed = named ? static_cast<unsigned>(std::strtoul(named, nullptr, 10)) : std::random_device{}();
        std::printf("random inputs from seed %u (MPTRAIN_TEST_SEED=%u repeats them)\n", seed, seed);
        return std::mt19937(seed);
    }());
    return engine;
}

std::vector<float> random_values(size_t count, float low, float high) {
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
ExactPreActivation exact_pre_activation(const std::vector<float>& input, const std::vector<float>& weights,
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

std::vector<float> rounded(std::vector<float> values, DType dtype) {
    for (float& value : values) value = round_to(dtype, value);
    return values;
}

using mpt_test::normalised_error;

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

std::vector<uint8_t> encode(const Backend& backend, DType dtype, const std::vector<float>& values) {
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
float element_value(bool wide, DType dtype, uint32_t bits) {
    if (wide) {
        float value = 0.0f;
        std::memcpy(&value, &bits, 4);
        return value;
    }
    return dtype == DType::fp16 ? half_to_float(static_cast<uint16_t>(bits))
                                : bfloat16_to_float(static_cast<uint16_t>(bits));
}

std::vector<float> decode(const Backend& backend, DType dtype, const std::vector<uint8_t>& bytes) {
    const size_t element = backend.storage_size(dtype);  // 4 for every dtype on the CPU
    std::vector<float> values(bytes.size() / element);
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, bytes.data() + i * element, element);  // little-endian: the low bytes
        values[i] = element_value(element == 4, dtype, bits);
    }
    return values;
}

Buffer upload(Backend& backend, DType dtype, const std::vector<float>& values) {
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
Buffer poisoned(Backend& backend, DType dtype, size_t count) {
    const size_t bytes = count * backend.storage_size(dtype);
    Buffer buffer(backend, bytes);
    const std::vector<uint8_t> poison(buffer.bytes(), 0xFF);
    backend.copy_to_device(buffer.data(), poison.data(), poison.size());
    return buffer;
}

std::vector<float> download(Backend& backend, const Buffer& buffer, DType dtype, size_t count) {
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
std::vector<float> padded_weights(int64_t units, int64_t inputs, int64_t valid_units, float limit) {
    std::vector<float> weights = random_values(static_cast<size_t>(units * inputs), -limit, limit);
    std::fill(weights.begin() + valid_units * inputs, weights.end(), 0.0f);
    return weights;
}

// A CUDA backend on its baseline paths, whatever the switches' defaults: the cases of a switched path
// turn it on themselves, so that a switch a device check finds faster can become a default without
// these comparisons changing what they compare. (Split-K and GEMM autotuning, fixed when the backend
// is made, follow the environment; they change the GEMMs' sums' order only.)
std::unique_ptr<Backend> make_cuda() {
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
std::unique_ptr<Backend> make_cuda_under(const char* variable, const char* value) {
    const EnvironmentSetting setting(variable, value);
    return make_cuda();
}

// A max_abs scratch of its own (cells and ticket zero, as the backend keeps its own) and two device
// floats for the maxima a kernel writes (poisoned: NaN), for the kernels the tests launch directly.
class DeviceMaxAbsScratch {
public:
    DeviceMaxAbsScratch() {
        REQUIRE(cudaMalloc(&memory_, kBytes) == cudaSuccess);
        REQUIRE(cudaMemset(memory_, 0, kOutOffset) == cudaSuccess);
        REQUIRE(cudaMemset(out(), 0xFF, 2 * sizeof(float)) == cudaSuccess);
    }
    ~DeviceMaxAbsScratch() { cudaFree(memory_); }
    DeviceMaxAbsScratch(const DeviceMaxAbsScratch&) = delete;
    DeviceMaxAbsScratch& operator=(const DeviceMaxAbsScratch&) = delete;
    MaxAbsScratch scratch() const {
        return MaxAbsScratch{static_cast<unsigned*>(memory_),
                             reinterpret_cast<unsigned*>(static_cast<char*>(memory_) + 256), 1024};
    }
    float* out() const { return reinterpret_cast<float*>(static_cast<char*>(memory_) + kOutOffset); }
    std::vector<float> results() const {  // (cudaMemcpy waits for the legacy stream's kernels)
        std::vector<float> values(2);
        REQUIRE(cudaMemcpy(values.data(), out(), sizeof(float) * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
        return values;
    }
    // The ticket and every cell zero again, as each kernel must leave them for the next.
    bool left_zero() const {
        std::vector<unsigned char> bytes(kOutOffset);
        REQUIRE(cudaMemcpy(bytes.data(), memory_, bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0; });
    }

private:
    static constexpr size_t kOutOffset = max_abs_scratch_bytes(), kBytes = kOutOffset + 256;
    void* memory_ = nullptr;
};
#endif

// The maximum of |x| so far raised by `value`, as max_abs takes it: NaN and Inf as +Inf.
float max_abs_with(float largest, float value) {
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
std::unique_ptr<Backend> make_cpu() { return create_cpu_backend(kCpuReferenceThreads); }

void set_fused(Backend& backend, bool fused) {
#if defined(MPTRAIN_WITH_CUDA)
    if (backend.kind() == BackendKind::cuda) cuda_backend_set_fused_epilogues(backend, fused);
#else
    (void)backend;
    (void)fused;
#endif
}

// ---- op comparisons (reference first, candidate second) ----------------------------------------

struct ForwardCase {
    int64_t rows, in_features, out_features, valid_out;
    Activation activation;
    DType compute, bias, output;
    bool with_mask;
};

// One dense_forward of case `c` on `backend` from these host operands (in its dtypes): the output
// poisoned and the ReLU mask zeroed before it, both kept for the caller to read.
struct ForwardRun {
    ForwardRun(Backend& backend, const ForwardCase& c, const std::vector<float>& input,
               const std::vector<float>& weights, const std::vector<float>& bias)
        : input_buffer(upload(backend, c.compute, input)),
          weight_buffer(upload(backend, c.compute, weights)),
          bias_buffer(upload(backend, c.bias, bias)),
          output(poisoned(backend, c.output, static_cast<size_t>(c.rows * c.out_features))),
          mask_bytes(backend.relu_mask_bytes(c.rows, c.out_features)),
          mask(backend, mask_bytes),
          workspace(backend) {
        if (mask_bytes) backend.fill_zero(mask.data(), mask_bytes);
        DenseForwardArgs args{};
        args.input = input_buffer.data();
        args.weights = weight_buffer.data();
        args.bias = bias_buffer.data();
        args.output = output.data();
        args.relu_mask = c.with_mask && mask_bytes ? mask.data() : nullptr;
        args.rows = c.rows;
        args.in_features = c.in_features;
        args.out_features = c.out_features;
        args.valid_out = c.valid_out;
        args.activation = c.activation;
        args.compute_dtype = c.compute;
        args.bias_dtype = c.bias;
        args.output_dtype = c.output;
        args.workspace = workspace.workspace();
        backend.dense_forward(args);
    }
    Buffer input_buffer, weight_buffer, bias_buffer, output;
    size_t mask_bytes;
    Buffer mask;
    WorkspaceBuffer workspace;
};

void compare_dense_forward(Backend& reference, Backend& candidate, const ForwardCase& c) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(std::string(dtype_name(c.compute)));
    CAPTURE(std::string(dtype_name(c.output)));
    CAPTURE(c.with_mask);
    const std::vector<float> input = rounded(random_values(static_cast<size_t>(c.rows * c.in_features), -1, 1), c.compute);
    const std::vector<float> weights = rounded(
        padded_weights(c.out_features, c.in_features, c.valid_out, 1.0f / std::sqrt(float(c.in_features))), c.compute);
    std::vector<float> bias = rounded(random_values(static_cast<size_t>(c.out_features), -0.5f, 0.5f), c.bias);
    std::fill(bias.begin() + c.valid_out, bias.end(), 0.0f);
    std::vector<float> results[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        const ForwardRun run(*backends[b], c, input, weights, bias);
        results[b] = download(*backends[b], run.output, c.output, static_cast<size_t>(c.rows * c.out_features));
    }
    CHECK(normalised_error(results[1], results[0]) <= error_bound(c.output));
}

void compare_dense_forward_cases(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        // Hidden layers: bias and output in the compute dtype, ReLU with and without the mask.
        compare_dense_forward(reference, candidate, {37, 200, 136, 136, Activation::relu, dtype, dtype, dtype, true});
        compare_dense_forward(reference, candidate, {64, 256, 128, 128, Activation::relu, dtype, dtype, dtype, false});
        compare_dense_forward(reference, candidate, {32, 96, 64, 64, Activation::linear, dtype, dtype, dtype, false});
        // The last layer: fp32 logits and bias, padded columns.
        compare_dense_forward(reference, candidate,
                              {33, 200, 16, 10, Activation::linear, dtype, DType::fp32, DType::fp32, false});
        // Activations cuBLASLt has no epilogue for.
        for (Activation activation : kActivations)
            if (activation != Activation::relu && activation != Activation::linear && activation != Activation::softmax)
                compare_dense_forward(reference, candidate, {17, 64, 24, 24, activation, dtype, dtype, dtype, false});
    }
    // Per-layer dtype overrides: the output is in the next layer's dtype.
    compare_dense_forward(reference, candidate,
                          {40, 128, 64, 64, Activation::relu, DType::bf16, DType::bf16, DType::fp16, true});
    compare_dense_forward(reference, candidate,
                          {40, 128, 64, 64, Activation::relu, DType::fp32, DType::fp32, DType::bf16, true});
    compare_dense_forward(reference, candidate,
                          {40, 128, 64, 64, Activation::relu, DType::fp16, DType::fp16, DType::fp32, true});
}

struct BackwardDataCase {
    int64_t rows, in_features, out_features;
    Activation input_activation;
    DType compute, input_grad;
    bool with_mask;  // A_prev comes from a ReLU forward that kept its mask
};

// `mask_only`: the candidate's A_prev is zeroed after its forward wrote the mask, so that only a
// backward that takes ReLU's derivative from the mask (not from A_prev) matches the reference.
void compare_dense_backward_data(Backend& reference, Backend& candidate, const BackwardDataCase& c,
                                 bool mask_only = false) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(static_cast<int>(c.input_activation));
    CAPTURE(std::string(dtype_name(c.compute)));
    CAPTURE(std::string(dtype_name(c.input_grad)));
    CAPTURE(c.with_mask);
    const int64_t previous_inputs = 48;
    const std::vector<float> previous_input =
        rounded(random_values(static_cast<size_t>(c.rows * previous_inputs), -1, 1), c.input_grad);
    const std::vector<float> previous_weights =
        rounded(random_values(static_cast<size_t>(c.in_features * previous_inputs), -0.3f, 0.3f), c.input_grad);
    const std::vector<float> previous_bias =
        rounded(random_values(static_cast<size_t>(c.in_features), -0.2f, 0.2f), c.input_grad);
    // A_prev without a forward: values in the activation's range (ReLU: some exact zeros).
    std::vector<float> activation_values = random_values(static_cast<size_t>(c.rows * c.in_features), -1, 1);
    for (float& value : activation_values) {
        if (c.input_activation == Activation::relu || c.input_activation == Activation::softplus)
            value = std::max(value, 0.0f);
        if (c.input_activation == Activation::sigmoid) value = 0.5f + 0.49f * value;
        if (c.input_activation == Activation::elu || c.input_activation == Activation::softsign) value *= 0.99f;
    }
    activation_values = rounded(activation_values, c.compute);
    const std::vector<float> output_grad =
        rounded(random_values(static_cast<size_t>(c.rows * c.out_features), -1, 1), c.compute);
    const std::vector<float> weights =
        rounded(random_values(static_cast<size_t>(c.out_features * c.in_features), -0.2f, 0.2f), c.compute);

    std::vector<float> results[2];
    std::vector<float> forward_outputs[2];  // each backend's A_prev as its own forward wrote it
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        const size_t mask_bytes = backend.relu_mask_bytes(c.rows, c.in_features);
        Buffer mask(backend, mask_bytes);
        Buffer activation = upload(backend, c.compute, activation_values);
        // The previous layer's operands outlive the backward on purpose: releasing any buffer makes
        // the CUDA backend forget every ReLU mask it tracks (the address may be reused), so freeing
        // them before the backward would silently turn the DRELU case into the fallback.
        Buffer x = upload(backend, c.input_grad, previous_input);
        Buffer w = upload(backend, c.input_grad, previous_weights);
        Buffer bias = upload(backend, c.input_grad, previous_bias);
        // Both GEMMs get a workspace, as in the executor: were the forward's RELU_AUX_BIAS refused
        // without one, the DRELU case below would quietly be the fallback.
        const WorkspaceBuffer workspace(backend);
        if (c.with_mask) {
            // The previous layer's forward writes A_prev (and, on a GPU, the mask) in layer i's dtype.
            DenseForwardArgs forward{};
            forward.input = x.data();
            forward.weights = w.data();
            forward.bias = bias.data();
            forward.output = activation.data();
            forward.relu_mask = mask_bytes ? mask.data() : nullptr;
            forward.rows = c.rows;
            forward.in_features = previous_inputs;
            forward.out_features = c.in_features;
            forward.valid_out = c.in_features;
            forward.activation = Activation::relu;
            forward.compute_dtype = c.input_grad;
            forward.bias_dtype = c.input_grad;
            forward.output_dtype = c.compute;
            forward.workspace = workspace.workspace();
            backend.dense_forward(forward);
            forward_outputs[b] = download(backend, activation, c.compute, static_cast<size_t>(c.rows * c.in_features));
            if (mask_only && b == 1)
                backend.fill_zero(activation.data(), static_cast<size_t>(c.rows * c.in_features) *
                                                         backend.storage_size(c.compute));
        }
        Buffer output_grad_buffer = upload(backend, c.compute, output_grad);
        Buffer weight_buffer = upload(backend, c.compute, weights);
        Buffer input_grad = poisoned(backend, c.input_grad, static_cast<size_t>(c.rows * c.in_features));
        DenseBackwardDataArgs args{};
        args.output_grad = output_grad_buffer.data();
        args.weights = weight_buffer.data();
        args.input = activation.data();
        args.relu_mask = c.with_mask && mask_bytes ? mask.data() : nullptr;
        args.input_grad = input_grad.data();
        args.rows = c.rows;
        args.in_features = c.in_features;
        args.out_features = c.out_features;
        args.input_activation = c.input_activation;
        args.compute_dtype = c.compute;
        args.input_grad_dtype = c.input_grad;
        args.workspace = workspace.workspace();
        // The maxima for the finiteness proof, where this backend's path takes them: max_abs's over
        // the gradient as written and over A_prev as the backward read it; left alone where not.
        Buffer maxima = poisoned(backend, DType::fp32, 2);
        args.input_grad_max_abs = maxima.as<float>();
        args.input_max_abs = maxima.as<float>() + 1;
        const bool taken = backend.dense_backward_data(args);
        results[b] = download(backend, input_grad, c.input_grad, static_cast<size_t>(c.rows * c.in_features));
        const std::vector<float> written = download(backend, maxima, DType::fp32, 2);
        CAPTURE(b);
        CAPTURE(taken);
        if (taken) {
            float gradient_max = 0.0f, input_max = 0.0f;
            for (const float value : results[b]) gradient_max = max_abs_with(gradient_max, value);
            for (const float value :
                 download(backend, activation, c.compute, static_cast<size_t>(c.rows * c.in_features)))
                input_max = max_abs_with(input_max, value);
            CHECK(written == std::vector<float>{gradient_max, input_max});
        } else {
            CHECK(std::isnan(written[0]));
            CHECK(std::isnan(written[1]));
        }
        if (backend.kind() == BackendKind::cpu) CHECK(taken);  // its loop takes them in every case
    }
    if (c.with_mask) {
        // Each backend's forward sums its products in its own order, so a pre-activation z within a few
        // fp32 roundings of 0 may be positive on one and not on the other, and a tiny positive z stored
        // in 16 bits reads 0 as A_prev while its mask bit says 1: ReLU then passes that element's
        // gradient on one backend only, each correctly. Such elements (|z| exact, from the rounded
        // operands, within 2^-16 of the sum of its terms' magnitudes: several times what 48 fp32
        // roundings, even truncating ones as tensor cores may do, can move it) are left out; elsewhere
        // both forwards must have kept exactly the elements with z > 0.
        int64_t at_kink = 0, wrong_sign = 0;
        for (int64_t row = 0; row < c.rows; ++row)
            for (int64_t f = 0; f < c.in_features; ++f) {
                const size_t i = static_cast<size_t>(row * c.in_features + f);
                const auto [z, magnitude] =
                    exact_pre_activation(previous_input, previous_weights, previous_bias, previous_inputs, row, f);
                if (std::fabs(z) <= std::ldexp(magnitude, -16)) {
                    ++at_kink;
                    results[0][i] = results[1][i] = 0.0f;
                    continue;
                }
                for (int b = 0; b < 2; ++b) wrong_sign += (forward_outputs[b][i] > 0.0f) != (z > 0.0);
            }
        if (at_kink > 0) MESSAGE(at_kink << " element(s) at ReLU's kink left out");
        CHECK(at_kink <= std::max<int64_t>(8, c.rows * c.in_features / 1000));  // about 1 in 15,000 expected
        CHECK(wrong_sign == 0);
    }
    CHECK(normalised_error(results[1], results[0]) <= error_bound(c.input_grad));
}

// The maxima dense_backward_data takes where it says it does, on values planted where a wrong loop
// bound or a missed tail would lose them: W the identity, so that dZ_prev is dZ where A_prev > 0 and
// +0 elsewhere; the largest kept |dZ| and the largest |A_prev| at the first, a middle and the last
// element, a larger |dZ| where A_prev is 0 (killed: not counted). `expect_taken`: whether this
// backend's path must take them.
void check_backward_data_maxima(Backend& backend, DType dtype, bool expect_taken) {
    CAPTURE(std::string(dtype_name(dtype)));
    const int64_t rows = 37, features = 136, count = rows * features;
    std::vector<float> weights(static_cast<size_t>(features * features), 0.0f);
    for (int64_t i = 0; i < features; ++i) weights[static_cast<size_t>(i * features + i)] = 1.0f;
    for (const int64_t at : {int64_t{0}, count / 2 + 3, count - 1}) {
        CAPTURE(at);
        std::vector<float> output_grad = rounded(random_values(static_cast<size_t>(count), -1, 1), dtype);
        std::vector<float> input = rounded(random_values(static_cast<size_t>(count), 0.25f, 1), dtype);
        const size_t planted = static_cast<size_t>(at), killed = static_cast<size_t>((at + 7) % count);
        output_grad[planted] = -3.5f;
        input[planted] = 2.75f;
        output_grad[killed] = 6.0f;
        input[killed] = 0.0f;
        Buffer output_grad_buffer = upload(backend, dtype, output_grad),
               weight_buffer = upload(backend, dtype, weights), input_buffer = upload(backend, dtype, input),
               input_grad = poisoned(backend, dtype, static_cast<size_t>(count)),
               maxima = poisoned(backend, DType::fp32, 2);
        const WorkspaceBuffer workspace(backend);
        DenseBackwardDataArgs args{};
        args.output_grad = output_grad_buffer.data();
        args.weights = weight_buffer.data();
        args.input = input_buffer.data();
        args.input_grad = input_grad.data();
        args.rows = rows;
        args.in_features = features;
        args.out_features = features;
        args.input_activation = Activation::relu;
        args.compute_dtype = dtype;
        args.input_grad_dtype = dtype;
        args.workspace = workspace.workspace();
        args.input_grad_max_abs = maxima.as<float>();
        args.input_max_abs = maxima.as<float>() + 1;
        CHECK(backend.dense_backward_data(args) == expect_taken);
        if (expect_taken) CHECK(download(backend, maxima, DType::fp32, 2) == std::vector<float>{3.5f, 2.75f});
    }
}

void compare_dense_backward_data_cases(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        compare_dense_backward_data(reference, candidate, {37, 136, 64, Activation::relu, dtype, dtype, true});
        compare_dense_backward_data(reference, candidate, {32, 128, 16, Activation::relu, dtype, dtype, false});
        for (Activation activation : kActivations)
            if (activation != Activation::relu && activation != Activation::softmax)
                compare_dense_backward_data(reference, candidate, {29, 64, 40, activation, dtype, dtype, false});
    }
    compare_dense_backward_data(reference, candidate, {24, 64, 32, Activation::relu, DType::fp16, DType::bf16, true});
    compare_dense_backward_data(reference, candidate, {24, 64, 32, Activation::relu, DType::bf16, DType::fp32, true});
}

using HeadCase = mpt_test::LossHeadCase;

// NaN in the same places of the first `count` elements of both, and those places zeroed there so that
// normalised_error can compare the rest.
bool zero_shared_nans(std::vector<float>& a, std::vector<float>& b, size_t count) {
    bool same = true;
    for (size_t i = 0; i < count; ++i) {
        if (std::isnan(a[i]) != std::isnan(b[i])) same = false;
        else if (std::isnan(a[i])) a[i] = b[i] = 0.0f;
    }
    return same;
}

// nan_column >= 0: row 0's logit there is NaN. The arg-max of a row with a NaN output is the CPU
// loop's on both backends: index 0 when it holds the NaN, else the first largest of the others.
void compare_loss_head_logits(Backend& reference, Backend& candidate, const HeadCase& c, int64_t nan_column) {
    const bool nan_logit = nan_column >= 0;
    CAPTURE(nan_column);
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(c.rows);
    CAPTURE(c.classes);
    CAPTURE(std::string(dtype_name(c.gradient_dtype)));
    CAPTURE(c.with_state);
    CAPTURE(c.label_smoothing);
    CAPTURE(c.with_class_weights);
    CAPTURE(c.with_row_weights);
    CAPTURE(c.mean_rows);
    CAPTURE(c.continues_batch);
    const mpt_test::LossHeadInputs in = mpt_test::random_loss_head_inputs(c, random_engine(), nan_column);
    TrainState initial{};
    initial.loss_scale = mpt_test::kLossHeadScale;
    const std::vector<double> initial_metrics(std::begin(mpt_test::kLossHeadInitialMetrics),
                                              std::end(mpt_test::kLossHeadInitialMetrics));

    std::vector<float> gradients[2], probabilities[2];
    std::vector<double> metrics[2];
    TrainState states[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer logits_buffer = upload(backend, DType::fp32, in.logits);
        Buffer labels_buffer = upload_raw(backend, in.labels);
        Buffer targets_buffer = upload(backend, DType::fp32, in.targets);
        Buffer gradient = poisoned(backend, c.gradient_dtype, static_cast<size_t>(c.rows * c.width));
        Buffer probability = poisoned(backend, DType::fp32, static_cast<size_t>(c.rows * c.width));
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer metric = upload_raw(backend, initial_metrics);
        Buffer weights = upload(backend, DType::fp32, in.class_weights);
        Buffer row_weight_buffer = upload(backend, DType::fp32, in.row_weights);
        const LossHeadArgs args = mpt_test::loss_head_args(
            c, {logits_buffer.as<float>(), labels_buffer.as<int32_t>(), targets_buffer.as<float>(),
                probability.as<float>(), gradient.data(), state.as<TrainState>(), metric.as<double>(),
                weights.as<float>(), row_weight_buffer.as<float>()});
        backend.loss_head(args);
        gradients[b] = download(backend, gradient, c.gradient_dtype, static_cast<size_t>(c.rows * c.width));
        if (c.with_probabilities)
            probabilities[b] = download(backend, probability, DType::fp32, static_cast<size_t>(c.rows * c.width));
        metrics[b] = download_raw<double>(backend, metric, kMetricsCount);
        states[b] = download_raw<TrainState>(backend, state, 1)[0];
    }
    if (nan_logit) {  // row 0's outputs: NaN in the same places (which ones depends on the pair)
        const size_t row = static_cast<size_t>(c.width);
        CHECK(zero_shared_nans(gradients[0], gradients[1], row));
        if (c.with_probabilities) CHECK(zero_shared_nans(probabilities[0], probabilities[1], row));
    }
    CHECK(normalised_error(gradients[1], gradients[0]) <= error_bound(c.gradient_dtype));
    if (c.with_probabilities) CHECK(normalised_error(probabilities[1], probabilities[0]) <= error_bound(DType::fp32));
    if (nan_logit) {  // Approx is false for NaN: NaN-ness itself, on each backend
        for (int b = 0; b < 2; ++b) {
            CAPTURE(b);
            CHECK(std::isnan(metrics[b][kMetricLossSum]));
            CHECK(std::isnan(metrics[b][kMetricBatchLoss]));
            CHECK(states[b].found_inf == 1);
        }
    } else {
        CHECK(metrics[1][kMetricLossSum] == doctest::Approx(metrics[0][kMetricLossSum]).epsilon(1e-5));
        CHECK(metrics[1][kMetricBatchLoss] == doctest::Approx(metrics[0][kMetricBatchLoss]).epsilon(1e-5));
    }
    CHECK(metrics[1][kMetricCorrect] == metrics[0][kMetricCorrect]);
    CHECK(metrics[1][kMetricCounted] == metrics[0][kMetricCounted]);
    CHECK(states[1].found_inf == states[0].found_inf);
}

// Each case as given, then with a NaN logit in row 0 and a state, so that found_inf can be raised:
// in column 0 and, with more classes, in column 1 (an element-wise head keeps the row's other
// outputs, and the arg-max must pass over the NaN as the CPU's loop does).
void compare_loss_head(Backend& reference, Backend& candidate, const HeadCase& c) {
    compare_loss_head_logits(reference, candidate, c, -1);
    HeadCase nan_case = c;
    nan_case.with_state = true;
    compare_loss_head_logits(reference, candidate, nan_case, 0);
    if (c.classes > 1) compare_loss_head_logits(reference, candidate, nan_case, 1);
}

void compare_loss_head_cases(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, dtype, true, false});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::sparse_categorical_crossentropy, 40, 16, 10, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::categorical_crossentropy, 33, 8, 5, dtype, false, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::binary_crossentropy, 50, 8, 3, dtype, false, true});
        compare_loss_head(reference, candidate,
                          {Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, dtype, false, false});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softmax, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::sigmoid, LossKind::mean_squared_error, 31, 8, 1, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::linear, LossKind::mean_absolute_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::tanh, LossKind::mean_absolute_error, 31, 8, 1, dtype, true, false});
        compare_loss_head(reference, candidate, {Activation::linear, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::softmax, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::sigmoid, LossKind::huber, 31, 8, 1, dtype, false, true});
        // The activations without an epilogue, as the last layer: applied and differentiated in the head.
        compare_loss_head(reference, candidate,
                          {Activation::softplus, LossKind::mean_squared_error, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate, {Activation::elu, LossKind::huber, 31, 8, 7, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::selu, LossKind::mean_absolute_error, 31, 8, 3, dtype, true, false});
        compare_loss_head(reference, candidate,
                          {Activation::leaky_relu, LossKind::mean_squared_error, 31, 8, 1, dtype, true, true});
        compare_loss_head(reference, candidate,
                          {Activation::softsign, LossKind::binary_crossentropy, 20, 8, 4, dtype, false, false});
    }
    // Rows wider than a warp (more than 32 columns), where a lane loops over its classes: every
    // head case, in one block (32 rows at most) and in several.
    compare_loss_head(
        reference, candidate,
        {Activation::softmax, LossKind::sparse_categorical_crossentropy, 29, 48, 40, DType::bf16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::sigmoid, LossKind::categorical_crossentropy, 45, 40, 33, DType::fp16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::sigmoid, LossKind::binary_crossentropy, 20, 40, 36, DType::fp32, true, false});
    compare_loss_head(reference, candidate,
                      {Activation::tanh, LossKind::binary_crossentropy, 40, 64, 50, DType::bf16, false, true});
    compare_loss_head(reference, candidate,
                      {Activation::linear, LossKind::mean_squared_error, 31, 72, 65, DType::fp32, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::huber, 37, 40, 40, DType::fp16, true, true});
    // Label smoothing in every cross-entropy form (logits, renormalised, softplus, clipped).
    for (const HeadCase& smoothed :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true, 0.1f},
          HeadCase{Activation::linear, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp16, true, false, 0.2f},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.1f},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::bf16, true, true, 0.3f},
          HeadCase{Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, DType::fp32, false, false, 0.05f},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, true,
                   0.1f}})
        compare_loss_head(reference, candidate, smoothed);
    // Class weights in every categorical form, with and without smoothing.
    for (const HeadCase& weighted :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true, 0.0f, true},
          HeadCase{Activation::linear, LossKind::sparse_categorical_crossentropy, 40, 16, 10, DType::fp16, true, false, 0.1f, true},
          HeadCase{Activation::softmax, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.0f, true},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::bf16, true, true, 0.2f, true},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, false,
                   0.0f, true}})
        compare_loss_head(reference, candidate, weighted);
    // Row weights (a weighted dataset's) with every loss, alone and after class weights.
    for (HeadCase row_weighted :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::categorical_crossentropy, 40, 16, 10, DType::fp16, true, false, 0.1f, true},
          HeadCase{Activation::sigmoid, LossKind::categorical_crossentropy, 33, 8, 5, DType::fp32, true, true, 0.0f, true},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::bf16, true, true},
          HeadCase{Activation::tanh, LossKind::binary_crossentropy, 20, 8, 4, DType::fp32, false, false},
          HeadCase{Activation::linear, LossKind::mean_squared_error, 31, 8, 7, DType::fp16, true, true},
          HeadCase{Activation::linear, LossKind::mean_absolute_error, 31, 8, 7, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::huber, 31, 8, 7, DType::fp32, true, true},
          HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::fp32, true, false,
                   0.0f, true}}) {
        row_weighted.with_row_weights = true;
        compare_loss_head(reference, candidate, row_weighted);
    }
    // Micro-batches' heads (gradient accumulation): the mean over their whole batch's rows, the batch
    // loss set by the first and added to by the others.
    for (HeadCase micro :
         {HeadCase{Activation::softmax, LossKind::sparse_categorical_crossentropy, 67, 16, 10, DType::bf16, true, true},
          HeadCase{Activation::linear, LossKind::mean_squared_error, 31, 8, 7, DType::fp16, true, true},
          HeadCase{Activation::sigmoid, LossKind::binary_crossentropy, 50, 8, 3, DType::fp32, true, false, 0.1f}}) {
        micro.mean_rows = 3 * micro.rows + 5;
        for (bool continues : {false, true}) {
            micro.continues_batch = continues;
            compare_loss_head(reference, candidate, micro);
        }
    }
    // Wide heads (several classes per lane) and many rows (several blocks).
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 300, 104, 100, DType::bf16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 4096, 16, 10, DType::fp16, true, false});
    // Past 2048 rows with a ragged class count (33 in 40 padded units), and 1000 classes (32 a lane).
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 2100, 40, 33, DType::fp16, true, true});
    compare_loss_head(reference, candidate,
                      {Activation::linear, LossKind::categorical_crossentropy, 2100, 40, 33, DType::bf16, true, false, 0.1f});
    compare_loss_head(reference, candidate,
                      {Activation::softmax, LossKind::sparse_categorical_crossentropy, 2050, 1000, 1000, DType::bf16, true,
                       true, 0.0f, true});
}

// `standardized`: then (value - mean) / divisor per feature, as for mpt_dataset_create_standardized.
// features = padded, a multiple of 16, and uint8 samples: the 16-byte chunk path.
void compare_gather(Backend& reference, Backend& candidate, bool u8, DType dtype, bool standardized = false,
                    int64_t features = 50, int64_t padded = 56) {
    CAPTURE(u8);
    CAPTURE(std::string(dtype_name(dtype)));
    CAPTURE(standardized);
    CAPTURE(features);
    CAPTURE(padded);
    const int64_t dataset_rows = 100, rows = 21, first = 7, target_width = 3;
    std::vector<uint8_t> samples_u8(static_cast<size_t>(dataset_rows * features));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& value : samples_u8) value = static_cast<uint8_t>(byte(random_engine()));
    const std::vector<float> samples_f32 = random_values(static_cast<size_t>(dataset_rows * features), -3, 3);
    std::vector<int32_t> order(static_cast<size_t>(dataset_rows));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), random_engine());
    std::vector<int32_t> labels(static_cast<size_t>(dataset_rows));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    const std::vector<float> targets = random_values(static_cast<size_t>(dataset_rows * target_width), 0, 1);
    const std::vector<float> row_weights = random_values(static_cast<size_t>(dataset_rows), 0, 2);
    const std::vector<float> feature_means = random_values(static_cast<size_t>(features), -1, 1);
    const std::vector<float> feature_divisors = random_values(static_cast<size_t>(features), 0.1f, 3);

    std::vector<float> batches[2], batch_targets[2], batch_row_weights[2];
    std::vector<int32_t> batch_labels[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer samples = u8 ? upload_raw(backend, samples_u8) : upload_raw(backend, samples_f32);
        Buffer order_buffer = upload_raw(backend, order);
        Buffer label_buffer = upload_raw(backend, labels);
        Buffer target_buffer = upload_raw(backend, targets);
        Buffer batch = poisoned(backend, dtype, static_cast<size_t>(rows * padded));
        Buffer batch_label = poisoned(backend, DType::fp32, static_cast<size_t>(rows));
        Buffer batch_target = poisoned(backend, DType::fp32, static_cast<size_t>(rows * target_width));
        Buffer row_weight_buffer = upload_raw(backend, row_weights);
        Buffer batch_row_weight = poisoned(backend, DType::fp32, static_cast<size_t>(rows));
        Buffer mean_buffer = upload_raw(backend, feature_means);
        Buffer divisor_buffer = upload_raw(backend, feature_divisors);
        GatherArgs args{};
        args.samples = samples.data();
        args.samples_are_u8 = u8;
        args.scale = u8 ? 1.0f / 255.0f : 0.7f;
        args.offset = u8 ? -0.25f : 0.1f;
        args.order = order_buffer.as<int32_t>();
        args.first = first;
        args.rows = rows;
        args.features = features;
        args.padded_features = padded;
        args.batch = batch.data();
        args.batch_dtype = dtype;
        args.labels = label_buffer.as<int32_t>();
        args.batch_labels = batch_label.as<int32_t>();
        args.targets = target_buffer.as<float>();
        args.target_width = target_width;
        args.batch_targets = batch_target.as<float>();
        args.row_weights = row_weight_buffer.as<float>();
        args.batch_row_weights = batch_row_weight.as<float>();
        if (standardized) {
            args.feature_mean = mean_buffer.as<float>();
            args.feature_divisor = divisor_buffer.as<float>();
        }
        backend.gather_batch(args);
        backend.scheduler().synchronize();
        batches[b] = download(backend, batch, dtype, static_cast<size_t>(rows * padded));
        batch_labels[b] = download_raw<int32_t>(backend, batch_label, static_cast<size_t>(rows));
        batch_targets[b] = download(backend, batch_target, DType::fp32, static_cast<size_t>(rows * target_width));
        batch_row_weights[b] = download(backend, batch_row_weight, DType::fp32, static_cast<size_t>(rows));
    }
    CHECK(normalised_error(batches[1], batches[0]) == 0.0);  // the same formula, each rounding alike: exact
    CHECK(batch_labels[1] == batch_labels[0]);
    CHECK(batch_targets[1] == batch_targets[0]);
    CHECK(batch_row_weights[1] == batch_row_weights[0]);
}

// How many elements of a and b differ by more than `tolerance`.
int64_t count_differing(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
    int64_t count = 0;
    for (size_t i = 0; i < a.size(); ++i) count += !(std::fabs(a[i] - b[i]) <= tolerance);
    return count;
}

std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> result(a.size());
    for (size_t i = 0; i < a.size(); ++i) result[i] = a[i] - b[i];
    return result;
}

struct UpdateCase {
    int64_t rows, in_features, out_features;
    DType dtype;
    OptimizerConfig optimizer;
    bool skipped;  // found_inf already set: nothing may change
    // In parts, as a clipped step runs it: UpdatePart::gradient, then UpdatePart::apply times this
    // factor (device memory). 0: whole.
    float gradient_factor = 0.0f;
    // In parts, as gradient accumulation runs them: this many UpdatePart::accumulate between the
    // gradient and the apply, each adding the gradient of another batch (the first's times 1 - k/4).
    int accumulations = 0;
    // A skipped step's dZ and A_prev with inf and NaN in them, as an overflowing fp16 step leaves them.
    bool non_finite_inputs = false;
};

// Plain SGD with the weight decay the update cases use: a rate times 0.05 off every weight a step.
OptimizerConfig decayed_sgd() {
    OptimizerConfig optimizer;
    optimizer.weight_decay = 0.05f;
    return optimizer;
}

// One layer's dense_update, twice in a row (so optimizer state carries over), from the same masters,
// gradients and state on both backends: the change of the masters, the optimizer state, the
// low-precision copies compared; a skipped update must leave every byte as it was.
void compare_dense_update(Backend& reference, Backend& candidate, const UpdateCase& c) {
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.out_features);
    CAPTURE(std::string(dtype_name(c.dtype)));
    CAPTURE(static_cast<int>(c.optimizer.kind));
    CAPTURE(c.optimizer.momentum);
    CAPTURE(c.optimizer.nesterov);
    CAPTURE(c.optimizer.centered);
    CAPTURE(c.optimizer.weight_decay);
    CAPTURE(c.skipped);
    CAPTURE(c.gradient_factor);
    CAPTURE(c.accumulations);
    CAPTURE(c.non_finite_inputs);
    const int64_t weight_count = c.out_features * c.in_features;
    const bool parts = c.gradient_factor != 0.0f;
    TrainState initial{};
    initial.loss_scale = 512.0f;
    initial.found_inf = c.skipped ? 1 : 0;
    initial.applied_steps = 3;
    std::vector<float> output_grad = random_values(static_cast<size_t>(c.rows * c.out_features), -1, 1);
    for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(c.rows);  // scaled, as from the head
    output_grad = rounded(output_grad, c.dtype);
    std::vector<float> input = rounded(random_values(static_cast<size_t>(c.rows * c.in_features), 0, 1), c.dtype);
    if (c.non_finite_inputs) {
        REQUIRE(c.skipped);
        output_grad.front() = INFINITY;
        output_grad[output_grad.size() / 2] = NAN;
        input[1] = NAN;
        input.back() = -INFINITY;
    }
    const std::vector<float> weights = random_values(static_cast<size_t>(weight_count), -0.5f, 0.5f);
    const std::vector<float> bias = random_values(static_cast<size_t>(c.out_features), -0.1f, 0.1f);
    const int states = optimizer_state_count(c.optimizer);
    const bool plain_sgd = is_plain_sgd(c.optimizer);
    const bool low = c.dtype != DType::fp32;

    std::vector<float> weight_results[2], bias_results[2], state_results[2][kMaxOptimizerStates],
        bias_state_results[2][kMaxOptimizerStates],
        low_weight_results[2], low_bias_results[2];
    Backend* backends[2] = {&reference, &candidate};
    for (int b = 0; b < 2; ++b) {
        Backend& backend = *backends[b];
        Buffer output_grad_buffer = upload(backend, c.dtype, output_grad);
        Buffer input_buffer = upload(backend, c.dtype, input);
        Buffer weight_buffer = upload(backend, DType::fp32, weights);
        Buffer bias_buffer = upload(backend, DType::fp32, bias);
        Buffer low_weights = poisoned(backend, c.dtype, static_cast<size_t>(weight_count));
        Buffer low_bias = poisoned(backend, c.dtype, static_cast<size_t>(c.out_features));
        Buffer scratch = poisoned(backend, DType::fp32, static_cast<size_t>(weight_count + 256 + c.out_features));
        const std::vector<float> zeros(static_cast<size_t>(weight_count), 0.0f);
        const std::vector<float> bias_zeros(static_cast<size_t>(c.out_features), 0.0f);
        Buffer weight_states[kMaxOptimizerStates] = {upload(backend, DType::fp32, zeros), upload(backend, DType::fp32, zeros),
                                                     upload(backend, DType::fp32, zeros)};
        Buffer bias_states[kMaxOptimizerStates] = {upload(backend, DType::fp32, bias_zeros),
                                                   upload(backend, DType::fp32, bias_zeros),
                                                   upload(backend, DType::fp32, bias_zeros)};
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer factor = upload(backend, DType::fp32, std::vector<float>{c.gradient_factor});
        const WorkspaceBuffer workspace(backend);
        DenseUpdateArgs args{};
        args.output_grad = output_grad_buffer.data();
        args.input = input_buffer.data();
        args.weights = weight_buffer.as<float>();
        args.bias = bias_buffer.as<float>();
        args.low_weights = low ? low_weights.data() : nullptr;
        args.low_bias = low ? low_bias.data() : nullptr;
        args.weight_grad = plain_sgd && !parts ? nullptr : scratch.as<float>();
        args.bias_grad = plain_sgd && !parts ? nullptr : scratch.as<float>() + weight_count + 256;
        for (int k = 0; k < kMaxOptimizerStates; ++k) {
            args.weight_state[k] = k < states ? weight_states[k].as<float>() : nullptr;
            args.bias_state[k] = k < states ? bias_states[k].as<float>() : nullptr;
        }
        args.rows = c.rows;
        args.in_features = c.in_features;
        args.out_features = c.out_features;
        args.compute_dtype = c.dtype;
        args.state = state.as<TrainState>();
        args.workspace = workspace.workspace();
        for (int update = 0; update < 2; ++update) {
            if (parts) {
                args.part = UpdatePart::gradient;
                args.gradient_factor = nullptr;
                backend.dense_update(args, c.optimizer);
                for (int k = 1; k <= c.accumulations; ++k) {
                    std::vector<float> other = output_grad;
                    for (float& g : other) g *= 1.0f - static_cast<float>(k) / 4.0f;
                    Buffer other_buffer = upload(backend, c.dtype, rounded(other, c.dtype));
                    args.output_grad = other_buffer.data();
                    args.part = UpdatePart::accumulate;
                    backend.dense_update(args, c.optimizer);
                    args.output_grad = output_grad_buffer.data();
                }
                args.part = UpdatePart::apply;
                args.gradient_factor = factor.as<float>();
            }
            backend.dense_update(args, c.optimizer);
        }
        weight_results[b] = download(backend, weight_buffer, DType::fp32, static_cast<size_t>(weight_count));
        bias_results[b] = download(backend, bias_buffer, DType::fp32, static_cast<size_t>(c.out_features));
        for (int k = 0; k < states; ++k) {
            state_results[b][k] = download(backend, weight_states[k], DType::fp32, static_cast<size_t>(weight_count));
            bias_state_results[b][k] = download(backend, bias_states[k], DType::fp32, static_cast<size_t>(c.out_features));
        }
        if (low) {
            low_weight_results[b] = download(backend, low_weights, c.dtype, static_cast<size_t>(weight_count));
            low_bias_results[b] = download(backend, low_bias, c.dtype, static_cast<size_t>(c.out_features));
        }
    }
    if (c.skipped) {
        for (int b = 0; b < 2; ++b) {
            CHECK(std::memcmp(weight_results[b].data(), weights.data(), weights.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(bias_results[b].data(), bias.data(), bias.size() * sizeof(float)) == 0);
            const auto zero = [](float v) { return v == 0.0f; };
            for (int k = 0; k < states; ++k) {
                CHECK(std::all_of(state_results[b][k].begin(), state_results[b][k].end(), zero));
                CHECK(std::all_of(bias_state_results[b][k].begin(), bias_state_results[b][k].end(), zero));
            }
            if (low) {  // still the poison: not a byte written
                const auto poison = [](float v) { return std::isnan(v); };
                CHECK(std::all_of(low_weight_results[b].begin(), low_weight_results[b].end(), poison));
                CHECK(std::all_of(low_bias_results[b].begin(), low_bias_results[b].end(), poison));
            }
        }
        return;
    }
    // What the update changed, compared (the masters themselves would hide a wrong small step).
    const OptimizerKind kind = c.optimizer.kind;
    if (kind == OptimizerKind::lion || kind == OptimizerKind::adam || kind == OptimizerKind::adamw ||
        kind == OptimizerKind::rmsprop) {
        // Every Lion step is the rate times a sign (and decay), and so, nearly, are Adam's and
        // RMSprop's first steps from zero state (g / (|g| + eps)): the same steps, but where a
        // gradient (or Lion's interpolation) lies within rounding of 0 the backends' sums, taken in
        // another order, may give it other signs. At most one parameter in 1,000 may differ.
        const float tolerance = 1e-3f * c.optimizer.learning_rate;
        CHECK(count_differing(weight_results[1], weight_results[0], tolerance) <= weight_count / 1000 + 1);
        CHECK(count_differing(bias_results[1], bias_results[0], tolerance) <= 1);
    } else {
        CHECK(normalised_error(difference(weight_results[1], weights), difference(weight_results[0], weights)) <= 1e-3);
        CHECK(normalised_error(difference(bias_results[1], bias), difference(bias_results[0], bias)) <= 1e-3);
        // (Not for the sign-like steps: one flipped sign moves its weight by twice the rate, some 1e-4
        // of the norm.)
        CHECK(normalised_error(weight_results[1], weight_results[0]) <= error_bound(DType::fp32));
    }
    for (int k = 0; k < states; ++k) {
        CHECK(normalised_error(state_results[1][k], state_results[0][k]) <= 1e-4);
        CHECK(normalised_error(bias_state_results[1][k], bias_state_results[0][k]) <= 1e-4);
    }
    if (low) {
        CHECK(normalised_error(low_weight_results[1], low_weight_results[0]) <= error_bound(c.dtype));
        CHECK(normalised_error(low_bias_results[1], low_bias_results[0]) <= error_bound(c.dtype));
    }
}

void compare_dense_update_cases(Backend& reference, Backend& candidate) {
    OptimizerConfig sgd;
    OptimizerConfig momentum;
    momentum.momentum = 0.9f;
    OptimizerConfig nesterov = momentum;
    nesterov.nesterov = true;
    OptimizerConfig adam;
    adam.kind = OptimizerKind::adam;
    adam.learning_rate = 1e-3f;
    OptimizerConfig adamw = adam;
    adamw.kind = OptimizerKind::adamw;
    adamw.weight_decay = 0.01f;
    OptimizerConfig rmsprop;
    rmsprop.kind = OptimizerKind::rmsprop;
    rmsprop.learning_rate = 1e-3f;
    OptimizerConfig rmsprop_momentum = rmsprop;
    rmsprop_momentum.momentum = 0.9f;
    rmsprop_momentum.rho = 0.8f;
    // Keras's weight decay under the other rules: plain SGD keeps its fused kernel with it (and the
    // CPU reference its one GEMM, beta the factor decay leaves), past 64 rows GEMM then update.
    OptimizerConfig sgd_decay = decayed_sgd();
    // Centered: the gradients' average is the second state array, or the third after momentum's.
    OptimizerConfig rmsprop_centered = rmsprop;
    rmsprop_centered.centered = true;
    OptimizerConfig rmsprop_centered_momentum = rmsprop_momentum;
    rmsprop_centered_momentum.centered = true;
    OptimizerConfig rmsprop_decay = rmsprop;
    rmsprop_decay.weight_decay = 0.05f;
    OptimizerConfig lion;  // Keras's defaults, as the C API sets them
    lion.kind = OptimizerKind::lion;
    lion.learning_rate = 1e-3f;
    lion.beta2 = 0.99f;
    OptimizerConfig lion_decay = lion;
    lion_decay.weight_decay = 0.1f;
    lion_decay.beta1 = 0.5f;
    for (DType dtype : kDTypes) {
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_decay, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_centered, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop_centered_momentum, false});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, rmsprop_centered_momentum, false});  // bias tail: one by one
        compare_dense_update(reference, candidate, {64, 200, 72, dtype, sgd_decay, false});  // fused, partial tiles
        compare_dense_update(reference, candidate, {96, 136, 64, dtype, sgd_decay, false});  // GEMM, then update
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, sgd_decay, true});  // skipped: no decay either
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false});   // fused SGD (rows <= 64)
        compare_dense_update(reference, candidate, {64, 200, 72, dtype, sgd, false});   // fused, partial tiles
        compare_dense_update(reference, candidate, {33, 101, 45, dtype, sgd, false});   // fused, columns one by one
        compare_dense_update(reference, candidate, {96, 136, 64, dtype, sgd, false});   // GEMM, then update
        compare_dense_update(reference, candidate, {64, 48, 16, dtype, momentum, false});
        compare_dense_update(reference, candidate, {16, 64, 24, dtype, nesterov, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adam, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, rmsprop, false});
        compare_dense_update(reference, candidate, {24, 72, 32, dtype, rmsprop_momentum, false});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, lion, false});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, lion_decay, false});  // bias tail: one by one
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, lion, true});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, sgd, true});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, adam, true});
        // In parts (a clipped step): plain SGD keeps its gradient too, and the factor scales it.
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false, 0.37f});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false, 0.37f});
        compare_dense_update(reference, candidate, {64, 48, 16, dtype, momentum, false, 1.0f});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, momentum, true, 0.5f});
        // Accumulated (micro-batches): cuBLASLt with beta 1 and the bias sums added to, unfused.
        compare_dense_update(reference, candidate, {37, 136, 64, dtype, sgd, false, 1.0f, 1});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, adamw, false, 0.37f, 3});
        compare_dense_update(reference, candidate, {16, 100, 13, dtype, rmsprop_centered_momentum, false, 1.0f, 2});
        compare_dense_update(reference, candidate, {32, 64, 16, dtype, adam, true, 1.0f, 2});
        compare_dense_update(reference, candidate, {40, 96, 40, dtype, lion_decay, false, 0.37f, 2});
    }
    // 1.5 M weights: past one pass of the update kernel's grid (8 blocks per SM, about 1 M elements
    // on an H200), so later grid-stride passes run and the bias group starts in the second.
    compare_dense_update(reference, candidate, {96, 3072, 512, DType::bf16, adam, false});
    // Fused SGD on the seed MLP's first layer: more row tiles than resident blocks, so each block
    // walks several (9 on an H200), the next tile's masters and dZ loaded while the current one is
    // summed; then the masters one by one (a row of 3001 columns is no whole number of float4s),
    // 6 tiles a block.
    compare_dense_update(reference, candidate, {32, 3072, 3000, DType::bf16, sgd, false});
    compare_dense_update(reference, candidate, {33, 3001, 2000, DType::fp16, sgd_decay, false});
}

// clip_factor over gradients as a step leaves them (times the loss scale): an empty set, one value,
// a ragged misaligned count, and 4 M values (past the first pass of the grid), with the bound below
// and above the norm, and a skipped step. The norm and factor it records in the TrainState against
// the host's own double-precision norm, and the factor exactly 1 when the bound is not exceeded.
void compare_clip_factor(Backend& reference, Backend& candidate) {
    struct ClipCase {
        int64_t count, offset;  // offset: elements into the buffer, so 1 is not 16-byte aligned
        float loss_scale, bound_over_norm;
        bool skipped;
    };
    const ClipCase cases[] = {{0, 0, 1.0f, 0.5f, false},        {1, 0, 1.0f, 0.5f, false},
                              {4999, 1, 512.0f, 0.25f, false},  {4999, 0, 512.0f, 2.0f, false},
                              {(int64_t{4} << 20) + 3, 0, 32768.0f, 0.1f, false},
                              {1000, 3, 65536.0f, 1.5f, false}, {1000, 0, 512.0f, 0.5f, true}};
    for (const ClipCase& c : cases) {
        CAPTURE(c.count);
        CAPTURE(c.offset);
        CAPTURE(c.loss_scale);
        CAPTURE(c.bound_over_norm);
        CAPTURE(c.skipped);
        // One more value past the end, large enough to show should it be read.
        std::vector<float> gradients = random_values(static_cast<size_t>(c.count + c.offset + 1), -1, 1);
        for (float& g : gradients) g *= c.loss_scale * 1e-2f;
        gradients.back() = 1e30f;
        double sum = 0.0;
        for (int64_t i = c.offset; i < c.offset + c.count; ++i)
            sum += static_cast<double>(gradients[static_cast<size_t>(i)]) * gradients[static_cast<size_t>(i)];
        const double norm = std::sqrt(sum) / c.loss_scale;
        // An empty set's norm is 0: any positive bound is above it.
        const float bound = c.count == 0 ? 1.0f : static_cast<float>(norm * c.bound_over_norm);
        // (A bound at the norm itself could round either way: the cases keep clear of it.)
        const double expected = c.count == 0 || c.bound_over_norm > 1.0f ? 1.0 : bound / norm;
        TrainState state = initial_train_state(LossScalerConfig{});
        state.loss_scale = c.loss_scale;
        state.found_inf = c.skipped ? 1 : 0;
        state.gradient_norm = 123.0f;  // poison: each case writes its own
        state.clip_factor = 123.0f;
        TrainState results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer values = upload(backend, DType::fp32, gradients);
            Buffer state_buffer = upload_raw(backend, std::vector<TrainState>{state});
            backend.clip_factor(values.as<float>() + c.offset, c.count, bound, state_buffer.as<TrainState>());
            results[b] = download_raw<TrainState>(backend, state_buffer, 1)[0];
        }
        for (const TrainState& result : results) {
            if (c.skipped) {  // no norm, and a factor no update reads
                CHECK(std::isnan(result.gradient_norm));
                CHECK(result.clip_factor == 1.0f);
                continue;
            }
            CHECK(result.gradient_norm == doctest::Approx(norm).epsilon(1e-6));
            CHECK(result.clip_factor == doctest::Approx(expected).epsilon(1e-6));
            if (expected == 1.0) CHECK(result.clip_factor == 1.0f);
            CHECK(result.steps == state.steps);  // the rest of the state as it was
            CHECK(result.loss_scale == state.loss_scale);
        }
    }
}

// average_weights against Keras's formula (exact: both backends round each product and the sum
// once) and swap_values, on ragged and misaligned counts, with a value past the end that neither
// may touch; the first applied step copies and a skipped step leaves the averages; momentum 0 (a
// frozen layer's) copies, whatever the step.
void compare_weight_averaging(Backend& reference, Backend& candidate) {
    struct AverageCase {
        int64_t count, offset;
        float momentum;
        int64_t applied_steps;
        bool skipped;
    };
    const AverageCase cases[] = {{0, 0, 0.9f, 3, false},      {1, 0, 0.9f, 3, false},     {4999, 1, 0.999f, 3, false},
                                 {4999, 3, 0.5f, 0, false},   {4999, 0, 0.75f, 7, true},
                                 {(int64_t{4} << 20) + 3, 0, 0.999f, 1, false}, {4999, 1, 0.0f, 3, false},
                                 {4999, 2, 0.0f, 3, true}};
    for (const AverageCase& c : cases) {
        CAPTURE(c.count);
        CAPTURE(c.offset);
        CAPTURE(c.momentum);
        CAPTURE(c.applied_steps);
        CAPTURE(c.skipped);
        const size_t size = static_cast<size_t>(c.count + c.offset + 1);
        const std::vector<float> masters = random_values(size, -2, 2);
        const std::vector<float> averages = random_values(size, -2, 2);
        std::vector<float> expected = averages;
        const bool copies = c.momentum == 0.0f;
        for (int64_t i = c.offset; i < c.offset + c.count && (!c.skipped || copies); ++i) {
            const size_t k = static_cast<size_t>(i);
            expected[k] = c.applied_steps == 0 || copies ? masters[k] : averaged_weight(averages[k], masters[k], c.momentum);
        }
        TrainState state = initial_train_state(LossScalerConfig{});
        state.applied_steps = c.applied_steps;
        state.steps = c.applied_steps + (c.skipped ? 1 : 0);
        state.found_inf = c.skipped ? 1 : 0;
        Backend* backends[2] = {&reference, &candidate};
        for (Backend* backend : backends) {
            Buffer master_buffer = upload(*backend, DType::fp32, masters);
            Buffer average_buffer = upload(*backend, DType::fp32, averages);
            Buffer state_buffer = upload_raw(*backend, std::vector<TrainState>{state});
            backend->average_weights(master_buffer.as<float>() + c.offset, average_buffer.as<float>() + c.offset, c.count,
                                     c.momentum, state_buffer.as<TrainState>());
            CHECK(download(*backend, average_buffer, DType::fp32, size) == expected);
            CHECK(download(*backend, master_buffer, DType::fp32, size) == masters);
            // And the exchange: each array takes the other's values, and nothing past the end.
            backend->swap_values(master_buffer.as<float>() + c.offset, average_buffer.as<float>() + c.offset, c.count);
            std::vector<float> swapped_masters = masters, swapped_averages = expected;
            for (int64_t i = c.offset; i < c.offset + c.count; ++i)
                std::swap(swapped_masters[static_cast<size_t>(i)], swapped_averages[static_cast<size_t>(i)]);
            CHECK(download(*backend, master_buffer, DType::fp32, size) == swapped_masters);
            CHECK(download(*backend, average_buffer, DType::fp32, size) == swapped_averages);
        }
    }
}

// dropout against nn/dropout.h's mask, exactly: each kept value times the scale, rounded once to the
// dtype, the others 0, on ragged counts and misaligned starts with a value past the end that it may
// not touch; the step count in backend memory keys the mask. Into another array (the forward's),
// whose input stays as it was, and in place (the backward's).
void compare_dropout(Backend& reference, Backend& candidate) {
    struct DropoutCase {
        int64_t count, offset, steps, layer;
        float rate;
        int64_t first_index = 0;  // a micro-batch's: where its values lie in the whole batch's
    };
    const DropoutCase cases[] = {{0, 0, 0, 0, 0.5f},        {1, 0, 3, 1, 0.5f},          {4999, 1, 0, 0, 0.1f},
                                 {4999, 3, 12345, 2, 0.9f}, {(int64_t{1} << 20) + 3, 0, 7, 1, 0.3f},
                                 {4999, 1, 5, 1, 0.4f, 3 * 4999}};
    const uint64_t seed = 0x0123456789abcdefULL;
    for (DType dtype : kDTypes) {
        for (const DropoutCase& c : cases) {
            CAPTURE(std::string(dtype_name(dtype)));
            CAPTURE(c.count);
            CAPTURE(c.offset);
            CAPTURE(c.steps);
            CAPTURE(c.rate);
            CAPTURE(c.first_index);
            const size_t size = static_cast<size_t>(c.count + c.offset + 1);
            const std::vector<float> values = rounded(random_values(size, -3, 3), dtype);
            const DropoutDraw draw = dropout_draw(seed, c.layer, c.rate);
            const uint64_t key = dropout_key(seed, c.steps, c.layer);
            std::vector<float> expected = values;
            int64_t kept = 0;
            for (int64_t i = 0; i < c.count; ++i) {
                const bool keeps = dropout_keeps(key, draw.threshold, c.first_index + i);
                kept += keeps;
                float& value = expected[static_cast<size_t>(c.offset + i)];
                value = keeps ? round_to(dtype, value * (1.0f / (1.0f - c.rate))) : 0.0f;
            }
            if (c.count > 1000) {  // the kept share within 6 standard deviations of 1 - rate
                const double mean = static_cast<double>(c.count) * (1.0 - c.rate);
                const double deviation = std::sqrt(static_cast<double>(c.count) * c.rate * (1.0 - c.rate));
                CHECK(std::abs(static_cast<double>(kept) - mean) < 6 * deviation);
            }
            TrainState state = initial_train_state(LossScalerConfig{});
            state.steps = c.steps;
            Backend* backends[2] = {&reference, &candidate};
            for (Backend* backend : backends) {
                for (bool in_place : {false, true}) {
                    CAPTURE(in_place);
                    Buffer input = upload(*backend, dtype, values);
                    Buffer output = upload(*backend, dtype, values);
                    Buffer state_buffer = upload_raw(*backend, std::vector<TrainState>{state});
                    const size_t offset = static_cast<size_t>(c.offset) * backend->storage_size(dtype);
                    DropoutArgs args{};
                    args.input = static_cast<char*>(input.data()) + offset;
                    args.output = static_cast<char*>((in_place ? input : output).data()) + offset;
                    args.dtype = dtype;
                    args.count = c.count;
                    args.draw = draw;
                    args.state = state_buffer.as<TrainState>();
                    args.first_index = c.first_index;
                    backend->dropout(args);
                    CHECK(download(*backend, in_place ? input : output, dtype, size) == expected);
                    if (!in_place) CHECK(download(*backend, input, dtype, size) == values);
                }
            }
        }
    }
}

// On a backend that takes the gradients' norm from the batch (clips_from_batch), that norm against
// the norm of the gradients its dense updates write (clip_factor over them), for three layers in
// every dtype: moderate values; inputs of 1e20 and gradients of 1e-25 (beyond what fp32 Gram
// matrices hold unscaled); and rows that cancel (pairs of equal inputs with opposite gradients).
void compare_clip_paths(Backend& backend) {
    const int64_t rows = 37;
    if (!backend.clips_from_batch(rows)) {
        MESSAGE("this backend takes no gradient norm from the batch");
        return;
    }
    struct Shape {
        int64_t in_features, out_features;
    };
    const Shape shapes[] = {{136, 64}, {64, 24}, {24, 8}};
    enum class Values { moderate, extreme, cancelling };
    for (Values values : {Values::moderate, Values::extreme, Values::cancelling}) {
        for (DType dtype : kDTypes) {
            CAPTURE(static_cast<int>(values));
            CAPTURE(std::string(dtype_name(dtype)));
            // Extreme values are fp32's: fp16 and bf16 would round them to infinity or zero.
            if (values == Values::extreme && dtype != DType::fp32) continue;
            TrainState initial = initial_train_state(LossScalerConfig{});
            initial.loss_scale = 512.0f;
            std::vector<Buffer> buffers;
            std::vector<DenseUpdateArgs> layers;
            std::vector<DenseUpdateShape> reserved;
            std::vector<float> bounds;
            int64_t gradient_elements = 0;
            for (const Shape& shape : shapes) gradient_elements += shape.out_features * shape.in_features + shape.out_features;
            Buffer gradients = poisoned(backend, DType::fp32, static_cast<size_t>(gradient_elements));
            int64_t offset = 0;
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            for (const Shape& shape : shapes) {
                std::vector<float> output_grad = random_values(static_cast<size_t>(rows * shape.out_features), -1, 1);
                std::vector<float> input = random_values(static_cast<size_t>(rows * shape.in_features), 0, 1);
                for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(rows);
                if (values == Values::extreme) {
                    for (float& g : output_grad) g *= 1e-25f;
                    for (float& a : input) a *= 1e20f;
                }
                if (values == Values::cancelling) {
                    for (int64_t r = 1; r < rows; r += 2)
                        for (int64_t k = 0; k < shape.in_features; ++k)
                            input[static_cast<size_t>(r * shape.in_features + k)] = input[static_cast<size_t>((r - 1) * shape.in_features + k)];
                    for (int64_t r = 1; r < rows; r += 2)
                        for (int64_t k = 0; k < shape.out_features; ++k)
                            output_grad[static_cast<size_t>(r * shape.out_features + k)] = -output_grad[static_cast<size_t>((r - 1) * shape.out_features + k)];
                }
                output_grad = rounded(output_grad, dtype);
                input = rounded(input, dtype);
                const auto largest = [](const std::vector<float>& v) {
                    float m = 0.0f;
                    for (float x : v) m = std::max(m, std::fabs(x));
                    return m;
                };
                bounds.insert(bounds.end(), {largest(output_grad), largest(input)});
                buffers.push_back(upload(backend, dtype, output_grad));
                buffers.push_back(upload(backend, dtype, input));
                DenseUpdateArgs args{};
                args.output_grad = buffers[buffers.size() - 2].data();
                args.input = buffers.back().data();
                args.weight_grad = gradients.as<float>() + offset;
                args.bias_grad = gradients.as<float>() + offset + shape.out_features * shape.in_features;
                offset += shape.out_features * shape.in_features + shape.out_features;
                args.rows = rows;
                args.in_features = shape.in_features;
                args.out_features = shape.out_features;
                args.compute_dtype = dtype;
                args.state = state.as<TrainState>();
                args.part = UpdatePart::gradient;
                layers.push_back(args);
                reserved.push_back({shape.in_features, shape.out_features, dtype});
            }
            Buffer bounds_buffer = upload(backend, DType::fp32, bounds);
            backend.reserve_update_scratch(reserved.data(), static_cast<int>(reserved.size()), rows, true);
            for (const DenseUpdateArgs& args : layers) backend.dense_update(args, OptimizerConfig{});
            const float clipnorm = 1e-30f;  // far below: the factor is clipnorm / norm
            backend.clip_factor(gradients.as<float>(), gradient_elements, clipnorm, state.as<TrainState>());
            const TrainState written = download_raw<TrainState>(backend, state, 1)[0];
            backend.clip_factor_from_batch(layers.data(), static_cast<int>(layers.size()), bounds_buffer.as<float>(),
                                           clipnorm, state.as<TrainState>());
            const TrainState from_batch = download_raw<TrainState>(backend, state, 1)[0];
            CHECK(std::isfinite(written.gradient_norm));
            CHECK(from_batch.gradient_norm >= 0.0f);
            if (values == Values::cancelling) {
                // What is left of the weights' gradient is the odd row out and the rounding of the
                // pairs' cancellation: the batch's norm agrees only to the pairs' size times fp32's
                // rounding, and may not come out negative or NaN.
                CHECK(from_batch.gradient_norm == doctest::Approx(written.gradient_norm).epsilon(1e-2));
            } else {
                CHECK(from_batch.gradient_norm == doctest::Approx(written.gradient_norm).epsilon(1e-5));
                CHECK(from_batch.clip_factor == doctest::Approx(written.clip_factor).epsilon(1e-5));
            }
        }
    }
}

// All trials of a dtype in one batched call, as a step issues them: ragged tails, misaligned
// starts, a negative maximum, NaN, -Inf, all zeros, an empty tensor, and 4 M elements whose maximum
// lies beyond the first pass of the grid (about 1 M elements in fp32 and 2 M in 16 bits on an H200).
void compare_max_abs(Backend& reference, Backend& candidate) {
    constexpr int kTrials = 8;
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        std::vector<std::vector<float>> values(kTrials);
        int64_t counts[kTrials], offsets[kTrials];
        for (int trial = 0; trial < kTrials; ++trial) {
            counts[trial] = trial == 6 ? 0 : trial == 7 ? (int64_t{4} << 20) + 3 : 4999 + trial;
            offsets[trial] = trial == 7 ? 0 : trial % 2;
            values[trial] = random_values(static_cast<size_t>(counts[trial] + offsets[trial]), -100, 100);
            const size_t o = static_cast<size_t>(offsets[trial]);
            if (trial == 1) values[trial][o + 1234] = -3000.0f;  // the largest is negative
            if (trial == 2) values[trial][o + static_cast<size_t>(counts[trial]) - 1] = std::numeric_limits<float>::quiet_NaN();
            if (trial == 3) values[trial][o + 17] = -std::numeric_limits<float>::infinity();
            if (trial == 4) std::fill(values[trial].begin(), values[trial].end(), 0.0f);
            if (trial == 7) values[trial][static_cast<size_t>(counts[trial]) - 7] = -1000.0f;  // in the last vector
        }
        std::vector<float> results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            std::vector<Buffer> buffers;
            buffers.reserve(kTrials);
            MaxAbsInput inputs[kTrials + 1];
            for (int trial = 0; trial < kTrials; ++trial) {
                buffers.push_back(upload(backend, dtype, values[trial]));
                const char* first = static_cast<const char*>(buffers.back().data()) +
                                    offsets[trial] * static_cast<int64_t>(backend.storage_size(dtype));
                inputs[trial] = MaxAbsInput{first, dtype, counts[trial]};
            }
            // Last, a maximum taken by its tensor's writer: its result left as it was (poison here).
            inputs[kTrials] = MaxAbsInput{nullptr, dtype, kMaxAbsTaken};
            Buffer out = poisoned(backend, DType::fp32, kTrials + 1);
            backend.max_abs(inputs, kTrials + 1, out.as<float>());
            results[b] = download(backend, out, DType::fp32, kTrials + 1);
            CHECK(std::isnan(results[b][kTrials]));
        }
        for (int trial = 0; trial < kTrials; ++trial) {
            CAPTURE(trial);
            float expected = 0.0f;  // independent: over the values as stored in the dtype
            for (int64_t i = offsets[trial]; i < offsets[trial] + counts[trial]; ++i) {
                const float value = round_to(dtype, values[trial][static_cast<size_t>(i)]);
                expected = std::isfinite(value) ? std::max(expected, std::fabs(value)) : INFINITY;
            }
            CHECK(results[0][static_cast<size_t>(trial)] == expected);
            CHECK(results[1][static_cast<size_t>(trial)] == expected);
        }
    }
}

void compare_decide_update(Backend& reference, Backend& candidate) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<std::vector<float>> cases = {
        {1.0f, 1.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 1.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // product overflows
        {1.0f, 1.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {1e37f, 0.1f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient rows * max|dZ| overflows; rows * max|dZ| * max|A| would not
    };
    for (size_t k = 0; k < cases.size(); ++k) {
        CAPTURE(k);
        int32_t found[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer pairs = upload(backend, DType::fp32, cases[k]);
            TrainState initial{};
            initial.loss_scale = 1.0f;
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            backend.decide_update(pairs.as<float>(), 3, 64, state.as<TrainState>());
            found[b] = download_raw<TrainState>(backend, state, 1)[0].found_inf;
        }
        CHECK(found[0] == (k == 0 ? 0 : 1));
        CHECK(found[1] == found[0]);
    }
}

void compare_finish_step(Backend& reference, Backend& candidate) {
    LossScalerConfig scaler;
    scaler.mode = LossScaling::dynamic;
    scaler.growth_interval = 3;
    for (int k = 0; k < 4; ++k) {
        CAPTURE(k);
        TrainState initial = initial_train_state(scaler);
        initial.found_inf = k == 1 ? 1 : 0;
        initial.growth_tracker = k == 2 ? 2 : 0;  // this step reaches the interval: the scale doubles
        initial.loss_scale = k == 3 ? 1.0f : 1024.0f;
        if (k == 3) initial.found_inf = 1;  // halving stops at min_scale
        TrainState results[2];
        Backend* backends[2] = {&reference, &candidate};
        // The running metrics reach the committed ones, bit for bit; without them, nothing is copied.
        std::vector<double> running(kMetricsCount);
        for (int i = 0; i < kMetricsCount; ++i) running[i] = (i % 2 ? -1e300 : 0.1) / (i + 1) + k;
        const std::vector<double> poison(kMetricsCount, -7.0);
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
            Buffer metrics = upload_raw(backend, running);
            Buffer committed = upload_raw(backend, poison);
            if (k == 0) backend.finish_step(state.as<TrainState>(), scaler, nullptr, committed.as<double>());
            else backend.finish_step(state.as<TrainState>(), scaler, metrics.as<double>(), committed.as<double>());
            results[b] = download_raw<TrainState>(backend, state, 1)[0];
            const std::vector<double> copied = download_raw<double>(backend, committed, kMetricsCount);
            CHECK(std::memcmp(copied.data(), (k == 0 ? poison : running).data(), sizeof(double) * kMetricsCount) == 0);
        }
        CHECK(results[1].loss_scale == results[0].loss_scale);
        CHECK(results[1].growth_tracker == results[0].growth_tracker);
        CHECK(results[1].skipped_steps == results[0].skipped_steps);
        CHECK(results[1].applied_steps == results[0].applied_steps);
        CHECK(results[1].steps == results[0].steps);
        CHECK(results[1].skipped_at_min_scale == results[0].skipped_at_min_scale);
        CHECK(results[0].skipped_at_min_scale == (k == 3 ? 1 : 0));  // an overflow at the minimum
        const float expected_scale = k == 1 ? 512.0f : k == 2 ? 2048.0f : k == 3 ? 1.0f : 1024.0f;
        CHECK(results[0].loss_scale == expected_scale);
    }
}

void compare_conversions(Backend& reference, Backend& candidate) {
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        const std::vector<float> values = random_values(1001, -70000.0f, 70000.0f);  // beyond fp16's range too
        std::vector<float> results[2];
        Backend* backends[2] = {&reference, &candidate};
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            Buffer source = upload(backend, DType::fp32, values);
            Buffer low = poisoned(backend, dtype, values.size());
            Buffer back = poisoned(backend, DType::fp32, values.size());
            backend.convert_from_fp32(low.data(), dtype, source.as<float>(), static_cast<int64_t>(values.size()));
            backend.convert_to_fp32(back.as<float>(), low.data(), dtype, static_cast<int64_t>(values.size()));
            results[b] = download(backend, back, DType::fp32, values.size());
        }
        REQUIRE(results[0].size() == results[1].size());
        for (size_t i = 0; i < values.size(); ++i) {
            CAPTURE(i);
            const float expected = round_to(dtype, values[i]);  // tested on its own in test_dtype
            CHECK(std::memcmp(&results[0][i], &expected, sizeof(float)) == 0);
            CHECK(std::memcmp(&results[1][i], &expected, sizeof(float)) == 0);
        }
    }
}

// ---- whole training runs -------------------------------------------------------------------------

struct TrainingRun {
    std::vector<float> initial, final;
    EvaluationResult evaluation;
    TrainState state;
};

// Trains `epochs` epochs at each batch size in turn (a new batch size plans the arenas again), in
// micro-batches of `micro_batch_size` rows where that is smaller (0: whole batches).
TrainingRun train(mpt_backend backend, mpt_precision precision, const SyntheticData& data, int64_t epochs,
                  const std::vector<int64_t>& batches, bool graphs = true, int64_t micro_batch_size = 0) {
    auto context = make_context(backend);
#if defined(MPTRAIN_WITH_CUDA)
    if (context->backend().kind() == BackendKind::cuda) {
        cuda_backend_set_graphs(context->backend(), graphs);
        // The head layer in a cluster (should it become a default) runs in recorded tasks only, its sums
        // in another order: off, so that the runs these cases compare, graphed and eager, compute alike.
        cuda_backend_set_head_layer_cluster(context->backend(), false);
    }
#else
    (void)graphs;
#endif
    auto model = make_mlp(context, data.features);
    auto dataset = to_dataset(context, data);
    TrainerConfig config;
    config.precision = precision;
    config.optimizer.learning_rate = 0.05f;
    config.micro_batch_size = micro_batch_size;
    Trainer trainer(model, config);
    TrainingRun run;
    run.initial = master_block(*model);
    for (int64_t batch : batches) trainer.fit(*dataset, epochs, batch, true);
    run.final = master_block(*model);
    run.evaluation = trainer.evaluate(*dataset, 64);
    run.state = trainer.state();
    return run;
}

TrainingRun train(mpt_backend backend, mpt_precision precision, const SyntheticData& data, int64_t epochs,
                  int64_t batch, bool graphs = true, int64_t micro_batch_size = 0) {
    return train(backend, precision, data, epochs, std::vector<int64_t>{batch}, graphs, micro_batch_size);
}

#if defined(MPTRAIN_WITH_CUDA)
// A bf16 ReLU layer's forward on `backend`, returning its ReLU mask's bytes (on CUDA, cuBLASLt's format).
std::vector<uint8_t> relu_forward_mask(Backend& backend, const std::vector<float>& input,
                                       const std::vector<float>& weights, const std::vector<float>& bias, int64_t rows,
                                       int64_t in_features, int64_t out_features) {
    const ForwardCase c{rows,        in_features, out_features, out_features, Activation::relu,
                        DType::bf16, DType::bf16, DType::bf16,  true};
    const ForwardRun run(backend, c, input, weights, bias);
    return download_raw<uint8_t>(backend, run.mask, run.mask_bytes);
}
#endif

#if defined(MPTRAIN_WITH_CUDA)
// The three ways the recorded-task cases issue their tasks: recorded (graphs), op by op, and recorded
// with programmatic dependent launch (9.0 and up).
struct IssueMode {
    bool graphs, dependent_launch;
};
constexpr IssueMode kIssueModes[] = {{true, false}, {false, false}, {true, true}};

// A CUDA backend issuing that way, or nullptr where the device has no dependent launch (a skip
// below 9.0, a failure from there up).
std::unique_ptr<Backend> cuda_backend_issuing(const IssueMode& mode) {
    auto backend = make_cuda();
    cuda_backend_set_graphs(*backend, mode.graphs);
    if (mode.dependent_launch &&
        !turn_on_device_path(*backend, cuda_backend_set_dependent_launch, "programmatic dependent launch", 9))
        return nullptr;
    return backend;
}

// One step's decision as a compute task: the max_abs pass over three layers' (dZ, A_prev) tensors
// and the decide_update that reads exactly its results, between begin_step and finish_step (four
// ops, so that the task is captured and replayed as the trainer's steps are).
struct DecisionTask {
    Backend* backend;
    MaxAbsInput inputs[6];
    float* maxima;
    TrainState* state;
    int64_t rows;
    LossScalerConfig scaler;
    // The maxima in two passes (4 tensors, then 2), as the executor makes them past 8 layers: the
    // decision reads both, so neither pass may take it.
    bool two_passes = false;
};

void run_decision_task(void* argument) {
    const DecisionTask& task = *static_cast<const DecisionTask*>(argument);
    task.backend->begin_step(task.state);
    if (task.two_passes) {
        task.backend->max_abs(task.inputs, 4, task.maxima);
        task.backend->max_abs(task.inputs + 4, 2, task.maxima + 4);
    } else {
        task.backend->max_abs(task.inputs, 6, task.maxima);
    }
    task.backend->decide_update(task.maxima, 3, task.rows, task.state);
    task.backend->finish_step(task.state, task.scaler, nullptr, nullptr);
}

// What a head task issues between its begin_step and its loss head: nothing, a dropout (the fold
// looks past the forward ops and dropouts the trainer issues there), or a max_abs pass (which keeps
// the begin_step a node of its own).
enum class BetweenStepAndHead { nothing, dropout, max_abs };

// A step's start as a compute task: begin_step, then the loss head (which may find the loss
// non-finite), a max pass and finish_step (four ops, so that the task is captured and replayed).

struct HeadTask {
    Backend* backend;
    LossHeadArgs head;
    MaxAbsInput input;
    float* maximum;
    LossScalerConfig scaler;
    BetweenStepAndHead between = BetweenStepAndHead::nothing;
    DropoutArgs dropout{};        // for BetweenStepAndHead::dropout
    MaxAbsInput between_input{};  // for BetweenStepAndHead::max_abs
    float* between_maximum = nullptr;
};

void run_head_task(void* argument) {
    const HeadTask& task = *static_cast<const HeadTask*>(argument);
    task.backend->begin_step(task.head.state);
    if (task.between == BetweenStepAndHead::dropout) task.backend->dropout(task.dropout);
    if (task.between == BetweenStepAndHead::max_abs)
        task.backend->max_abs(&task.between_input, 1, task.between_maximum);
    task.backend->loss_head(task.head);
    task.backend->max_abs(&task.input, 1, task.maximum);
    task.backend->finish_step(task.head.state, task.scaler, nullptr, nullptr);
}
#endif

// The last layer of a step as a compute task: the step's begin_step, the layer's forward, its loss
// head and its input gradient, as the trainer issues them (recorded on CUDA, where the head layer in a
// cluster takes the last three and the head clears found_inf in the begin_step's place).
struct HeadLayerTask {
    Backend* backend;
    DenseForwardArgs below;  // the layer below's forward, where it writes the layer's input in the task
    DenseForwardArgs forward;
    LossHeadArgs head;
    DenseBackwardDataArgs data;
    bool maxima_taken = false;  // what dense_backward_data answered
};

void run_head_layer_task(void* argument) {
    HeadLayerTask& task = *static_cast<HeadLayerTask*>(argument);
    task.backend->begin_step(task.head.state);
    if (task.below.output) task.backend->dense_forward(task.below);
    task.backend->dense_forward(task.forward);
    task.backend->loss_head(task.head);
    task.maxima_taken = task.backend->dense_backward_data(task.data);
}

struct HeadLayerCase {
    Activation activation;  // the head's
    LossKind loss;
    Activation previous;  // the layer below's (its output is the layer's input)
    int64_t rows, in_features, width, classes;
    DType compute;
    float label_smoothing = 0.0f;
    bool with_class_weights = false;
    // The forward reads a copy of the layer below's outputs (as after a dropout there), the input
    // gradient's activation derivative the outputs themselves.
    bool dropped_input = false;
    bool fp32_input_grad = false;  // the layer below kept in fp32 (else its gradient has the compute dtype)
    bool maxima = false;           // the backward asked for max|dZ_prev| and max|A_prev|
    bool row_weights = false;
    // The layer below runs in the task (ReLU, its forward writing its mask where the backend keeps one),
    // its outputs the layer's input: the input gradient's derivative then comes from that mask, as
    // the DRELU plan reads it.
    bool forward_below = false;
};

// The case's ops recorded on `candidate` (on CUDA, MPTRAIN_CUDA_HEAD_LAYER_CLUSTER's path where
// `fused` says the launch takes them: one more such launch counted) against `reference` (the CPU)
// issuing them: the logits, the metrics and found_inf, the logits gradient, the input gradient and,
// where asked and taken, the maxima (each side's exactly those of its own arrays).
void compare_head_layer(Backend& reference, Backend& candidate, const HeadLayerCase& c, bool fused) {
    CAPTURE(static_cast<int>(c.activation));
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(static_cast<int>(c.previous));
    CAPTURE(c.rows);
    CAPTURE(c.in_features);
    CAPTURE(c.width);
    CAPTURE(std::string(dtype_name(c.compute)));
    // The layer below's outputs, as its activation leaves them (non-negative after a ReLU, some zeros).
    std::vector<float> input = random_values(static_cast<size_t>(c.rows * c.in_features), -1, 1);
    for (float& value : input) value = activation_forward(c.previous, value);
    input = rounded(input, c.compute);
    std::vector<float> dropped = input;
    if (c.dropped_input)
        for (size_t i = 0; i < dropped.size(); ++i)
            dropped[i] = i % 3 == 0 ? 0.0f : rounded({2.0f * input[i]}, c.compute)[0];
    const DType input_grad_dtype = c.fp32_input_grad ? DType::fp32 : c.compute;
    // Padded outputs' weights and bias are zero, as the model keeps them: cuBLASLt's forward computes
    // the padded columns, the CPU and the cluster's launch write 0 there.
    const std::vector<float> weights = rounded(padded_weights(c.width, c.in_features, c.classes, 0.3f), c.compute);
    std::vector<float> bias = random_values(static_cast<size_t>(c.width), -0.5f, 0.5f);
    std::fill(bias.begin() + c.classes, bias.end(), 0.0f);
    const std::vector<float> class_weights = random_values(static_cast<size_t>(c.classes), 0, 3);
    const std::vector<float> row_weights = random_values(static_cast<size_t>(c.rows), 0, 2);
    std::uniform_int_distribution<int32_t> label_distribution(0, static_cast<int32_t>(c.classes - 1));
    std::vector<int32_t> labels(static_cast<size_t>(c.rows));
    for (int32_t& label : labels) label = label_distribution(random_engine());
    const std::vector<float> targets = random_values(static_cast<size_t>(c.rows * c.classes), 0, 1);
    const bool sparse = loss_uses_labels(c.loss);
    constexpr int64_t kBelowInputs = 64;
    const std::vector<float> below_input =
        rounded(random_values(static_cast<size_t>(c.rows * kBelowInputs), -1, 1), c.compute);
    const std::vector<float> below_weights =
        rounded(random_values(static_cast<size_t>(c.in_features * kBelowInputs), -0.3f, 0.3f), c.compute);
    const std::vector<float> below_bias = random_values(static_cast<size_t>(c.in_features), -0.1f, 0.1f);
    std::vector<float> inputs[2] = {input, input};  // each side's (its own forward's, with forward_below)
    TrainState initial{};
    initial.loss_scale = 1024.0f;
    initial.found_inf = 1;  // as a skipped step leaves it: the step's head must clear it

    std::vector<float> logits[2], logits_grads[2], input_grads[2], maxima[2];
    std::vector<double> metrics[2];
    TrainState states[2];
    bool taken[2] = {false, false};
    std::vector<uint8_t> below_mask;  // the candidate's forward below wrote it, where it wrote one
    Backend* backends[2] = {&reference, &candidate};
#if defined(MPTRAIN_WITH_CUDA)
    const bool counted = candidate.kind() == BackendKind::cuda;
    uint64_t fused_before = 0;
#endif
    // The candidate runs twice, each time over new buffers, and the second run is compared: a shape's
    // first run on CUDA may grow the backend's fp32 scratch (planning an unfused backward), which issues
    // the ops recorded before it one by one, unfused. A training step's later runs find it grown.
    for (int run = 0; run < 3; ++run) {
        const int b = run == 0 ? 0 : 1;
#if defined(MPTRAIN_WITH_CUDA)
        if (run == 2 && counted) fused_before = cuda_backend_op_paths(candidate).head_layers_in_cluster;
#endif
        Backend& backend = *backends[b];
        WorkspaceBuffer workspace(backend);
        Buffer input_buffer =
            c.forward_below ? poisoned(backend, c.compute, input.size()) : upload(backend, c.compute, input);
        Buffer below_input_buffer = upload(backend, c.compute, below_input);
        Buffer below_weight_buffer = upload(backend, c.compute, below_weights);
        Buffer below_bias_buffer = upload(backend, c.compute, below_bias);
        const size_t mask_bytes = backend.relu_mask_bytes(c.rows, c.in_features);
        Buffer mask_buffer = upload_raw(backend, std::vector<uint8_t>(std::max<size_t>(mask_bytes, 1), 0xa5));
        Buffer dropped_buffer = upload(backend, c.compute, dropped);
        Buffer weight_buffer = upload(backend, c.compute, weights);
        Buffer bias_buffer = upload(backend, DType::fp32, bias);
        Buffer logits_buffer = poisoned(backend, DType::fp32, static_cast<size_t>(c.rows * c.width));
        Buffer labels_buffer = upload_raw(backend, labels);
        Buffer targets_buffer = upload(backend, DType::fp32, targets);
        Buffer class_weight_buffer = upload(backend, DType::fp32, class_weights);
        Buffer row_weight_buffer = upload(backend, DType::fp32, row_weights);
        Buffer logits_grad = poisoned(backend, c.compute, static_cast<size_t>(c.rows * c.width));
        Buffer input_grad = poisoned(backend, input_grad_dtype, static_cast<size_t>(c.rows * c.in_features));
        Buffer maxima_buffer = poisoned(backend, DType::fp32, 3);
        Buffer state = upload_raw(backend, std::vector<TrainState>{initial});
        Buffer metric = upload_raw(backend, std::vector<double>{1.5, 2.0, 3.0, 4.0});
        HeadLayerTask task{};
        task.backend = &backend;
        if (c.forward_below) {
            DenseForwardArgs& below = task.below;
            below.input = below_input_buffer.data();
            below.weights = below_weight_buffer.data();
            below.bias = below_bias_buffer.data();
            below.output = input_buffer.data();
            below.relu_mask = mask_bytes ? mask_buffer.data() : nullptr;
            below.rows = c.rows;
            below.in_features = kBelowInputs;
            below.out_features = below.valid_out = c.in_features;
            below.activation = Activation::relu;
            below.compute_dtype = below.bias_dtype = below.output_dtype = c.compute;
            below.workspace = workspace.workspace();
        }
        DenseForwardArgs& forward = task.forward;
        forward.input = c.dropped_input ? dropped_buffer.data() : input_buffer.data();
        forward.weights = weight_buffer.data();
        forward.bias = bias_buffer.data();
        forward.output = logits_buffer.data();
        forward.rows = c.rows;
        forward.in_features = c.in_features;
        forward.out_features = c.width;
        forward.valid_out = c.classes;
        forward.activation = Activation::linear;
        forward.compute_dtype = c.compute;
        forward.bias_dtype = DType::fp32;
        forward.output_dtype = DType::fp32;
        forward.workspace = workspace.workspace();
        LossHeadArgs& head = task.head;
        head.logits = logits_buffer.as<float>();
        head.labels = sparse ? labels_buffer.as<int32_t>() : nullptr;
        head.targets = sparse ? nullptr : targets_buffer.as<float>();
        head.logits_grad = logits_grad.data();
        head.state = state.as<TrainState>();
        head.metrics = metric.as<double>();
        head.rows = c.rows;
        head.width = c.width;
        head.classes = c.classes;
        head.activation = c.activation;
        head.loss = c.loss;
        head.label_smoothing = c.label_smoothing;
        head.huber_delta = 0.5f;
        head.class_weights = c.with_class_weights ? class_weight_buffer.as<float>() : nullptr;
        head.row_weights = c.row_weights ? row_weight_buffer.as<float>() : nullptr;
        head.logits_grad_dtype = c.compute;
        DenseBackwardDataArgs& data = task.data;
        data.output_grad = logits_grad.data();
        data.weights = weight_buffer.data();
        data.input = input_buffer.data();
        data.input_grad = input_grad.data();
        data.rows = c.rows;
        data.in_features = c.in_features;
        data.out_features = c.width;
        data.input_activation = c.previous;
        data.compute_dtype = c.compute;
        data.input_grad_dtype = input_grad_dtype;
        data.workspace = workspace.workspace();
        data.relu_mask = task.below.relu_mask;
        if (c.maxima) {
            data.input_grad_max_abs = maxima_buffer.as<float>();
            data.input_max_abs = maxima_buffer.as<float>() + 1;
            head.logits_grad_max_abs = maxima_buffer.as<float>() + 2;  // every head takes it
        }
        backend.scheduler().submit(Lane::compute, &run_head_layer_task, &task);
        backend.scheduler().synchronize();
        logits[b] = download(backend, logits_buffer, DType::fp32, static_cast<size_t>(c.rows * c.width));
        logits_grads[b] = download(backend, logits_grad, c.compute, static_cast<size_t>(c.rows * c.width));
        input_grads[b] = download(backend, input_grad, input_grad_dtype, static_cast<size_t>(c.rows * c.in_features));
        maxima[b] = download(backend, maxima_buffer, DType::fp32, 3);
        metrics[b] = download_raw<double>(backend, metric, kMetricsCount);
        states[b] = download_raw<TrainState>(backend, state, 1)[0];
        taken[b] = task.maxima_taken;
        if (c.forward_below) inputs[b] = download(backend, input_buffer, c.compute, input.size());
        if (c.forward_below && mask_bytes) below_mask = download_raw<uint8_t>(backend, mask_buffer, mask_bytes);
    }
#if defined(MPTRAIN_WITH_CUDA)
    if (counted) {
        CHECK(cuda_backend_op_paths(candidate).head_layers_in_cluster == fused_before + (fused ? 1u : 0u));
        // The launch takes the maxima wherever asked (the DRELU plan alone takes none).
        if (fused && c.maxima) CHECK(taken[1]);
        // Its input gradient exactly as its order of sums gives it from the logits gradient it wrote (in
        // the compute dtype; every block's the same): a thread's fused multiply-adds over the outputs in
        // order, ReLU's derivative selecting, rounded once. ReLU's derivative is the forward's mask bit
        // where it wrote a mask (a pre-activation within 2^-25 above 0 is stored as an output of 0 but
        // keeps its bit), else whether the output is positive. (Below ReLU or a linear layer: another
        // activation's derivative may round otherwise on the device, whose compiler contracts it.)
        if (fused && (c.previous == Activation::relu || c.previous == Activation::linear)) {
            const int64_t mask_ld_bits = relu_mask_ld_bits(c.in_features);
            std::vector<float> expected(input_grads[1].size());
            for (int64_t r = 0; r < c.rows; ++r)
                for (int64_t k = 0; k < c.in_features; ++k) {
                    float sum = 0.0f;
                    for (int64_t o = 0; o < c.width; ++o)
                        sum = std::fma(logits_grads[1][static_cast<size_t>(r * c.width + o)],
                                       weights[static_cast<size_t>(o * c.in_features + k)], sum);
                    const float output = inputs[1][static_cast<size_t>(r * c.in_features + k)];
                    const int64_t bit = small_batch_mma::mask_bit(k, r, mask_ld_bits);  // cuBLASLt's format
                    const bool positive = below_mask.empty()
                                              ? output > 0.0f
                                              : ((below_mask[static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1) != 0;
                    const float value = c.previous == Activation::linear || positive ? sum : 0.0f;
                    expected[static_cast<size_t>(r * c.in_features + k)] = rounded({value}, input_grad_dtype)[0];
                }
            size_t differing = 0;
            for (size_t i = 0; i < expected.size(); ++i) differing += expected[i] == input_grads[1][i] ? 0 : 1;
            CHECK(differing == 0);
        }
    }
#else
    (void)fused;
#endif
    CHECK(normalised_error(logits[1], logits[0]) <= error_bound(DType::fp32));
    CHECK(normalised_error(logits_grads[1], logits_grads[0]) <= error_bound(c.compute));
    // The input gradient comes from the logits gradient in the compute dtype: where the two sides'
    // logits differ in their last bit, an element of it may round the other way.
    CHECK(normalised_error(input_grads[1], input_grads[0]) <= error_bound(c.compute));
    CHECK(metrics[1][kMetricLossSum] == doctest::Approx(metrics[0][kMetricLossSum]).epsilon(1e-4));
    CHECK(metrics[1][kMetricBatchLoss] == doctest::Approx(metrics[0][kMetricBatchLoss]).epsilon(1e-4));
    CHECK(metrics[1][kMetricCounted] == metrics[0][kMetricCounted]);
    CHECK(std::abs(metrics[1][kMetricCorrect] - metrics[0][kMetricCorrect]) <= 1.0);  // a near tie may go either way
    CHECK(states[0].found_inf == 0);  // finite logits, and the step's head cleared it
    CHECK(states[1].found_inf == states[0].found_inf);
    // Each side's maxima are its own arrays' largest magnitudes, exactly (as max_abs would give them):
    // the logits gradient's always (the head's, in the cluster's launch or its own), the others where
    // the backward took them.
    for (int b = 0; b < 2 && c.maxima; ++b) {
        CAPTURE(b);
        float logits_grad_largest = 0.0f;
        for (float value : logits_grads[b]) logits_grad_largest = std::max(logits_grad_largest, std::fabs(value));
        CHECK(maxima[b][2] == logits_grad_largest);
        if (!taken[b]) continue;
        float gradient_largest = 0.0f, input_largest = 0.0f;
        for (float value : input_grads[b]) gradient_largest = std::max(gradient_largest, std::fabs(value));
        for (float value : inputs[b]) input_largest = std::max(input_largest, std::fabs(value));
        CHECK(maxima[b][0] == gradient_largest);
        CHECK(maxima[b][1] == input_largest);
    }
}

// The cases, each with whether MPTRAIN_CUDA_HEAD_LAYER_CLUSTER's launch takes it on a device whose
// clusters hold `max_blocks` blocks (8 with clusters, 1 without): the seed MLP's last layer at batch
// 32 (8 blocks of 128 inputs, the last of 104) with its maxima, other heads (sigmoid with binary
// cross-entropy, a regression through a linear output of one column, label smoothing with class
// weights, row weights) over other layers below, a single row, a dropout below (the forward reading
// the dropped copy, the derivative the outputs) with the layer below in fp32, 33 to 64 rows (a warp's
// several rows in the head), 32 classes, the layer below run in the task (its ReLU mask read); and the
// shapes it does not take (fp32, 65 rows, 40 padded
// outputs, inputs not a multiple of 8, 9 blocks' worth), which run as before.
void compare_head_layer_cases(Backend& reference, Backend& candidate, int max_blocks) {
    const auto takes = [max_blocks](const HeadLayerCase& c) {
        return c.compute != DType::fp32 && c.rows <= kHeadLayerMaxRows && c.width <= kHeadLayerMaxWidth &&
               c.in_features % 8 == 0 && head_layer_blocks(c.in_features) <= max_blocks;
    };
    const auto compare = [&](const HeadLayerCase& c) { compare_head_layer(reference, candidate, c, takes(c)); };
    const Activation softmax = Activation::softmax, relu = Activation::relu;
    const LossKind sparse = LossKind::sparse_categorical_crossentropy;
    for (DType dtype : kDTypes) {
        HeadLayerCase seed{softmax, sparse, relu, 32, 1000, 16, 10, dtype};
        seed.maxima = true;
        compare(seed);
        compare({Activation::sigmoid, LossKind::binary_crossentropy, Activation::tanh, 17, 40, 8, 3, dtype});
        HeadLayerCase regression{
            Activation::linear, LossKind::mean_squared_error, Activation::linear, 9, 40, 1, 1, dtype};
        regression.maxima = true;
        compare(regression);
        compare({softmax, sparse, relu, 1, 200, 16, 10, dtype});
        compare({softmax, sparse, relu, 24, 1000, 16, 10, dtype, 0.0f, false, true, true});
        compare({Activation::sigmoid, LossKind::binary_crossentropy, relu, 40, 72, 8, 2, dtype});
        HeadLayerCase weighted{softmax, sparse, relu, 64, 1000, 16, 10, dtype, 0.1f, true};
        weighted.row_weights = true;
        weighted.maxima = true;
        compare(weighted);
        compare(
            {softmax, LossKind::categorical_crossentropy, Activation::leaky_relu, 5, 72, 16, 12, dtype, 0.1f, true});
        compare({softmax, sparse, Activation::elu, 48, 256, 32, 32, dtype});
        HeadLayerCase masked{softmax, sparse, relu, 32, 1000, 16, 10, dtype};
        masked.forward_below = true;
        compare(masked);
        masked.maxima = true;
        masked.rows = 20;
        compare(masked);
    }
    // 5 blocks, the last share 8 inputs.
    compare({softmax, sparse, relu, 24, 520, 16, 10, DType::bf16});
    compare({Activation::sigmoid, LossKind::binary_crossentropy, Activation::tanh, 7, 520, 4, 4, DType::fp16});
    compare({softmax, sparse, relu, 65, 1000, 16, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 64, 40, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 1036, 16, 10, DType::bf16});
    compare({softmax, sparse, relu, 32, 1032, 16, 10, DType::bf16});
}

}  // namespace

// ---- cases that run everywhere --------------------------------------------------------------------

TEST_CASE("cuda_device_count never throws, and a CUDA context without a device is reported unavailable") {
    int count = -1;
    CHECK_NOTHROW(count = cuda_device_count());
    CHECK(count >= 0);
    if (count > 0) return;
    try {
        make_context(MPT_BACKEND_CUDA);
        FAIL("a CUDA context was created without a device");
    } catch (const Error& error) {
        CHECK(error.status() == MPT_STATUS_BACKEND_UNAVAILABLE);
    }
    auto context = make_context(MPT_BACKEND_AUTO);  // AUTO falls back to the CPU
    CHECK(context->backend().kind() == BackendKind::cpu);
}

TEST_CASE("the CPU's dense_backward_data takes the maxima of dZ_prev and A_prev that max_abs would give") {
    auto cpu = make_cpu();
    for (DType dtype : kDTypes) check_backward_data_maxima(*cpu, dtype, true);
}

TEST_CASE("the op comparison harness agrees CPU against CPU") {
    auto reference = make_cpu();
    auto candidate = make_cpu();
    compare_dense_forward_cases(*reference, *candidate);
    compare_dense_backward_data_cases(*reference, *candidate);
    compare_dense_update_cases(*reference, *candidate);
    compare_loss_head_cases(*reference, *candidate);
    compare_gather(*reference, *candidate, true, DType::bf16);
    compare_gather(*reference, *candidate, false, DType::fp16, true);
    compare_max_abs(*reference, *candidate);
    compare_decide_update(*reference, *candidate);
    compare_finish_step(*reference, *candidate);
    compare_clip_factor(*reference, *candidate);
    compare_weight_averaging(*reference, *candidate);
    compare_dropout(*reference, *candidate);
    compare_conversions(*reference, *candidate);
    compare_head_layer_cases(*reference, *candidate, kHeadLayerMaxBlocks);
}

TEST_CASE("the CPU's gradient norm from the batch is the norm of the gradients its updates write") {
    auto cpu = make_cpu();
    compare_clip_paths(*cpu);
}

// The measure itself: poison and non-finite results fail it, an infinity both sides hold does not
// (fp16 gradients both backends overflow; a 0.1% chance per run of the NaN-logit tanh case).
TEST_CASE("the normalised error fails poison and stray infinities, not infinities both sides hold") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(normalised_error({3.0f, 4.0f}, {3.0f, 4.0f}) == 0.0);
    CHECK(normalised_error({3.0f, 4.0f + 5e-4f}, {3.0f, 4.0f}) == doctest::Approx(1e-4).epsilon(1e-3));
    CHECK(normalised_error({3.0f, -inf, 4.0f}, {3.0f, -inf, 4.0f}) == 0.0);
    CHECK(normalised_error({3.0f, -inf, 4.0f + 5e-4f}, {3.0f, -inf, 4.0f}) == doctest::Approx(1e-4).epsilon(1e-3));
    CHECK(std::isinf(normalised_error({3.0f, inf}, {3.0f, 4.0f})));
    CHECK(std::isinf(normalised_error({3.0f, nan}, {3.0f, 4.0f})));
    CHECK_FALSE(normalised_error({3.0f, inf}, {3.0f, -inf}) <= 1.0);
    CHECK_FALSE(normalised_error({3.0f, 4.0f}, {3.0f, inf}) <= 1.0);
    CHECK_FALSE(normalised_error({3.0f, nan}, {3.0f, nan}) <= 1.0);
}

// ---- GPU cases ------------------------------------------------------------------------------------

TEST_CASE("the CUDA backend describes its device and sizes its storage") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    CHECK(cuda->kind() == BackendKind::cuda);
    CHECK(cuda->device_name().find("cuda:0") == 0);
    CHECK(cuda->storage_size(DType::fp32) == 4);
    CHECK(cuda->storage_size(DType::fp16) == 2);
    CHECK(cuda->storage_size(DType::bf16) == 2);
    CHECK(cuda->relu_mask_bytes(32, 3000) == 32 * 3072 / 8);
    const DType preferred = cuda->preferred_compute_dtype();
    CHECK((preferred == DType::bf16 || preferred == DType::fp16));
}

TEST_CASE("CUDA dense_forward matches the CPU (fused epilogues and fallbacks)") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_dense_forward_cases(*cpu, *cuda);
    set_fused(*cuda, false);
    compare_dense_forward_cases(*cpu, *cuda);
}

TEST_CASE("CUDA dense_backward_data matches the CPU (DRELU with the forward's mask and fallbacks)") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_dense_backward_data_cases(*cpu, *cuda);
    set_fused(*cuda, false);
    compare_dense_backward_data_cases(*cpu, *cuda);
}

#if defined(MPTRAIN_WITH_CUDA)
// A ReLU's input gradient without a valid mask (its forward wrote none, under
// MPTRAIN_CUDA_RELU_FROM_OUTPUT=1, or never ran) is a plain GEMM into the gradient's dtype, then
// ReLU's derivative from A_prev applied in place: the CPU's numbers. 37 x 130 elements leave 2 past
// the last whole 16-byte vector (of 8 16-bit elements or 4 floats), which the kernel's tail takes,
// where cuBLASLt has a GEMM for the odd leading dimension (else the fp32 fallback's numbers: the same).
TEST_CASE("CUDA dense_backward_data without a valid mask takes ReLU's derivative from A_prev, in place") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    const EnvironmentSetting from_output("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1");
    auto cuda = make_cuda();
    CHECK(cuda->relu_mask_bytes(32, 3000) == 0);  // no forward writes one: a trainer plans none
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        const uint64_t before = cuda_backend_op_paths(*cuda).backward_data_relu_from_output;
        // The forward runs and, under the switch, writes no mask; then no forward at all.
        const uint64_t maxima_before = cuda_backend_op_paths(*cuda).backward_data_max_abs;
        compare_dense_backward_data(*cpu, *cuda, {37, 136, 64, Activation::relu, dtype, dtype, true});
        compare_dense_backward_data(*cpu, *cuda, {32, 128, 16, Activation::relu, dtype, dtype, false});
        CHECK(cuda_backend_op_paths(*cuda).backward_data_relu_from_output == before + 2);
        CHECK(cuda_backend_op_paths(*cuda).backward_data_max_abs == maxima_before + 2);  // the maxima asked for
        compare_dense_backward_data(*cpu, *cuda, {37, 130, 16, Activation::relu, dtype, dtype, false});
        MESSAGE(std::string(dtype_name(dtype)) << ": the tail case took the in-place path: "
                                  << (cuda_backend_op_paths(*cuda).backward_data_relu_from_output == before + 3));
    }
    for (DType dtype : kDTypes) check_backward_data_maxima(*cuda, dtype, true);
    // Another dtype for the gradient than A_prev's: the fp32 fallback, which converts as it goes.
    const uint64_t before = cuda_backend_op_paths(*cuda).backward_data_relu_from_output;
    compare_dense_backward_data(*cpu, *cuda, {24, 64, 32, Activation::relu, DType::bf16, DType::fp32, false});
    CHECK(cuda_backend_op_paths(*cuda).backward_data_relu_from_output == before);
}

// That path's in-place kernel against `y > 0` on the host, for every fp16 and bf16 bit pattern of
// y (zeros of both signs, subnormals, Infs, NaNs) and for fp32's edge cases among random patterns,
// in arrays whose length leaves 3 elements past the last whole 16-byte vector: the gradient kept
// bit for bit where y > 0, +0 elsewhere, and nothing written past the end.
TEST_CASE("ReLU's derivative in place keeps the gradient exactly where y > 0, for every 16-bit y") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();  // the device, current
    std::mt19937 random(71);
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        const bool wide = dtype == DType::fp32;
        std::vector<uint32_t> y;
        if (wide) {
            y = {0u,          0x80000000u, 1u,          0x80000001u, 0x007fffffu, 0x00800000u, 0x3f800000u,
                 0xbf800000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffc00000u};
            while (y.size() < 4099) y.push_back(static_cast<uint32_t>(random()));
        } else {
            for (uint32_t bits = 0; bits < 65536; ++bits) y.push_back(bits);
            for (uint32_t bits : {0x8000u, 0x0001u, 0x3c00u}) y.push_back(bits);  // 65539: 3 past 8192 vectors
        }
        const size_t count = y.size(), element = wide ? 4 : 2, padding = 16;
        std::vector<uint32_t> gradient(count);
        for (uint32_t& g : gradient) g = (static_cast<uint32_t>(random()) | 1u) & (wide ? 0xffffffffu : 0xffffu);
        std::vector<unsigned char> y_bytes(count * element), g_bytes(count * element + padding, 0xa5);
        for (size_t i = 0; i < count; ++i) {
            std::memcpy(&y_bytes[i * element], &y[i], element);  // little-endian: the low bytes
            std::memcpy(&g_bytes[i * element], &gradient[i], element);
        }
        void* device_y = nullptr;
        void* device_g = nullptr;
        REQUIRE(cudaMalloc(&device_y, y_bytes.size()) == cudaSuccess);
        REQUIRE(cudaMalloc(&device_g, g_bytes.size()) == cudaSuccess);
        REQUIRE(cudaMemcpy(device_y, y_bytes.data(), y_bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(device_g, g_bytes.data(), g_bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        // Without the maxima, then with them (the executor's kernel where it asks): the same gradient.
        for (const bool maxima : {false, true}) {
            CAPTURE(maxima);
            REQUIRE(cudaMemcpy(device_g, g_bytes.data(), g_bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
            DeviceMaxAbsScratch scratch;
            if (maxima)
                run_relu_backward_in_place(device_g, device_y, dtype, static_cast<int64_t>(count), scratch.out(),
                                           scratch.out() + 1, scratch.scratch(), cudaStream_t{});
            else
                run_relu_backward_in_place(device_g, device_y, dtype, static_cast<int64_t>(count), cudaStream_t{});
            std::vector<unsigned char> result(g_bytes.size());
            REQUIRE(cudaMemcpy(result.data(), device_g, result.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
            size_t wrong = 0;
            float gradient_max = 0.0f, y_max = 0.0f;  // as max_abs takes them: NaN as +Inf
            for (size_t i = 0; i < count; ++i) {
                const float value = element_value(wide, dtype, y[i]);
                const uint32_t expected = value > 0.0f ? gradient[i] : 0u;
                uint32_t got = 0;
                std::memcpy(&got, &result[i * element], element);
                if (got != expected && wrong++ < 5)
                    MESSAGE("element " << i << ": y bits " << y[i] << ", got " << got << ", expected " << expected);
                gradient_max = max_abs_with(gradient_max, element_value(wide, dtype, expected));
                y_max = max_abs_with(y_max, value);
            }
            CHECK(wrong == 0);
            CHECK(std::all_of(result.end() - padding, result.end(), [](unsigned char b) { return b == 0xa5; }));
            if (maxima) {
                CHECK(scratch.results() == std::vector<float>{gradient_max, y_max});
                CHECK(scratch.left_zero());
            }
        }
        cudaFree(device_y);
        cudaFree(device_g);
    }
}

// The maxima the in-place kernel takes for the finiteness proof, on finite values where they are
// not +Inf: the largest kept gradient (a larger one where y <= 0 is zeroed, not counted) and the
// largest |y|, in the tail past the last whole vector too, over many blocks, twice over the same
// scratch (the second time smaller: the cells were left 0), then asked for one at a time.
TEST_CASE("CUDA ReLU's derivative in place takes max|gradient| and max|y| as max_abs would") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();  // the device, current
    std::mt19937 random(72);
    for (DType dtype : kDTypes) {
        CAPTURE(std::string(dtype_name(dtype)));
        const int64_t count = 100003;  // 49 blocks; 3 elements past the last whole 16-byte vector of 16-bit ones
        DeviceMaxAbsScratch scratch;
        for (int round = 0; round < 3; ++round) {
            CAPTURE(round);
            std::vector<float> y = rounded(random_values(static_cast<size_t>(count), -1, 1), dtype);
            std::vector<float> gradient = rounded(random_values(static_cast<size_t>(count), -1, 1), dtype);
            const float largest_gradient = round == 1 ? 1.5f : -3.25f, largest_y = round == 1 ? -1.25f : 2.5f;
            // Both before the last element, whose y is the largest |y| (negative in round 1: not kept).
            const size_t killed = static_cast<size_t>(random() % (count - 1)),
                         kept = static_cast<size_t>(random() % (count - 1));
            y[killed] = -0.5f;
            gradient[killed] = 7.5f;  // zeroed: y is not above 0
            if (kept != killed) {
                y[kept] = 0.75f;
                gradient[kept] = largest_gradient;
            }
            y[static_cast<size_t>(count) - 1] = largest_y;  // in the tail
            Buffer y_buffer = upload(*cuda, dtype, y), g_buffer = upload(*cuda, dtype, gradient);
            float* const gradient_out = round == 2 ? nullptr : scratch.out();
            float* const y_out = scratch.out() + 1;
            run_relu_backward_in_place(g_buffer.data(), y_buffer.data(), dtype, count, gradient_out, y_out,
                                       scratch.scratch(), cudaStream_t{});
            const std::vector<float> result = download(*cuda, g_buffer, dtype, static_cast<size_t>(count));
            float gradient_max = 0.0f;
            for (size_t i = 0; i < result.size(); ++i) {
                CHECK(result[i] == (y[i] > 0.0f ? gradient[i] : 0.0f));
                gradient_max = max_abs_with(gradient_max, result[i]);
            }
            const std::vector<float> maxima = scratch.results();
            if (kept != killed && round != 2) CHECK(maxima[0] == std::fabs(largest_gradient));
            if (round != 2) CHECK(maxima[0] == gradient_max);
            CHECK(maxima[1] == std::fabs(largest_y));
            CHECK(scratch.left_zero());
        }
    }
}
#endif

TEST_CASE("the CUDA loss head matches the CPU for every activation and loss") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_loss_head_cases(*cpu, *cuda);
}

#if defined(MPTRAIN_WITH_CUDA)
// MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1: a recorded step's last layer (forward and input gradient) in its
// loss head's launch, K split across a cluster's blocks, the step's begin_step folded into it, against
// the CPU issuing the ops (compare_head_layer_cases: the seed MLP's last layer in 8 blocks, other heads
// and layers below, 1 to 64 rows, the maxima; and the shapes it leaves to the separate launches). On a
// device without clusters only the layers of at most 128 inputs take it.
TEST_CASE(
    "CUDA head layer in a cluster matches the CPU, and leaves the shapes it does not take to the separate launches") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    cuda_backend_set_graphs(*cuda, true);
    cuda_backend_set_head_layer_cluster(*cuda, true);
    const int max_blocks = cuda_backend_head_layer_max_blocks(*cuda);
    MESSAGE("the head layer's clusters hold " << max_blocks << " block(s) here");
    compare_head_layer_cases(*cpu, *cuda, max_blocks);
}
#endif

TEST_CASE("CUDA gather_batch matches the CPU bit for bit") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    for (DType dtype : kDTypes) {
        for (bool standardized : {false, true}) {
            compare_gather(*cpu, *cuda, true, dtype, standardized);
            compare_gather(*cpu, *cuda, false, dtype, standardized);
            compare_gather(*cpu, *cuda, true, dtype, standardized, 64, 64);  // in 16-byte chunks
        }
    }
}

TEST_CASE("CUDA dense_update matches the CPU for every optimizer and skips a non-finite step") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_dense_update_cases(*cpu, *cuda);
    set_fused(*cuda, false);
    compare_dense_update_cases(*cpu, *cuda);
}

#if defined(MPTRAIN_WITH_CUDA)
// MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1: plain SGD's whole updates that fused SGD does not take (over
// 64 rows) as one GEMM into the masters, alpha and beta from the device. Against the CPU, whose plain
// SGD is the same GEMM: with and without weight decay, the copies four at a time and one by one, the
// seed MLP's first layer at batch 256, and skipped steps that must leave every master and copy as it
// was, also with inf and NaN in dZ and A_prev (0 * inf would be NaN: the skip zeroes them first).
// Then with every fused plan refused when it runs: each op planned again with the plain GEMM and the
// column-sum kernel for the bias gradient, after its start kernel had run once already.
TEST_CASE("CUDA plain SGD into the masters matches the CPU, and a skipped step leaves them, inf in dZ or not") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {96, 136, 64, dtype, sgd, false});
        compare_dense_update(*cpu, *cuda, {96, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {65, 102, 45, dtype, sgd, false});      // copies one by one: 4,590 weights
        compare_dense_update(*cpu, *cuda, {96, 64, 16, dtype, sgd_decay, true});  // skipped: no decay either
        compare_dense_update(*cpu, *cuda, {96, 64, 16, dtype, sgd, true, 0.0f, 0, true});
        compare_dense_update(*cpu, *cuda, {37, 136, 64, dtype, sgd, false});  // fused SGD's still
    }
    compare_dense_update(*cpu, *cuda, {256, 3072, 3000, DType::bf16, sgd, false});
    const CudaOpPaths paths = cuda_backend_op_paths(*cuda);
    CHECK(paths.gradient_into_masters > 0);
    CHECK(paths.fused_sgd > 0);
    CHECK(paths.weight_gradient_fused + paths.weight_gradient_unfused == 0);
    // The bias gradient in the GEMM (BGRADB with device scalars), or the column-sum kernel after it:
    // the same numbers; the summary reads which.
    MESSAGE("plain SGD into the masters: fused plans refused "
            << cuda_backend_refused_epilogue_plans(*cuda)
            << (cuda_backend_refused_epilogue_plans(*cuda)
                    ? " (last: " + cuda_backend_last_refused_epilogue(*cuda) + ")"
                    : std::string()));

    std::unique_ptr<Backend> refusing = make_cuda_under("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    cuda_backend_refuse_fused_runs(*refusing, true);
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *refusing, {96, 136, 64, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *refusing, {96, 64, 16, dtype, sgd, true, 0.0f, 0, true});
    }
    CHECK(cuda_backend_refused_epilogue_plans(*refusing) > 0);  // when run, or by the heuristic already
    CHECK(cuda_backend_op_paths(*refusing).gradient_into_masters > 0);
}
#endif

#if defined(MPTRAIN_WITH_CUDA)
// The fused SGD kernel compiled for exactly 32 rows, against the CPU: whole tiles and the edges of
// every kind (a partial last strip and tile, columns one by one where in_features is no multiple of
// 4, which takes the kernel for any rows), with weight decay, skipped, and the seed MLP's first layer.
TEST_CASE("MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: CUDA fused SGD for 32 rows matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {32, 256, 64, dtype, sgd, false});        // whole tiles only
        compare_dense_update(*cpu, *cuda, {32, 200, 72, dtype, sgd_decay, false});  // partial strip and tile
        compare_dense_update(*cpu, *cuda, {32, 101, 45, dtype, sgd, false});        // any rows' kernel
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd, true});
        // Several tiles a block (64 row tiles of 8 strips on an H200's 264 blocks: 2 each), so that a
        // whole next tile is prefetched unchecked.
        compare_dense_update(*cpu, *cuda, {32, 1024, 2048, dtype, sgd_decay, false});
    }
    compare_dense_update(*cpu, *cuda, {32, 3072, 3000, DType::bf16, sgd, false});
    CHECK(cuda_backend_op_paths(*cuda).fused_sgd_32_rows > 0);
}

// The bulk-copy fused SGD kernel (MPTRAIN_CUDA_BULK_COPY_SGD=1: compute capability 9.0, fp16 and
// bf16) against the CPU: its three compilations (batches up to 32 rows, 33 to 64, 65 to 256, K padded
// with zeros; past 64 rows in place of the weight-gradient GEMM and the update kernel), whole tiles,
// a partial last strip and tile, weight decay, runs of several tiles a block (every stage of the ring
// refilled: the seed MLP's layers and 2048 x 4096), skipped steps (not a byte written, inf and NaN in
// the inputs or not), and shapes whose rows the bulk copies cannot take (the CUDA-core kernel then:
// in_features no multiple of 4, out_features none of 8); fp32 keeps the CUDA-core kernel. On 9.0 the
// bf16 and fp16 updates must have been planned with it.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1: CUDA fused SGD by bulk copies matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    OptimizerConfig sgd;
    OptimizerConfig sgd_decay = decayed_sgd();
    for (DType dtype : kDTypes) {
        compare_dense_update(*cpu, *cuda, {32, 256, 64, dtype, sgd, false});        // whole tiles only
        compare_dense_update(*cpu, *cuda, {32, 200, 72, dtype, sgd_decay, false});  // partial strip and tile
        compare_dense_update(*cpu, *cuda, {7, 136, 40, dtype, sgd, false});         // K mostly padding
        compare_dense_update(*cpu, *cuda, {33, 136, 40, dtype, sgd, false});        // the 64-row compilation
        compare_dense_update(*cpu, *cuda, {64, 200, 72, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {65, 136, 40, dtype, sgd, false});  // the 256-row compilation
        compare_dense_update(*cpu, *cuda, {256, 200, 72, dtype, sgd_decay, false});
        compare_dense_update(*cpu, *cuda, {256, 64, 16, dtype, sgd, true});
        compare_dense_update(*cpu, *cuda, {32, 101, 45, dtype, sgd, false});  // neither fits: CUDA cores
        compare_dense_update(*cpu, *cuda, {32, 100, 44, dtype, sgd, false});  // out_features: CUDA cores
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd, true});
        compare_dense_update(*cpu, *cuda, {32, 64, 16, dtype, sgd_decay, true, 0.0f, 0, true});
    }
    for (DType dtype : {DType::fp16, DType::bf16}) {
        compare_dense_update(*cpu, *cuda, {32, 3072, 3000, dtype, sgd, false});
        compare_dense_update(*cpu, *cuda, {64, 2048, 4096, dtype, sgd_decay, false});
    }
    compare_dense_update(*cpu, *cuda, {32, 3000, 1000, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 1000, 16, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {256, 3072, 3000, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {200, 1024, 2048, DType::fp16, sgd_decay, false});
    const uint64_t planned = cuda_backend_op_paths(*cuda).fused_sgd_bulk_copy;
    MESSAGE("bulk-copy fused SGD: " << planned << " updates planned with it");
    if (compute_capability_major(*cuda) >= 9)
        CHECK(planned > 0);
    else
        CHECK(planned == 0);
}

// The same kernel on layers small enough for compute-sanitizer's racecheck and synccheck, which the
// device check runs over this case (the one above takes minutes under them): each compilation, a
// partial strip and tile, several tiles a block for a ring that turns over (640 outputs: 20 tiles
// for at most a few hundred blocks), and a skipped step.
TEST_CASE("MPTRAIN_CUDA_BULK_COPY_SGD=1: fused SGD by bulk copies on small layers matches the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    std::unique_ptr<Backend> cuda = make_cuda_under("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    OptimizerConfig sgd;
    compare_dense_update(*cpu, *cuda, {32, 200, 72, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {48, 136, 40, DType::fp16, sgd, false});
    compare_dense_update(*cpu, *cuda, {100, 136, 40, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 128, 640, DType::bf16, sgd, false});
    compare_dense_update(*cpu, *cuda, {32, 64, 16, DType::bf16, sgd, true});
    if (compute_capability_major(*cuda) >= 9) CHECK(cuda_backend_op_paths(*cuda).fused_sgd_bulk_copy > 0);
}

// A compute capability 9.0 device with a whole Hopper's SMs (not a MIG slice), where the small-batch
// kernels split the seed MLP's large products across a cluster's blocks (this build has sm_90 code:
// the device check's; below 9.0 they run one block a tile).
bool small_batch_splits_expected(const Backend& backend) {
    int device = 0, multiprocessors = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return false;
    return compute_capability_major(backend) >= 9 && multiprocessors >= 100;
}

// The small-batch forward kernel (compute capability 8.0 and up) in cuBLASLt's place for batches of
// at most 64 rows: the same cases and the seed MLP's layers at batch 32; the backward's DRELU
// reading the mask it wrote; and that mask against cuBLASLt's, bit for bit.
TEST_CASE("CUDA dense_forward matches the CPU with the small-batch kernel, whose ReLU mask is cuBLASLt's") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    if (!mpt::testing::turn_on_tensor_core_path(*cuda, cuda_backend_set_small_batch_forward,
                                                "small-batch forward kernel"))
        return;
    const auto forward_on_kernel = [&] { return cuda_backend_op_paths(*cuda).forward_small_batch; };
    // On a Hopper the seed MLP's first layer splits K across a cluster's blocks (2 on 132 SMs), as
    // most cases below do (split_k); below 9.0, one block a tile.
    DenseForwardArgs seed_layer{};
    seed_layer.rows = 32;
    seed_layer.in_features = 3072;
    seed_layer.out_features = seed_layer.valid_out = 3000;
    seed_layer.compute_dtype = DType::bf16;
    const small_batch_mma::SplitK split = small_batch_forward_split(seed_layer);
    MESSAGE("small-batch forward, the seed MLP's first layer at batch 32: K in " << split.splits << " blocks of "
                                                                                 << split.k_per_block);
    const bool splits_expected = small_batch_splits_expected(*cuda);
    if (splits_expected) CHECK(split.splits > 1);
    compare_dense_forward_cases(*cpu, *cuda);  // fp32's (cuBLASLt) among them
    for (DType dtype : {DType::bf16, DType::fp16}) {
        const ForwardCase cases[] = {
            {32, 3072, 3000, 3000, Activation::relu, dtype, dtype, dtype, true},  // the seed MLP at batch 32
            {32, 3000, 1000, 1000, Activation::relu, dtype, dtype, dtype, true},
            {32, 1000, 16, 10, Activation::linear, dtype, DType::fp32, DType::fp32, false},
            {1, 3072, 100, 100, Activation::relu, dtype, dtype, dtype, true},
            {64, 520, 70, 70, Activation::relu, dtype, dtype, dtype, true},
            {40, 1288, 72, 72, Activation::relu, dtype, dtype, dtype, true},  // 8 tiles: 3 groups of steps, a tail
            {13, 2056, 48, 48, Activation::relu, dtype, dtype, dtype, true},  // 2 tiles: 3 groups, a tail
            {9, 8, 33, 30, Activation::sigmoid, dtype, dtype, dtype, false},
            {40, 128, 64, 64, Activation::relu, dtype, dtype, DType::fp32, true}};
        for (const ForwardCase& c : cases) {
            const uint64_t before = forward_on_kernel();
            compare_dense_forward(*cpu, *cuda, c);
            CHECK(forward_on_kernel() == before + 1);  // each case ran on the kernel, not on cuBLASLt
        }
    }
    // The with-mask cases' forwards run on the kernel: a mask in another format than cuBLASLt's
    // would send the DRELU gradients to the wrong places.
    compare_dense_backward_data_cases(*cpu, *cuda);
    const CudaOpPaths paths = cuda_backend_op_paths(*cuda);
    CHECK(paths.forward_small_batch > 0);
    CHECK(paths.backward_data_fused > 0);
    CHECK((paths.small_batch_split > 0) == splits_expected);  // the cases planned split, and ran so

    // Bit for bit where the sum is clear of 0 (the two add in different orders), and the bit is
    // whether the sum is positive. 200 features: a block of 32 past the end, a 256-bit row stride.
    const int64_t rows = 29, in_features = 264, out_features = 200;
    const std::vector<float> input =
        rounded(random_values(static_cast<size_t>(rows * in_features), -1, 1), DType::bf16);
    const std::vector<float> weights =
        rounded(random_values(static_cast<size_t>(out_features * in_features), -0.1f, 0.1f), DType::bf16);
    const std::vector<float> bias = rounded(random_values(static_cast<size_t>(out_features), -0.3f, 0.3f), DType::bf16);
    std::vector<uint8_t> masks[2];
    for (int small_batch = 0; small_batch < 2; ++small_batch) {
        cuda_backend_set_small_batch_forward(*cuda, small_batch == 1);
        const uint64_t before = forward_on_kernel();
        masks[small_batch] = relu_forward_mask(*cuda, input, weights, bias, rows, in_features, out_features);
        CHECK(forward_on_kernel() == before + static_cast<uint64_t>(small_batch));  // cuBLASLt's, then the kernel's
    }
    const int64_t ld_bits = static_cast<int64_t>(masks[0].size()) * 8 / rows;
    CHECK(ld_bits == 256);
    int checked = 0, positive = 0;
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t f = 0; f < out_features; ++f) {
            const double z = exact_pre_activation(input, weights, bias, in_features, row, f).z;
            if (std::fabs(z) < 1e-3) continue;
            const int64_t bit = row * ld_bits + f;
            CAPTURE(row);
            CAPTURE(f);
            CHECK(((masks[0][bit / 8] >> (bit % 8)) & 1) == (z > 0 ? 1 : 0));  // cuBLASLt's
            CHECK(((masks[1][bit / 8] >> (bit % 8)) & 1) == (z > 0 ? 1 : 0));  // the kernel's
            ++checked;
            positive += z > 0;
        }
    CHECK(checked > rows * out_features * 9 / 10);
    CHECK(positive > checked / 4);
}

// The small-batch backward-data kernel in cuBLASLt's place for batches of at most 64 rows, reading
// the ReLU masks cuBLASLt's forward wrote and those the small-batch forward kernel wrote.
TEST_CASE("CUDA dense_backward_data matches the CPU with the small-batch kernel, through either forward's mask") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    if (!mpt::testing::turn_on_tensor_core_path(*cuda, cuda_backend_set_small_batch_backward_data,
                                                "small-batch backward-data kernel"))
        return;
    const auto on_kernel = [&] { return cuda_backend_op_paths(*cuda).backward_data_small_batch; };
    DenseBackwardDataArgs seed_layer{};  // the seed MLP's second layer's input gradient at batch 32
    seed_layer.rows = 32;
    seed_layer.in_features = 3000;
    seed_layer.out_features = 1000;
    seed_layer.compute_dtype = DType::bf16;
    const small_batch_mma::SplitK split = small_batch_backward_data_split(seed_layer);
    MESSAGE("small-batch backward-data, the seed MLP's 32 x 1000 x 3000 product: output features in "
            << split.splits << " blocks of " << split.k_per_block);
    const bool splits_expected = small_batch_splits_expected(*cuda);
    if (splits_expected) CHECK(split.splits > 1);
    const uint64_t splits_before = cuda_backend_op_paths(*cuda).small_batch_split;
    for (bool small_batch_forward : {false, true}) {
        CAPTURE(small_batch_forward);
        CHECK(cuda_backend_set_small_batch_forward(*cuda, small_batch_forward) == small_batch_forward);
        const uint64_t forwards_on_kernel = cuda_backend_op_paths(*cuda).forward_small_batch;
        compare_dense_backward_data_cases(*cpu, *cuda);  // fp32's (cuBLASLt) among them
        for (DType dtype : {DType::bf16, DType::fp16}) {
            const BackwardDataCase cases[] = {
                {32, 3000, 1000, Activation::relu, dtype, dtype, true},  // the seed MLP at batch 32
                {32, 1000, 16, Activation::relu, dtype, dtype, true},
                {1, 200, 40, Activation::relu, dtype, dtype, true},
                {13, 104, 48, Activation::relu, dtype, dtype, true},  // 2 batch tiles
                {64, 136, 72, Activation::relu, dtype, dtype, true},
                {40, 72, 1288, Activation::relu, dtype, dtype, true},  // 8 tiles: 3 groups of steps, a tail
                {20, 40, 2056, Activation::relu, dtype, dtype, true},  // 4 tiles: 3 groups, a tail
                {33, 72, 264, Activation::relu, dtype, dtype, false},  // ReLU's derivative from A_prev
                {29, 64, 40, Activation::sigmoid, dtype, dtype, false},
                {24, 64, 32, Activation::relu, dtype, DType::fp32, true}};
            for (const BackwardDataCase& c : cases) {
                const uint64_t before = on_kernel();
                const uint64_t fused_forwards = cuda_backend_op_paths(*cuda).forward_fused;
                // Where a 16-bit forward wrote the mask, the kernel must take ReLU's derivative from it.
                const bool mask_only = c.with_mask && c.input_grad == dtype;
                compare_dense_backward_data(*cpu, *cuda, c, mask_only);
                CHECK(on_kernel() == before + 1);  // each case ran on the kernel, not on cuBLASLt
                // (A failure here, not the kernel, explains a mask case's mismatch: no forward wrote its mask.)
                if (mask_only) CHECK(cuda_backend_op_paths(*cuda).forward_fused == fused_forwards + 1);
            }
        }
        // The masks came from the forward named: cuBLASLt's, then the small-batch kernel's.
        CHECK((cuda_backend_op_paths(*cuda).forward_small_batch > forwards_on_kernel) == small_batch_forward);
    }
    CHECK((cuda_backend_op_paths(*cuda).small_batch_split > splits_before) == splits_expected);
}

#endif

TEST_CASE("CUDA max_abs, decide_update, clip_factor, average_weights and finish_step match the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_max_abs(*cpu, *cuda);
    compare_decide_update(*cpu, *cuda);
    compare_clip_factor(*cpu, *cuda);
    compare_weight_averaging(*cpu, *cuda);
    compare_finish_step(*cpu, *cuda);
}

// Recorded (a compute task: its first sighting, its capture and its replays), a max_abs pass and the
// decide_update right after it that reads exactly its results are one launch, whose last block
// reads every tensor's maximum (raised by the blocks' atomics) and then takes the decision. The same tensors' maxima
// and decisions as issued op by op (graphs off), round after round, on tensors of many blocks with the largest value
// moving, and the decision flipping between rounds as the values change in place. Also with maxima
// taken (kMaxAbsTaken: written before the pass, as a backward that wrote its tensors does, and
// their tensors filled with larger values the pass must not read): the pass leaves them and the
// decision reads them; a second pass of taken inputs only launches nothing.
TEST_CASE("a recorded max_abs pass decides the update in its own launch, as decide_update does") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const float inf = std::numeric_limits<float>::infinity();
    // (max|dZ|, max|A_prev|) of three layers, as compare_decide_update's cases.
    const std::vector<std::vector<float>> cases = {
        {1.0f, 1.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 1.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // product overflows
        {1.0f, 1.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},    // all zero: finite
        {1e37f, 0.1f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient's bound overflows
    };
    const int64_t rows = 64;
    const int64_t sizes[6] = {300001, 7, 120000, 64, 4096, 1};  // many blocks, one, a ragged tail
    // Recorded, issued op by op, and recorded with programmatic dependent launch (9.0 and up); the
    // maxima in one pass, and in two (the decision a kernel of its own then).
    const auto is_taken = [](bool taken, int t) { return taken && (t == 2 || t == 4 || t == 5); };
    for (const bool taken : {false, true})
        for (const bool two_passes : {false, true})
            for (const IssueMode& mode : kIssueModes) {
                const bool graphs = mode.graphs, dependent_launch = mode.dependent_launch;
                CAPTURE(taken);
                CAPTURE(graphs);
                CAPTURE(dependent_launch);
                CAPTURE(two_passes);
                auto backend = cuda_backend_issuing(mode);
                if (!backend) continue;
                std::vector<Buffer> tensors;
                DecisionTask task{};
                task.backend = backend.get();
                task.two_passes = two_passes;
                for (int t = 0; t < 6; ++t) {
                    tensors.emplace_back(*backend, static_cast<size_t>(sizes[t]) * sizeof(float));
                    task.inputs[t] = is_taken(taken, t) ? MaxAbsInput{nullptr, DType::fp32, kMaxAbsTaken}
                                                        : MaxAbsInput{tensors.back().data(), DType::fp32, sizes[t]};
                }
                Buffer maxima = poisoned(*backend, DType::fp32, 6);
                TrainState initial{};
                initial.loss_scale = 1.0f;
                Buffer state = upload_raw(*backend, std::vector<TrainState>{initial});
                task.maxima = maxima.as<float>();
                task.state = state.as<TrainState>();
                task.rows = rows;
                std::mt19937 generator(11);
                for (int round = 0; round < 12; ++round) {
                    const std::vector<float>& pairs = cases[static_cast<size_t>(round) % cases.size()];
                    CAPTURE(round);
                    for (int t = 0; t < 6; ++t) {
                        // Values below the maximum, of both signs, and the maximum (negated half the time) somewhere.
                        std::uniform_real_distribution<float> below(-pairs[t] * 0.5f, pairs[t] * 0.5f);
                        std::vector<float> values(static_cast<size_t>(sizes[t]));
                        for (float& value : values) value = std::isfinite(pairs[t]) ? below(generator) : 1.0f;
                        const size_t at = generator() % values.size();
                        values[at] = (generator() % 2 ? -1.0f : 1.0f) * pairs[t];
                        if (is_taken(taken, t)) {
                            // Written before the pass, as by the backward; its tensor holds more, unread.
                            backend->copy_to_device(maxima.as<float>() + t, &pairs[static_cast<size_t>(t)],
                                                    sizeof(float));
                            values[at] = 3e38f;
                        }
                        backend->copy_to_device(tensors[static_cast<size_t>(t)].data(), values.data(),
                                                values.size() * sizeof(float));
                    }
                    backend->scheduler().submit(Lane::compute, &run_decision_task, &task);
                    backend->scheduler().synchronize();
                    CHECK(download(*backend, maxima, DType::fp32, 6) == pairs);
                    const TrainState after = download_raw<TrainState>(*backend, state, 1)[0];
                    const bool finite = gradient_bounds_finite(pairs.data(), 3, rows);
                    CHECK(finite == (pairs[2] != 1e30f && std::isfinite(pairs[4]) && pairs[0] != 1e37f));
                    CHECK(after.found_inf == (finite ? 0 : 1));
                    CHECK(after.steps == round + 1);
                }
                // Recorded: the first sighting runs eagerly and the second is captured, each through one
                // fused launch; the ten replays launch the graph. Op by op: never fused.
                const CudaOpPaths paths = cuda_backend_op_paths(*backend);
                CHECK(paths.max_abs_deciding == (graphs && !two_passes ? 2u : 0u));
                CHECK((paths.dependent_launches > 0) == dependent_launch);
                if (graphs) {
                    INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
                    CHECK(cuda_backend_graph_refusals(*backend) == 0);
                    CHECK(cuda_backend_graph_replays(*backend) == 10);
                } else {
                    CHECK(cuda_backend_graph_replays(*backend) == 0);
                }
            }
#endif
}

// Recorded, a begin_step followed by its loss head (nothing between them touches found_inf) needs no
// memset: the head clears found_inf itself before its check. A step's found_inf is then its own
// head's verdict, whatever the step before it left: finite after non-finite, and non-finite again,
// round after round through the first sighting, the capture and the replays; issued op by op, the
// memset runs as before.
TEST_CASE("a recorded begin_step is folded into its loss head, which leaves found_inf as the memset would") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const int64_t width = 16, classes = 10;
    // 32 rows: the head is one block; 200: several, the last one combining them. Recorded, issued op
    // by op, and recorded with programmatic dependent launch (9.0 and up). With a dropout between
    // the begin_step and the head (folded all the same), and with a max_abs pass there (not folded).
    for (const int64_t rows : {int64_t{32}, int64_t{200}})
        for (const IssueMode& mode : kIssueModes)
            for (const BetweenStepAndHead between :
                 {BetweenStepAndHead::nothing, BetweenStepAndHead::dropout, BetweenStepAndHead::max_abs}) {
                const bool graphs = mode.graphs, dependent_launch = mode.dependent_launch;
                CAPTURE(rows);
                CAPTURE(graphs);
                CAPTURE(dependent_launch);
                CAPTURE(static_cast<int>(between));
                auto backend = cuda_backend_issuing(mode);
                if (!backend) continue;
                std::vector<float> finite = random_values(static_cast<size_t>(rows * width), -2.0f, 2.0f);
                std::vector<float> poisoned_logits = finite;
                poisoned_logits[static_cast<size_t>(3 * width + 2)] = std::numeric_limits<float>::quiet_NaN();
                Buffer logits = upload(*backend, DType::fp32, finite);
                std::vector<int32_t> label_values(static_cast<size_t>(rows));
                for (int64_t r = 0; r < rows; ++r)
                    label_values[static_cast<size_t>(r)] = static_cast<int32_t>(r % classes);
                Buffer labels = upload_raw(*backend, label_values);
                Buffer gradient = poisoned(*backend, DType::bf16, static_cast<size_t>(rows * width));
                TrainState initial{};
                initial.loss_scale = 1.0f;
                initial.found_inf = 1;  // as a skipped step leaves it: the first round must clear it
                Buffer state = upload_raw(*backend, std::vector<TrainState>{initial});
                Buffer maximum = poisoned(*backend, DType::fp32, 1);
                HeadTask task{};
                task.backend = backend.get();
                task.head.logits = logits.as<float>();
                task.head.labels = labels.as<int32_t>();
                task.head.logits_grad = gradient.data();
                task.head.logits_grad_dtype = DType::bf16;
                task.head.state = state.as<TrainState>();
                task.head.rows = rows;
                task.head.width = width;
                task.head.classes = classes;
                task.head.activation = Activation::softmax;
                task.head.loss = LossKind::sparse_categorical_crossentropy;
                task.input = MaxAbsInput{gradient.data(), DType::bf16, rows * width};
                task.maximum = maximum.as<float>();
                Buffer dropped_in = upload(*backend, DType::fp32, finite);
                Buffer dropped_out = poisoned(*backend, DType::fp32, finite.size());
                Buffer between_maximum = poisoned(*backend, DType::fp32, 1);
                task.between = between;
                task.dropout.input = dropped_in.data();
                task.dropout.output = dropped_out.data();
                task.dropout.dtype = DType::fp32;
                task.dropout.count = rows * width;
                task.dropout.draw = DropoutDraw{7, 0, 0x80000000u, 2.0f};
                task.dropout.state = state.as<TrainState>();
                task.between_input = MaxAbsInput{dropped_in.data(), DType::fp32, rows * width};
                task.between_maximum = between_maximum.as<float>();
                for (int round = 0; round < 8; ++round) {
                    CAPTURE(round);
                    const bool nan_round = round % 3 == 2;
                    const std::vector<float>& values = nan_round ? poisoned_logits : finite;
                    backend->copy_to_device(logits.data(), values.data(), values.size() * sizeof(float));
                    backend->scheduler().submit(Lane::compute, &run_head_task, &task);
                    backend->scheduler().synchronize();
                    const TrainState after = download_raw<TrainState>(*backend, state, 1)[0];
                    CHECK(after.found_inf == (nan_round ? 1 : 0));
                    CHECK(after.steps == round + 1);
                }
                const CudaOpPaths paths = cuda_backend_op_paths(*backend);
                CHECK(paths.begin_steps_folded == (graphs && between != BetweenStepAndHead::max_abs ? 2u : 0u));
                CHECK((paths.dependent_launches > 0) == dependent_launch);
                if (graphs) CHECK(cuda_backend_graph_replays(*backend) == 6);
            }
#endif
}

#if defined(MPTRAIN_WITH_CUDA)
// A step's updates as a compute task: fused SGD of each layer in turn, as the trainer issues them,
// and with `finish` the step's finish_step after them.
struct UpdateLayersTask {
    Backend* backend;
    std::vector<DenseUpdateArgs> layers;
    OptimizerConfig optimizer;
    bool finish;
    TrainState* state;
    LossScalerConfig scaler;
    const double* metrics;
    double* committed_metrics;
    // Optional, before the updates: a max_abs pass over `decision_inputs` into `maxima` and the
    // decide_update that reads its 2 * decision_layers results.
    std::vector<MaxAbsInput> decision_inputs;
    float* maxima = nullptr;
    int decision_layers = 0;
};

void run_update_layers_task(void* argument) {
    const UpdateLayersTask& task = *static_cast<const UpdateLayersTask*>(argument);
    if (task.maxima) {
        task.backend->max_abs(task.decision_inputs.data(), static_cast<int>(task.decision_inputs.size()), task.maxima);
        task.backend->decide_update(task.maxima, task.decision_layers, task.layers.front().rows, task.state);
    }
    for (const DenseUpdateArgs& args : task.layers) task.backend->dense_update(args, task.optimizer);
    if (task.finish) task.backend->finish_step(task.state, task.scaler, task.metrics, task.committed_metrics);
}

// One backend's copy of the layers' operands and parameters.
struct UpdateLayersOperands {
    std::vector<Buffer> buffers;  // per layer: dZ, A, masters, bias, low weights, low bias
    std::unique_ptr<Buffer> state, metrics, committed_metrics;
    UpdateLayersTask task{};
};

struct UpdateShape {
    int64_t in_features, out_features;
};

// Random operands of plain SGD updates of `shapes` at `rows` rows: per layer dZ (scaled as a loss
// scale of `initial` makes it), A, masters and bias, the same for every backend given them.
std::vector<std::vector<std::vector<float>>> update_layer_values(const std::vector<UpdateShape>& shapes, int64_t rows,
                                                                 DType dtype, const TrainState& initial) {
    std::vector<std::vector<std::vector<float>>> values;
    for (const UpdateShape& shape : shapes) {
        std::vector<float> output_grad = random_values(static_cast<size_t>(rows * shape.out_features), -1, 1);
        for (float& g : output_grad) g *= initial.loss_scale / static_cast<float>(rows);
        values.push_back({rounded(output_grad, dtype),
                          rounded(random_values(static_cast<size_t>(rows * shape.in_features), 0, 1), dtype),
                          random_values(static_cast<size_t>(shape.in_features * shape.out_features), -0.5f, 0.5f),
                          random_values(static_cast<size_t>(shape.out_features), -0.1f, 0.1f)});
    }
    return values;
}

// `backend`'s copy of those operands (poisoned low-precision copies), its state and metrics, and the
// task that updates every layer with `sgd` and finishes the step.
void upload_update_layers(Backend& backend, UpdateLayersOperands& own, const std::vector<UpdateShape>& shapes,
                          const std::vector<std::vector<std::vector<float>>>& values, int64_t rows, DType dtype,
                          const OptimizerConfig& sgd, const TrainState& initial, const LossScalerConfig& scaler) {
    own.state = std::make_unique<Buffer>(upload_raw(backend, std::vector<TrainState>{initial}));
    own.metrics = std::make_unique<Buffer>(upload_raw(backend, std::vector<double>{1.5, 20.0, 32.0, 0.25}));
    own.committed_metrics = std::make_unique<Buffer>(poisoned(backend, DType::fp32, 2 * kMetricsCount));
    own.task.backend = &backend;
    own.task.optimizer = sgd;
    own.task.finish = true;
    own.task.state = own.state->as<TrainState>();
    own.task.scaler = scaler;
    own.task.metrics = own.metrics->as<double>();
    own.task.committed_metrics = own.committed_metrics->as<double>();
    own.buffers.reserve(6 * shapes.size());  // the args below point into them
    for (size_t l = 0; l < shapes.size(); ++l) {
        const UpdateShape& shape = shapes[l];
        own.buffers.push_back(upload(backend, dtype, values[l][0]));
        own.buffers.push_back(upload(backend, dtype, values[l][1]));
        own.buffers.push_back(upload(backend, DType::fp32, values[l][2]));
        own.buffers.push_back(upload(backend, DType::fp32, values[l][3]));
        const bool low = dtype != DType::fp32;
        own.buffers.push_back(poisoned(backend, dtype, static_cast<size_t>(shape.in_features * shape.out_features)));
        own.buffers.push_back(poisoned(backend, dtype, static_cast<size_t>(shape.out_features)));
        const Buffer* layer = &own.buffers[own.buffers.size() - 6];
        DenseUpdateArgs args{};
        args.output_grad = layer[0].data();
        args.input = layer[1].data();
        args.weights = layer[2].as<float>();
        args.bias = layer[3].as<float>();
        args.low_weights = low ? layer[4].data() : nullptr;
        args.low_bias = low ? layer[5].data() : nullptr;
        args.rows = rows;
        args.in_features = shape.in_features;
        args.out_features = shape.out_features;
        args.compute_dtype = dtype;
        args.state = own.state->as<TrainState>();
        own.task.layers.push_back(args);
    }
}

// Every layer's masters, bias and their low-precision copies, as floats, in layer order.
std::vector<float> download_update_layers(Backend& backend, const UpdateLayersOperands& own,
                                          const std::vector<UpdateShape>& shapes, DType dtype) {
    std::vector<float> results;
    for (size_t l = 0; l < shapes.size(); ++l) {
        const Buffer* layer = &own.buffers[6 * l];
        const size_t weights = static_cast<size_t>(shapes[l].in_features * shapes[l].out_features);
        const size_t bias = static_cast<size_t>(shapes[l].out_features);
        for (const std::vector<float>& part :
             {download(backend, layer[2], DType::fp32, weights), download(backend, layer[3], DType::fp32, bias),
              download(backend, layer[4], dtype, weights), download(backend, layer[5], dtype, bias)})
            results.insert(results.end(), part.begin(), part.end());
    }
    return results;
}
#endif

// With grouped SGD, a recorded task's consecutive fused SGD updates are one launch (up to 4 layers,
// those of one kernel variant together): each layer must come out as the launch of its own makes
// it, bit for bit, in the first sighting (eager), the capture and the replays, and a skipped step
// (found_inf set) must write nothing. Six layers: the first four are one run, of which the fourth
// (an odd width, the kernel's element-by-element variant) is launched apart; the last two are
// another. The large first layer takes nearly all of its launch's blocks, one tile each; the narrow
// second one, a few blocks that walk 16 tiles each; the third, one block. The step's finish_step
// after the sixth is taken by the last launch's last block (of dozens): the loss scaler (dynamic,
// doubled after every finite step, halved on the skipped one, and read by every block to unscale)
// and the committed metrics must come out as its own kernel leaves them.
// Then the same layer twice in a row, which must not run beside itself.
TEST_CASE("CUDA fused SGD updates recorded for several layers run as one launch, each layer as in its own") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const std::vector<UpdateShape> shapes = {{1024, 1024}, {8, 2048}, {136, 10}, {101, 33}, {64, 16}, {512, 256}};
    struct Configuration {
        DType dtype;
        int64_t rows;
    };
    const Configuration configurations[] = {{DType::bf16, 32}, {DType::fp16, 64}, {DType::fp32, 17}};
    for (const Configuration& configuration : configurations) {
        CAPTURE(std::string(dtype_name(configuration.dtype)));
        CAPTURE(configuration.rows);
        const int64_t rows = configuration.rows;
        OptimizerConfig sgd;
        sgd.learning_rate = 0.05f;
        sgd.weight_decay = 0.01f;
        TrainState initial{};
        initial.loss_scale = 256.0f;
        initial.applied_steps = 2;
        LossScalerConfig scaler;
        scaler.mode = LossScaling::dynamic;
        scaler.growth_interval = 1;
        static_assert(kMetricsCount == 4, "the metrics uploaded below");
        // The same values for both backends.
        const auto values = update_layer_values(shapes, rows, configuration.dtype, initial);
        std::unique_ptr<Backend> backends[2] = {make_cuda(), make_cuda()};  // grouped, then each layer alone
        cuda_backend_set_grouped_sgd(*backends[0], true);
        UpdateLayersOperands operands[2];
        for (int b = 0; b < 2; ++b)
            upload_update_layers(*backends[b], operands[b], shapes, values, rows, configuration.dtype, sgd, initial,
                                 scaler);
        // Rounds 0 to 2: the first sighting, the capture, a replay; round 3 replays a skipped step.
        std::vector<float> before_skipped;
        for (int round = 0; round < 4; ++round) {
            CAPTURE(round);
            std::vector<float> results[2];
            TrainState states[2];
            std::vector<double> committed[2];
            for (int b = 0; b < 2; ++b) {
                Backend& backend = *backends[b];
                // The state as the last round's finish_step left it, with this round's verdict.
                TrainState state = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                state.found_inf = round == 3 ? 1 : 0;
                backend.copy_to_device(operands[b].state->data(), &state, sizeof state);
                backend.scheduler().submit(Lane::compute, &run_update_layers_task, &operands[b].task);
                backend.scheduler().synchronize();
                states[b] = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                committed[b] = download_raw<double>(backend, *operands[b].committed_metrics, kMetricsCount);
                results[b] = download_update_layers(backend, operands[b], shapes, configuration.dtype);
            }
            REQUIRE(results[0].size() == results[1].size());
            CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
            CHECK(std::memcmp(&states[0], &states[1], sizeof(TrainState)) == 0);
            CHECK(states[0].steps == round + 1);
            CHECK(states[0].skipped_steps == (round == 3 ? 1 : 0));
            CHECK(committed[0] == std::vector<double>{1.5, 20.0, 32.0, 0.25});
            CHECK(committed[1] == committed[0]);
            if (round == 2) before_skipped = results[0];
            if (round == 3)  // not a byte written
                CHECK(std::memcmp(results[0].data(), before_skipped.data(), results[0].size() * sizeof(float)) == 0);
        }
        // Grouped: the first three layers and the last two in the first sighting and the capture (the
        // fourth launched apart, and replays count no ops); the finish_step taken likewise.
        CHECK(cuda_backend_op_paths(*backends[0]).fused_sgd_grouped == 10);
        CHECK(cuda_backend_op_paths(*backends[0]).steps_finished_by_update == 2);
        CHECK(cuda_backend_op_paths(*backends[1]).fused_sgd_grouped == 0);
        CHECK(cuda_backend_op_paths(*backends[1]).steps_finished_by_update == 0);
        for (const auto& backend : backends) {
            INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
            CHECK(cuda_backend_graph_refusals(*backend) == 0);
            CHECK(cuda_backend_graph_replays(*backend) == 2);
        }

        // The first layer twice, then the third: the repeat runs after the first update, and only it
        // and the third share a launch.
        std::vector<float> twice[2];
        for (int b = 0; b < 2; ++b) {
            Backend& backend = *backends[b];
            UpdateLayersTask task = operands[b].task;
            task.layers = {operands[b].task.layers[0], operands[b].task.layers[0], operands[b].task.layers[2]};
            task.finish = false;
            backend.copy_to_device(operands[b].state->data(), &initial, sizeof initial);
            backend.scheduler().submit(Lane::compute, &run_update_layers_task, &task);
            backend.scheduler().synchronize();
            for (int l : {0, 2}) {
                const Buffer* layer = &operands[b].buffers[static_cast<size_t>(6 * l)];
                const size_t weights = static_cast<size_t>(shapes[l].in_features * shapes[l].out_features);
                for (const std::vector<float>& part :
                     {download(backend, layer[2], DType::fp32, weights),
                      download(backend, layer[3], DType::fp32, static_cast<size_t>(shapes[l].out_features))})
                    twice[b].insert(twice[b].end(), part.begin(), part.end());
            }
        }
        CHECK(std::memcmp(twice[0].data(), twice[1].data(), twice[0].size() * sizeof(float)) == 0);
        CHECK(cuda_backend_op_paths(*backends[0]).fused_sgd_grouped == 10 + 2);
    }
#endif
}

// Where every maximum of a step's finiteness proof was taken as its tensor was written (the loss
// head's, the backward's) and the network's input decides as none, the recorded max_abs pass has
// nothing to read, and its decide_update rides in the first fused SGD update's launch instead of a
// launch of its own: each block decides before it writes, and block 0 leaves found_inf for the
// rest. Against a backend with the folds off (the pass, then decide_update): the same masters,
// copies and state bit for bit, round after round through the first sighting, the capture and the
// replays, for finite bounds, bounds whose product overflows and a non-finite maximum; the empty
// input's entry holds a stale maximum the fold must not read (the pass writes 0 there). One layer a
// launch and grouped; a batch past fused SGD's rows decides in the pass as before.
TEST_CASE("a recorded max_abs pass with nothing to read gives its decision to the first fused SGD update") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<UpdateShape> shapes = {{96, 64}, {64, 48}, {48, 16}};
    // Entries 0, 2, 3, 4, 5 as the head and the backward leave them; entry 1 (the input's) is stale.
    const std::vector<std::vector<float>> cases = {
        {1.0f, 0.0f, 2.0f, 0.5f, 3.0f, 1e10f},   // finite
        {1.0f, 0.0f, 1e30f, 1e10f, 3.0f, 2.0f},  // a product overflows
        {1.0f, 0.0f, 2.0f, 3.0f, inf, 1.0f},     // a non-finite dZ
        {1e37f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f},   // the bias gradient's bound overflows
    };
    const float stale_input_maximum = 1e38f;  // with the first case's dZ, a bound past fp32 if it were read
    struct Configuration {
        DType dtype;
        int64_t rows;
        bool fused;  // fused SGD takes the updates
    };
    const Configuration configurations[] = {{DType::bf16, 32, true}, {DType::fp16, 64, true}, {DType::bf16, 80, false}};
    for (const Configuration& configuration : configurations)
        for (const bool grouped : {false, true})
            for (const IssueMode& mode : kIssueModes) {
                CAPTURE(std::string(dtype_name(configuration.dtype)));
                CAPTURE(configuration.rows);
                CAPTURE(grouped);
                CAPTURE(mode.graphs);
                CAPTURE(mode.dependent_launch);
                const int64_t rows = configuration.rows;
                OptimizerConfig sgd;
                sgd.learning_rate = 0.05f;
                TrainState initial{};
                initial.loss_scale = 1.0f;
                LossScalerConfig scaler;
                const auto values = update_layer_values(shapes, rows, configuration.dtype, initial);
                std::unique_ptr<Backend> backends[2] = {cuda_backend_issuing(mode), cuda_backend_issuing(mode)};
                if (!backends[0]) continue;
                cuda_backend_set_step_folds(*backends[1], false);  // the pass, then decide_update
                UpdateLayersOperands operands[2];
                std::unique_ptr<Buffer> maxima[2];
                for (int b = 0; b < 2; ++b) {
                    cuda_backend_set_grouped_sgd(*backends[b], grouped);
                    upload_update_layers(*backends[b], operands[b], shapes, values, rows, configuration.dtype, sgd,
                                         initial, scaler);
                    maxima[b] = std::make_unique<Buffer>(poisoned(*backends[b], DType::fp32, 6));
                    UpdateLayersTask& task = operands[b].task;
                    task.maxima = maxima[b]->as<float>();
                    task.decision_layers = 3;
                    task.decision_inputs.assign(6, MaxAbsInput{nullptr, configuration.dtype, kMaxAbsTaken});
                    task.decision_inputs[1] = MaxAbsInput{nullptr, configuration.dtype, 0};  // decides as none
                }
                for (int round = 0; round < 8; ++round) {
                    CAPTURE(round);
                    std::vector<float> pairs = cases[static_cast<size_t>(round) % cases.size()];
                    std::vector<float> results[2];
                    TrainState states[2];
                    for (int b = 0; b < 2; ++b) {
                        Backend& backend = *backends[b];
                        TrainState state = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                        state.found_inf = 0;  // as the step's begin_step and finite loss leave it
                        backend.copy_to_device(operands[b].state->data(), &state, sizeof state);
                        // As the head and the backward write them; the input's left from another step.
                        std::vector<float> written = pairs;
                        written[1] = stale_input_maximum;
                        backend.copy_to_device(maxima[b]->data(), written.data(), written.size() * sizeof(float));
                        backend.scheduler().submit(Lane::compute, &run_update_layers_task, &operands[b].task);
                        backend.scheduler().synchronize();
                        states[b] = download_raw<TrainState>(backend, *operands[b].state, 1)[0];
                        results[b] = download_update_layers(backend, operands[b], shapes, configuration.dtype);
                        // The pass's results, its 0 for the empty input included, whichever launch wrote it.
                        CHECK(download(backend, *maxima[b], DType::fp32, 6) == pairs);
                    }
                    const bool finite = gradient_bounds_finite(pairs.data(), 3, rows);
                    CHECK(finite == (round % 4 == 0));
                    CHECK(states[0].found_inf == (finite ? 0 : 1));
                    CHECK(std::memcmp(&states[0], &states[1], sizeof(TrainState)) == 0);
                    REQUIRE(results[0].size() == results[1].size());
                    CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
                }
                // Recorded: the first sighting and the capture each fold (replays count no ops); op by
                // op, or past fused SGD's rows, the pass decides (there the first step grows the weight
                // gradient's scratch, and the second runs eagerly too).
                const bool folds = mode.graphs && configuration.fused;
                CHECK(cuda_backend_op_paths(*backends[0]).updates_deciding == (folds ? 2u : 0u));
                CHECK((cuda_backend_op_paths(*backends[0]).max_abs_deciding > 0) ==
                      (mode.graphs && !configuration.fused));
                CHECK(cuda_backend_op_paths(*backends[1]).updates_deciding == 0);
                for (const auto& backend : backends) {
                    INFO("last refusal: " << cuda_backend_last_graph_refusal(*backend));
                    CHECK(cuda_backend_graph_refusals(*backend) == 0);
                    if (configuration.fused) CHECK(cuda_backend_graph_replays(*backend) == (mode.graphs ? 6 : 0));
                }
            }
#endif
}

TEST_CASE("CUDA dropout drops and scales the values the CPU does, bit for bit") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_dropout(*cpu, *cuda);
}

TEST_CASE("CUDA conversions round like the CPU") {
    SKIP_WITHOUT_GPU();
    auto cpu = make_cpu();
    auto cuda = make_cuda();
    compare_conversions(*cpu, *cuda);
}

TEST_CASE("misaligned operands are an error, not a crash") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    Buffer input(*cuda, 64 * 64 * 2 + 64), weights(*cuda, 64 * 64 * 2), bias(*cuda, 64 * 2), output(*cuda, 64 * 64 * 2);
    DenseForwardArgs args{};
    args.input = static_cast<char*>(input.data()) + 2;
    args.weights = weights.data();
    args.bias = bias.data();
    args.output = output.data();
    args.rows = 64;
    args.in_features = 64;
    args.out_features = 64;
    args.valid_out = 64;
    args.activation = Activation::relu;
    args.compute_dtype = args.bias_dtype = args.output_dtype = DType::bf16;
    // Refused with INVALID_ARGUMENT and a message naming the alignment wanted.
    auto check_refused = [&](const char* alignment) {
        CAPTURE(alignment);
        try {
            cuda->dense_forward(args);
            FAIL("misaligned memory was accepted");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(std::string(error.what()).find(alignment) != std::string::npos);
        }
    };
    check_refused("16-byte");
    // cuBLASLt wants its workspace 256-byte aligned.
    args.input = input.data();
    const WorkspaceBuffer workspace(*cuda);
    args.workspace = GemmWorkspace{static_cast<char*>(workspace.buffer.data()) + 16, workspace.bytes - 256};
    check_refused("256-byte");
    args.workspace = workspace.workspace();
    cuda->dense_forward(args);  // the backend is still usable
    cuda->scheduler().synchronize();
}

// An empty layer reaches no kernel (the fused SGD kernel's grid would have no column strips).
TEST_CASE("a dense_update of an empty layer is an error, not a failed launch") {
    SKIP_WITHOUT_GPU();
    auto cuda = make_cuda();
    Buffer masters(*cuda, 256), state(*cuda, sizeof(TrainState)), gradient(*cuda, 256);
    DenseUpdateArgs args{};
    args.output_grad = gradient.data();
    args.input = gradient.data();
    args.weights = static_cast<float*>(masters.data());
    args.bias = static_cast<float*>(masters.data());
    args.state = static_cast<const TrainState*>(state.data());
    args.rows = 32;
    args.in_features = 0;
    args.out_features = 16;
    args.compute_dtype = DType::bf16;
    for (int64_t in_features : {int64_t{0}, int64_t{-3}}) {
        args.in_features = in_features;
        try {
            cuda->dense_update(args, OptimizerConfig{});
            FAIL("an empty layer was accepted");
        } catch (const Error& error) {
            CHECK(error.status() == MPT_STATUS_INVALID_ARGUMENT);
            CHECK(std::string(error.what()).find("non-empty") != std::string::npos);
        }
    }
    cuda->scheduler().synchronize();  // nothing was launched that failed
}

TEST_CASE("the cuBLASLt workspace is planned into each executor's arena and charged to the context") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    const size_t workspace_bytes = context->backend().gemm_workspace_bytes();
    CHECK(workspace_bytes >= (size_t{4} << 20));
    auto model = make_mlp(context, 100);  // a few hundred KiB of parameters: far below the workspace
    const size_t before = context->memory().used();
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, config);
    const GemmWorkspace& workspace = trainer.executor().gemm_workspace();
    CHECK(workspace.bytes == workspace_bytes);
    REQUIRE(workspace.data != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(workspace.data) % 256 == 0);
    CHECK(context->memory().used() - before >= workspace_bytes);
}

TEST_CASE("a memory budget without room for the cuBLASLt workspace gives a trainer without one, which trains") {
    SKIP_WITHOUT_GPU();
    ContextConfig config;
    config.backend = MPT_BACKEND_CUDA;
    config.threads = 2;
    config.memory_budget = size_t{2} << 20;  // the small MLP's arenas fit; 4 or 32 MiB of workspace do not
    auto context = std::make_shared<Context>(config);
    REQUIRE(context->backend().gemm_workspace_bytes() > config.memory_budget);
    auto model = make_mlp(context, 100);
    const SyntheticData data = synthetic_data(256, 100, 8);
    auto dataset = to_dataset(context, data);
    TrainerConfig trainer_config;
    trainer_config.precision = MPT_PRECISION_MIXED_BF16;
    Trainer trainer(model, trainer_config);
    CHECK(trainer.executor().gemm_workspace().bytes == 0);
    CHECK(trainer.executor().gemm_workspace().data == nullptr);
    const std::vector<float> before = master_block(*model);
    trainer.fit(*dataset, 2, 32, true);
    CHECK(master_block(*model) != before);
    CHECK(std::isfinite(trainer.evaluate(*dataset, 64).loss));
}

TEST_CASE("training on the GPU ends where training on the CPU ends, from the same seed") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(512, 100, 11);
    const mpt_precision precisions[] = {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16};
    // Batch 32: plain SGD in the fused kernel. Batch 96: the weight-gradient GEMM into the
    // executor's gradient scratch, then the update kernel.
    const std::pair<int64_t, int64_t> batches_and_epochs[] = {{32, 3}, {96, 8}};
    for (const auto& [batch, epochs] : batches_and_epochs) {
        for (mpt_precision precision : precisions) {
            CAPTURE(batch);
            CAPTURE(static_cast<int>(precision));
            const TrainingRun cpu = train(MPT_BACKEND_CPU, precision, data, epochs, batch);
            const TrainingRun gpu = train(MPT_BACKEND_CUDA, precision, data, epochs, batch);
            CHECK(gpu.initial == cpu.initial);  // the same seed gives the same initial weights
            // What training changed, compared: fp32 differs only by accumulation order; mixed
            // precision adds last-place flips of the 16-bit activations along 40 or 48 steps.
            const double bound = precision == MPT_PRECISION_FP32 ? 1e-3 : 5e-2;
            CHECK(normalised_error(difference(gpu.final, gpu.initial), difference(cpu.final, cpu.initial)) <= bound);
            CHECK(gpu.evaluation.loss == doctest::Approx(cpu.evaluation.loss).epsilon(0.02));
            CHECK(gpu.evaluation.accuracy == doctest::Approx(cpu.evaluation.accuracy).epsilon(0.02));
            CHECK(gpu.state.steps == cpu.state.steps);
            CHECK(gpu.state.skipped_steps == cpu.state.skipped_steps);
            CHECK(gpu.evaluation.accuracy > 0.5f);  // it learned the bands
        }
    }
}

TEST_CASE("a batch in micro-batches trains on the GPU as in one pass, and as on the CPU") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(512, 100, 13);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        CAPTURE(static_cast<int>(precision));
        // Batches of 96 in micro-batches of 40, 40 and 16: the first writes the sums (the GEMM's
        // BGRADB epilogue), the others add to them (beta 1, the bias sums unfused).
        const TrainingRun whole = train(MPT_BACKEND_CUDA, precision, data, 3, 96);
        const TrainingRun parts = train(MPT_BACKEND_CUDA, precision, data, 3, 96, true, 40);
        const TrainingRun eager = train(MPT_BACKEND_CUDA, precision, data, 3, 96, false, 40);
        const TrainingRun cpu = train(MPT_BACKEND_CPU, precision, data, 3, 96, true, 40);
        const double bound = precision == MPT_PRECISION_FP32 ? 1e-3 : 5e-2;
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(whole.final, whole.initial)) <= bound);
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(eager.final, eager.initial)) <= 1e-3);
        CHECK(normalised_error(difference(parts.final, parts.initial), difference(cpu.final, cpu.initial)) <= bound);
        CHECK(parts.state.steps == whole.state.steps);
        CHECK(parts.state.steps == cpu.state.steps);
        CHECK(parts.evaluation.accuracy == doctest::Approx(whole.evaluation.accuracy).epsilon(0.02));
    }
}

TEST_CASE("graph replay and eager issue train identically on the GPU") {
    SKIP_WITHOUT_GPU();
    const SyntheticData data = synthetic_data(256, 100, 5);
    // Batch 48 plans the arenas again between two runs at 16: the graphs of the first run at 16 are
    // kept, and must not replay on buffers that moved.
    const std::vector<int64_t> batches = {16, 48, 16};
    const TrainingRun eager = train(MPT_BACKEND_CUDA, MPT_PRECISION_MIXED_BF16, data, 2, batches, false);
    const TrainingRun graphed = train(MPT_BACKEND_CUDA, MPT_PRECISION_MIXED_BF16, data, 2, batches, true);
    // The same kernels on the same data: identical up to cuBLASLt reduction order, if it varies at all.
    CHECK(normalised_error(difference(graphed.final, graphed.initial), difference(eager.final, eager.initial)) <= 1e-3);
    CHECK(graphed.state.steps == eager.state.steps);
}

TEST_CASE("an injected overflow skips exactly that update and halves the scale on the device") {
    SKIP_WITHOUT_GPU();
    auto context = make_context(MPT_BACKEND_CUDA);
    auto model = make_mlp(context, 64);
    const int64_t rows = 64, features = 64;
    std::vector<float> samples = random_values(static_cast<size_t>(rows * features), 0, 1);
    for (int64_t f = 0; f < features; ++f) samples[static_cast<size_t>(32 * features + f)] = 1e6f;  // fp16: Inf
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % 10);
    auto dataset = Dataset::from_f32(context, samples.data(), rows, features, labels.data(), 10, true);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_FP16;  // dynamic loss scaling by default
    Trainer trainer(model, config);
    const TrainState initial = trainer.state();
    REQUIRE(initial.loss_scale == 32768.0f);

    trainer.step(*dataset, 0, 32);  // finite
    const std::vector<float> before = master_block(*model);
    TrainState state = trainer.state();
    CHECK(state.steps == 1);
    CHECK(state.applied_steps == 1);
    CHECK(state.skipped_steps == 0);
    CHECK(state.loss_scale == 32768.0f);

    trainer.step(*dataset, 32, 32);  // row 32 overflows fp16
    const std::vector<float> after = master_block(*model);
    state = trainer.state();
    CHECK(state.steps == 2);
    CHECK(state.applied_steps == 1);
    CHECK(state.skipped_steps == 1);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(state.growth_tracker == 0);
    CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);

    trainer.step(*dataset, 0, 32);  // finite again: applied at the halved scale
    state = trainer.state();
    CHECK(state.applied_steps == 2);
    CHECK(state.skipped_steps == 1);
    CHECK(state.loss_scale == 16384.0f);
    CHECK(master_block(*model) != after);
}

TEST_CASE("steady-state steps make no device allocation and no host synchronisation") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    auto context = make_context(MPT_BACKEND_CUDA);
    Backend& backend = context->backend();
    auto model = make_mlp(context, 100);
    const SyntheticData short_data = synthetic_data(64, 100, 1), long_data = synthetic_data(192, 100, 2);
    auto short_set = Dataset::from_u8(context, short_data.samples.data(), short_data.rows, short_data.features,
                                      short_data.labels.data(), 10, 1.0f / 255.0f, 0.0f);
    auto long_set = Dataset::from_u8(context, long_data.samples.data(), long_data.rows, long_data.features,
                                     long_data.labels.data(), 10, 1.0f / 255.0f, 0.0f);
    // Whole batches, then micro-batches of 6, 6 and 4 rows: each pass its own graph.
    for (const int64_t micro : {int64_t{0}, int64_t{6}}) {
        CAPTURE(micro);
        TrainerConfig config;
        config.precision = MPT_PRECISION_MIXED_BF16;
        config.micro_batch_size = micro;
        Trainer trainer(model, config);
        // Warm-up: arenas, datasets on the device, GEMM plans, graphs captured.
        trainer.fit(*long_set, 1, 16, true);
        trainer.fit(*short_set, 1, 16, true);

        auto measure = [&](const Dataset& dataset) {
            const uint64_t allocations = cuda_backend_allocation_count(backend);
            const uint64_t syncs = backend.scheduler().host_sync_count();
            trainer.fit(dataset, 1, 16, true);
            return std::make_pair(cuda_backend_allocation_count(backend) - allocations,
                                  backend.scheduler().host_sync_count() - syncs);
        };
        const uint64_t replays_before = cuda_backend_graph_replays(backend);
        const auto four_steps = measure(*short_set);
        const auto twelve_steps = measure(*long_set);
        CHECK(four_steps.first == 0);
        CHECK(twelve_steps.first == 0);
        // Syncs per epoch are a constant (order upload, final drain, metric reads); per step: none.
        CHECK(twelve_steps.second == four_steps.second);
        CHECK(cuda_backend_graph_replays(backend) - replays_before >= 16);
    }
#endif
}

TEST_CASE("a progress callback reads the step count, the scheduled rate and the scaler without waiting for the device") {
    SKIP_WITHOUT_GPU();
#if defined(MPTRAIN_WITH_CUDA)
    auto context = make_context(MPT_BACKEND_CUDA);
    Backend& backend = context->backend();
    auto model = make_mlp(context, 100);
    const SyntheticData data = synthetic_data(192, 100, 3);
    auto dataset = Dataset::from_u8(context, data.samples.data(), data.rows, data.features, data.labels.data(), 10,
                                    1.0f / 255.0f, 0.0f);
    TrainerConfig config;
    config.precision = MPT_PRECISION_MIXED_BF16;
    config.optimizer.schedule.kind = LrScheduleKind::cosine;
    config.optimizer.schedule.decay_steps = 24;
    config.optimizer.schedule.decay_factor = 0.0f;
    Trainer trainer(model, config);
    struct Probe {
        Trainer* trainer;
        Scheduler* scheduler;
        uint64_t syncs_in_reads = 0;
        int64_t calls = 0;
        bool counts_ordered = true;
    } probe{&trainer, &backend.scheduler()};
    auto on_progress = [](int64_t epoch, int64_t step, int64_t steps_per_epoch, float, float, void* user_data) {
        Probe& p = *static_cast<Probe*>(user_data);
        const uint64_t before = p.scheduler->host_sync_count();
        const int64_t issued = p.trainer->steps_taken();
        const float rate = p.trainer->scheduled_learning_rate();
        const TrainState seen = p.trainer->observed_state();  // what mpt_trainer_get_loss_scale reads
        p.syncs_in_reads += p.scheduler->host_sync_count() - before;
        // The step reported has run; the count covers it and at most the steps queued behind it, and
        // the state seen is that step's own.
        const int64_t reported = epoch * steps_per_epoch + step;
        p.counts_ordered = p.counts_ordered && issued >= reported && rate >= 0.0f && seen.steps == reported;
        ++p.calls;
        return 0;
    };
    trainer.set_callbacks(TrainerCallbacks{on_progress, nullptr, &probe});
    trainer.fit(*dataset, 2, 16, true);
    CHECK(probe.calls == 24);
    CHECK(probe.syncs_in_reads == 0);
    CHECK(probe.counts_ordered);
    CHECK(trainer.steps_taken() == trainer.state().steps);
#endif
}
