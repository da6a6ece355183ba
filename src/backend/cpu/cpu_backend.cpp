// See cpu_backend.h. Element-wise passes run on the thread pool with static ranges (deterministic);
// GEMMs go to cpu_sgemm (OpenBLAS panels on the pool), or to AMX for bf16 and fp16 layers where the
// CPU has it.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "amp/loss_scaler.h"
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/cpu_loss_head.h"
#include "backend/cpu/cpu_max_abs.h"
#include "backend/cpu/cpu_update_elements.h"
#include "backend/cpu/rounded_copy.h"
#include "backend/cpu/small_gemm.h"
#include "backend/cpu/weight_words.h"
#include "core/environment_settings.h"
#include "core/error.h"
#include "core/float_bits.h"
#include "data/epoch_order.h"
#include "io/json_writer.h"
#include "memory/host_block.h"

namespace mpt {

namespace {

constexpr int64_t kRowGrain = 8;
constexpr int64_t kElementGrain = 1 << 15;

int resolve_threads(int threads) {
    if (threads > 0) return threads;
    const unsigned cores = std::thread::hardware_concurrency();
    return cores == 0 ? 1 : static_cast<int>(cores);
}

// row[c] = activation(row[c] + bias[c]): ReLU and linear as loops of their own, so they vectorise
// (the switch inside activation_forward keeps the general loop scalar). Same results either way.
void add_bias_and_activate(Activation activation, const float* bias, float* row, int64_t count) {
    switch (activation) {
        case Activation::relu:
            for (int64_t c = 0; c < count; ++c) {
                const float z = row[c] + bias[c];
                row[c] = z > 0.0f ? z : 0.0f;  // activation_forward's ReLU, NaN included
            }
            return;
        case Activation::linear:
            for (int64_t c = 0; c < count; ++c) row[c] += bias[c];
            return;
        default:
            for (int64_t c = 0; c < count; ++c) row[c] = activation_forward(activation, row[c] + bias[c]);
    }
}

// gradient[i] *= (output[i] > 0 ? 1 : 0), ReLU's derivative from its output, as a bit select
// between the gradient and the gradient times 0 (both computed; the same values, NaN and Inf
// included). Written as the product, the compiler keeps a branch per element (it will not
// if-convert a multiplication that may trap), which mispredicts on half the units: 7% of a bf16
// step at batch 256. This form vectorises.
void multiply_by_relu_derivative(float* __restrict gradient, const float* __restrict output, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const uint32_t keep = 0u - static_cast<uint32_t>(output[i] > 0.0f);
        const uint32_t bits = (float_bits(gradient[i]) & keep) | (float_bits(gradient[i] * 0.0f) & ~keep);
        gradient[i] = bits_float(bits);
    }
}

// Raises `largest`, the bits of a maximum so far (a non-negative float or +Inf, whose bits order as
// their values), to `candidate`'s.
void raise_to(std::atomic<uint32_t>& largest, float candidate) {
    const uint32_t bits = float_bits(candidate);
    uint32_t seen = largest.load(std::memory_order_relaxed);
    while (bits > seen && !largest.compare_exchange_weak(seen, bits, std::memory_order_relaxed)) {
    }
}

}  // namespace

std::unique_ptr<Backend> create_cpu_backend(int threads, MemoryTracker* memory) {
    return std::make_unique<CpuBackend>(threads, memory);
}

CpuBackend::CpuBackend(int threads, MemoryTracker* memory) : pool_(resolve_threads(threads)) {
    pool_.charge_scratch_to(memory);
    cpu_gemm_set_threads(pool_.threads());
    const char* clip_setting = std::getenv("MPTRAIN_CPU_CLIP_FROM_BATCH");
    clip_from_batch_ = !(clip_setting && std::strcmp(clip_setting, "0") == 0);
}

std::string CpuBackend::setup_warning() const {
    std::string warnings = cpu_gemm_kernel_warning();
    const std::string unknown = unknown_environment_settings({{"MPTRAIN_CPU_AMX", {"0", "1"}},
                                                              {"MPTRAIN_CPU_BF16_DOT", {"0", "1"}},
                                                              {"MPTRAIN_CPU_SMALL_GEMM", {"0", "avx2", "avx512f"}},
                                                              {"MPTRAIN_CPU_CLIP_FROM_BATCH", {"0", "1"}}});
    if (!unknown.empty()) warnings += (warnings.empty() ? "" : "; ") + unknown;
    return warnings;
}

