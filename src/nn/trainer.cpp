// See trainer.h.
#include "nn/trainer.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <locale>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "nn/checkpoint.h"

namespace mpt {

namespace {

LossScalerConfig resolve_scaler(const TrainerConfig& config, Model& model) {
    model.build();
    const PrecisionPolicy policy = resolve_precision(config.precision, model.context()->backend());
    LossScalerConfig scaler = config.scaler;
    switch (config.loss_scaling) {
        case MPT_LOSS_SCALING_DEFAULT: scaler.mode = default_loss_scaling(layer_compute_dtypes(model, policy)); break;
        case MPT_LOSS_SCALING_OFF: scaler.mode = LossScaling::off; break;
        case MPT_LOSS_SCALING_STATIC: scaler.mode = LossScaling::fixed; break;
        case MPT_LOSS_SCALING_DYNAMIC: scaler.mode = LossScaling::dynamic; break;
    }
    return scaler;
}

// The mean loss over `samples` rows and the accuracy over the rows counted, from running metrics.
EvaluationResult metric_means(const double* metrics, int64_t samples) {
    return EvaluationResult{static_cast<float>(metrics[kMetricLossSum] / static_cast<double>(samples)),
                            static_cast<float>(metrics[kMetricCorrect] / std::max(1.0, metrics[kMetricCounted]))};
}

// Calls a host callback. A C++ host's callback may throw: that stops training with a clear status
// instead of unwinding through the host's C frames with an unknown exception.
template <typename Callback, typename... Args>
int call_host(Callback callback, const char* which, Args... args) {
    try {
        return callback(args...);
    } catch (const std::exception& error) {
        fail(MPT_STATUS_CANCELLED, std::string("the ") + which + " callback threw: " + error.what());
    } catch (...) {
        fail(MPT_STATUS_CANCELLED, std::string("the ") + which + " callback threw an exception");
    }
}

// Sets a flag for its own lifetime: while a callback runs, also when it throws.
struct RaisedWhileAlive {
    bool& flag;
    explicit RaisedWhileAlive(bool& raised) : flag(raised) { flag = true; }
    ~RaisedWhileAlive() { flag = false; }
    RaisedWhileAlive(const RaisedWhileAlive&) = delete;
    RaisedWhileAlive& operator=(const RaisedWhileAlive&) = delete;
};

}  // namespace

template <typename Callback, typename... Args>
bool Trainer::callback_stops_fit(Callback callback, const char* which, Args... args) {
    const RaisedWhileAlive in_callback(in_callback_);
    return call_host(callback, which, args...) != 0;
}

void Trainer::stop_if_asked() const {
    if (!stop_reason_.empty()) fail(MPT_STATUS_CANCELLED, stop_reason_);
}

bool Trainer::epoch_end_owed_after(std::exception_ptr failure) const {
    if (!stop_reason_.empty()) return false;
    try {
        std::rethrow_exception(failure);
    } catch (const Error& error) {
        return error.status() == MPT_STATUS_CANCELLED || error.status() == MPT_STATUS_NON_FINITE;
    } catch (...) {
        return false;
    }
}

namespace {

// Keeps the copy lane from writing into buffers after the call that started it has returned.
class DrainOnExit {
public:
    explicit DrainOnExit(Scheduler& scheduler) : scheduler_(scheduler) {}
    ~DrainOnExit() {
        try {
            scheduler_.synchronize();
        } catch (...) {
            // The error that unwound us is the one to report.
        }
    }

private:
    Scheduler& scheduler_;
};

// The running metrics lent to an evaluation: cleared for it, then put back as the last finished
// training step left them (an interrupted epoch's sums, which an evaluation that failed partway would
// otherwise leave half-overwritten): by give_back() once it has read its own, or on the way out of a
// failure. Declared before the scope's DrainOnExit, so it runs after it.
class BorrowedRunningMetrics {
public:
    explicit BorrowedRunningMetrics(Executor& executor) : executor_(executor) { executor_.clear_running_metrics(); }
    void give_back() {
        returned_ = true;
        executor_.revert_metrics();  // a failure here is the evaluation's
    }
    ~BorrowedRunningMetrics() {
        if (returned_) return;
        try {
            executor_.revert_metrics();
        } catch (...) {
            // A device fault: the error being reported says so.
        }
    }
    BorrowedRunningMetrics(const BorrowedRunningMetrics&) = delete;
    BorrowedRunningMetrics& operator=(const BorrowedRunningMetrics&) = delete;

private:
    Executor& executor_;
    bool returned_ = false;
};

// `config`, once its loss options are found to suit `model`: checked before the executor plans and
// uploads anything, so that a refusal is the one documented (not OUT_OF_MEMORY) and costs nothing.
const TrainerConfig& checked_loss(const TrainerConfig& config, const Model& model) {
    if (model.layers().empty()) return config;  // the executor's build says so
    const LossConfig& loss = config.loss;
    if (loss.kind == LossKind::sparse_categorical_crossentropy || loss.kind == LossKind::categorical_crossentropy)
        require(model.output_features() >= 2 || model.layers().back().activation != Activation::softmax,
                MPT_STATUS_INVALID_ARGUMENT, "categorical cross-entropy needs at least 2 outputs");
    require(loss.label_smoothing >= 0.0f && loss.label_smoothing < 1.0f, MPT_STATUS_INVALID_ARGUMENT,
            "label_smoothing must be in [0, 1)");
    if (loss.label_smoothing != 0.0f && !loss_takes_label_smoothing(loss.kind))
        fail(MPT_STATUS_INVALID_ARGUMENT, std::string("label smoothing applies to the cross-entropy losses; ") +
                                              loss_name(loss.kind) + " has no labels to smooth");
    require(valid_huber_delta(loss.huber_delta), MPT_STATUS_INVALID_ARGUMENT, "the Huber delta must be finite and above 0");
    const std::vector<float>& class_weights = loss.class_weights;
    if (!class_weights.empty()) {
        if (!loss_takes_class_weights(loss.kind))
            fail(MPT_STATUS_INVALID_ARGUMENT, std::string("class weights apply to the categorical cross-entropy "
                                                          "losses (sparse or one-hot), not to ") +
                                                  loss_name(loss.kind));
        if (static_cast<int64_t>(class_weights.size()) != model.output_features())
            fail(MPT_STATUS_SHAPE_MISMATCH, std::to_string(class_weights.size()) + " class weights for a model with " +
                                                std::to_string(model.output_features()) + " outputs");
        require(valid_class_weights(class_weights.data(), static_cast<int64_t>(class_weights.size())),
                MPT_STATUS_INVALID_ARGUMENT, "class weights must be finite, >= 0 and not all 0");
    }
    return config;
}

// `config`, once its optimizer options are found to go together (checked before the executor plans).
const TrainerConfig& checked_optimizer(const TrainerConfig& config) {
    const OptimizerConfig& optimizer = config.optimizer;
    require(!(optimizer.kind == OptimizerKind::rmsprop && optimizer.nesterov && optimizer.momentum != 0.0f),
            MPT_STATUS_INVALID_ARGUMENT, "RMSprop takes momentum, not Nesterov momentum (that is SGD's)");
    require(config.micro_batch_size >= 0, MPT_STATUS_INVALID_ARGUMENT, "the micro-batch size must be >= 0 (0: none)");
    return config;
}

}  // namespace

// On a failure inside fit or step (a task raised, a cancel, a non-finite step), once the work issued
// has drained: puts the running metrics back as the last finished step left them, for a step that
// failed partway has added its passes so far to them (run again, it would count twice in its
// epoch's means); and takes the step count from the device, for a step whose task failed was
// counted on issue but may never have reached its finish_step, and the skipped steps, for steps
// queued behind the failure ran with their reports dropped (on a GPU, up to kReportSlots - 1):
// their skips are covered by the failure being reported, not news that fails the next fit or step.
// Declared before the scope's DrainOnExit, so it runs after it.
class Trainer::StepRecoveryOnFailure {
public:
    explicit StepRecoveryOnFailure(Trainer& trainer) : trainer_(trainer), exceptions_(std::uncaught_exceptions()) {}
    ~StepRecoveryOnFailure() {
        if (std::uncaught_exceptions() == exceptions_) return;
        // A device fault fails both: the error being reported says so, and the device is unreadable.
        try {
            const TrainState state = trainer_.executor_.read_state();
            trainer_.steps_taken_ = state.steps;
            trainer_.acknowledge_skipped_steps(state);
        } catch (...) {
        }
        try {
            trainer_.executor_.revert_metrics();
        } catch (...) {
        }
    }

private:
    Trainer& trainer_;
    const int exceptions_;
};

Trainer::Trainer(std::shared_ptr<Model> model, const TrainerConfig& config)
    : model_(std::move(model)),
      config_(checked_optimizer(checked_loss(config, *model_))),
      executor_(*model_, resolve_precision(config.precision, model_->context()->backend()), ExecutionMode::training,
                config.loss, config.optimizer, resolve_scaler(config, *model_)),
      shuffle_rng_(model_->context()->seed() ^ 0x5eed5eed5eed5eedULL),
      dropout_seed_(Rng(model_->context()->seed() ^ 0xd50bd50bd50bd50bULL).next_u64()) {
    executor_.set_dropout_seed(dropout_seed_);
    model_->context()->log(MPT_LOG_LEVEL_DEBUG, std::string("trainer: precision ") + precision_name(precision()) +
                                                    ", loss " + loss_name(config.loss.kind));
    std::vector<DType> dtypes = layer_compute_dtypes(*model_, executor_.policy());
    std::sort(dtypes.begin(), dtypes.end());
    dtypes.erase(std::unique(dtypes.begin(), dtypes.end()), dtypes.end());
    for (DType dtype : dtypes) {
        const std::string warning = model_->context()->backend().emulation_warning(dtype);
        if (!warning.empty()) model_->context()->log(MPT_LOG_LEVEL_WARNING, warning);
    }
}

Trainer::~Trainer() {
    // The model keeps the averages it holds (Keras's finalize): the trained weights go with us.
    if (holds_averaged_weights()) model_->set_averages_holder(nullptr);
    Backend& backend = model_->context()->backend();
    try {
        backend.scheduler().synchronize();
    } catch (...) {
    }
    backend.release_host(reports_);  // the order arenas go with the members, after the sync above
}

void Trainer::require_trained_weights(const char* what) const {
    const void* holder = model_->averages_holder();
    if (!holder) return;
    fail(MPT_STATUS_INVALID_STATE,
         std::string("cannot ") + what + " while the model holds " + (holder == this ? "this" : "another") +
             " trainer's averaged weights: exchange them back first (mpt_trainer_swap_ema_weights)");
}

void Trainer::swap_averaged_weights() {
    require(averages_weights(config_.optimizer), MPT_STATUS_INVALID_STATE,
            "this trainer keeps no averaged weights (mpt_trainer_options_set_ema)");
    const void* holder = model_->averages_holder();
    require(holder == nullptr || holder == this, MPT_STATUS_INVALID_STATE,
            "the model holds another trainer's averaged weights: that trainer exchanges them back first");
    require(!model_->fitted_by_another_than(this), MPT_STATUS_INVALID_STATE,
            "another trainer of the model is inside fit (this call came from its callback): its next steps "
            "would train the averaged weights");
    Backend& backend = model_->context()->backend();
    backend.scheduler().synchronize();
    float* const averages = executor_.averages();
    const int64_t count = model_->parameter_block_elements();
    if (!holder && executor_.read_state().applied_steps == 0) {
        // No applied step has written the averages yet: they are the weights themselves.
        std::vector<float> block(static_cast<size_t>(count));
        model_->read_master_block(block.data());
        backend.copy_to_device(averages, block.data(), block.size() * sizeof(float));
    } else {
        // Frozen layers are not averaged: exchanged in, they keep their weights (whatever has set
        // them meanwhile), and exchanged back they are unchanged too.
        if (!holder)
            for (size_t i = 0; i < model_->layers().size(); ++i)
                if (!model_->layers()[i].trainable) executor_.set_average_to_weights(i);
        backend.swap_values(model_->masters(), averages, count);
        backend.scheduler().synchronize();
    }
    model_->mark_weights_changed();
    model_->set_averages_holder(holder ? nullptr : this);
}

void Trainer::check_samples(const Dataset& dataset) const {
    require(dataset.context() == model_->context(), MPT_STATUS_INVALID_ARGUMENT,
            "the dataset was created on another context than the model");
    if (dataset.features() != model_->input_features())
        fail(MPT_STATUS_SHAPE_MISMATCH, "the dataset has " + std::to_string(dataset.features()) +
                                            " features per sample, the model takes " +
                                            std::to_string(model_->input_features()));
    require(!(dataset.standardized() && model_->input_standardization()), MPT_STATUS_INVALID_ARGUMENT,
            "the dataset is standardized and the model standardizes its inputs too: that would standardize twice "
            "(give the model the dataset it was standardized from)");
}

DatasetView Trainer::gather_view(const Dataset& dataset) const {
    DatasetView view = dataset.device_view();
    // check_samples refused a standardized dataset for a model that standardizes its inputs.
    if (const FeatureStandardization* standardization = model_->input_standardization().get()) {
        const FeatureStandardization::DeviceValues values = standardization->device_values();
        view.feature_mean = values.mean;
        view.feature_divisor = values.divisor;
    }
    return view;
}

void Trainer::check_dataset(const Dataset& dataset) const {
    check_samples(dataset);
    if (loss_uses_labels(config_.loss.kind)) {
        require(dataset.has_labels(), MPT_STATUS_SHAPE_MISMATCH,
                "sparse categorical cross-entropy needs a dataset with integer labels");
        if (dataset.num_classes() > model_->output_features())
            fail(MPT_STATUS_SHAPE_MISMATCH, "the dataset has " + std::to_string(dataset.num_classes()) +
                                                " classes, the model has " + std::to_string(model_->output_features()) +
                                                " outputs");
    } else {
        require(dataset.target_width() > 0, MPT_STATUS_SHAPE_MISMATCH,
                "this loss needs a dataset with float targets (mpt_dataset_create_f32_targets)");
        if (dataset.target_width() != model_->output_features())
            fail(MPT_STATUS_SHAPE_MISMATCH, "the dataset's targets have width " + std::to_string(dataset.target_width()) +
                                                ", the model has " + std::to_string(model_->output_features()) + " outputs");
        require(config_.loss.kind != LossKind::binary_crossentropy || dataset.targets_in_unit_interval(),
                MPT_STATUS_INVALID_ARGUMENT, "binary cross-entropy needs targets in [0, 1]; this data set has others");
    }
}

namespace {

int64_t order_capacity(const Arena& order) { return static_cast<int64_t>(order.bytes() / sizeof(int32_t)); }
int32_t* order_rows(const Arena& order) { return static_cast<int32_t*>(order.base()); }

}  // namespace

void Trainer::reserve_order(Arena& order, int64_t rows) {
    if (rows <= order_capacity(order)) return;
    Context& context = *model_->context();
    context.backend().scheduler().synchronize();  // a gather may still read the old buffer
    order = Arena();  // released first, so the budget has room for the larger one
    order = Arena(context.backend(), context.memory(), static_cast<size_t>(rows) * sizeof(int32_t));
}

const int32_t* Trainer::identity_order(int64_t rows) {
    if (rows > order_capacity(identity_order_)) {
        reserve_order(identity_order_, rows);
        // Issued on the compute lane, where step and evaluate also gather.
        model_->context()->backend().fill_order(order_rows(identity_order_), rows, false, 0);
    }
    return order_rows(identity_order_);
}

void Trainer::run_gather(void* argument) {
    GatherTask& task = *static_cast<GatherTask*>(argument);
    task.trainer->executor_.gather(*task.dataset, task.view, task.order, task.host_order, task.first, task.rows,
                                   task.slot);
}

int64_t Trainer::pass_rows(int64_t batch_rows) const {
    const int64_t micro = config_.micro_batch_size;
    return micro > 0 && micro < batch_rows ? micro : batch_rows;
}

void Trainer::reserve_training_batch(int64_t batch_rows) {
    if (pass_rows(batch_rows) < batch_rows) executor_.reserve_accumulated_gradients();
    executor_.reserve_rows(pass_rows(batch_rows), pass_rows(batch_rows) == batch_rows);
}

int64_t Trainer::default_batch_size() const { return last_batch_size_ ? pass_rows(last_batch_size_) : 256; }

void Trainer::run_train_step(void* argument) {
    StepTask& task = *static_cast<StepTask*>(argument);
    Executor& executor = task.trainer->executor_;
    if (task.part.first_row == 0) {
        // Weights set between two steps (from a callback) reach the low-precision copies before this
        // step reads them; otherwise a no-op (the update keeps the copies in step with the masters).
        executor.sync_weights();
        executor.begin_step();
    }
    executor.forward(task.slot, task.rows, true, task.part);
    executor.loss_head(task.slot, task.rows, Executor::HeadMode::train, task.row_weighted, task.part);
    executor.backward(task.slot, task.rows, task.part);
    if (task.part.whole()) {
        executor.update(task.slot, task.rows);
        return;
    }
    executor.accumulate(task.slot, task.rows, task.part);
    if (task.closes_step) executor.apply_accumulated(task.slot, task.rows);
}

namespace {

// A scale for an error message: "1", "0.5", "65536", whatever the host program's locale.
std::string scale_text(float scale) {
    std::ostringstream text;
    text.imbue(std::locale::classic());
    text << scale;
    return text.str();
}

}  // namespace

void Trainer::check_finite_step(const TrainState& state, bool last_step_only) {
    if (state.skipped_steps == skipped_seen_) return;
    const bool at_min_scale = state.skipped_at_min_scale != skipped_at_min_scale_seen_;
    acknowledge_skipped_steps(state);
    // Above the minimum the scaler backs off and training goes on (no message is built: mixed-fp16
    // skips steps in the steady state); at it, every later step would be skipped as well, so the run
    // has diverged (or met NaN/Inf data) and fit must say so.
    const LossScalerConfig& scaler = executor_.scaler_config();
    if (scaler.mode == LossScaling::dynamic && !at_min_scale) return;
    const std::string which = last_step_only ? "step " + std::to_string(state.steps)
                                             : "a step of this epoch (by step " + std::to_string(state.steps) + ")";
    const std::string where =
        scaler.mode == LossScaling::dynamic
            ? " with the loss scale already at its minimum (" + scale_text(scaler.min_scale) +
                  ") or below, where backing off cannot help"
            : std::string();
    fail(MPT_STATUS_NON_FINITE, which + ": the loss or a gradient is NaN or Inf" + where + "; its update was skipped" +
                                    (last_step_only ? " (the weights are unchanged)" : ", the epoch's other steps ran") +
                                    ". Check the data and the learning rate.");
}

void Trainer::acknowledge_skipped_steps(const TrainState& state) {
    skipped_seen_ = state.skipped_steps;
    skipped_at_min_scale_seen_ = state.skipped_at_min_scale;
}

void Trainer::issue_report(int64_t step) {
    Backend& backend = model_->context()->backend();
    const int slot = (report_head_ + reports_pending_) % kReportSlots;
    executor_.report_async(&reports_[slot]);
    report_landed_[slot] = backend.scheduler().record(Lane::compute);
    report_step_[slot] = step;
    ++reports_pending_;
}

void Trainer::deliver_report(int64_t steps_per_epoch, int64_t batch_rows) {
    const int slot = report_head_;
    model_->context()->backend().scheduler().wait_host(report_landed_[slot]);
    report_head_ = (report_head_ + 1) % kReportSlots;
    --reports_pending_;
    const StepReport& report = reports_[slot];
    check_finite_step(report.state, true);
    if (!callbacks_.progress) return;
    const int64_t step = report_step_[slot];
    const EvaluationResult running = metric_means(report.metrics, step * batch_rows);
    struct ReportedWhileAlive {
        std::optional<TrainState>& state;
        ~ReportedWhileAlive() { state.reset(); }
    } reported{reported_state_};
    reported_state_ = report.state;
    if (callback_stops_fit(callbacks_.progress, "progress", epochs_completed_, step, steps_per_epoch, running.loss,
                           running.accuracy, callbacks_.user_data))
        fail(MPT_STATUS_CANCELLED, "training cancelled by the progress callback");
    stop_if_asked();
}

void Trainer::deliver_landed_reports(int64_t steps_per_epoch, int64_t batch_rows) {
    Scheduler& scheduler = model_->context()->backend().scheduler();
    // A full ring means the host is kReportSlots steps ahead: wait for the oldest to make room.
    if (reports_pending_ == kReportSlots) deliver_report(steps_per_epoch, batch_rows);
    while (reports_pending_ > 0 && scheduler.completed(report_landed_[report_head_]))
        deliver_report(steps_per_epoch, batch_rows);
}

void Trainer::fit(const Dataset& dataset, int64_t epochs, int64_t batch_size, bool shuffle) {
    require(epochs >= 0, MPT_STATUS_INVALID_ARGUMENT, "epochs must be >= 0");
    require(batch_size > 0, MPT_STATUS_INVALID_ARGUMENT, "batch_size must be positive");
    check_dataset(dataset);
    require_trained_weights("train");
    if (epochs > 0) model_->require_trainable_layer();  // 0 epochs train nothing either way
    // Registered for the whole call: another trainer's exchange from a callback is refused meanwhile.
    struct FitRegistration {
        Model& model;
        const Trainer* trainer;
        FitRegistration(Model& m, const Trainer* t) : model(m), trainer(t) { model.begin_fit(trainer); }
        ~FitRegistration() { model.end_fit(trainer); }
        FitRegistration(const FitRegistration&) = delete;
        FitRegistration& operator=(const FitRegistration&) = delete;
    } registration(*model_, this);
    const StepRecoveryOnFailure recovery(*this);
    const int64_t rows = dataset.rows();
    const int64_t batch_rows = std::min(batch_size, rows);
    const int64_t steps = rows / batch_rows;  // the last partial batch is dropped
    // An epoch interrupted by a cancel or captured in a checkpoint is finished first, in its saved
    // order, when fit continues with the same data geometry; otherwise it is abandoned.
    const bool order_kept = static_cast<int64_t>(restored_order_.size()) == rows ||
                            (restored_order_.empty() && device_has_epoch_order_);
    // Other rows of the same count (another fold) are other data; an epoch from a checkpoint knows
    // only its count (its rows are unknown).
    const bool same_data = !epoch_data_.known() || dataset.reads_rows_of(epoch_data_);
    bool resume = steps_into_epoch_ > 0 && rows == epoch_rows_ && batch_rows == epoch_batch_size_ && shuffle == shuffle_ &&
                  order_kept && same_data;
    if (steps_into_epoch_ > 0 && !resume) {
        // Abandoned here, not when the next epoch starts: a fit that starts none (0 epochs, or a
        // failure first) must not leave the old epoch resumable under this call's data and batch size.
        model_->context()->log(MPT_LOG_LEVEL_INFO, "fit: the interrupted epoch is abandoned (other data, batch size or shuffling)");
        steps_into_epoch_ = 0;
        device_has_epoch_order_ = false;
        restored_order_.clear();
    }
    executor_.release_weight_words();
    reserve_training_batch(batch_rows);
    epoch_batch_size_ = batch_rows;
    shuffle_ = shuffle;
    epoch_rows_ = rows;
    Backend& backend = model_->context()->backend();
    Scheduler& scheduler = backend.scheduler();
    const DatasetView view = gather_view(dataset);
    // Reports are issued on the CPU too, where they land at once: a non-finite step stops fit there
    // before the next one. On a GPU only a progress callback needs them; fit checks at epoch end.
    const bool reporting = callbacks_.progress != nullptr || backend.kind() == BackendKind::cpu;
    // Pinned on a GPU: allocated here, before the steps and their timer, never inside the loop.
    if (reporting && !reports_) reports_ = static_cast<StepReport*>(backend.allocate_host(kReportSlots * sizeof(StepReport)));

    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
        if (epoch > 0) require_trained_weights("go on training after the epoch-end callback");
        DrainOnExit drain(scheduler);
        report_head_ = 0;
        reports_pending_ = 0;
        int64_t first_step = 0;
        // A new epoch draws its shuffle seed from the trainer's generator. Should the epoch fail
        // before its first step has run (out of memory for the order or the first step's scratch),
        // the draw is undone: fit called again then trains exactly what the failed call would have.
        struct UndoDrawUnlessStarted {
            Rng& generator;
            const Rng before;
            bool started = false;
            ~UndoDrawUnlessStarted() {
                if (!started) generator = before;
            }
        } undo_draw{shuffle_rng_, shuffle_rng_};
        // An evaluation from the last epoch-end callback may have planned the step buffers again, or
        // (out of memory for its larger batch) left none: plan for fit's batch before this epoch's
        // first gather. Nothing when the plan fits, as it does but after such an evaluation.
        reserve_training_batch(batch_rows);
        if (resume) {
            if (!restored_order_.empty()) {
                reserve_order(epoch_order_, rows);
                backend.copy_to_device(epoch_order_.base(), restored_order_.data(), restored_order_.size() * sizeof(int32_t));
                restored_order_.clear();
            }
            first_step = steps_into_epoch_;
            resume = false;
        } else {
            restored_order_.clear();
            reserve_order(epoch_order_, rows);
            backend.fill_order(order_rows(epoch_order_), rows, shuffle, shuffle ? shuffle_rng_.next_u64() : 0);
            executor_.reset_metrics();
            steps_into_epoch_ = 0;
        }
        device_has_epoch_order_ = true;
        // The copy lane reads the order: it starts after the compute lane has written it.
        scheduler.wait(Lane::copy, scheduler.record(Lane::compute));
        executor_.sync_weights();
        const int32_t* order = order_rows(epoch_order_);
        const int32_t* host_order = nullptr;
        if (view.streamed) {  // the host picks the rows it stages: it needs the order too (once an epoch)
            host_epoch_order_.resize(static_cast<size_t>(rows));
            backend.copy_to_host(host_epoch_order_.data(), order, host_epoch_order_.size() * sizeof(int32_t));
            host_order = host_epoch_order_.data();
        }
        // A step is `passes` passes, of its whole batch or of each of its micro-batches in turn; the
        // epoch's passes are numbered from 0 and alternate between the batch slots.
        const int64_t micro_rows = pass_rows(batch_rows);
        const int64_t passes = (batch_rows + micro_rows - 1) / micro_rows;
        auto pass_part = [&](int64_t pass) {
            return passes > 1 ? BatchPart{pass % passes * micro_rows, batch_rows} : BatchPart{};
        };
        auto pass_row_count = [&](int64_t pass) { return std::min(micro_rows, batch_rows - pass_part(pass).first_row); };
        auto submit_gather = [&](int64_t pass) {
            GatherTask& task = gather_tasks_[pass % kBatchSlots];
            task = GatherTask{this,
                              &dataset,
                              view,
                              order,
                              host_order,
                              pass / passes * batch_rows + pass_part(pass).first_row,
                              pass_row_count(pass),
                              static_cast<int>(pass % kBatchSlots)};
            scheduler.submit(Lane::copy, &Trainer::run_gather, &task);
            return scheduler.record(Lane::copy);
        };
        scheduler.start_timer();
        Event ready[kBatchSlots];
        const int64_t first_pass = first_step * passes, end_pass = steps * passes;
        if (first_pass < end_pass) ready[first_pass % kBatchSlots] = submit_gather(first_pass);
        for (int64_t p = first_pass; p < end_pass; ++p) {
            const int slot = static_cast<int>(p % kBatchSlots);
            // The next pass's slot was last read by pass p - 1, which the compute lane has finished
            // issuing; on a GPU the copy lane orders after it through this event.
            const Event computed = scheduler.record(Lane::compute);
            if (p + 1 < end_pass) {
                scheduler.wait(Lane::copy, computed);
                ready[(p + 1) % kBatchSlots] = submit_gather(p + 1);
            }
            scheduler.wait(Lane::compute, ready[slot]);
            const bool closes_step = p % passes == passes - 1;
            step_task_ = StepTask{this, slot, pass_row_count(p), dataset.has_row_weights(), pass_part(p), closes_step};
            scheduler.submit(Lane::compute, &Trainer::run_train_step, &step_task_);
            if (!closes_step) continue;
            const int64_t s = p / passes;
            steps_into_epoch_ = s + 1;
            // The rows this epoch reads, from its first step on: a fit that runs none (0 epochs, a
            // failure first) leaves an epoch from a checkpoint resumable on any data of its size.
            if (s == first_step) epoch_data_ = dataset.rows_read();
            undo_draw.started = true;
            ++steps_taken_;
            last_batch_size_ = batch_rows;  // once a step is issued: a fit that issues none leaves it
            if (reporting) {
                issue_report(s + 1);
                // The last step's report is delivered at the epoch's end, where a failure it brings
                // closes the epoch (all its steps ran) instead of leaving it open with nothing left.
                if (s + 1 < steps) deliver_landed_reports(steps, batch_rows);
            }
            if (s + 1 < steps) checkpoint_if_due(false);
        }
        scheduler.stop_timer();
        scheduler.synchronize();
        last_epoch_timing_ = EpochTiming{scheduler.timer_seconds(), steps - first_step};
        auto close_epoch = [&] {
            ++epochs_completed_;
            steps_into_epoch_ = 0;
            device_has_epoch_order_ = false;
        };
        // A closed epoch's callback, then its automatic checkpoint, which so holds what the callback
        // changed (a schedule's next learning rate): a run resumed from it goes on as this one does.
        // The epoch is counted whatever the callback says, so the checkpoint is due even when it
        // stops fit or throws (kept in `callback_error`); a failed checkpoint is what fit returns.
        // True when the callback asked to stop.
        auto end_epoch = [&](std::exception_ptr& callback_error) {
            double metrics[kMetricsCount];
            executor_.read_metrics(metrics);
            const EvaluationResult means = metric_means(metrics, steps * batch_rows);
            bool stop = false;
            try {
                const RaisedWhileAlive in_epoch_end(in_epoch_end_callback_);
                stop = callbacks_.epoch_end && callback_stops_fit(callbacks_.epoch_end, "epoch-end", epochs_completed_ - 1,
                                                                  means.loss, means.accuracy, callbacks_.user_data);
            } catch (...) {
                callback_error = std::current_exception();
            }
            checkpoint_if_due(true);
            return stop;
        };
        try {
            while (reports_pending_ > 0) deliver_report(steps, batch_rows);
            check_finite_step(executor_.read_state(), false);
        } catch (...) {
            // Every step of the epoch has run (on a GPU a non-finite step is found here, at the end):
            // the epoch is over, whatever failed, and the next fit starts a new one rather than
            // "resuming" an epoch with no step left.
            reports_pending_ = 0;
            close_epoch();
            // Steps whose reports were dropped may have been skipped as non-finite: that is known now
            // (the cancel or failure being reported covers it), not news for the next fit.
            try {
                acknowledge_skipped_steps(executor_.read_state());
            } catch (...) {
                // A device fault: the error already being reported, or the next call, says so.
            }
            // After a cancel from the progress callback or a non-finite step, the whole epoch still
            // gets its epoch-end callback and checkpoint, as every counted epoch does (Keras calls
            // on_epoch_end after a stop too); then fit returns that failure, or the checkpoint's.
            // Not after a destroy (the trainer is going) or a device or memory failure.
            if (epoch_end_owed_after(std::current_exception())) {
                std::exception_ptr ignored;  // the failure being reported comes first
                end_epoch(ignored);
            }
            throw;
        }
        close_epoch();
        std::exception_ptr callback_error;
        const bool stop = end_epoch(callback_error);
        if (callback_error) std::rethrow_exception(callback_error);
        if (stop) fail(MPT_STATUS_CANCELLED, "training stopped by the epoch-end callback");
        stop_if_asked();
    }
}

