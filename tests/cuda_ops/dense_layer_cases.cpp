// test_cuda_ops: a dense layer's forward (cuBLASLt's fused epilogues, their fallbacks and the
// small-batch kernel) and its input gradient (DRELU through the forward's mask, ReLU's derivative
// in place, the maxima it takes for the finiteness proof), CUDA against the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_ops/comparisons.h"
#include "cuda_ops/harness.h"
#include "support/normalised_error.h"
#include "support/skip_without_gpu.h"
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
using mpt_test::normalised_error;

#if defined(MPTRAIN_WITH_CUDA)
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

}  // namespace

namespace mpt::testing {

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

}  // namespace mpt::testing

TEST_CASE("CUDA dense_forward matches the CPU (fused epilogues and fallbacks)") {
    SKIP_WITHOUT_GPU();
    compare_fused_and_unfused(compare_dense_forward_cases);
}

TEST_CASE("CUDA dense_backward_data matches the CPU (DRELU with the forward's mask and fallbacks)") {
    SKIP_WITHOUT_GPU();
    compare_fused_and_unfused(compare_dense_backward_data_cases);
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

#if defined(MPTRAIN_WITH_CUDA)
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