std::string CpuBackend::device_name() const {
    return std::string("cpu (") + std::to_string(pool_.threads()) + " threads, " + cpu_gemm_library() +
           (amx_gemm_refused()     ? ", amx refused by Linux"
            : amx_gemm_supported() ? ", amx"
                                   : "") +
           (native_gemm_kind(DType::bf16) == NativeGemm::dot_products ? ", avx512-bf16 GEMMs" : "") + ", small GEMMs " +
           small_gemm_kernels_name(small_gemm_kernels()) + ")";
}

void CpuBackend::describe(JsonWriter& out) const {
    out.key("threads").integer(pool_.threads());
    out.key("gemm_library").string(cpu_gemm_library());
    // As device_name: nothing here asks Linux for the tile state (a description changes nothing).
    out.key("amx").string(amx_gemm_refused() ? "refused by Linux" : amx_gemm_supported() ? "supported" : "absent");
    out.key("bf16_gemm").string(native_gemm_name(native_gemm_kind(DType::bf16)));
    out.key("fp16_gemm").string(native_gemm_name(native_gemm_kind(DType::fp16)));
    out.key("small_gemm").string(small_gemm_kernels_name(small_gemm_kernels()));
    out.key("max_abs_elements").unsigned_integer(max_abs_elements_.load(std::memory_order_relaxed));
}

std::string CpuBackend::emulation_warning(DType compute_dtype) const {
    if (compute_dtype == DType::fp32 || native_gemm_available(compute_dtype)) return {};
    return std::string("cpu backend: ") + dtype_name(compute_dtype) + " GEMMs are emulated in fp32 on this CPU (" +
           native_gemm_unavailable_reason(compute_dtype) + "), which makes mixed precision slower than fp32 here; " +
           "MPT_PRECISION_AUTO picks " + dtype_name(preferred_compute_dtype()) + " on it";
}

template <typename Work>
void CpuBackend::freeing_scratch_on_failure(const Work& work) {
    try {
        work();
    } catch (const Error& error) {
        if (error.status() == MPT_STATUS_OUT_OF_MEMORY) pool_.release_scratch();
        throw;
    } catch (const std::bad_alloc&) {
        pool_.release_scratch();
        throw;
    }
}

int64_t CpuBackend::small_gemm_rows(DType dtype, bool dot_products) {
    // bf16 on AMX tiles against small_gemm, the seed MLP's GEMMs on 2 threads (bench/NOTES.md): as
    // dot products (the forward) small_gemm is 1.12-1.29x faster up to 6 rows, level at 7; summed
    // over the depth (the input gradient) tiles win from 5 rows (1.15-1.35x). fp16 takes four tile
    // products per product, so small_gemm wins through its 8 rows; so does bf16 where the packed
    // GEMM runs on AVX512-BF16's dot products rather than tiles (a prediction on 7 or 8 rows of the
    // seed MLP took 2.87 and 2.86 ms there, against 2.31 and 2.56 ms in small_gemm; bench/NOTES.md).
    if (dtype != DType::bf16 || !amx_gemm_available()) return kSmallGemmMaxRows;
    return dot_products ? 6 : 4;
}

CpuBackend::GemmKernel CpuBackend::gemm_kernel(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                                               int64_t k) const {
    if (dtype == DType::fp32 || !native_gemm_available(dtype)) return GemmKernel::sgemm;
    // A few rows or columns of C in bf16 or fp16 (same rounding as AMX's packing): small_gemm. It
    // streams dot products when the side it streams is contiguous over the depth: op(B) for a few
    // rows of C, op(A) for a few columns.
    const bool dot_products = m <= kSmallGemmMaxRows ? transpose_b : !transpose_a;
    if (small_gemm_applies(m, n, k, small_gemm_rows(dtype, dot_products)) && small_gemm_supported(dtype))
        return GemmKernel::small;
    return GemmKernel::amx;
}

int64_t CpuBackend::weight_words_max_rows(DType compute_dtype) const {
    // small_gemm reads them, on as many rows as it takes the forward's dot products over floats, so
    // that words and floats give the same bits. The AMX GEMM (more rows) does not: its packing from
    // words measured only 1.08-1.15x faster in bf16 and no faster in fp16 (bench/NOTES.md).
    if (!rounds_parameters_on_read(compute_dtype) || !small_gemm_words_supported(compute_dtype)) return 0;
    return small_gemm_rows(compute_dtype, true);
}

