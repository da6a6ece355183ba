/*
 * mptrain.hpp — optional header-only C++17 wrapper over the C API (mptrain.h).
 *
 * Classes own their handles (move-only; the destructor calls mpt_*_destroy), every failing call
 * throws mptrain::Error carrying the mpt_status and the mpt_last_error() message, and callbacks are
 * std::function objects. It adds no symbols to libmptrain.so: the ABI stays the C one.
 *
 * Threads follow the C API: an object is used by one thread at a time, and objects created from one
 * Context are not used from two threads at once; different contexts may run in parallel.
 * An exception thrown by a callback cancels fit() and is rethrown from it.
 */
#ifndef MPTRAIN_HPP
#define MPTRAIN_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mptrain/mptrain.h"

namespace mptrain {

/** Thrown by every wrapper call that fails: the C status and the library's message. */
class Error : public std::runtime_error {
public:
    Error(mpt_status status, const std::string& message)
        : std::runtime_error(std::string(mpt_status_string(status)) + ": " + message),
          status_(status), message_(message) {}
    mpt_status status() const noexcept { return status_; }
    /** The library's message alone (what() also names the status). */
    const std::string& message() const noexcept { return message_; }

private:
    mpt_status status_;
    std::string message_;
};

namespace detail {

inline void check(mpt_status status) {
    if (status != MPT_STATUS_OK) throw Error(status, mpt_last_error());
}

/** The lr_schedule factor when the caller gives none: a decay to rate 0 for LINEAR and COSINE (Keras's
 *  CosineDecay alpha, PyTorch's CosineAnnealingLR eta_min, Hugging Face's linear schedule), PyTorch
 *  StepLR's gamma for STEP. An unknown schedule gets 1 and the library refuses it. */
inline float default_lr_schedule_factor(mpt_lr_schedule schedule) noexcept {
    switch (schedule) {
        case MPT_LR_SCHEDULE_LINEAR:
        case MPT_LR_SCHEDULE_COSINE: return 0.0f;
        case MPT_LR_SCHEDULE_STEP: return 0.1f;
        default: return 1.0f;
    }
}

/** A path for C; one holding NUL is refused (C would stop reading there). */
inline const char* c_path(const std::string& path) {
    if (path.find('\0') != std::string::npos) throw Error(MPT_STATUS_INVALID_ARGUMENT, "path contains NUL");
    return path.c_str();
}

/** MPT_MAX_HOST_ELEMENTS, checked here too, so that what the library would refuse is refused before
 *  the wrapper allocates for it. */
constexpr int64_t kMaxHostElements = MPT_MAX_HOST_ELEMENTS;

/** rows * width (both positive) as an element count, refused as the library refuses it: the same
 *  status and message. */
inline int64_t host_elements(int64_t rows, int64_t width, const char* what) {
    if (width > kMaxHostElements / rows)
        throw Error(MPT_STATUS_INVALID_ARGUMENT, std::string(what) + " would hold more than 2^40 elements");
    return rows * width;
}

/** `count` zeroed floats for C to fill. A failed allocation is an Error, as it is in C, rather than
 *  std::bad_alloc. */
inline std::vector<float> zeroed_floats(int64_t count) {
    const auto out_of_memory = [] { return Error(MPT_STATUS_OUT_OF_MEMORY, "out of host memory"); };
    std::vector<float> buffer;
    if (count < 0 || static_cast<uint64_t>(count) > buffer.max_size()) throw out_of_memory();
    try {
        buffer.resize(static_cast<size_t>(count));
    } catch (const std::bad_alloc&) {
        throw out_of_memory();
    }
    return buffer;
}

/** The output buffer of a prediction on `rows` rows, after the library's checks of them (the inputs,
 *  then the outputs, within kMaxHostElements). */
inline std::vector<float> prediction_output(int64_t rows, int64_t input_features, int64_t output_features) {
    host_elements(rows, input_features, "the inputs (rows * input features)");
    return zeroed_floats(host_elements(rows, std::max<int64_t>(output_features, 1), "the outputs (rows * output features)"));
}

template <typename T, void (*Destroy)(T*)>
struct Deleter {
    void operator()(T* handle) const noexcept { Destroy(handle); }
};
template <typename T, void (*Destroy)(T*)>
using Owned = std::unique_ptr<T, Deleter<T, Destroy>>;

// Kept alive by every object created from a context: the C context (and so its log callback) lives
// as long as any of them.
struct LogState {
    std::function<void(mpt_log_level, const char*)> callback;
    static void trampoline(mpt_log_level level, const char* message, void* user_data) noexcept {
        auto* self = static_cast<LogState*>(user_data);
        try {
            if (self->callback) self->callback(level, message ? message : "");
        } catch (...) {
            // A log message must never unwind through C frames; it is dropped.
        }
    }
};

}  // namespace detail

inline std::string version() { return mpt_version(); }
inline int cuda_device_count() { return mpt_cuda_device_count(); }

/** Options of a Context; chainable setters. */
class ContextOptions {
public:
    ContextOptions() {
        mpt_context_options_t* raw = nullptr;
        detail::check(mpt_context_options_create(&raw));
        handle_.reset(raw);
    }
    ContextOptions& backend(mpt_backend value) { detail::check(mpt_context_options_set_backend(get(), value)); return *this; }
    ContextOptions& threads(int value) { detail::check(mpt_context_options_set_threads(get(), value)); return *this; }
    ContextOptions& seed(uint64_t value) { detail::check(mpt_context_options_set_seed(get(), value)); return *this; }
    ContextOptions& device(int value) { detail::check(mpt_context_options_set_device(get(), value)); return *this; }
    ContextOptions& log_level(mpt_log_level value) { detail::check(mpt_context_options_set_log_level(get(), value)); return *this; }
    ContextOptions& memory_budget(size_t bytes) { detail::check(mpt_context_options_set_memory_budget(get(), bytes)); return *this; }
    ContextOptions& dataset_device_budget(size_t bytes) {
        detail::check(mpt_context_options_set_dataset_device_budget(get(), bytes));
        return *this;
    }
    /** The callback is copied into every Context created from these options. */
    ContextOptions& log(std::function<void(mpt_log_level, const char*)> callback) {
        log_ = std::move(callback);
        return *this;
    }
    mpt_context_options_t* get() const noexcept { return handle_.get(); }
    const std::function<void(mpt_log_level, const char*)>& log_callback() const noexcept { return log_; }

private:
    detail::Owned<mpt_context_options_t, mpt_context_options_destroy> handle_;
    std::function<void(mpt_log_level, const char*)> log_;
};

class Context {
public:
    /** A context with default options (backend AUTO, seed 42). */
    Context() : Context(nullptr) {}
    explicit Context(const ContextOptions& options) : Context(&options) {}