float Trainer::step(const Dataset& dataset, int64_t first, int64_t batch_size) {
    check_dataset(dataset);
    require_trained_weights("train");
    model_->require_trainable_layer();
    require(batch_size > 0, MPT_STATUS_INVALID_ARGUMENT, "batch_size must be positive");
    require(first >= 0 && first <= dataset.rows() - batch_size, MPT_STATUS_INVALID_ARGUMENT,
            "rows [first, first + batch_size) must lie inside the dataset");
    executor_.release_weight_words();
    reserve_training_batch(batch_size);
    const int32_t* order = identity_order(dataset.rows());
    executor_.sync_weights();
    // A step of the caller's is no step of an epoch fit left unfinished: its loss must not reach
    // that epoch's means when fit finishes it.
    double epoch_metrics[kMetricsCount];
    executor_.read_metrics(epoch_metrics);
    Scheduler& scheduler = model_->context()->backend().scheduler();
    const StepRecoveryOnFailure recovery(*this);
    DrainOnExit drain(scheduler);
    // The whole batch, or its micro-batches one after another, gathered on the compute lane.
    const int64_t micro_rows = pass_rows(batch_size);
    for (int64_t first_row = 0; first_row < batch_size; first_row += micro_rows) {
        const int64_t rows = std::min(micro_rows, batch_size - first_row);
        gather_tasks_[0] = GatherTask{this, &dataset, gather_view(dataset), order, nullptr, first + first_row, rows, 0};
        scheduler.submit(Lane::compute, &Trainer::run_gather, &gather_tasks_[0]);
        const BatchPart part = micro_rows < batch_size ? BatchPart{first_row, batch_size} : BatchPart{};
        step_task_ = StepTask{this, 0, rows, dataset.has_row_weights(), part, first_row + rows == batch_size};
        scheduler.submit(Lane::compute, &Trainer::run_train_step, &step_task_);
    }
    ++steps_taken_;
    last_batch_size_ = batch_size;
    const StepReport report = executor_.read_report();
    // Before check_finite_step: a non-finite step's loss must not stay in the epoch's sums either.
    executor_.write_metrics(epoch_metrics);
    check_finite_step(report.state, true);
    return static_cast<float>(report.metrics[kMetricBatchLoss]);
}