void CpuBackend::write_weight_words(const float* masters, uint16_t* words, DType dtype, int64_t count) {
    mpt::write_weight_words(dtype, masters, words, count, pool_);
}

void CpuBackend::gemm(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    const float* a_values = static_cast<const float*>(a);
    const float* b_values = static_cast<const float*>(b);
    freeing_scratch_on_failure([&] {
        switch (gemm_kernel(dtype, transpose_a, transpose_b, m, n, k)) {
            case GemmKernel::small:
                small_gemm(dtype, transpose_a, transpose_b, m, n, k, alpha, a_values, lda, b_values, ldb, beta, c, ldc,
                           pool_);
                return;
            case GemmKernel::amx:
                amx_gemm(dtype, transpose_a, transpose_b, m, n, k, alpha, a_values, lda, b_values, ldb, beta, c, ldc,
                         pool_);
                return;
            case GemmKernel::sgemm:
                cpu_sgemm(transpose_a, transpose_b, m, n, k, alpha, a_values, lda, b_values, ldb, beta, c, ldc, pool_);
                return;
        }
    });
}

void CpuBackend::reserve_gemm(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k) {
    switch (gemm_kernel(dtype, transpose_a, transpose_b, m, n, k)) {
        case GemmKernel::small: small_gemm_reserve(m, n, k, pool_); return;
        case GemmKernel::amx: amx_gemm_reserve(dtype, transpose_a, transpose_b, m, n, k, pool_); return;
        case GemmKernel::sgemm: cpu_sgemm_reserve(m, n, k, pool_); return;
    }
}

namespace {

// clip_factor_from_batch's scratch at `rows` for layers up to `widest` features: the two Gram
// matrices, then room for one layer's dZ or A_prev scaled into range.
int64_t clip_gram_floats(int64_t rows, int64_t widest) { return 2 * rows * rows + rows * widest; }

}  // namespace

void CpuBackend::reserve_update_scratch(const DenseUpdateShape* layers, int count, int64_t rows, bool clipping) {
    freeing_scratch_on_failure([&] {
        // dense_update's GEMM: dW[out, in] = dZ^T . A over the batch.
        for (int i = 0; i < count; ++i)
            reserve_gemm(layers[i].compute_dtype, true, false, layers[i].out_features, layers[i].in_features, rows);
        if (!clipping || !clips_from_batch(rows)) return;
        // clip_factor_from_batch's Gram GEMMs and scratch (grown, never shrunk: trainers share it).
        int64_t widest = 0;
        for (int i = 0; i < count; ++i) {
            reserve_gemm(DType::fp32, false, true, rows, rows, layers[i].out_features);
            reserve_gemm(DType::fp32, false, true, rows, rows, layers[i].in_features);
            widest = std::max({widest, layers[i].out_features, layers[i].in_features});
        }
        pool_.scratch(ScratchUse::clip_gram).reserve<float>(clip_gram_floats(rows, widest));
    });
}

void* CpuBackend::allocate(size_t bytes) {
    void* pointer = allocate_host_block(bytes);
    if (!pointer) fail(MPT_STATUS_OUT_OF_MEMORY, "cpu backend: could not allocate " + std::to_string(bytes) + " bytes");
    return pointer;
}

void CpuBackend::release(void* pointer) noexcept { release_host_block(pointer); }

void CpuBackend::copy_to_device(void* destination, const void* source, size_t bytes) {
    if (bytes) std::memcpy(destination, source, bytes);
}

void CpuBackend::copy_to_host(void* destination, const void* source, size_t bytes) {
    if (bytes) std::memcpy(destination, source, bytes);
}

void CpuBackend::fill_zero(void* destination, size_t bytes) {
    if (bytes) std::memset(destination, 0, bytes);
}

void CpuBackend::convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count) {
    float* out = static_cast<float*>(destination);
    round_copy(dtype, source, out, static_cast<size_t>(count));
}

void CpuBackend::convert_to_fp32(float* destination, const void* source, DType, int64_t count) {
    if (destination != source) std::memcpy(destination, source, static_cast<size_t>(count) * sizeof(float));
}

