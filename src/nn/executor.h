// The executor turns a model, a precision policy and a batch size into a planned step: which
// buffers exist, in which dtype, where in the arenas, and the backend operations of each phase
// (gather, forward, loss head, backward, update). It allocates only when planning, never per step.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/precision_policy.h"
#include "backend/backend.h"
#include "data/dataset.h"
#include "memory/arena.h"
#include "memory/arena_plan.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/weight_word_cache.h"

namespace mpt {

enum class ExecutionMode { training, inference };

// Buffers for two batches exist so the next one can be gathered while the current one computes.
constexpr int kBatchSlots = 2;

// Where a pass's rows lie in their step's batch. Gradient accumulation runs a step's batch as
// micro-batches, each through forward, head and backward with its rows from `first_row` of the
// whole batch's `batch_rows`; the default is a whole batch.
struct BatchPart {
    int64_t first_row = 0;
    int64_t batch_rows = 0;  // 0: the pass is the whole batch
    bool whole() const { return batch_rows == 0; }
};

// What a step leaves for the host to read: the train state and the running metrics, adjacent in
// backend memory so that one asynchronous copy brings both back.
struct StepReport {
    TrainState state;
    double metrics[kMetricsCount];
};

class Executor {
public:
    Executor(Model& model, const PrecisionPolicy& policy, ExecutionMode mode, const LossConfig& loss,
             const OptimizerConfig& optimizer, const LossScalerConfig& scaler);

    // Makes the step arena fit `rows` per batch (plans again only for a larger batch, or for whole
    // training steps where the plan was made without them; a new plan serves what the old one did).
    // `whole_steps`: training steps will run on these rows in one pass (update), whose gradients may
    // need step memory; micro-batches (accumulate) keep theirs in the accumulated gradients instead,
    // and evaluate and predict have none.
    void reserve_rows(int64_t rows, bool whole_steps = true);
    int64_t planned_rows() const { return planned_rows_; }
    size_t planned_bytes() const;     // both arenas as planned
    size_t allocated_bytes() const;   // both arenas as allocated
    // Where the step plan keeps layer `layer`'s activation (or, `gradient`, its output gradient dZ):
    // [begin, end) bytes from the step arena's start; {0, 0} where it keeps none. For the tests of
    // which buffers may share bytes (reserve_rows).
    std::pair<size_t, size_t> planned_layer_bytes(size_t layer, bool gradient) const;

    // Refreshes the low-precision weight copies if the model's masters changed since last time.
    void sync_weights();
    // A prediction's hold on the weight words (WeightWordCache): from prepare_prediction until its
    // last forward has run, so the context's memory tracker does not take them back meanwhile.
    WeightWordCache::Reading reading_weight_words() { return WeightWordCache::Reading(word_cache_); }
    // Before a prediction on batches of `rows`, under reading_weight_words(): where the backend
    // reads weights as 16-bit words at that size (Backend::weight_words_max_rows), keeps such words
    // of the current weights, from the second prediction on unchanged weights on (the first only
    // notes them, and gives the words of older weights back: a prediction between training steps
    // would otherwise pay for a copy each time). Every forward under the reading on current words
    // reads them; without memory for them (the budget), predictions read the masters as before.
    // Planning for more rows gives their memory back, and so does release_weight_words.
    void prepare_prediction(int64_t rows);
    // Gives the weight words' memory back: they are the predictions' cache, and training or
    // evaluation would make them stale anyway (the trainer calls this before either allocates).
    void release_weight_words() { word_cache_.release(); }