EvaluationResult Trainer::evaluate(const Dataset& dataset, int64_t batch_size) {
    check_dataset(dataset);
    require(batch_size >= 0, MPT_STATUS_INVALID_ARGUMENT, "batch_size must be >= 0");
    if (batch_size == 0) batch_size = default_batch_size();
    const int64_t rows = dataset.rows();
    const int64_t batch_rows = std::min(batch_size, rows);
    executor_.release_weight_words();
    executor_.reserve_rows(batch_rows, false);  // no training step runs on it
    const int32_t* order = identity_order(rows);
    executor_.sync_weights();
    // Evaluation borrows the running metrics, whatever an interrupted epoch has in them.
    BorrowedRunningMetrics borrowed(executor_);
    Scheduler& scheduler = model_->context()->backend().scheduler();
    DrainOnExit drain(scheduler);
    const DatasetView view = gather_view(dataset);
    for (int64_t first = 0; first < rows; first += batch_rows) {
        const int64_t count = std::min(batch_rows, rows - first);
        gather_tasks_[0] = GatherTask{this, &dataset, view, order, nullptr, first, count, 0};
        scheduler.submit(Lane::compute, &Trainer::run_gather, &gather_tasks_[0]);
        executor_.forward(0, count);
        executor_.loss_head(0, count, Executor::HeadMode::evaluate, dataset.has_row_weights());
    }
    double metrics[kMetricsCount];
    executor_.read_metrics(metrics);
    borrowed.give_back();
    return metric_means(metrics, rows);
}

