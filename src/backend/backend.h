// The backend interface: the handful of fused operations a training step is made of. The CPU
// backend is the reference implementation; the CUDA backend implements the same contract and is
// tested against it op by op. All pointers are backend memory (host memory on the CPU backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "amp/loss_scaler.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/host_device.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/loss.h"
#include "nn/optimizer.h"
#include "sched/scheduler.h"

namespace mpt {

class MemoryTracker;
class JsonWriter;

enum class BackendKind : uint8_t { cpu = 1, cuda = 2 };

// Backend memory a dense op's GEMM may use as scratch (cuBLASLt's workspace). The executor plans
// Backend::gemm_workspace_bytes() of it into its persistent arena and hands it to every dense op;
// empty is valid and means GEMMs that need none (the CPU backend never uses it).
struct GemmWorkspace {
    void* data = nullptr;  // 256-byte aligned
    size_t bytes = 0;
};

// Row-major [rows, features] activations, row-major [units, inputs] weights. Every width here is
// already padded to a multiple of 8; `valid_*` counts the real units, the rest are kept at zero.
struct DenseForwardArgs {
    const void* input;      // [rows, in_features], compute dtype
    const void* weights;    // [out_features, in_features], compute dtype (or fp32 masters: rounds_parameters_on_read)
    const void* bias;       // [out_features], bias_dtype (fp32 on the last layer, else compute dtype)
    void* output;           // [rows, out_features], output_dtype; padded columns written as 0
    void* relu_mask;        // optional backend-private aux buffer (CUDA's ReLU bit mask); may be null
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    int64_t valid_out;
    Activation activation;  // never softmax: the loss head applies it
    DType compute_dtype;
    DType bias_dtype;
    DType output_dtype;
    GemmWorkspace workspace;
    // Optional: the same weights as 16-bit words of the compute dtype (Backend::weight_words_max_rows),
    // which the backend reads instead of `weights`; null when the executor keeps none.
    const uint16_t* weight_words = nullptr;
};

// dZ_prev = (dZ · W) ⊙ act'(A_prev): the input gradient of a layer, fused with the previous
// layer's activation derivative (cuBLASLt's DRELU epilogue for ReLU).
struct DenseBackwardDataArgs {
    const void* output_grad;   // dZ [rows, out_features], compute dtype
    const void* weights;       // [out_features, in_features], compute dtype (as in DenseForwardArgs)
    const void* input;         // A_prev [rows, in_features] as produced by the previous layer
    const void* relu_mask;     // the previous layer's aux buffer, may be null
    void* input_grad;          // dZ_prev [rows, in_features], input_grad_dtype
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    Activation input_activation;  // the previous layer's activation
    DType compute_dtype;
    DType input_grad_dtype;
    GemmWorkspace workspace;
    // Optional single floats of backend memory: max |x| over input_grad as written and over input
    // (as max_abs computes them), for a backend that can take them as it writes input_grad instead of
    // a max_abs pass reading both arrays again (dense_backward_data says whether it did).
    float* input_grad_max_abs = nullptr;
    float* input_max_abs = nullptr;
};

// Dropout of a training step (nn/dropout.h): output[i] = kept(i) ? input[i] * scale : 0, rounded to
// `dtype`, over [rows, width] arrays of backend memory that are the same or do not overlap. From a
// layer's outputs (kept for its activation's derivative) to the next layer's input after its
// forward, and with the same draw on its output gradient, in place, after the next layer's
// dense_backward_data.
struct DropoutArgs {
    const void* input;
    void* output;
    DType dtype;
    int64_t count;             // rows * width
    DropoutDraw draw;
    const TrainState* state;   // backend memory: the step count (TrainState::steps) keys the mask
    // The index of input[0] in the step's whole [batch rows, width] array: a micro-batch's rows
    // after the first draw the masks the whole batch's rows there would (gradient accumulation).
    int64_t first_index = 0;
};

// The fused head: activation of the last layer (softmax row-wise, or element-wise), the loss, the
// scaled logits gradient (dloss/dlogits · loss_scale / rows) and the metrics, all in fp32.
struct LossHeadArgs {
    const float* logits;       // [rows, width]
    const int32_t* labels;     // [rows] for sparse categorical cross-entropy, else null
    const float* targets;      // [rows, classes] for the other losses, else null
    float* probabilities;      // optional [rows, width] activation output (predict), may be null
    void* logits_grad;         // optional [rows, width], logits_grad_dtype; padded columns 0
    TrainState* state;         // loss_scale read; found_inf set on a non-finite loss. May be null.
    double* metrics;           // optional accumulator [loss_sum, correct, counted, batch_loss]
    int64_t rows;
    int64_t width;
    int64_t classes;           // valid columns
    Activation activation;
    LossKind loss;
    float label_smoothing;     // s in [0, 1): targets are t (1 - s) + s / n (nn/loss.h); 0 for none
    float huber_delta;         // LossKind::huber's delta (finite, > 0); read by no other loss
    // Optional [classes] in backend memory (categorical losses): each row's loss and gradient times
    // its class's weight (its label, or the first largest of its targets). Null: every weight 1.
    const float* class_weights;
    // Optional [rows] in backend memory: each row's own weight (a weighted dataset's, Keras's
    // sample_weight), multiplying its loss and gradient after its class weight. Null: every weight 1.
    const float* row_weights;
    DType logits_grad_dtype;
    // Gradient accumulation: a micro-batch's head computes its share of its step's whole batch of
    // `mean_rows` rows, whose mean the loss is (the gradient's factor is loss_scale / mean_rows too),
    // and the batch loss metric gets its share added when `continues_batch` (a micro-batch after the
    // first) instead of set. 0: the loss is the mean over `rows`.
    int64_t mean_rows = 0;
    bool continues_batch = false;
    // Optional single float of backend memory: max |x| over logits_grad as written (as max_abs
    // computes it), which every backend writes as it writes the gradient, so that the step's
    // finiteness check does not read the gradient again in a max_abs pass. Needs logits_grad.
    float* logits_grad_max_abs = nullptr;
};
// The rows a head's loss is a mean over.
MPT_HOST_DEVICE int64_t loss_mean_rows(const LossHeadArgs& args) { return args.mean_rows > 0 ? args.mean_rows : args.rows; }
constexpr int kMetricsCount = 4;
enum MetricsIndex { kMetricLossSum = 0, kMetricCorrect = 1, kMetricCounted = 2, kMetricBatchLoss = 3 };

// The batch loss metric after a head whose rows' losses (weighted) sum to `loss_sum`: their mean
// over loss_mean_rows, added to the share of the micro-batches before when continues_batch.
MPT_HOST_DEVICE double head_batch_loss(const LossHeadArgs& args, double loss_sum) {
    const double share = loss_sum / static_cast<double>(loss_mean_rows(args));
    return args.continues_batch && args.metrics ? args.metrics[kMetricBatchLoss] + share : share;
}

// The weight update of one layer, fused with its weight-gradient GEMM. Plain SGD needs no gradient
// tensor: the CPU accumulates -lr/scale * dZ^T·A straight into the fp32 masters (GEMM beta = 1),
// and CUDA does the same in one kernel for batches of at most 64 rows. Otherwise dW/db go to the
// scratch gradients first (update_needs_gradient_scratch). Either way the low-precision copy is
// written from the new masters. When state->found_inf it changes none of them (masters, optimizer
// state, copies), though a backend may then overwrite dZ and A_prev, whose values the dropped step
// no longer needs (CUDA's plain SGD into the masters zeroes them, so that its GEMM adds zeros).
//
// Gradient clipping needs the norm of every layer's gradient before any layer's update. A backend
// that takes it from the batch (clips_from_batch) runs whole updates times *gradient_factor. Else an
// update runs in two parts: `gradient` writes dW/db (times the loss scale) to weight_grad/bias_grad
// and changes nothing else; `apply` updates the masters from them, times *gradient_factor.
// Gradient accumulation runs the parts too, with `accumulate` between them: every micro-batch of a
// step after the first adds its dW/db to weight_grad/bias_grad (changing nothing else), so that
// `apply` then updates from the whole batch's gradient.
enum class UpdatePart : uint8_t { whole, gradient, apply, accumulate };

// One layer's update as reserve_update_scratch sees it.
struct DenseUpdateShape {
    int64_t in_features, out_features;
    DType compute_dtype;
};

struct DenseUpdateArgs {
    const void* output_grad;   // dZ [rows, out_features], compute dtype (multiplied by the loss scale)
    const void* input;         // A_prev [rows, in_features], compute dtype
    float* weights;            // fp32 masters [out_features, in_features]
    float* bias;               // fp32 masters [out_features]
    void* low_weights;         // compute-dtype copies, or null when the layer computes in fp32 or the
                               // backend rounds_parameters_on_read
    void* low_bias;
    float* weight_grad;        // scratch [out_features, in_features]; may be null for plain SGD
    float* bias_grad;          // scratch [out_features]; may be null for plain SGD
    float* weight_state[kMaxOptimizerStates];  // optimizer state per optimizer_state_count(), else null
    float* bias_state[kMaxOptimizerStates];
    int64_t rows;
    int64_t in_features;
    int64_t out_features;
    DType compute_dtype;
    const TrainState* state;   // loss scale, found_inf, applied steps (Adam's bias correction)
    GemmWorkspace workspace;
    UpdatePart part = UpdatePart::whole;  // the other parts need weight_grad and bias_grad
    // whole or apply, backend memory: multiplies every gradient (TrainState::clip_factor). Null: 1.
    const float* gradient_factor = nullptr;
};

// Gathers rows of a dataset in a given order and normalises them into a batch.
struct GatherArgs {
    const void* samples;         // dataset storage in backend memory: uint8 or fp32 [rows, features]
    bool samples_are_u8;
    float scale;                 // x * scale + offset
    float offset;
    // Then, per feature f, (value - feature_mean[f]) / feature_divisor[f]
    // (mpt_dataset_create_standardized; backend memory, even for a streamed dataset; null: none).
    const float* feature_mean;
    const float* feature_divisor;
    const int32_t* order;        // backend memory: row indices of the epoch's order (null: identity)
    // A streamed dataset (DatasetView::streamed): samples, labels and targets are host memory, and
    // the rows come from `host_order` (host memory; null: identity) instead of `order`. Only GPU
    // backends see these; they stage the rows through pinned memory.
    bool streamed;
    const int32_t* host_order;
    int64_t first;               // position in the order of the batch's first row
    int64_t rows;
    int64_t features;
    int64_t padded_features;
    void* batch;                 // [rows, padded_features] in batch_dtype
    DType batch_dtype;
    const int32_t* labels;       // dataset labels or null
    int32_t* batch_labels;
    const float* targets;        // dataset targets or null
    int64_t target_width;
    float* batch_targets;
    const float* row_weights;    // dataset row weights or null
    float* batch_row_weights;
};

// One tensor of a batched max_abs. count kMaxAbsTaken (values null): its maximum is already in
// out[k], written by the dense_backward_data that wrote the tensor; the pass leaves it there and a
// decision it takes reads it.
struct MaxAbsInput {
    const void* values;
    DType dtype;
    int64_t count;
};
constexpr int64_t kMaxAbsTaken = -1;
constexpr int kMaxAbsInputs = 16;  // per max_abs call; even, so a layer's pair never straddles two calls
static_assert(kMaxAbsInputs % 2 == 0, "max_abs inputs come in (dZ, A_prev) pairs");

class Backend {
public:
    virtual ~Backend() = default;