    mpt_backend backend() const {
        mpt_backend out{};
        detail::check(mpt_context_get_backend(get(), &out));
        return out;
    }
    mpt_precision resolve_precision(mpt_precision requested) const {
        mpt_precision out{};
        detail::check(mpt_context_resolve_precision(get(), requested, &out));
        return out;
    }
    /** {used, peak} arena bytes. */
    std::pair<size_t, size_t> memory() const {
        size_t used = 0, peak = 0;
        detail::check(mpt_context_get_memory(get(), &used, &peak));
        return {used, peak};
    }
    /** What this context runs on and how, as one JSON object (mpt_context_describe): "version",
     *  "backend" ("cpu" or "cuda"), "device", the memory counters, then the backend's own members. */
    std::string describe() const {
        size_t length = 0;
        detail::check(mpt_context_describe(get(), nullptr, 0, &length));
        // Room for C's NUL; the text cannot grow between the calls, as no other thread may use this
        // context's objects meanwhile (this file's threading rule).
        std::string text(length + 1, '\0');
        detail::check(mpt_context_describe(get(), text.data(), text.size(), &length));
        text.resize(length);
        return text;
    }
    mpt_context_t* get() const noexcept { return handle_.get(); }
    const std::shared_ptr<detail::LogState>& log_state() const noexcept { return log_; }

private:
    explicit Context(const ContextOptions* options) {
        mpt_context_options_t* raw_options = options ? options->get() : nullptr;
        if (options && options->log_callback()) {
            log_ = std::make_shared<detail::LogState>();
            log_->callback = options->log_callback();
            detail::check(mpt_context_options_set_log_callback(raw_options, &detail::LogState::trampoline, log_.get()));
        }
        mpt_context_t* raw = nullptr;
        const mpt_status status = mpt_context_create(raw_options, &raw);
        // The options object is the caller's: do not leave it pointing at this context's state.
        if (options && options->log_callback()) mpt_context_options_set_log_callback(raw_options, nullptr, nullptr);
        detail::check(status);
        handle_.reset(raw);
    }

    std::shared_ptr<detail::LogState> log_;  // declared first: outlives the handle
    detail::Owned<mpt_context_t, mpt_context_destroy> handle_;
};

/** Each feature's mean and standard deviation over a dataset's rows (Dataset::feature_statistics()):
 *  one value per feature, to standardize this dataset and the others of a split with, or a model's
 *  inputs (Model::set_input_standardization). */
struct FeatureStatistics {
    std::vector<float> mean;
    std::vector<float> stddev;
};

class Model {
public:
    Model(const Context& context, int64_t input_features) : log_(context.log_state()) {
        mpt_model_t* raw = nullptr;
        detail::check(mpt_model_create(context.get(), input_features, &raw));
        handle_.reset(raw);
    }
    Model& add_dense(int64_t units, mpt_activation activation = MPT_ACTIVATION_LINEAR) {
        detail::check(mpt_model_add_dense(get(), units, activation));
        return *this;
    }
    Model& set_layer_dtype(int64_t layer, mpt_dtype dtype) {
        detail::check(mpt_model_set_layer_dtype(get(), layer, dtype));
        return *this;
    }
    /** Layer `layer`'s dtype override (MPT_DTYPE_DEFAULT: the policy's). */
    mpt_dtype layer_dtype(int64_t layer) const {
        mpt_dtype out = MPT_DTYPE_DEFAULT;
        detail::check(mpt_model_get_layer_dtype(get(), layer, &out));
        return out;
    }
    /** Dropout after hidden layer `layer`, as a Keras Dropout(rate) layer after it
     *  (mpt_model_set_layer_dropout): while a trainer trains, each output is dropped with probability
     *  `rate` in [0, 1) and the kept ones scaled by 1 / (1 - rate); evaluate and predict use every
     *  output. 0 (the default) is none. Before the model is built; another rate or layer throws Error
     *  (INVALID_ARGUMENT). Building a model whose last layer has dropout (a Trainer, predict, weights)
     *  throws INVALID_STATE. Saved with the model. */
    Model& set_layer_dropout(int64_t layer, float rate) {
        detail::check(mpt_model_set_layer_dropout(get(), layer, rate));
        return *this;
    }
    /** Layer `layer`'s dropout rate (0: none). */
    float layer_dropout(int64_t layer) const {
        float out = 0.0f;
        detail::check(mpt_model_get_layer_dropout(get(), layer, &out));
        return out;
    }
    /** Freezes layer `layer` (false) or lets it train (true, the default), as Keras's
     *  layer.trainable (mpt_model_set_layer_trainable): trainers' steps leave a frozen layer exactly
     *  as it is while gradients still flow through it. At any time; saved with the model. */
    Model& set_layer_trainable(int64_t layer, bool trainable) {
        detail::check(mpt_model_set_layer_trainable(get(), layer, trainable ? 1 : 0));
        return *this;
    }
    /** Whether layer `layer` trains (false: frozen). */
    bool layer_trainable(int64_t layer) const {
        int out = 0;
        detail::check(mpt_model_get_layer_trainable(get(), layer, &out));
        return out != 0;
    }
    /** Dropout on the inputs, as a Keras Dropout(rate) before the first Dense layer
     *  (mpt_model_set_input_dropout): rate in [0, 1), 0 (the default) none; before the model is built;
     *  saved with the model. */
    Model& set_input_dropout(float rate) {
        detail::check(mpt_model_set_input_dropout(get(), rate));
        return *this;
    }
    float input_dropout() const {
        float out = 0.0f;
        detail::check(mpt_model_get_input_dropout(get(), &out));
        return out;
    }
    /** Standardizes the inputs inside the model, as a Keras Normalization layer before the first
     *  Dense layer (mpt_model_set_input_standardization): input feature f becomes
     *  (x - mean[f]) / max(stddev[f], 1e-7), each operation in float32, in fit, step, evaluate and
     *  predict over a dataset and in predict() over inputs alike. Saved with the model, so a loaded
     *  model predicts from raw inputs as the trained one did. A training set's
     *  Dataset::feature_statistics() are the values to give (Keras's adapt). One finite mean and one
     *  finite stddev >= 0 per input feature, else Error with MPT_STATUS_SHAPE_MISMATCH (a count other
     *  than input_features(), or mean and stddev of different sizes) or MPT_STATUS_INVALID_ARGUMENT;
     *  they replace any the model had. A trainer refuses a standardized dataset for such a model
     *  (INVALID_ARGUMENT: that would standardize twice). At any time but while a trainer fits the
     *  model (INVALID_STATE). */
    Model& set_input_standardization(const std::vector<float>& mean, const std::vector<float>& stddev) {
        // One count reaches C: unequal sizes (or none, which C would take for removing it) are the
        // shape mismatch C reports for a count other than the input features.
        if (mean.size() != stddev.size() || mean.empty())
            throw Error(MPT_STATUS_SHAPE_MISMATCH, "standardization takes one mean and one stddev per input feature (" +
                                                       std::to_string(mean.size()) + " means and " +
                                                       std::to_string(stddev.size()) + " stddevs given)");
        detail::check(mpt_model_set_input_standardization(get(), mean.data(), stddev.data(),
                                                          static_cast<int64_t>(mean.size())));
        return *this;
    }
    /** Removes the model's input standardization, if any: it takes its inputs as given again. */
    Model& clear_input_standardization() {
        detail::check(mpt_model_set_input_standardization(get(), nullptr, nullptr, 0));
        return *this;
    }
    /** The means and standard deviations the model standardizes its inputs by, as set (not
     *  floored), or std::nullopt when it takes them as given. */
    std::optional<FeatureStatistics> input_standardization() const {
        const int64_t count = input_features();
        FeatureStatistics out{detail::zeroed_floats(count), detail::zeroed_floats(count)};
        int standardizes = 0;
        detail::check(
            mpt_model_get_input_standardization(get(), out.mean.data(), out.stddev.data(), count, &standardizes));
        if (standardizes == 0) return std::nullopt;
        return out;
    }
    /** How layer `layer`'s weights are drawn when the model is built (mpt_model_set_layer_initializer;
     *  Keras's kernel_initializer, default Glorot-uniform). Before the model is built; not saved. */
    Model& set_layer_initializer(int64_t layer, mpt_initializer initializer) {
        detail::check(mpt_model_set_layer_initializer(get(), layer, initializer));
        return *this;
    }
    mpt_initializer layer_initializer(int64_t layer) const {
        mpt_initializer out = MPT_INITIALIZER_GLOROT_UNIFORM;
        detail::check(mpt_model_get_layer_initializer(get(), layer, &out));
        return out;
    }
    int64_t layer_count() const { return query(mpt_model_get_layer_count); }
    /** Layer `layer`'s width and activation, as added or as a loaded file holds them. */
    int64_t layer_units(int64_t layer) const {
        int64_t out = 0;
        detail::check(mpt_model_get_layer_units(get(), layer, &out));
        return out;
    }
    mpt_activation layer_activation(int64_t layer) const {
        mpt_activation out = MPT_ACTIVATION_LINEAR;
        detail::check(mpt_model_get_layer_activation(get(), layer, &out));
        return out;
    }
    int64_t input_features() const { return query(mpt_model_get_input_features); }
    int64_t output_features() const { return query(mpt_model_get_output_features); }
    int64_t parameter_count() const { return query(mpt_model_get_parameter_count); }