    // ---- phases, issued on the scheduler's current lane ----
    // `order` is backend memory; `host_order` (host memory, null: identity) is read for a streamed view.
    void gather(const Dataset& dataset, const DatasetView& view, const int32_t* order, const int32_t* host_order,
                int64_t first, int64_t rows, int slot);
    // Copies host fp32 rows into `slot`'s input (inference staging path, outside steps).
    void load_inputs(const float* host_rows, int64_t rows, int slot);
    // Zeros for `slot`'s labels and targets: the head reads them even when only outputs are wanted
    // (predict), so they must hold valid values there.
    void clear_head_inputs(int slot, int64_t rows);
    // `training`: the layers with dropout drop their outputs into the next layer's input, with the
    // step's mask (set_dropout_seed) at `part`'s rows.
    void forward(int slot, int64_t rows, bool training = false, const BatchPart& part = BatchPart{});
    // Loss head on the forward's logits. train: metrics accumulate and scaled dlogits are written;
    // evaluate: metrics only; predict: the last layer's outputs only (read_outputs). `row_weighted`:
    // the slot's batch came from a weighted dataset, whose row weights its gather wrote (train and
    // evaluate weigh each row's loss by them). A micro-batch's (train) head takes its share of its
    // whole batch's mean loss and gradient.
    enum class HeadMode { train, evaluate, predict };
    void loss_head(int slot, int64_t rows, HeadMode mode, bool row_weighted = false, const BatchPart& part = BatchPart{});
    // Input gradients (dZ) down to the lowest trainable layer, before any weight changes; through a
    // dropout the same mask as training's forward drew. Frozen layers below it need none.
    void backward(int slot, int64_t rows, const BatchPart& part = BatchPart{});
    // Proves the step finite (or marks it skipped), then updates every trainable layer and the loss
    // scaler. Frozen layers (DenseLayer::trainable) take no part in a step's update: no gradient,
    // no bound, no share of the clipped norm, no change, no averaging (a thawed layer's average
    // starts again from its weights: begin_step; swapping the averages in leaves a frozen layer
    // as it is: set_average_to_weights).
    void update(int slot, int64_t rows);
    // Gradient accumulation, instead of update: after a micro-batch's backward, proves its share
    // finite (or marks the step skipped) and writes (the first micro-batch) or adds (the others)
    // every layer's weight and bias gradients to the accumulated gradients. A step's begin_step
    // comes before its first micro-batch only, so that any micro-batch's overflow skips the step.
    void accumulate(int slot, int64_t rows, const BatchPart& part);
    // After the last micro-batch's accumulate: clips the accumulated gradients when the optimizer
    // clips, then updates every layer from them and the loss scaler, as update does (`slot` and
    // `rows`: the last micro-batch's).
    void apply_accumulated(int slot, int64_t rows);
    // The accumulated gradients' memory (every layer's dW and db packed, fp32), before the first
    // accumulate; kept until the executor goes.
    void reserve_accumulated_gradients();
    // Before a step's first pass: reads which layers are trainable for the step (fails with
    // INVALID_STATE, before any work, when none is), then begins it on the backend.
    void begin_step();

    // ---- state outside steps ----
    TrainState read_state() const;
    StepReport read_report() const;  // the state and the running metrics, in one copy
    void write_state(const TrainState& state);
    // The running metrics, which every loss head but predict's adds to: kMetricsCount values.
    void read_metrics(double* metrics) const;
    // Enqueues a copy of the step report into `host` (Backend::allocate_host memory) on the current
    // lane; it has landed once an event recorded after it completes.
    void report_async(StepReport* host) const;
    // The committed metrics are the running ones as the last finished training step left them, or as
    // reset_metrics or write_metrics set both. Between steps the two are equal; a step that fails
    // partway, or an evaluation, leaves the running ones off until revert_metrics.
    void reset_metrics();                       // both to zero
    void write_metrics(const double* metrics);  // both
    void clear_running_metrics();               // to zero, the committed ones kept
    void revert_metrics();                      // the running ones back to the committed ones
    // Copies the last loss head's outputs (unpadded, [rows, classes]) to host memory.
    void read_outputs(float* host, int64_t rows) const;
    // Optimizer state arrays (padded parameter layout), for checkpoints.
    int optimizer_state_arrays() const { return optimizer_state_count(optimizer_); }
    float* optimizer_state(int index) const;
    // The moving average of the masters (padded parameter layout, backend memory) where the optimizer
    // averages weights (OptimizerConfig::ema_momentum), else null. Holds the masters as of the last
    // applied step; nothing before the first (TrainState::applied_steps 0 says so).
    float* averages() const { return averages_; }
    // Layer `layer`'s average becomes its weights (backend memory, on the current lane; skipped
    // steps or not). Outside steps, or at a step's beginning.
    void set_average_to_weights(size_t layer);
    // Where every dense op's GEMM workspace lies in the persistent arena (empty on the CPU, or where
    // the memory budget had no room for it).
    const GemmWorkspace& gemm_workspace() const { return gemm_workspace_; }