void Trainer::predict(const float* inputs, int64_t rows, float* outputs) {
    require(rows > 0, MPT_STATUS_INVALID_ARGUMENT, "rows must be positive");
    const int64_t batch_rows = std::min<int64_t>(rows, std::max<int64_t>(default_batch_size(), 256));
    executor_.reserve_rows(batch_rows, false);  // no training step runs on it
    executor_.sync_weights();
    // The words stay until the last forward has run (the drain, which unwinds first).
    const WeightWordCache::Reading reading = executor_.reading_weight_words();
    DrainOnExit drain(model_->context()->backend().scheduler());
    executor_.prepare_prediction(batch_rows);
    const int64_t features = model_->input_features(), classes = model_->output_features();
    for (int64_t first = 0; first < rows; first += batch_rows) {
        const int64_t count = std::min(batch_rows, rows - first);
        executor_.load_inputs(inputs + first * features, count, 0);
        executor_.forward(0, count);
        executor_.loss_head(0, count, Executor::HeadMode::predict);
        executor_.read_outputs(outputs + first * classes, count);
    }
}

void Trainer::predict(const Dataset& dataset, int64_t batch_size, float* outputs) {
    check_samples(dataset);
    require(batch_size >= 0, MPT_STATUS_INVALID_ARGUMENT, "batch_size must be >= 0");
    if (batch_size == 0) batch_size = default_batch_size();
    const int64_t rows = dataset.rows(), classes = model_->output_features();
    const int64_t batch_rows = std::min(batch_size, rows);
    executor_.release_weight_words();
    executor_.reserve_rows(batch_rows, false);  // no training step runs on it
    const int32_t* order = identity_order(rows);
    executor_.sync_weights();
    Scheduler& scheduler = model_->context()->backend().scheduler();
    DrainOnExit drain(scheduler);
    // Samples only: labels, targets (of any width) and row weights stay where they are.
    DatasetView view = gather_view(dataset);
    view.labels = nullptr;
    view.targets = nullptr;
    view.row_weights = nullptr;
    for (int64_t first = 0; first < rows; first += batch_rows) {
        const int64_t count = std::min(batch_rows, rows - first);
        gather_tasks_[0] = GatherTask{this, &dataset, view, order, nullptr, first, count, 0};
        scheduler.submit(Lane::compute, &Trainer::run_gather, &gather_tasks_[0]);
        executor_.clear_head_inputs(0, count);
        executor_.forward(0, count);
        executor_.loss_head(0, count, Executor::HeadMode::predict);
        executor_.read_outputs(outputs + first * classes, count);
    }
}