    /** Layer `layer`'s fp32 master weights ([units, inputs] row-major) and bias. */
    std::pair<std::vector<float>, std::vector<float>> weights(int64_t layer) {
        const int64_t units = layer_units(layer);  // throws for a layer out of range
        const int64_t inputs = layer == 0 ? input_features() : layer_units(layer - 1);
        // The library caps both at 2^24, so no overflow, but 2^48 floats fit no memory.
        const int64_t weight_count = inputs > INT64_MAX / units ? INT64_MAX : units * inputs;
        std::vector<float> w = detail::zeroed_floats(weight_count), b = detail::zeroed_floats(units);
        detail::check(mpt_model_get_weights(get(), layer, w.data(), static_cast<int64_t>(w.size()), b.data(),
                                            static_cast<int64_t>(b.size())));
        return {std::move(w), std::move(b)};
    }
    void set_weights(int64_t layer, const std::vector<float>& weights, const std::vector<float>& bias) {
        detail::check(mpt_model_set_weights(get(), layer, weights.data(), static_cast<int64_t>(weights.size()),
                                            bias.data(), static_cast<int64_t>(bias.size())));
    }
    /** fp32 forward pass; `inputs` holds whole rows of input_features() floats. */
    std::vector<float> predict(const std::vector<float>& inputs) {
        const int64_t rows = rows_of(inputs.size(), input_features());
        std::vector<float> out = detail::prediction_output(rows, input_features(), output_features());
        detail::check(mpt_model_predict(get(), inputs.data(), rows, out.data(), static_cast<int64_t>(out.size())));
        return out;
    }
    /** Saves the architecture and fp32 weights as a .safetensors file, atomically (a crash leaves the
     *  old file or the new one). Builds the model. MPT_STATUS_IO_ERROR when it cannot be written. */
    void save(const std::string& path) { detail::check(mpt_model_save(get(), detail::c_path(path))); }
    /** Loads a model written by save() (or the model inside a training checkpoint). A missing file
     *  throws Error with MPT_STATUS_IO_ERROR, a truncated or damaged one MPT_STATUS_CORRUPT_DATA, one
     *  from another major version MPT_STATUS_UNSUPPORTED. */
    static Model load(const Context& context, const std::string& path) {
        mpt_model_t* raw = nullptr;
        detail::check(mpt_model_load(context.get(), detail::c_path(path), &raw));
        return Model(raw, context.log_state());
    }
    mpt_model_t* get() const noexcept { return handle_.get(); }
    const std::shared_ptr<detail::LogState>& log_state() const noexcept { return log_; }