    const std::vector<DType>& layer_dtypes() const { return layer_dtypes_; }
    const PrecisionPolicy& policy() const { return policy_; }
    const LossScalerConfig& scaler_config() const { return scaler_; }
    const OptimizerConfig& optimizer() const { return optimizer_; }
    // Read by each dense_update as it is issued: steps issued before keep the rate they were issued with.
    void set_learning_rate(float learning_rate) { optimizer_.learning_rate = learning_rate; }
    // Keys the dropout masks of the steps issued after (with TrainState::steps and the layer).
    void set_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }
    const LossConfig& loss() const { return loss_; }

private:
    struct LayerSlots {
        int activation = -1;  // A_i (the last layer: fp32 logits)
        // Training, a layer with dropout: A_i dropped, the next layer's input (and its update's),
        // while A_i itself stays for the activation's derivative in backward.
        int dropped = -1;
        int relu_mask = -1;
        int output_grad = -1; // dZ_i
    };
    struct BatchSlot {
        int inputs = -1;
        int labels = -1;
        int targets = -1;
        int row_weights = -1;
        // The gathered inputs' max|x| decides the update as none would (Dataset::batch_values_decide_as_none):
        // decide_from_bounds then does not measure it.
        bool inputs_decide_as_none = false;
    };

    // Plans the persistent arena with the backend's GEMM workspace, or with none when that does not
    // fit the memory budget or the device.
    void plan_persistent();
    void plan_persistent(size_t workspace_bytes);
    DType activation_dtype(size_t layer) const;  // what layer `layer` writes: the consumer's dtype
    const void* layer_weights(size_t layer) const;
    // The most rows on which layer `layer` reads weight words (0: never).
    int64_t weight_words_max_rows(size_t layer) const;
    // Layer `layer`'s weight words for a forward on `rows`, when current; else null.
    const uint16_t* layer_weight_words(size_t layer, int64_t rows) const;
    // fp32 layers, and low-precision ones whose backend rounds the masters as its ops read them:
    // layers without low-precision copies of their parameters.
    bool parameters_read_as_masters(size_t layer) const;
    const void* layer_bias(size_t layer) const;
    // Every layer's dense_update (update's second half, after the step is proven finite or not);
    // with clipping, the clip factor first (from the batch, or from every layer's gradient part).
    void update_layers(int slot, int64_t rows);
    // A layer's update of `part`; the parts other than whole read and write their gradients in
    // `gradients`, every layer's packed (gradient_offsets_).
    DenseUpdateArgs layer_update(size_t layer, int slot, int64_t rows, UpdatePart part, float* gradients) const;
    // Before a step's first dense_update on `rows`: the backend's update scratch for them.
    void reserve_update_scratch(int64_t rows, bool clipping);
    // The bounds of every layer's dZ and A_prev in this pass, and decide_update with `bound_rows`.
    void decide_from_bounds(int slot, int64_t rows, int64_t bound_rows);
    // After every layer's update: the weights' moving average and the loss scaler's step.
    void finish_update();
    bool all_layers_trainable() const;  // in this step

    void* step_buffer(int id) const { return id < 0 ? nullptr : step_arena_.at<char>(step_plan_.offset(id)); }
    // The input of layer `layer`: the batch, or the previous layer's output as a training step's
    // forward and update read it (`dropped`: after its dropout, where it has one).
    const void* layer_input(size_t layer, int slot, bool dropped) const;
    // Dropout of layer `layer` from `input` to `output` (the same array, or apart), [rows, width]
    // of `dtype`: its output or its gradient.
    // Drops `rate` of input's [rows, width] values into output (which may be input), with the mask of
    // `mask_layer` (a layer's index, or input_dropout_layer for the inputs) at this step.
    // `first_row`: where the rows lie in their step's batch (BatchPart), which keys their masks.
    void drop(int64_t mask_layer, float rate, const void* input, void* output, DType dtype, int64_t rows, int64_t width,
              int64_t first_row);