void CpuBackend::fill_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed) {
    make_epoch_order(order, rows, shuffle, seed, order_keys_);
}

void CpuBackend::gather_batch(const GatherArgs& args) {
    // Runs on the copy lane's worker thread: single-threaded on purpose, it overlaps the compute.
    float* batch = static_cast<float*>(args.batch);
    for (int64_t r = 0; r < args.rows; ++r) {
        const int64_t source_row = args.order ? args.order[args.first + r] : args.first + r;
        float* out = batch + r * args.padded_features;
        if (args.samples_are_u8) {
            const uint8_t* in = static_cast<const uint8_t*>(args.samples) + source_row * args.features;
            for (int64_t f = 0; f < args.features; ++f) out[f] = static_cast<float>(in[f]) * args.scale + args.offset;
        } else {
            const float* in = static_cast<const float*>(args.samples) + source_row * args.features;
            for (int64_t f = 0; f < args.features; ++f) out[f] = in[f] * args.scale + args.offset;
        }
        if (args.feature_mean)
            for (int64_t f = 0; f < args.features; ++f)
                out[f] = (out[f] - args.feature_mean[f]) / args.feature_divisor[f];
        round_array(args.batch_dtype, out, static_cast<size_t>(args.features));
        std::fill(out + args.features, out + args.padded_features, 0.0f);
        if (args.labels) args.batch_labels[r] = args.labels[source_row];
        if (args.targets)
            std::memcpy(args.batch_targets + r * args.target_width, args.targets + source_row * args.target_width,
                        static_cast<size_t>(args.target_width) * sizeof(float));
        if (args.row_weights) args.batch_row_weights[r] = args.row_weights[source_row];
    }
}

void CpuBackend::dense_forward(const DenseForwardArgs& args) {
    float* output = static_cast<float*>(args.output);
    const float* bias = static_cast<const float*>(args.bias);
    if (args.bias_dtype != DType::fp32) {
        // The bias as its low-precision copy holds it: rounded here when the masters came instead
        // (rounds_parameters_on_read); rounding the copy again changes nothing. In the caller's
        // scratch, grown on its first call.
        float* rounded_bias = pool_.scratch(ScratchUse::rounded_bias).reserve<float>(args.valid_out);
        round_copy(args.bias_dtype, bias, rounded_bias, static_cast<size_t>(args.valid_out));
        bias = rounded_bias;
    }
    if (args.weight_words && args.rows <= weight_words_max_rows(args.compute_dtype)) {
        freeing_scratch_on_failure([&] {
            small_gemm_words(args.compute_dtype, args.rows, args.out_features, args.in_features, 1.0f,
                             static_cast<const float*>(args.input), args.in_features, args.weight_words,
                             args.in_features, 0.0f, output, args.out_features, pool_);
        });
    } else {
        gemm(args.compute_dtype, false, true, args.rows, args.out_features, args.in_features, 1.0f, args.input,
             args.in_features, args.weights, args.in_features, 0.0f, output, args.out_features);
    }
    // Epilogue as a GPU does it: fp32 accumulator + bias, activation, then one rounding to the output.
    pool_.parallel_for(args.rows, kRowGrain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            float* row = output + r * args.out_features;
            add_bias_and_activate(args.activation, bias, row, args.valid_out);
            round_array(args.output_dtype, row, static_cast<size_t>(args.valid_out));
            std::fill(row + args.valid_out, row + args.out_features, 0.0f);
        }
    });
}