    static int64_t rows_of(size_t values, int64_t width, const char* what = "inputs") {
        // (The library refuses zero rows too; said here in the caller's terms, as the bindings say it.)
        if (values == 0 && width > 0)
            throw Error(MPT_STATUS_SHAPE_MISMATCH, std::string(what) + " has no rows: at least one is needed");
        if (width <= 0 || values == 0 || values % static_cast<size_t>(width) != 0)
            throw Error(MPT_STATUS_SHAPE_MISMATCH, std::to_string(values) + " values are not whole rows of " +
                                                       std::to_string(width));
        return static_cast<int64_t>(values / static_cast<size_t>(width));
    }

private:
    Model(mpt_model_t* raw, std::shared_ptr<detail::LogState> log) : log_(std::move(log)), handle_(raw) {}
    int64_t query(mpt_status (*getter)(const mpt_model_t*, int64_t*)) const {
        int64_t out = 0;
        detail::check(getter(get(), &out));
        return out;
    }
    std::shared_ptr<detail::LogState> log_;
    detail::Owned<mpt_model_t, mpt_model_destroy> handle_;
};

class Dataset {
public:
    /** float32 samples ([rows, features]) with int32 labels in [0, num_classes). */
    static Dataset from_f32(const Context& context, const std::vector<float>& samples, int64_t features,
                            const std::vector<int32_t>& labels, int32_t num_classes, bool check_finite = true) {
        check_rows(samples.size(), features, labels.size());
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_f32(context.get(), samples.data(), static_cast<int64_t>(labels.size()), features,
                                             labels.data(), num_classes, check_finite ? 1 : 0, &raw));
        return Dataset(raw, context.log_state());
    }
    /** uint8 samples normalised as x * scale + offset. */
    static Dataset from_u8(const Context& context, const std::vector<uint8_t>& samples, int64_t features,
                           const std::vector<int32_t>& labels, int32_t num_classes, float scale = 1.0f / 255.0f,
                           float offset = 0.0f) {
        check_rows(samples.size(), features, labels.size());
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_u8(context.get(), samples.data(), static_cast<int64_t>(labels.size()), features,
                                            labels.data(), num_classes, scale, offset, &raw));
        return Dataset(raw, context.log_state());
    }
    /** float32 samples with float32 targets ([rows, target_width]). */
    static Dataset from_f32_targets(const Context& context, const std::vector<float>& samples, int64_t features,
                                    const std::vector<float>& targets, int64_t target_width, bool check_finite = true) {
        const int64_t rows = Model::rows_of(samples.size(), features, "samples");
        if (target_width <= 0 || targets.size() % static_cast<uint64_t>(target_width) != 0 ||
            targets.size() / static_cast<uint64_t>(target_width) != static_cast<uint64_t>(rows))
            throw Error(MPT_STATUS_SHAPE_MISMATCH, "targets must hold rows * target_width values");
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_f32_targets(context.get(), samples.data(), rows, features, targets.data(),
                                                     target_width, check_finite ? 1 : 0, &raw));
        return Dataset(raw, context.log_state());
    }
    static Dataset load_cifar10(const Context& context, const std::string& directory, bool train, int64_t limit = 0) {
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_load_cifar10(context.get(), detail::c_path(directory), train ? 1 : 0, limit, &raw));
        return Dataset(raw, context.log_state());
    }
    int64_t rows() const {
        int64_t out = 0;
        detail::check(mpt_dataset_get_rows(get(), &out));
        return out;
    }
    int64_t features() const {
        int64_t out = 0;
        detail::check(mpt_dataset_get_features(get(), &out));
        return out;
    }
    /** The integer labels of this dataset's rows; a dataset of float targets has none (throws
     *  Error with MPT_STATUS_INVALID_ARGUMENT). */
    std::vector<int32_t> labels() const {
        std::vector<int32_t> out(static_cast<size_t>(rows()));
        detail::check(mpt_dataset_get_labels(get(), out.data(), static_cast<int64_t>(out.size())));
        return out;
    }
    /** Rows [first, first + rows) as a dataset sharing this one's storage (no copy; on a GPU one
     *  device copy serves both): a held-out validation set (Keras's validation_split keeps the last
     *  rows) or a first or last fold. It stays valid when this dataset is gone. */
    Dataset slice(int64_t first, int64_t rows) const {
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_slice(get(), first, rows, &raw));
        return Dataset(raw, log_);
    }
    /** Copies of the rows rows[0], rows[1], ... in that order (repeats allowed), with their labels or
     *  targets and weights: any rows, where a slice is one range (the training rows around a middle
     *  fold, a stratified split, a bootstrap sample). Indices count from this dataset's first row (a
     *  slice's own); an empty list or an index outside [0, rows()) throws Error with
     *  MPT_STATUS_INVALID_ARGUMENT. It has a storage of its own: it stays valid when this dataset is gone. */
    Dataset subset(const std::vector<int64_t>& rows) const {
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_subset(get(), rows.data(), static_cast<int64_t>(rows.size()), &raw));
        return Dataset(raw, log_);
    }
    /** These rows with a weight per row (shared, not copied): Keras's sample_weight. fit, step and
     *  evaluate multiply each row's loss (and in training its gradient, after its class weight) by
     *  its weight and average over the rows as before; evaluate leaves class weights out, and
     *  accuracy is unweighted. One finite weight >= 0 per row. */
    Dataset weighted(const std::vector<float>& weights) const {
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_weighted(get(), weights.data(), static_cast<int64_t>(weights.size()), &raw));
        return Dataset(raw, log_);
    }
    /** These rows (shared, not copied) standardized feature by feature, as Keras's Normalization
     *  layer: feature f of every batch holds (x - mean[f]) / max(stddev[f], 1e-7), x after the
     *  dataset's scale and offset, for fit, step, evaluate and predict over a dataset (predict over
     *  inputs takes them as given; Model::set_input_standardization standardizes those too, and is
     *  saved with the model). One finite mean and one finite stddev >= 0 per feature, else
     *  Error with MPT_STATUS_SHAPE_MISMATCH (a count other than features(), or mean and stddev of
     *  different sizes) or MPT_STATUS_INVALID_ARGUMENT; they replace any standardization this dataset
     *  had, and slices, weighted views and subsets of the result keep them. Use the training set's
     *  feature_statistics() for the validation and test sets too. It stays valid when this dataset is
     *  gone. */
    Dataset standardized(const std::vector<float>& mean, const std::vector<float>& stddev) const {
        // One count reaches C: unequal sizes (or none, which C would see as a NULL pointer) are the
        // shape mismatch C reports for a count other than the features.
        if (mean.size() != stddev.size() || mean.empty())
            throw Error(MPT_STATUS_SHAPE_MISMATCH, "standardization takes one mean and one stddev per feature (" +
                                                       std::to_string(mean.size()) + " means and " +
                                                       std::to_string(stddev.size()) + " stddevs given)");
        mpt_dataset_t* raw = nullptr;
        detail::check(mpt_dataset_create_standardized(get(), mean.data(), stddev.data(),
                                                      static_cast<int64_t>(mean.size()), &raw));
        return Dataset(raw, log_);
    }
    /** Each feature's mean and population standard deviation (divided by the rows, as Keras's
     *  Normalization.adapt) over this dataset's rows (a slice's own), of the values its batches hold
     *  (standardized ones, for a standardized dataset). standardized(s.mean, s.stddev) gives features
     *  of mean 0 and standard deviation 1. */
    FeatureStatistics feature_statistics() const {
        const int64_t count = features();
        FeatureStatistics out{detail::zeroed_floats(count), detail::zeroed_floats(count)};
        detail::check(mpt_dataset_get_feature_statistics(get(), out.mean.data(), out.stddev.data(), count));
        return out;
    }
    mpt_dataset_t* get() const noexcept { return handle_.get(); }

private:
    Dataset(mpt_dataset_t* raw, std::shared_ptr<detail::LogState> log) : log_(std::move(log)), handle_(raw) {}
    static void check_rows(size_t values, int64_t features, size_t labels) {
        // Beyond the library's limit (int64_t overflow included) no vector can be right: that is the
        // library's refusal, with its status and message.
        if (features > 0 && labels > 0)
            detail::host_elements(static_cast<int64_t>(labels), features, "the dataset (rows * features)");
        if (features <= 0 || labels == 0 || values != labels * static_cast<size_t>(features))
            throw Error(MPT_STATUS_SHAPE_MISMATCH, "samples must hold labels.size() * features values (" +
                                                       std::to_string(values) + " given for " +
                                                       std::to_string(labels) + " labels)");
    }
    std::shared_ptr<detail::LogState> log_;
    detail::Owned<mpt_dataset_t, mpt_dataset_destroy> handle_;
};

/** Values TrainerOptions reads back together (mpt_trainer_options_get_*). */
struct MomentumSetting {
    float momentum = 0.0f;
    bool nesterov = false;
};
struct AdamSetting {
    float beta1 = 0.0f, beta2 = 0.0f, epsilon = 0.0f;
};
struct LionSetting {
    float beta1 = 0.0f, beta2 = 0.0f;
};
struct RmspropSetting {
    float rho = 0.0f, epsilon = 0.0f;
};
struct LrScheduleSetting {
    mpt_lr_schedule schedule = MPT_LR_SCHEDULE_CONSTANT;
    int64_t warmup_steps = 0, decay_steps = 0;
    float factor = 1.0f;
};
struct LossScalingSetting {
    mpt_loss_scaling mode = MPT_LOSS_SCALING_DEFAULT;
    float initial_scale = 0.0f;
};
struct LossScalerDynamicsSetting {
    float growth_factor = 0.0f, backoff_factor = 0.0f;
    int64_t growth_interval = 0;
    float min_scale = 0.0f, max_scale = 0.0f;
};