    Model& model_;
    Backend& backend_;
    PrecisionPolicy policy_;
    ExecutionMode mode_;
    LossConfig loss_;
    OptimizerConfig optimizer_;
    LossScalerConfig scaler_;
    std::vector<DType> layer_dtypes_;
    int64_t classes_ = 0;
    int64_t output_width_ = 0;

    // Persistent arena: low-precision weight copies, optimizer state, step state, metrics, GEMM
    // workspace.
    Arena persistent_arena_;
    size_t persistent_planned_ = 0;
    char* low_copies_ = nullptr;     // parameter layout, storage_size(low dtype) bytes per element
    size_t low_element_bytes_ = 0;
    float* gradient_bounds_ = nullptr;   // (max|dZ_i|, max|A_prev_i|) per layer
    float* class_weights_ = nullptr;     // the loss's class weights in backend memory, when it has any
    GemmWorkspace gemm_workspace_;      // for every dense op's GEMM; empty where the backend needs none
    float* optimizer_states_[kMaxOptimizerStates] = {};
    float* averages_ = nullptr;
    StepReport* report_ = nullptr;
    TrainState* state_ = nullptr;   // &report_->state
    double* metrics_ = nullptr;     // report_->metrics
    double* committed_metrics_ = nullptr;  // right after report_ (so after the running metrics)
    uint64_t synced_weights_version_ = ~uint64_t{0};
    uint64_t dropout_seed_ = 0;

    // Weight words for predictions (prepare_prediction), in the parameter layout: 2 bytes per
    // element, written for the layers whose backend reads them.
    WeightWordCache word_cache_;
    uint64_t predicted_version_ = ~uint64_t{0};  // the weights the last prediction read

    // Step arena: batch-sized buffers with liveness reuse.
    ArenaPlan step_plan_;
    Arena step_arena_;
    int64_t planned_rows_ = 0;
    bool planned_whole_steps_ = false;  // the plan has what whole training steps need (gradient scratch)
    int64_t update_scratch_rows_ = 0;  // the batch size the backend last reserved update scratch for
    bool update_scratch_clipping_ = false;  // and whether for clipping
    std::vector<LayerSlots> layer_slots_;
    std::vector<DenseUpdateArgs> layer_updates_;  // a clipped step's, one per layer (sized when planning)
    // Where each trainable layer's dW (then its db) lies in a clipped step's all-layer gradient
    // scratch and in the accumulated gradients: packed, without the parameter layout's alignment
    // gaps, the trainable layers one after another (begin_step lays them out).
    std::vector<int64_t> gradient_offsets_;
    int64_t gradient_elements_ = 0;            // every layer's dW and db in that layout: the capacity
    int64_t trainable_gradient_elements_ = 0;  // the trainable layers', this step
    std::vector<size_t> trainable_layers_;     // this step's, in order (capacity for all: no allocation)
    std::vector<int> trainable_index_;         // per layer: its place in trainable_layers_, -1 if frozen
    // Per entry of gradient_bounds_: written by this pass's loss head (the last layer's max|dZ|) or
    // dense_backward_data (backward), so that decide_from_bounds's max_abs leaves it as it is
    // instead of reading its tensor again.
    std::vector<char> bounds_taken_;
    std::vector<char> trained_last_step_;      // per layer: trainable in the last step begun (initially all)
    std::vector<DenseUpdateShape> update_shapes_;  // every layer's, for reserve_update_scratch
    BatchSlot batch_slots_[kBatchSlots];
    // Gradient accumulation's sums of a step's micro-batches (reserve_accumulated_gradients).
    Arena accumulated_arena_;
    float* accumulated_gradients_ = nullptr;
    int logits_grad_ = -1;
    int gradient_scratch_ = -1;  // one layer's dW and db where the update needs them; all layers' when clipping
    int dropped_inputs_ = -1;    // training with input dropout: the batch after its dropout
    int outputs_ = -1;
    int staging_ = -1;
};

}  // namespace mpt