void CpuBackend::loss_head(const LossHeadArgs& args) {
    require(valid_label_smoothing(args.loss, args.label_smoothing), MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: loss_head needs label smoothing in [0, 1), 0 for a regression");
    require(args.loss != LossKind::huber || valid_huber_delta(args.huber_delta), MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: loss_head needs a finite Huber delta above 0");
    require(args.class_weights == nullptr || loss_takes_class_weights(args.loss), MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: loss_head takes class weights for the categorical losses only");
    require(!args.logits_grad_max_abs || args.logits_grad, MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: loss_head takes the logits gradient's maximum only where it writes the gradient");
    cpu_loss_head(args);
}

bool CpuBackend::dense_backward_data(const DenseBackwardDataArgs& args) {
    float* input_grad = static_cast<float*>(args.input_grad);
    gemm(args.compute_dtype, false, false, args.rows, args.in_features, args.out_features, 1.0f, args.output_grad,
         args.out_features, args.weights, args.in_features, 0.0f, input_grad, args.in_features);
    const float* input = static_cast<const float*>(args.input);
    const int64_t total = args.rows * args.in_features;
    // The maxima asked for, of each task's range while it is in cache: max_abs's values (over the
    // rounded gradient), without its second pass over both arrays.
    std::atomic<uint32_t> input_grad_largest{0}, input_largest{0};
    pool_.parallel_for(total, kElementGrain, [&](int64_t begin, int64_t end) {
        if (args.input_activation == Activation::relu) {
            multiply_by_relu_derivative(input_grad + begin, input + begin, end - begin);
        } else {
            for (int64_t i = begin; i < end; ++i)
                input_grad[i] *= activation_derivative_from_output(args.input_activation, input[i]);
        }
        round_array(args.input_grad_dtype, input_grad + begin, static_cast<size_t>(end - begin));
        if (args.input_grad_max_abs) raise_to(input_grad_largest, max_abs_range(input_grad, begin, end));
        if (args.input_max_abs) raise_to(input_largest, max_abs_range(input, begin, end));
    });
    if (args.input_grad_max_abs) *args.input_grad_max_abs = bits_float(input_grad_largest.load());
    if (args.input_max_abs) *args.input_max_abs = bits_float(input_largest.load());
    return true;
}

void CpuBackend::dropout(const DropoutArgs& args) {
    require(args.input != nullptr && args.output != nullptr && args.state != nullptr && args.count >= 0,
            MPT_STATUS_INVALID_ARGUMENT, "cpu backend: dropout needs its input, its output and the train state");
    const float* input = static_cast<const float*>(args.input);
    float* output = static_cast<float*>(args.output);
    const uint64_t key = dropout_key(args.draw.seed, args.state->steps, args.draw.layer);
    pool_.parallel_for(args.count, kElementGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
            output[i] = dropout_keeps(key, args.draw.threshold, args.first_index + i) ? input[i] * args.draw.scale : 0.0f;
        round_array(args.dtype, output + begin, static_cast<size_t>(end - begin));
    });
}

void CpuBackend::begin_step(TrainState* state) { state->found_inf = 0; }

void CpuBackend::max_abs(const MaxAbsInput* inputs, int count, float* out) {
    require(count >= 0 && count <= kMaxAbsInputs, MPT_STATUS_INVALID_ARGUMENT, "max_abs takes at most 16 inputs");
    for (int k = 0; k < count; ++k) {
        if (inputs[k].count == kMaxAbsTaken) continue;  // out[k] written by its dense_backward_data
        out[k] = max_abs_one(static_cast<const float*>(inputs[k].values), inputs[k].count);
        if (inputs[k].count > 0)
            max_abs_elements_.fetch_add(static_cast<uint64_t>(inputs[k].count), std::memory_order_relaxed);
    }
}

float CpuBackend::max_abs_one(const float* data, int64_t count) {
    constexpr int kChunks = 64;
    float chunk_max[kChunks] = {};
    const int64_t chunk_size = std::max<int64_t>(kElementGrain, (count + kChunks - 1) / kChunks);
    const int64_t chunks = (count + chunk_size - 1) / chunk_size;
    pool_.parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t chunk = begin; chunk < end; ++chunk) {
            const int64_t first = chunk * chunk_size;
            chunk_max[chunk] = max_abs_range(data, first, std::min(count, first + chunk_size));
        }
    });
    float largest = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) largest = std::max(largest, chunk_max[chunk]);
    return largest;
}

void CpuBackend::decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) {
    if (!gradient_bounds_finite(max_abs_pairs, layer_count, rows)) state->found_inf = 1;
}

void CpuBackend::column_sums(const float* output_grad, int64_t rows, int64_t columns, float factor, float* out,
                             float keep) {
    pool_.parallel_for(columns, kRowGrain, [&](int64_t begin, int64_t end) {
        float sums[256];
        for (int64_t block = begin; block < end; block += 256) {
            const int64_t block_end = std::min(end, block + 256);
            std::fill(sums, sums + (block_end - block), 0.0f);
            for (int64_t r = 0; r < rows; ++r) {
                const float* row = output_grad + r * columns;
                for (int64_t c = block; c < block_end; ++c) sums[c - block] += row[c];
            }
            for (int64_t c = block; c < block_end; ++c)
                out[c] = keep != 0.0f ? keep * out[c] + factor * sums[c - block] : factor * sums[c - block];
        }
    });
}