    virtual BackendKind kind() const = 0;
    virtual std::string device_name() const = 0;
    // Members of mpt_context_describe's object beyond the context's own (backend, device, ...): how
    // this backend is set up now and what it has done so far, for logs and benchmark records.
    virtual void describe(JsonWriter& out) const = 0;
    // Something about how this backend was set up that makes it run well below what the hardware
    // allows, said once by the context as a warning; empty when there is nothing to say.
    virtual std::string setup_warning() const { return {}; }
    // Empty, or why layers computing in `compute_dtype` run slower here than in fp32 (a CPU without
    // native low-precision GEMMs emulates them), said once by each trainer that uses it.
    virtual std::string emulation_warning(DType) const { return {}; }
    // Storage bytes of one element of `dtype` (the CPU emulates low dtypes in fp32 storage).
    virtual size_t storage_size(DType dtype) const = 0;
    // The precision MPT_PRECISION_AUTO picks here.
    virtual DType preferred_compute_dtype() const = 0;
    // Bytes of the private aux buffer dense_forward may keep for backward (CUDA: ReLU bit mask).
    virtual size_t relu_mask_bytes(int64_t rows, int64_t features) const = 0;
    // Bytes of GemmWorkspace the dense ops can use; 0 when they never need any.
    virtual size_t gemm_workspace_bytes() const = 0;
    // Whether the ops of a layer computing in `compute_dtype` take its fp32 master weights and bias
    // and round them to the layer's dtypes as they read them, computing what they would from
    // low-precision copies (the CPU's AMX counts fp32 subnormals as zero where a copy might round
    // one up to bf16's smallest normal). Such a layer keeps no copies: its ops get the masters as
    // `weights` and `bias`, and its update writes none (low_weights and low_bias null). Saves a
    // copy's memory and the update's pass writing it, where rounding on the fly is free (the CPU's
    // AMX packing).
    virtual bool rounds_parameters_on_read(DType) const { return false; }
    // The most rows for which dense_forward of a layer computing in `compute_dtype`, whose ops get
    // the masters (rounds_parameters_on_read), reads DenseForwardArgs::weight_words when given them:
    // a prediction on a few rows then reads half the bytes (the CPU's small GEMMs: 1 row 1.75x
    // faster). 0: never, and the executor keeps no words.
    virtual int64_t weight_words_max_rows(DType) const { return 0; }
    // Writes `count` fp32 masters as 16-bit words of `dtype` for weight_words, rounded as this
    // backend's ops round the masters they read. Only where weight_words_max_rows(dtype) > 0.
    virtual void write_weight_words(const float*, uint16_t*, DType, int64_t) {
        fail(MPT_STATUS_INTERNAL, "this backend reads no weight words");
    }
    // Whether dense_update wants args.weight_grad/bias_grad for this optimizer on batches of up to
    // `rows` (true for more rows when true for fewer), for the `count` layers `layers` (every layer a
    // step updates). Plain SGD on the CPU adds the gradient straight into the masters, and CUDA does
    // so in one kernel up to 64 rows (up to 256 under MPTRAIN_CUDA_BULK_COPY_SGD=1, for the layers
    // whose dtype and shapes that kernel takes); above that CUDA writes it first, into the scratch
    // the executor plans. (Given none, CUDA grows a private scratch, charged to the context's
    // memory: for direct use of the backend, not for the executor.)
    virtual bool update_needs_gradient_scratch(const OptimizerConfig& optimizer, int64_t rows,
                                               const DenseUpdateShape* layers, int count) const = 0;