void Trainer::set_checkpointing(const CheckpointPolicy& policy) {
    require(policy.every_steps >= 0 && policy.every_epochs >= 0, MPT_STATUS_INVALID_ARGUMENT,
            "checkpoint intervals must be >= 0");
    require(policy.keep_last >= 1, MPT_STATUS_INVALID_ARGUMENT, "keep_last must be >= 1");
    // Found now rather than after fit's first steps, when the first checkpoint is due.
    std::error_code error;
    if (!policy.directory.empty() && !std::filesystem::is_directory(policy.directory, error))
        fail(MPT_STATUS_IO_ERROR, "checkpoint directory " + policy.directory + " is not an existing directory" +
                                      (error ? ": " + error.message() : std::string()));
    checkpointing_ = policy;
}

void Trainer::checkpoint_if_due(bool epoch_ended) {
    const CheckpointPolicy& policy = checkpointing_;
    if (policy.directory.empty()) return;
    // An epoch's last step is checkpointed after the epoch is booked, so the file says "between
    // epochs"; both triggers can fall there.
    const bool step_due = policy.every_steps > 0 && steps_taken_ % policy.every_steps == 0;
    const bool epoch_due = epoch_ended && policy.every_epochs > 0 && epochs_completed_ % policy.every_epochs == 0;
    const bool due = step_due || epoch_due;
    if (!due) return;
    write_rotating_checkpoint(*this, policy, steps_taken_);
}