void CpuBackend::write_low_copy(const float* master, void* low, DType dtype, int64_t count) {
    if (!low) return;
    float* out = static_cast<float*>(low);
    const bool streamed = static_cast<size_t>(count) * sizeof(float) >= kStreamedCopyBytes;
    pool_.parallel_for(count, kElementGrain, [&](int64_t begin, int64_t end) {
        write_rounded_copy(dtype, master + begin, out + begin, static_cast<size_t>(end - begin), streamed);
    });
}

void CpuBackend::dense_update(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) {
    const TrainState& state = *args.state;
    if (state.found_inf) return;
    const float* output_grad = static_cast<const float*>(args.output_grad);
    const float* input = static_cast<const float*>(args.input);
    const int64_t weight_count = args.out_features * args.in_features;
    OptimizerStepScalars scalars = optimizer_step_scalars(optimizer, state.loss_scale, state.applied_steps, state.steps);
    if (args.part == UpdatePart::whole && is_plain_sgd(optimizer)) {
        // W = keep * W + (-lr / scale) * dZ^T · A: the GEMM is the update (times the clip factor, if
        // given), keep what weight decay leaves of each weight (1 without it: the GEMM only adds).
        const float step = -scalars.learning_rate * scalars.inverse_scale * (args.gradient_factor ? *args.gradient_factor : 1.0f);
        const float keep = plain_sgd_keep(optimizer, scalars.learning_rate);
        gemm(args.compute_dtype, true, false, args.out_features, args.in_features, args.rows, step, output_grad,
             args.out_features, input, args.in_features, keep, args.weights, args.in_features);
        column_sums(output_grad, args.rows, args.out_features, step, args.bias, keep);
    } else {
        require(args.weight_grad && args.bias_grad, MPT_STATUS_INVALID_ARGUMENT,
                "cpu backend: this dense_update needs weight_grad and bias_grad");
        if (args.part != UpdatePart::apply) {
            const float keep = args.part == UpdatePart::accumulate ? 1.0f : 0.0f;  // adds to the sums, or writes them
            gemm(args.compute_dtype, true, false, args.out_features, args.in_features, args.rows, 1.0f, output_grad,
                 args.out_features, input, args.in_features, keep, args.weight_grad, args.in_features);
            column_sums(output_grad, args.rows, args.out_features, 1.0f, args.bias_grad, keep);
            if (args.part != UpdatePart::whole) return;
        }
        if (args.gradient_factor) scalars.inverse_scale *= *args.gradient_factor;
        auto apply = [&](float* master, const float* gradient, float* const* states, int64_t count) {
            for (int k = 0; k < optimizer_state_count(optimizer); ++k)
                require(states[k] != nullptr, MPT_STATUS_INVALID_ARGUMENT,
                        "cpu backend: dense_update needs every optimizer state array");
            pool_.parallel_for(count, kElementGrain, [&](int64_t begin, int64_t end) {
                update_elements(optimizer, scalars, master, gradient, states, begin, end);
            });
        };
        apply(args.weights, args.weight_grad, args.weight_state, weight_count);
        apply(args.bias, args.bias_grad, args.bias_state, args.out_features);
    }
    write_low_copy(args.weights, args.low_weights, args.compute_dtype, weight_count);
    write_low_copy(args.bias, args.low_bias, args.compute_dtype, args.out_features);
}

void CpuBackend::clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state) {
    require(gradients != nullptr && state != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: clip_factor needs the gradients and the train state");
    // At most kChunks chunks (as max_abs_one cuts them) summed in order: the same sum whatever the
    // thread count, and no allocation inside the step.
    constexpr int kChunks = 64;
    double partials[kChunks] = {};
    const int64_t chunk_size = std::max<int64_t>(kElementGrain, (count + kChunks - 1) / kChunks);
    const int64_t chunks = (count + chunk_size - 1) / chunk_size;
    pool_.parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t chunk = begin; chunk < end; ++chunk) {
            const int64_t last = std::min(count, (chunk + 1) * chunk_size);
            double sum = 0.0;
            for (int64_t i = chunk * chunk_size; i < last; ++i) sum += static_cast<double>(gradients[i]) * gradients[i];
            partials[chunk] = sum;
        }
    });
    double sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials[chunk];
    record_global_clip(*state, sum, clipnorm);
}