    virtual void* allocate(size_t bytes) = 0;   // 256-byte aligned; throws Error on failure
    virtual void release(void* pointer) noexcept = 0;
    // Host memory that copy_to_host_async can write into (pinned on CUDA); throws Error on failure.
    virtual void* allocate_host(size_t bytes) = 0;
    virtual void release_host(void* pointer) noexcept = 0;
    // Copies outside a step (synchronous for the host).
    virtual void copy_to_device(void* destination, const void* source, size_t bytes) = 0;
    virtual void copy_to_host(void* destination, const void* source, size_t bytes) = 0;
    virtual void fill_zero(void* destination, size_t bytes) = 0;
    // Enqueues a copy into `host` (from allocate_host) on the current lane without waiting for it:
    // the bytes are there once an event recorded after this call has completed.
    virtual void copy_to_host_async(void* host, const void* source, size_t bytes) = 0;
    // Converts fp32 values into `dtype` storage (the low-precision weight copy after set_weights).
    virtual void convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count) = 0;
    virtual void convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count) = 0;

    virtual Scheduler& scheduler() = 0;

    // ---- step operations, issued on the scheduler's current lane ----
    // Writes an epoch's row order to `order` (backend memory): the identity, or the permutation of
    // `seed` that data/epoch_order.h defines, identical on every backend.
    virtual void fill_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed) = 0;
    virtual void gather_batch(const GatherArgs& args) = 0;
    virtual void dense_forward(const DenseForwardArgs& args) = 0;
    virtual void loss_head(const LossHeadArgs& args) = 0;
    // Also writes the maxima args asks for (input_grad_max_abs, input_max_abs) where this backend's
    // path for args takes them, and then returns true: every one asked for is written. False: none.
    virtual bool dense_backward_data(const DenseBackwardDataArgs& args) = 0;
    virtual void dropout(const DropoutArgs& args) = 0;
    // Clears state->found_inf at the start of a step.
    virtual void begin_step(TrainState* state) = 0;
    // out[k] = max |x| over inputs[k] (NaN counts as +Inf) for k < count <= kMaxAbsInputs: a step's
    // tensors in one pass (one kernel on a GPU). `inputs` is host memory, read during the call. An
    // input of count kMaxAbsTaken leaves out[k] as it is.
    virtual void max_abs(const MaxAbsInput* inputs, int count, float* out) = 0;
    // Sets state->found_inf when some layer's max|dZ| * max|A_prev| * rows is not finite in fp32.
    // Otherwise every weight gradient is provably finite, so nothing wider ever has to be scanned.
    // `max_abs_pairs` holds (max|dZ_i|, max|A_prev_i|) for each layer. For a micro-batch, `rows` is
    // its step's whole batch: each micro-batch's bound then covers its sum and the sum of all.
    virtual void decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) = 0;
    virtual void dense_update(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) = 0;
    // record_global_clip(*state, sum of gradients[i]^2, clipnorm), both in backend memory:
    // `gradients` are `count` values as UpdatePart::gradient left them. The sum is taken in double,
    // in an order that does not depend on the thread count.
    virtual void clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state) = 0;
    // Whether clip_factor_from_batch serves batches of `rows`: a backend where the gradients' norm
    // costs less from each layer's dZ and A_prev, through rows x rows Gram matrices, than writing
    // every gradient and reading it back, when the batch is small next to the layers.
    virtual bool clips_from_batch(int64_t /*rows*/) const { return false; }
    // record_global_clip(*state, sum of the `count` layers' ||dW||^2 + ||db||^2, clipnorm), the
    // gradients as their dense updates would compute them but never written: with G = dZ dZ^T and
    // H = A_prev A_prev^T (rows x rows), ||dZ^T A_prev||^2 = sum of G (.) H and ||db||^2 = sum of G.
    // `max_abs_pairs` are decide_update's (max|dZ_i|, max|A_prev_i|), which say when a layer's values
    // must be scaled for its Gram matrices to stay in range. Deterministic for a given thread count
    // (the GEMMs are). Only where clips_from_batch(rows), after reserve_update_scratch at `rows`
    // with clipping.
    virtual void clip_factor_from_batch(const DenseUpdateArgs* /*layers*/, int /*count*/,
                                        const float* /*max_abs_pairs*/, float /*clipnorm*/, TrainState* /*state*/) {
        fail(MPT_STATUS_INTERNAL, "this backend takes no gradient norm from the batch");
    }
    // Before a step's first dense_update at `rows` per batch (the executor calls it once per batch
    // size): a backend whose updates grow scratch as they first need it (the CPU's weight-gradient
    // GEMMs) reserves it for all `count` layers here, and what clip_factor_from_batch needs when
    // `clipping`, so that running out of memory or budget fails the step before it updates any
    // layer (a plain SGD update writes the weights in its GEMM).
    virtual void reserve_update_scratch(const DenseUpdateShape* /*layers*/, int /*count*/, int64_t /*rows*/,
                                        bool /*clipping*/) {}
    // Weight averaging, after every layer's update and before finish_step: when the step was applied
    // (!state->found_inf), averages[i] = averaged_weight(averages[i], masters[i], momentum) over
    // `count` values, or averages[i] = masters[i] on the first applied step (state->applied_steps 0)
    // and, whatever the step, where `momentum` is 0 (a frozen layer's average). A skipped step
    // leaves them otherwise. The state is read in backend memory, as the updates read it.
    virtual void average_weights(const float* masters, float* averages, int64_t count, float momentum,
                                 const TrainState* state) = 0;
    // Exchanges `count` values of two arrays of backend memory that do not overlap (outside steps).
    virtual void swap_values(float* first, float* second, int64_t count) = 0;
    // Advances the loss scaler and the step counters after every layer's update, and copies the
    // kMetricsCount running `metrics` to `committed_metrics` (backend memory, both): the metrics as
    // the step leaves them, which a later step that fails partway is undone to (its passes so far
    // have added to the running ones). Either may be null: no copy.
    virtual void finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                             double* committed_metrics) = 0;
};

// Creates the CPU backend with `threads` compute threads (0 = all cores). `memory`, when given (a
// context's), is charged with the GEMMs' scratch buffers as they grow.
std::unique_ptr<Backend> create_cpu_backend(int threads, MemoryTracker* memory = nullptr);
// Creates the CUDA backend on `device`, or throws Error(MPT_STATUS_BACKEND_UNAVAILABLE). Its own
// device buffers (the epoch order's sort keys, streamed batches' staging slots, reduction scratch)
// are charged to `memory` when given, so a context's budget and peak cover them as well as its arenas.
std::unique_ptr<Backend> create_cuda_backend(int device, MemoryTracker* memory = nullptr);
// Usable CUDA devices; 0 when CUDA is not built in, no driver/GPU is present or cuBLASLt is missing.
int cuda_device_count();
// Why cuda_device_count() is 0 (the CUDA error, a missing cuBLASLt, a build without CUDA); empty
// when a device is usable.
std::string cuda_unavailable_reason();

}  // namespace mpt