// Out of line on purpose: compiled with the core's flags (no floating-point contraction), the factor
// is the one the CPU backend's steps use, bit for bit, on every target.
float Trainer::scheduled_learning_rate() const {
    return mpt::scheduled_learning_rate(executor_.optimizer(), steps_taken_);
}

void Trainer::set_learning_rate(float learning_rate) {
    config_.optimizer.learning_rate = learning_rate;
    executor_.set_learning_rate(learning_rate);
}

bool Trainer::epoch_steps_all_run() const {
    return steps_into_epoch_ > 0 && epoch_batch_size_ > 0 && steps_into_epoch_ == epoch_rows_ / epoch_batch_size_;
}

Trainer::UnfinishedEpoch Trainer::unfinished_epoch() const {
    if (steps_into_epoch_ == 0 || epoch_steps_all_run()) return {};
    return {steps_into_epoch_, epoch_rows_, epoch_batch_size_};
}

TrainerSnapshot Trainer::snapshot() const {
    model_->context()->backend().scheduler().synchronize();
    TrainerSnapshot snapshot;
    snapshot.state = executor_.read_state();
    snapshot.learning_rate = learning_rate();
    // Saved from the progress callback of an epoch's last step, the epoch has no step left but fit
    // has not booked it yet: it is saved as booked, as an automatic checkpoint at the epoch's end
    // is, so that a resume neither "finishes" an empty epoch nor loses count of it.
    const bool all_steps_run = epoch_steps_all_run();
    snapshot.epochs_completed = epochs_completed_ + (all_steps_run ? 1 : 0);
    snapshot.steps_into_epoch = all_steps_run ? 0 : steps_into_epoch_;
    // Inside an epoch, its batch size (which a resume must match), not that of a step since.
    snapshot.batch_size = snapshot.steps_into_epoch > 0 ? epoch_batch_size_ : last_batch_size_;
    snapshot.dataset_rows = epoch_rows_;
    snapshot.shuffle = shuffle_;
    snapshot.shuffle_rng = shuffle_rng_.state();
    snapshot.dropout_seed = dropout_seed_;
    if (snapshot.steps_into_epoch > 0) {
        if (!restored_order_.empty()) {
            snapshot.epoch_order = restored_order_;
        } else if (device_has_epoch_order_) {
            snapshot.epoch_order.resize(static_cast<size_t>(epoch_rows_));
            model_->context()->backend().copy_to_host(snapshot.epoch_order.data(), epoch_order_.base(),
                                                      snapshot.epoch_order.size() * sizeof(int32_t));
        }
    }
    executor_.read_metrics(snapshot.metrics);
    return snapshot;
}

void Trainer::restore(const TrainerSnapshot& snapshot) {
    model_->context()->backend().scheduler().synchronize();
    executor_.write_state(snapshot.state);
    executor_.write_metrics(snapshot.metrics);
    set_learning_rate(snapshot.learning_rate);
    epochs_completed_ = snapshot.epochs_completed;
    steps_into_epoch_ = snapshot.steps_into_epoch;
    steps_taken_ = snapshot.state.steps;
    acknowledge_skipped_steps(snapshot.state);
    last_batch_size_ = snapshot.batch_size;
    epoch_batch_size_ = snapshot.batch_size;
    epoch_rows_ = snapshot.dataset_rows;
    epoch_data_ = DatasetRows{};
    shuffle_ = snapshot.shuffle;
    shuffle_rng_.set_state(snapshot.shuffle_rng);
    dropout_seed_ = snapshot.dropout_seed;
    executor_.set_dropout_seed(dropout_seed_);
    restored_order_ = snapshot.epoch_order;
    device_has_epoch_order_ = false;
}

}  // namespace mpt