// Up to this many rows the Gram matrices cost less than the gradients' extra passes through memory
// (bench/NOTES.md, "Gradient clipping's cost").
constexpr int64_t kClipFromBatchMaxRows = 64;

bool CpuBackend::clips_from_batch(int64_t rows) const { return clip_from_batch_ && rows <= kClipFromBatchMaxRows; }

void CpuBackend::clip_factor_from_batch(const DenseUpdateArgs* layers, int count, const float* max_abs_pairs,
                                        float clipnorm, TrainState* state) {
    require(state != nullptr && (count == 0 || (layers != nullptr && max_abs_pairs != nullptr)),
            MPT_STATUS_INVALID_ARGUMENT, "cpu backend: clip_factor_from_batch needs the layers, their bounds and the train state");
    double sum = 0.0;
    for (int layer = 0; layer < count && !state->found_inf; ++layer) {  // a skipped step has no norm
        const DenseUpdateArgs& args = layers[layer];
        const int64_t rows = args.rows;
        float* const scratch =
            pool_.scratch(ScratchUse::clip_gram)
                .reserve<float>(clip_gram_floats(rows, std::max(args.in_features, args.out_features)));
        float* const output_gram = scratch;
        float* const input_gram = scratch + rows * rows;
        float* const scaled = scratch + 2 * rows * rows;
        // X X^T for `values` [rows, width] as stored (rounded to the layer's dtype), in fp32; the
        // power of two it was scaled by (squared) is returned, so that the sums come out right.
        const auto gram = [&](const void* values, int64_t width, float largest, float* out) -> double {
            const float* x = static_cast<const float*>(values);
            double unscale = 1.0;
            if (largest > 0.0f && !(largest >= kGramSafeLow && largest <= kGramSafeHigh)) {
                const int exponent = std::ilogb(largest) + 1;  // largest * 2^-exponent in [0.5, 1)
                const float scale = std::ldexp(1.0f, -exponent);
                for (int64_t i = 0; i < rows * width; ++i) scaled[i] = x[i] * scale;
                x = scaled;
                unscale = std::ldexp(1.0, 2 * exponent);
            }
            gemm(DType::fp32, false, true, rows, rows, width, 1.0f, x, width, x, width, 0.0f, out, rows);
            return unscale;
        };
        const double output_unscale = gram(args.output_grad, args.out_features, max_abs_pairs[2 * layer], output_gram);
        const double input_unscale = gram(args.input, args.in_features, max_abs_pairs[2 * layer + 1], input_gram);
        double weights = 0.0, bias = 0.0;
        for (int64_t i = 0; i < rows * rows; ++i) {
            weights += static_cast<double>(output_gram[i]) * input_gram[i];
            bias += output_gram[i];
        }
        // Both are sums of squares: rows that cancel may leave a rounding error of either sign.
        sum += std::max(weights, 0.0) * output_unscale * input_unscale + std::max(bias, 0.0) * output_unscale;
    }
    record_global_clip(*state, sum, clipnorm);
}

void CpuBackend::average_weights(const float* masters, float* averages, int64_t count, float momentum,
                                 const TrainState* state) {
    require(masters != nullptr && averages != nullptr && state != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: average_weights needs the masters, the averages and the train state");
    const bool copy = momentum == 0.0f;  // a frozen layer's: its weights, whatever the step
    if (state->found_inf && !copy) return;
    if (copy || state->applied_steps == 0) {
        std::memcpy(averages, masters, static_cast<size_t>(count) * sizeof(float));
        return;
    }
    pool_.parallel_for(count, kElementGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) averages[i] = averaged_weight(averages[i], masters[i], momentum);
    });
}

void CpuBackend::swap_values(float* first, float* second, int64_t count) {
    require(first != nullptr && second != nullptr && count >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "cpu backend: swap_values needs two arrays");
    std::swap_ranges(first, first + count, second);
}

void CpuBackend::finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                             double* committed_metrics) {
    advance_loss_scaler(*state, scaler);
    if (metrics && committed_metrics) std::copy(metrics, metrics + kMetricsCount, committed_metrics);
}

}  // namespace mpt
