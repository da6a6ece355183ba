// The trainer: fit, one step, evaluate and predict for a model under a precision policy, optimizer
// and loss scaler. It drives the executor's phases through the scheduler so that the next batch is
// gathered on the copy lane while the current step runs on the compute lane.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/executor.h"

namespace mpt {

struct TrainerConfig {
    mpt_precision precision = MPT_PRECISION_AUTO;
    LossConfig loss;
    OptimizerConfig optimizer;
    mpt_loss_scaling loss_scaling = MPT_LOSS_SCALING_DEFAULT;
    LossScalerConfig scaler;  // mode is derived from loss_scaling and the policy
    // Gradient accumulation: a step's batch of more rows runs as micro-batches of at most this many
    // (forward, head, backward, gradients added up), then the one update. 0: every batch at once.
    int64_t micro_batch_size = 0;
};

struct TrainerCallbacks {
    mpt_progress_fn progress = nullptr;
    mpt_epoch_end_fn epoch_end = nullptr;
    void* user_data = nullptr;
};

// Everything besides tensors that a checkpoint needs to resume training bit-exactly.
struct TrainerSnapshot {
    TrainState state{};
    float learning_rate = 0.0f;  // the rate of the next step: part of the run, not of its options
    int64_t epochs_completed = 0;
    int64_t steps_into_epoch = 0;  // > 0: fit resumes inside this epoch with `epoch_order`
    int64_t batch_size = 0;
    int64_t dataset_rows = 0;
    bool shuffle = false;
    Rng::State shuffle_rng{};
    uint64_t dropout_seed = 0;  // keys the dropout masks (nn/dropout.h) with the step count
    std::vector<int32_t> epoch_order;  // the interrupted epoch's row order (empty between epochs)
    double metrics[kMetricsCount] = {};
};

// Automatic checkpoints during fit: directory/checkpoint-<step>.safetensors, newest `keep_last` kept.
struct CheckpointPolicy {
    std::string directory;  // empty: off
    int64_t every_steps = 0;
    int64_t every_epochs = 0;
    int64_t keep_last = 1;
};

struct EvaluationResult {
    float loss;
    float accuracy;
};

// The last completed epoch of fit, timed on the compute lane (CUDA events on a GPU).
struct EpochTiming {
    double seconds = 0.0;
    int64_t steps = 0;
};

class Trainer {
public:
    Trainer(std::shared_ptr<Model> model, const TrainerConfig& config);
    ~Trainer();

    void set_callbacks(const TrainerCallbacks& callbacks) { callbacks_ = callbacks; }
    // True while fit runs a progress or epoch-end callback. Fit waits between two steps there (where
    // it takes its automatic checkpoints), so a checkpoint may be saved from the callback.
    bool in_callback() const { return in_callback_; }
    // True while fit runs an epoch-end callback: between epochs, nothing queued, the epoch's metrics
    // already read, so an evaluation may run there (validation each epoch).
    bool in_epoch_end_callback() const { return in_epoch_end_callback_; }
    // The running fit stops after the callback it is in, with MPT_STATUS_CANCELLED and `why` (the
    // C API: the trainer was destroyed from a callback of this fit).
    void stop_soon(std::string why) { stop_reason_ = std::move(why); }
    void set_checkpointing(const CheckpointPolicy& policy);
    // The base rate, from the next step issued on (also from fit's callbacks: a schedule of its own).
    void set_learning_rate(float learning_rate);
    float learning_rate() const { return executor_.optimizer().learning_rate; }  // the base rate
    // The rate of the next step: the base rate times the schedule's factor at the step count.
    float scheduled_learning_rate() const;
    void fit(const Dataset& dataset, int64_t epochs, int64_t batch_size, bool shuffle);
    float step(const Dataset& dataset, int64_t first, int64_t batch_size);
    EvaluationResult evaluate(const Dataset& dataset, int64_t batch_size);
    void predict(const float* inputs, int64_t rows, float* outputs);
    // The outputs predict gives, for every row of `dataset` (only its samples are read), in batches of
    // `batch_size` (0: the last training batch size, or 256); `outputs` holds rows * outputs floats.
    void predict(const Dataset& dataset, int64_t batch_size, float* outputs);