class TrainerOptions {
public:
    TrainerOptions() {
        mpt_trainer_options_t* raw = nullptr;
        detail::check(mpt_trainer_options_create(&raw));
        handle_.reset(raw);
    }
    TrainerOptions& precision(mpt_precision value) { detail::check(mpt_trainer_options_set_precision(get(), value)); return *this; }
    /** The loss (mpt_trainer_options_set_loss): a cross-entropy, or a regression loss on float targets
     *  averaged over the outputs as Keras's: MPT_LOSS_MEAN_SQUARED_ERROR (y - t)^2,
     *  MPT_LOSS_MEAN_ABSOLUTE_ERROR |y - t|, MPT_LOSS_HUBER with huber_delta(). */
    TrainerOptions& loss(mpt_loss value) { detail::check(mpt_trainer_options_set_loss(get(), value)); return *this; }
    /** Huber's delta for MPT_LOSS_HUBER (mpt_trainer_options_set_huber_delta; default 1, Keras's): the loss
     *  is (y - t)^2 / 2 where |y - t| <= delta, else delta (|y - t| - delta / 2), so outlying targets pull
     *  no harder than delta. 0, a negative, NaN or infinite delta throws Error (INVALID_ARGUMENT), the
     *  options unchanged. Only Huber reads it; checkpoints of a Huber trainer must match it. */
    TrainerOptions& huber_delta(float delta) {
        detail::check(mpt_trainer_options_set_huber_delta(get(), delta));
        return *this;
    }
    /** Label smoothing s in [0, 1) for the cross-entropy losses (mpt_trainer_options_set_label_smoothing):
     *  targets t become t (1 - s) + s / n. Other values throw Error (INVALID_ARGUMENT); a non-zero s with
     *  a regression loss makes the Trainer's constructor throw it. */
    TrainerOptions& label_smoothing(float value) {
        detail::check(mpt_trainer_options_set_label_smoothing(get(), value));
        return *this;
    }
    /** Class weights for the categorical cross-entropy losses (mpt_trainer_options_set_class_weights),
     *  as Keras's fit(class_weight=): in training (fit, step) each row's loss and gradient are
     *  multiplied by weights[c], c its label (for float targets, the first largest target), still
     *  averaged over the batch's rows; evaluate() stays unweighted. One weight per model output (else
     *  the Trainer's constructor throws SHAPE_MISMATCH), finite, >= 0 and not all 0 (else Error with
     *  INVALID_ARGUMENT, the options unchanged); an empty vector removes them. Other losses make the
     *  Trainer's constructor throw INVALID_ARGUMENT. The weights are copied. */
    TrainerOptions& class_weights(const std::vector<float>& weights) {
        detail::check(mpt_trainer_options_set_class_weights(get(), weights.empty() ? nullptr : weights.data(),
                                                            static_cast<int64_t>(weights.size())));
        return *this;
    }
    TrainerOptions& optimizer(mpt_optimizer value) { detail::check(mpt_trainer_options_set_optimizer(get(), value)); return *this; }
    TrainerOptions& learning_rate(float value) { detail::check(mpt_trainer_options_set_learning_rate(get(), value)); return *this; }
    /** SGD momentum in [0, 1), optionally Nesterov (mpt_trainer_options_set_momentum). MPT_OPTIMIZER_RMSPROP
     *  takes the momentum too, not Nesterov's (the Trainer's constructor then throws INVALID_ARGUMENT);
     *  Adam and Lion ignore it. */
    TrainerOptions& momentum(float value, bool nesterov = false) {
        detail::check(mpt_trainer_options_set_momentum(get(), value, nesterov ? 1 : 0));
        return *this;
    }
    TrainerOptions& adam(float beta1, float beta2, float epsilon) {
        detail::check(mpt_trainer_options_set_adam(get(), beta1, beta2, epsilon));
        return *this;
    }
    /** Lion's beta1 and beta2, each in [0, 1), for MPT_OPTIMIZER_LION (mpt_trainer_options_set_lion;
     *  unset, Keras's 0.9 and 0.99), as Keras computes it: w -= lr * sign(beta1 * m + (1 - beta1) * g),
     *  then m = beta2 * m + (1 - beta2) * g. Other values throw Error (INVALID_ARGUMENT), the options
     *  unchanged. The betas are the ones adam() sets too: the last call's. Lion ignores momentum().
     *  Checkpoints of a Lion trainer must match its betas. */
    TrainerOptions& lion(float beta1, float beta2) {
        detail::check(mpt_trainer_options_set_lion(get(), beta1, beta2));
        return *this;
    }
    /** RMSprop's rho in [0, 1) and epsilon (finite, > 0) for MPT_OPTIMIZER_RMSPROP
     *  (mpt_trainer_options_set_rmsprop; defaults 0.9 and 1e-7, as Keras's). Other values throw Error
     *  (INVALID_ARGUMENT), the options unchanged. The epsilon is the one adam() sets too: the last call's. */
    TrainerOptions& rmsprop(float rho, float epsilon) {
        detail::check(mpt_trainer_options_set_rmsprop(get(), rho, epsilon));
        return *this;
    }
    /** Centered RMSprop (Keras's centered=True; mpt_trainer_options_set_rmsprop_centered): the
     *  gradients' average a is kept too and v - a^2 replaces v under the root. */
    TrainerOptions& rmsprop_centered(bool centered) {
        detail::check(mpt_trainer_options_set_rmsprop_centered(get(), centered ? 1 : 0));
        return *this;
    }
    /** Decoupled weight decay, Keras's for every optimizer (mpt_trainer_options_set_weight_decay). */
    TrainerOptions& weight_decay(float value) { detail::check(mpt_trainer_options_set_weight_decay(get(), value)); return *this; }
    /** Gradient clipping by global norm (mpt_trainer_options_set_global_clipnorm), as Keras's
     *  global_clipnorm: every step the gradients of all weights and biases together are scaled by
     *  clipnorm / max(norm, clipnorm), norm their L2 norm; 0 (the default) turns it off. A negative, NaN
     *  or infinite bound throws Error (INVALID_ARGUMENT), the options unchanged. */
    TrainerOptions& global_clipnorm(float value) {
        detail::check(mpt_trainer_options_set_global_clipnorm(get(), value));
        return *this;
    }
    /** An exponential moving average of the weights (mpt_trainer_options_set_ema), as Keras's use_ema
     *  with ema_momentum: after every applied step each weight's and bias's average becomes
     *  momentum * average + (1 - momentum) * weight, the first applied step copying the weights;
     *  Trainer::swap_ema_weights() puts them in the model. momentum in (0, 1), or 0 (the default) to
     *  keep none; anything else throws Error (INVALID_ARGUMENT), the options unchanged. Checkpoints
     *  must match it (and then hold the averages). */
    TrainerOptions& ema_momentum(float momentum) {
        detail::check(mpt_trainer_options_set_ema(get(), momentum));
        return *this;
    }
    /** Gradient accumulation (mpt_trainer_options_set_micro_batch_size): a step over a batch of more
     *  than `rows` rows runs forward and backward on micro-batches of `rows` rows, adds up their
     *  gradients and makes the whole batch's one update (the same step but for rounding), with the
     *  step memory of a micro-batch plus the sums (4 bytes a parameter). 0 (the default): every
     *  batch in one pass; below 0 throws Error (INVALID_ARGUMENT). */
    TrainerOptions& micro_batch_size(int64_t rows) {
        detail::check(mpt_trainer_options_set_micro_batch_size(get(), rows));
        return *this;
    }
    /** A learning-rate schedule the library evaluates at every step (mpt_trainer_options_set_lr_schedule
     *  has the formulas): each step trains with the base rate times a factor, a linear warm-up over
     *  `warmup_steps` (>= 0; 0: none), then MPT_LR_SCHEDULE_CONSTANT (decay_steps 0, factor 1), LINEAR
     *  or COSINE down to base * factor over `decay_steps` (>= 1; factor in [0, 1]), or STEP (times factor
     *  every `decay_steps`; factor in (0, 1]). Without a factor: 1 for CONSTANT, 0 for LINEAR and
     *  COSINE (a decay to rate 0), 0.1 for STEP; a factor given is passed on as it is. Other values
     *  throw Error (INVALID_ARGUMENT). Trainer::scheduled_learning_rate() gives the next step's rate;
     *  the base rate stays Trainer::learning_rate(). */
    TrainerOptions& lr_schedule(mpt_lr_schedule schedule, int64_t warmup_steps, int64_t decay_steps = 0,
                                std::optional<float> factor = std::nullopt) {
        detail::check(mpt_trainer_options_set_lr_schedule(
            get(), schedule, warmup_steps, decay_steps, factor.value_or(detail::default_lr_schedule_factor(schedule))));
        return *this;
    }
    TrainerOptions& loss_scaling(mpt_loss_scaling mode, float initial_scale = 32768.0f) {
        detail::check(mpt_trainer_options_set_loss_scaling(get(), mode, initial_scale));
        return *this;
    }
    TrainerOptions& loss_scaler_dynamics(float growth_factor, float backoff_factor, int64_t growth_interval,
                                         float min_scale, float max_scale) {
        detail::check(mpt_trainer_options_set_loss_scaler_dynamics(get(), growth_factor, backoff_factor, growth_interval,
                                                                   min_scale, max_scale));
        return *this;
    }
    /** The options of the trainer that wrote the training checkpoint at `path`
     *  (mpt_trainer_options_create_from_checkpoint), to resume a run from the file alone:
     *  Trainer trainer(Model::load(context, path), TrainerOptions::from_checkpoint(path));
     *  trainer.load_checkpoint(path). Precision and loss scaling as it ran them, the base rate of its
     *  next step, micro_batch_size 0 (no checkpoint records it). Throws Error: INVALID_ARGUMENT for a
     *  model file, IO_ERROR for a missing one, CORRUPT_DATA for a damaged one, UNSUPPORTED for one of
     *  another major version. */
    static TrainerOptions from_checkpoint(const std::string& path) {
        mpt_trainer_options_t* raw = nullptr;
        detail::check(mpt_trainer_options_create_from_checkpoint(detail::c_path(path), &raw));
        return TrainerOptions(raw);
    }
    mpt_trainer_options_t* get() const noexcept { return handle_.get(); }