    // Exchanges the model's weights with this trainer's moving averages (OptimizerConfig::ema_momentum),
    // outside fit or from its epoch-end callback: evaluate, predict or save the averaged model, then
    // exchange again to train on. Before the first applied step the averages are the weights.
    void swap_averaged_weights();
    // Whether the model holds this trainer's averages now.
    bool holds_averaged_weights() const { return model_->averages_holder() == this; }
    // Refuses (MPT_STATUS_INVALID_STATE) to `what` while the model holds a trainer's averages.
    void require_trained_weights(const char* what) const;

    mpt_precision precision() const { return executor_.policy().precision; }
    TrainState state() const { return executor_.read_state(); }  // waits for the device
    // The state a caller sees: from a progress callback, as of the step it reports (its report's copy,
    // read without waiting for the device; on a GPU a few steps behind it); otherwise state().
    TrainState observed_state() const { return reported_state_ ? *reported_state_ : state(); }
    // Steps issued so far, skipped ones included: TrainState::steps once they have run, read without
    // waiting for the device (from a progress callback on a GPU, a few steps past the one reported).
    int64_t steps_taken() const { return steps_taken_; }
    int64_t epochs_completed() const { return epochs_completed_; }
    // The rows of the last training step issued (fit's batch size or the data set's rows when fewer,
    // or step's rows; whole batches), as a checkpoint restores them; 0 before any.
    int64_t last_batch_size() const { return last_batch_size_; }
    // The epoch fit left unfinished (cancelled, failed, or restored mid-epoch from a checkpoint), which
    // the next fit finishes on data of its rows in its batch size; all 0 when there is none. From a
    // progress callback, the epoch in progress (its steps issued so far; none once all are).
    struct UnfinishedEpoch {
        int64_t steps = 0, rows = 0, batch_size = 0;
    };
    UnfinishedEpoch unfinished_epoch() const;
    EpochTiming last_epoch_timing() const { return last_epoch_timing_; }
    const Executor& executor() const { return executor_; }
    Executor& executor() { return executor_; }
    const std::shared_ptr<Model>& model() const { return model_; }
    const TrainerConfig& config() const { return config_; }

    // Training progress for checkpoints (the scheduler is drained first), and its restoration. An
    // epoch interrupted inside (a cancel, or a checkpoint taken mid-epoch) is finished first by the
    // next fit on data of the same geometry, in its saved order.
    TrainerSnapshot snapshot() const;
    void restore(const TrainerSnapshot& snapshot);
    // Keys the dropout masks with the step count: from the context's seed, or from a checkpoint.
    uint64_t dropout_seed() const { return dropout_seed_; }

private:
    class StepRecoveryOnFailure;
    struct GatherTask {
        Trainer* trainer;
        const Dataset* dataset;
        DatasetView view;
        const int32_t* order;
        const int32_t* host_order;  // for a streamed dataset; null: identity
        int64_t first;
        int64_t rows;
        int slot;
    };
    struct StepTask {
        Trainer* trainer;
        int slot;
        int64_t rows;
        bool row_weighted;  // the batch's dataset has row weights
        BatchPart part;     // a micro-batch's place in its step's batch; whole by default
        bool closes_step;   // a whole batch, or its last micro-batch: the update follows
    };
    static void run_gather(void* task);
    static void run_train_step(void* task);