    /** Reading back (mpt_trainer_options_get_*): each setter's name without arguments gives what the
     *  options hold now, the defaults until set, the optimizer's own defaults (AdamW's weight decay
     *  0.004, Lion's beta2 0.99) unless a value was set. Trainer::options() gives a trainer's. */
    mpt_precision precision() const { return read(mpt_trainer_options_get_precision); }
    mpt_loss loss() const { return read(mpt_trainer_options_get_loss); }
    float huber_delta() const { return read(mpt_trainer_options_get_huber_delta); }
    float label_smoothing() const { return read(mpt_trainer_options_get_label_smoothing); }
    /** Empty when there are none (every weight 1). */
    std::vector<float> class_weights() const {
        int64_t count = 0;
        detail::check(mpt_trainer_options_get_class_weights(get(), nullptr, 0, &count));
        std::vector<float> weights(static_cast<size_t>(count));
        detail::check(mpt_trainer_options_get_class_weights(get(), weights.data(), count, &count));
        return weights;
    }
    mpt_optimizer optimizer() const { return read(mpt_trainer_options_get_optimizer); }
    float learning_rate() const { return read(mpt_trainer_options_get_learning_rate); }
    MomentumSetting momentum() const {
        float momentum = 0.0f;
        int nesterov = 0;
        detail::check(mpt_trainer_options_get_momentum(get(), &momentum, &nesterov));
        return {momentum, nesterov != 0};
    }
    AdamSetting adam() const {
        AdamSetting out;
        detail::check(mpt_trainer_options_get_adam(get(), &out.beta1, &out.beta2, &out.epsilon));
        return out;
    }
    LionSetting lion() const {
        LionSetting out;
        detail::check(mpt_trainer_options_get_lion(get(), &out.beta1, &out.beta2));
        return out;
    }
    RmspropSetting rmsprop() const {
        RmspropSetting out;
        detail::check(mpt_trainer_options_get_rmsprop(get(), &out.rho, &out.epsilon));
        return out;
    }
    bool rmsprop_centered() const { return read(mpt_trainer_options_get_rmsprop_centered) != 0; }
    float weight_decay() const { return read(mpt_trainer_options_get_weight_decay); }
    float global_clipnorm() const { return read(mpt_trainer_options_get_global_clipnorm); }
    float ema_momentum() const { return read(mpt_trainer_options_get_ema); }
    int64_t micro_batch_size() const { return read(mpt_trainer_options_get_micro_batch_size); }
    LrScheduleSetting lr_schedule() const {
        LrScheduleSetting out;
        detail::check(mpt_trainer_options_get_lr_schedule(get(), &out.schedule, &out.warmup_steps, &out.decay_steps,
                                                          &out.factor));
        return out;
    }
    LossScalingSetting loss_scaling() const {
        LossScalingSetting out;
        detail::check(mpt_trainer_options_get_loss_scaling(get(), &out.mode, &out.initial_scale));
        return out;
    }
    LossScalerDynamicsSetting loss_scaler_dynamics() const {
        LossScalerDynamicsSetting out;
        detail::check(mpt_trainer_options_get_loss_scaler_dynamics(get(), &out.growth_factor, &out.backoff_factor,
                                                                   &out.growth_interval, &out.min_scale,
                                                                   &out.max_scale));
        return out;
    }

private:
    friend class Trainer;  // Trainer::options() adopts its copy
    explicit TrainerOptions(mpt_trainer_options_t* adopted) noexcept : handle_(adopted) {}

    // One value through a getter of the C API.
    template <typename T>
    T read(mpt_status (*getter)(const mpt_trainer_options_t*, T*)) const {
        T out{};
        detail::check(getter(get(), &out));
        return out;
    }

    detail::Owned<mpt_trainer_options_t, mpt_trainer_options_destroy> handle_;
};

struct Evaluation {
    float loss = 0.0f;
    float accuracy = 0.0f;
};

struct LossScaleState {
    float scale = 0.0f;
    int64_t growth_tracker = 0;
    int64_t skipped_steps = 0;
};

/** The epoch fit left unfinished (Trainer::unfinished_epoch): all 0 when there is none. */
struct UnfinishedEpoch {
    int64_t steps = 0;       // its steps that ran
    int64_t rows = 0;        // the rows of the data set it trains on
    int64_t batch_size = 0;  // its batch size
};

/** Arguments of the progress callback; loss and accuracy are running means of the epoch. */
struct Progress {
    int64_t epoch;
    int64_t step;
    int64_t steps_per_epoch;
    float loss;
    float accuracy;
};

class Trainer {
public:
    /** Return true to stop training (as the C callbacks' non-zero): fit then throws Error with
     *  MPT_STATUS_CANCELLED. */
    using ProgressCallback = std::function<bool(const Progress&)>;
    using EpochEndCallback = std::function<bool(int64_t epoch, float loss, float accuracy)>;

    explicit Trainer(const Model& model) : Trainer(model, nullptr) {}
    Trainer(const Model& model, const TrainerOptions& options) : Trainer(model, options.get()) {}

    /** Either callback may be empty. They run on the thread that calls fit(). A callback may call
     *  set_callbacks (the new ones apply from the next call) or destroy this Trainer (fit then throws
     *  Error with MPT_STATUS_CANCELLED), as the C API allows. The epoch-end callback may call
     *  evaluate() on this Trainer (validation each epoch: the numbers of an evaluate() between
     *  one-epoch fits, and fit's run goes on unchanged); from the progress callback evaluate(), and
     *  from either fit(), step() and predict(), throw Error with MPT_STATUS_INVALID_STATE.
     *  gradient_norm() read from the progress callback is the reported step's. */
    void set_callbacks(ProgressCallback progress, EpochEndCallback epoch_end = {}) {
        Callbacks& callbacks = *checked_callbacks();
        auto functions = std::make_shared<const Callbacks::Functions>(
            Callbacks::Functions{std::move(progress), std::move(epoch_end)});
        detail::check(mpt_trainer_set_callbacks(get(), functions->progress ? &Callbacks::on_progress : nullptr,
                                                functions->epoch_end ? &Callbacks::on_epoch_end : nullptr, &callbacks));
        // A running callback holds its own reference to the functions it was called from.
        callbacks.functions = std::move(functions);
    }
    void fit(const Dataset& dataset, int64_t epochs, int64_t batch_size, bool shuffle = true) {
        // A callback may destroy this Trainer (the C trainer is then freed as the C call returns):
        // from here on only these locals are used, and they keep the callbacks' state and the log
        // callback (which the C context may still call) alive until fit has returned.
        const std::shared_ptr<Callbacks> callbacks = checked_callbacks();
        const std::shared_ptr<detail::LogState> log = log_;
        callbacks->error = nullptr;
        const mpt_status status = mpt_trainer_fit(get(), dataset.get(), epochs, batch_size, shuffle ? 1 : 0);
        if (callbacks->error) std::rethrow_exception(std::exchange(callbacks->error, nullptr));
        detail::check(status);
    }
    /** One step on rows [first, first + batch_size); returns the batch's mean loss. */
    float step(const Dataset& dataset, int64_t first, int64_t batch_size) {
        float loss = 0.0f;
        detail::check(mpt_trainer_step(get(), dataset.get(), first, batch_size, &loss));
        return loss;
    }
    Evaluation evaluate(const Dataset& dataset, int64_t batch_size = 0) {
        Evaluation result;
        detail::check(mpt_trainer_evaluate(get(), dataset.get(), batch_size, &result.loss, &result.accuracy));
        return result;
    }
    std::vector<float> predict(const std::vector<float>& inputs) {
        const int64_t rows = Model::rows_of(inputs.size(), input_features_);
        std::vector<float> out = detail::prediction_output(rows, input_features_, output_features_);
        detail::check(mpt_trainer_predict(get(), inputs.data(), rows, out.data(), static_cast<int64_t>(out.size())));
        return out;
    }
    /** predict's outputs for every row of `dataset` (only its samples are read), in batches of
     *  `batch_size` (0: the last training batch size, or 256); allowed from the epoch-end callback. */
    std::vector<float> predict(const Dataset& dataset, int64_t batch_size = 0) {
        const int64_t rows = dataset.rows();
        std::vector<float> out = detail::prediction_output(rows, input_features_, output_features_);
        detail::check(
            mpt_trainer_predict_dataset(get(), dataset.get(), batch_size, out.data(), static_cast<int64_t>(out.size())));
        return out;
    }
    mpt_precision precision() const {
        mpt_precision out{};
        detail::check(mpt_trainer_get_precision(get(), &out));
        return out;
    }
    /** The base rate: the options' until set, or restored by load_checkpoint(). Without a schedule
     *  (TrainerOptions::lr_schedule) it is the rate of the next step. */
    float learning_rate() const {
        float out = 0.0f;
        detail::check(mpt_trainer_get_learning_rate(get(), &out));
        return out;
    }
    /** A copy of the options this trainer was created with (mpt_trainer_get_options): the base rate
     *  as it is now, the precision as given (precision() gives the one it runs in). A Trainer created
     *  from them with the same initial weights trains as this one did from its creation, at this
     *  one's base rate now. */
    TrainerOptions options() const {
        mpt_trainer_options_t* copy = nullptr;
        detail::check(mpt_trainer_get_options(get(), &copy));
        return TrainerOptions(copy);
    }
    /** The base rate from the next step on (finite, > 0), also from fit's callbacks: a schedule.
     *  Checkpoints save and restore the rate; an automatic one at an epoch's end is written after that
     *  epoch's epoch-end callback, so it holds the rate the callback set. */
    void set_learning_rate(float learning_rate) {
        detail::check(mpt_trainer_set_learning_rate(get(), learning_rate));
    }
    /** The rate the next step trains with: the base rate times the schedule's factor at the step
     *  count (progress().first; on a GPU this waits for the steps issued). */
    float scheduled_learning_rate() const {
        float out = 0.0f;
        detail::check(mpt_trainer_get_scheduled_learning_rate(get(), &out));
        return out;
    }
    LossScaleState loss_scale() const {
        LossScaleState state;
        detail::check(mpt_trainer_get_loss_scale(get(), &state.scale, &state.growth_tracker, &state.skipped_steps));
        return state;
    }
    /** The global L2 norm of the last step's gradients (all weights and biases, the loss scale divided
     *  out) before clipping: what TrainerOptions::global_clipnorm compared with its bound (PyTorch's
     *  clip_grad_norm_ returns the same number). From a progress callback, the reported step's. Only a
     *  clipping trainer computes it: NaN (not an Error) without clipping, before the first step, after
     *  load_checkpoint(), and for a skipped step (its gradients not finite). */
    float gradient_norm() const {
        float out = 0.0f;
        detail::check(mpt_trainer_get_gradient_norm(get(), &out));
        return out;
    }
    /** Exchanges the model's weights with this trainer's moving averages (TrainerOptions::ema_momentum;
     *  without it Error with MPT_STATUS_INVALID_STATE); returns true when the model now holds the
     *  averages, false when its own weights are back (bit for bit). Meanwhile evaluate(), predict() and
     *  the Model's calls see the averages, and fit(), step() (of any trainer of the model),
     *  save_checkpoint() and load_checkpoint() throw Error with MPT_STATUS_INVALID_STATE. Before the
     *  first applied step the averages are the weights. Allowed from fit()'s epoch-end callback (exchange
     *  back before it returns, or fit's next epoch is refused), not from its progress callback. A Trainer
     *  destroyed while the model holds its averages leaves them there (Keras's way of finishing). */
    bool swap_ema_weights() {
        int holds_averages = 0;
        detail::check(mpt_trainer_swap_ema_weights(get(), &holds_averages));
        return holds_averages != 0;
    }
    /** {optimizer steps, completed epochs}. */
    std::pair<int64_t, int64_t> progress() const {
        int64_t steps = 0, epochs = 0;
        detail::check(mpt_trainer_get_progress(get(), &steps, &epochs));
        return {steps, epochs};
    }
    /** The rows of the last training step (fit's batch size, or the data set's rows when fewer; step's
     *  rows), whole batches; 0 before any; a checkpoint restores it, so a resumed run can fit on in the
     *  saved run's batches (mpt_trainer_get_batch_size: the exception of an unfinished epoch). */
    int64_t batch_size() const {
        int64_t rows = 0;
        detail::check(mpt_trainer_get_batch_size(get(), &rows));
        return rows;
    }
    /** The epoch fit left unfinished (cancelled, failed, or captured mid-epoch by a checkpoint that
     *  load_checkpoint() restored), which the next fit finishes on the same data in that batch size
     *  and abandons otherwise; all 0 when there is none (mpt_trainer_get_unfinished_epoch). */
    UnfinishedEpoch unfinished_epoch() const {
        UnfinishedEpoch epoch;
        detail::check(mpt_trainer_get_unfinished_epoch(get(), &epoch.steps, &epoch.rows, &epoch.batch_size));
        return epoch;
    }
    /** Writes a training checkpoint, atomically: fp32 master weights, optimizer and loss-scaler state,
     *  the learning rate, step and epoch counters, the position inside the epoch and the shuffle state. Loading it into a
     *  trainer of the same architecture and options and calling fit() continues the run bit-exactly on
     *  the CPU backend. */
    void save_checkpoint(const std::string& path) {
        detail::check(mpt_trainer_save_checkpoint(get(), detail::c_path(path)));
    }
    /** Restores a checkpoint, its learning rate included; the whole file is validated first, so a
     *  failure changes nothing. Error statuses: another architecture SHAPE_MISMATCH, other trainer
     *  options (all but the learning rate) or a model file INVALID_ARGUMENT, a missing
     *  file IO_ERROR, a damaged one CORRUPT_DATA, another major version UNSUPPORTED. */
    void load_checkpoint(const std::string& path) {
        detail::check(mpt_trainer_load_checkpoint(get(), detail::c_path(path)));
    }
    /** Checkpoints automatically during fit() into `directory` (which must exist) as
     *  checkpoint-<step>.safetensors, every `every_steps` optimizer steps and/or every `every_epochs`-th
     *  epoch (0 = not on that trigger; left out: every epoch unless `every_steps` is given), keeping the
     *  newest `keep_last` (>= 1). std::nullopt turns checkpointing off. A failed write stops fit() with
     *  MPT_STATUS_IO_ERROR. */
    void set_checkpointing(const std::optional<std::string>& directory, int64_t every_steps = 0,
                           std::optional<int64_t> every_epochs = std::nullopt, int64_t keep_last = 1) {
        const int64_t epochs = every_epochs ? *every_epochs : (every_steps == 0 ? 1 : 0);
        detail::check(mpt_trainer_set_checkpointing(get(), directory ? detail::c_path(*directory) : nullptr, every_steps,
                                                    epochs, keep_last));
    }
    /** {planned, allocated} arena bytes. */
    std::pair<size_t, size_t> memory() const {
        size_t planned = 0, allocated = 0;
        detail::check(mpt_trainer_get_memory(get(), &planned, &allocated));
        return {planned, allocated};
    }
    /** {seconds, steps} of the last epoch fit completed (device time on a GPU). */
    std::pair<double, int64_t> last_epoch_time() const {
        double seconds = 0.0;
        int64_t steps = 0;
        detail::check(mpt_trainer_get_last_epoch_time(get(), &seconds, &steps));
        return {seconds, steps};
    }
    mpt_trainer_t* get() const noexcept { return handle_.get(); }

private:
    // The user_data given to C. Heap-allocated so that it stays put when the Trainer is moved, and
    // shared with each running fit(), which outlives the Trainer if a callback destroys it.
    struct Callbacks {
        struct Functions {
            ProgressCallback progress;
            EpochEndCallback epoch_end;
        };
        // Replaced whole by set_callbacks; immutable, so a running call can keep its own alive.
        std::shared_ptr<const Functions> functions = std::make_shared<const Functions>();
        std::exception_ptr error;