    // The dataset's context and sample width are the model's (all predict needs).
    void check_samples(const Dataset& dataset) const;
    // check_samples, and the labels or targets the loss needs.
    void check_dataset(const Dataset& dataset) const;
    // Where a gather reads `dataset` (Dataset::device_view), with the model's input standardization
    // if it has one: both placed on the backend here, before any task that gathers is queued.
    DatasetView gather_view(const Dataset& dataset) const;
    // Grows a row-order buffer (an arena of its own, so charged to the context's memory) to `rows`
    // int32 entries; contents are lost on growth.
    void reserve_order(Arena& order, int64_t rows);
    // The identity order over at least `rows` rows, for step and evaluate.
    const int32_t* identity_order(int64_t rows);
    // The rows of each forward and backward pass of a step over `batch_rows`: the whole batch, or
    // the micro-batch size where that is smaller (TrainerConfig::micro_batch_size).
    int64_t pass_rows(int64_t batch_rows) const;
    // Plans the step buffers for a training batch of `batch_rows` (those of its passes) and, for a
    // batch in micro-batches, the accumulated gradients.
    void reserve_training_batch(int64_t batch_rows);
    // The batch size evaluate and predict take by default: the rows of the last training step's
    // passes (its micro-batches' when it had some), else 256.
    int64_t default_batch_size() const;
    // Raises MPT_STATUS_NON_FINITE when a step met NaN/Inf (its update was skipped) without dynamic
    // loss scaling, or with it at the scaler's minimum scale, where backing off cannot help.
    // `last_step_only`: `state` is right after the only step not yet checked (a step's report), so
    // the message names that step; else (a GPU epoch's end) some earlier step of the epoch may be it.
    void check_finite_step(const TrainState& state, bool last_step_only);
    // Every step of the epoch in progress has run, but fit has not booked the epoch yet (seen from the
    // progress callback of its last step): it counts as finished.
    bool epoch_steps_all_run() const;
    // Takes the skips counted in `state` as known: news neither for check_finite_step nor a next fit.
    void acknowledge_skipped_steps(const TrainState& state);
    // Step reports: after a step, its TrainState and running metrics are copied asynchronously into
    // a ring of host buffers (pinned on a GPU); each is delivered (finite check, progress callback)
    // once its copy has landed, so reading the numbers never stalls the device. The host blocks
    // only when the ring is full, i.e. when it runs kReportSlots steps ahead of the device.
    void issue_report(int64_t step);
    void deliver_report(int64_t steps_per_epoch, int64_t batch_rows);
    void deliver_landed_reports(int64_t steps_per_epoch, int64_t batch_rows);
    // Writes a checkpoint when the policy says so after this step or epoch.
    void checkpoint_if_due(bool epoch_ended);
    // A host callback, with in_callback_ set while it runs; true when fit must stop (it asked to).
    template <typename Callback, typename... Args>
    bool callback_stops_fit(Callback callback, const char* which, Args... args);
    void stop_if_asked() const;
    // Whether an epoch that `failure` closed after all its steps ran still gets its epoch-end
    // callback and checkpoint: after a cancel or a non-finite step, unless the trainer is going.
    bool epoch_end_owed_after(std::exception_ptr failure) const;

    std::shared_ptr<Model> model_;
    TrainerConfig config_;
    Executor executor_;
    TrainerCallbacks callbacks_;
    Rng shuffle_rng_;
    uint64_t dropout_seed_;
    Arena epoch_order_;  // fit's order; outlives an interrupted epoch for its resume
    bool device_has_epoch_order_ = false;  // it holds the current (or interrupted) epoch's order
    Arena identity_order_;
    int64_t last_batch_size_ = 0;   // fit's or step's, for the defaults of evaluate and predict
    int64_t epoch_batch_size_ = 0;  // fit's, of the current (or interrupted) epoch: a step's does not change it
    int64_t epochs_completed_ = 0;
    int64_t steps_into_epoch_ = 0;
    // Host mirror of TrainState::steps, counted as steps are issued. A step whose task fails does
    // not count on the device: fit and step then take the device's count again (StepRecoveryOnFailure).
    int64_t steps_taken_ = 0;
    bool shuffle_ = false;
    int64_t epoch_rows_ = 0;   // rows of the dataset of the current (or interrupted) epoch
    // The rows that epoch reads; unknown (no storage) when it came from a checkpoint.
    DatasetRows epoch_data_;
    std::vector<int32_t> restored_order_;  // an interrupted epoch's order from a checkpoint
    std::vector<int32_t> host_epoch_order_;  // a copy of the epoch's order when the data is streamed
    CheckpointPolicy checkpointing_;
    int64_t skipped_seen_ = 0;                // TrainState::skipped_steps as last checked
    int64_t skipped_at_min_scale_seen_ = 0;   // TrainState::skipped_at_min_scale as last checked
    GatherTask gather_tasks_[kBatchSlots] = {};
    StepTask step_task_ = {};
    EpochTiming last_epoch_timing_;

    static constexpr int kReportSlots = 8;
    StepReport* reports_ = nullptr;  // kReportSlots, from Backend::allocate_host
    Event report_landed_[kReportSlots];
    int64_t report_step_[kReportSlots] = {};
    int report_head_ = 0;
    int reports_pending_ = 0;
    bool in_callback_ = false;
    std::optional<TrainState> reported_state_;  // while a progress callback runs: its step's state
    bool in_epoch_end_callback_ = false;
    std::string stop_reason_;  // stop_soon's; empty: go on
};

}  // namespace mpt