        template <typename Call>
        static int invoke(void* user_data, Call call) noexcept {
            auto* self = static_cast<Callbacks*>(user_data);
            const std::shared_ptr<const Functions> running = self->functions;  // survives set_callbacks
            try {
                return call(*running) ? 1 : 0;
            } catch (...) {
                self->error = std::current_exception();
                return 1;
            }
        }
        static int on_progress(int64_t epoch, int64_t step, int64_t steps, float loss, float accuracy,
                               void* user_data) noexcept {
            return invoke(user_data, [&](const Functions& functions) {
                return functions.progress && functions.progress(Progress{epoch, step, steps, loss, accuracy});
            });
        }
        static int on_epoch_end(int64_t epoch, float loss, float accuracy, void* user_data) noexcept {
            return invoke(user_data, [&](const Functions& functions) {
                return functions.epoch_end && functions.epoch_end(epoch, loss, accuracy);
            });
        }
    };

    // Only a moved-from Trainer has none; it fails like every other call on it.
    const std::shared_ptr<Callbacks>& checked_callbacks() const {
        if (!callbacks_) throw Error(MPT_STATUS_INVALID_ARGUMENT, "trainer is NULL");
        return callbacks_;
    }

    Trainer(const Model& model, const mpt_trainer_options_t* options) : log_(model.log_state()) {
        mpt_trainer_t* raw = nullptr;
        detail::check(mpt_trainer_create(model.get(), options, &raw));
        handle_.reset(raw);
        input_features_ = model.input_features();
        output_features_ = model.output_features();
    }

    std::shared_ptr<detail::LogState> log_;
    std::shared_ptr<Callbacks> callbacks_ = std::make_shared<Callbacks>();  // outlives the handle
    detail::Owned<mpt_trainer_t, mpt_trainer_destroy> handle_;
    int64_t input_features_ = 0;
    int64_t output_features_ = 0;
};

}  // namespace mptrain

#endif /* MPTRAIN_HPP */
