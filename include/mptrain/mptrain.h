/*
 * mptrain.h — the C API of mptrain, an embeddable mixed-precision training runtime.
 *
 * This header is the specification. Conventions that hold for every function:
 *  - Fallible calls return mpt_status. MPT_STATUS_OK is 0; values are pinned forever and only
 *    appended. mpt_last_error() gives a thread-local message for the last failure on this thread.
 *  - Out-parameters are written only on success.
 *  - mpt_<class>_destroy(NULL) is a no-op. Child handles keep their parents alive (reference
 *    counts), so handles may be destroyed in any order.
 *  - No exception, abort or exit crosses this boundary; after an error every handle stays usable.
 *  - Threads: a context and everything created from it (its models, data sets and trainers) are
 *    used by one thread at a time, since they share one backend; different contexts may be used
 *    from different threads in parallel. A call on a handle of a context that another thread is
 *    using fails with MPT_STATUS_INVALID_STATE (the callbacks of the thread using it may call into
 *    it); a _destroy from another thread waits until that thread's call has returned, and calls
 *    other threads start while it waits (other than destroys) are refused, so later calls cannot
 *    keep it waiting (a callback must not wait for a thread that destroys a handle of a context in
 *    use). Functions marked
 *    "thread-safe" may be called from any thread at any time.
 *  - Sizes and counts are int64_t, byte counts size_t, strings UTF-8, booleans int (0 / non-zero).
 */
#ifndef MPTRAIN_H
#define MPTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  define MPT_API __declspec(dllimport)
#elif defined(__GNUC__)
#  define MPT_API __attribute__((visibility("default")))
#else
#  define MPT_API
#endif

#define MPT_VERSION_MAJOR 0
#define MPT_VERSION_MINOR 1
#define MPT_VERSION_PATCH 0

/** The most elements one caller's array may hold (a data set's samples, labels or targets, a
 *  prediction's inputs or outputs): larger ones give MPT_STATUS_INVALID_ARGUMENT. Bindings check it
 *  before they allocate an output for the library to fill. */
#define MPT_MAX_HOST_ELEMENTS (INT64_C(1) << 40)

/* ---------------------------------------------------------------------------------------------
 * Status codes (values pinned forever; new codes are only appended)
 * ------------------------------------------------------------------------------------------- */
typedef enum mpt_status {
    MPT_STATUS_OK = 0,
    MPT_STATUS_INVALID_ARGUMENT = 1, /* NULL handle or pointer, out-of-range value, bad name */
    MPT_STATUS_SHAPE_MISMATCH = 2,   /* data width or label count does not fit the model */
    MPT_STATUS_OUT_OF_MEMORY = 3,    /* allocation failed or the context's memory budget is exceeded */
    MPT_STATUS_IO_ERROR = 4,         /* a file could not be opened, read or written */
    MPT_STATUS_CORRUPT_DATA = 5,     /* a file has the wrong size, bad labels or bad structure */
    MPT_STATUS_INVALID_STATE = 6,    /* the call is not allowed now (e.g. adding a layer after use) */
    MPT_STATUS_NON_FINITE = 7,       /* NaN/Inf in input data, or a non-finite loss in training */
    MPT_STATUS_CANCELLED = 8,        /* a callback asked to stop */
    MPT_STATUS_BACKEND_UNAVAILABLE = 9, /* the requested backend is not built in or has no device */
    MPT_STATUS_BACKEND_ERROR = 10,   /* the backend (e.g. a CUDA call) failed */
    MPT_STATUS_UNSUPPORTED = 11,     /* the combination of options is not supported */
    MPT_STATUS_INTERNAL = 12         /* a bug in mptrain; the message says where */
} mpt_status;

typedef enum mpt_backend {
    MPT_BACKEND_AUTO = 0, /* CUDA when a usable GPU exists, else CPU */
    MPT_BACKEND_CPU = 1,
    MPT_BACKEND_CUDA = 2
} mpt_backend;

typedef enum mpt_dtype {
    MPT_DTYPE_DEFAULT = 0, /* per-layer override only: follow the precision policy */
    MPT_DTYPE_FP32 = 1,
    MPT_DTYPE_FP16 = 2,
    MPT_DTYPE_BF16 = 3
} mpt_dtype;

typedef enum mpt_precision {
    MPT_PRECISION_FP32 = 0,
    MPT_PRECISION_MIXED_FP16 = 1,
    MPT_PRECISION_MIXED_BF16 = 2,
    MPT_PRECISION_AUTO = 3 /* bf16 on CUDA cc >= 8.0, fp16 on 7.x; on the CPU bf16 with AMX, else fp32 */
} mpt_precision;

typedef enum mpt_activation {
    MPT_ACTIVATION_LINEAR = 0,
    MPT_ACTIVATION_RELU = 1,
    MPT_ACTIVATION_SIGMOID = 2,
    MPT_ACTIVATION_TANH = 3,
    MPT_ACTIVATION_SOFTMAX = 4,    /* last layer only */
    MPT_ACTIVATION_LEAKY_RELU = 5, /* Keras's "leaky_relu": z above 0, else 0.2 z */
    MPT_ACTIVATION_ELU = 6,        /* Keras's "elu": z above 0, else e^z - 1 */
    MPT_ACTIVATION_SELU = 7,       /* Keras's "selu": 1.0507 elu(z) with alpha 1.6733 */
    MPT_ACTIVATION_SOFTPLUS = 8,   /* log(1 + e^z) */
    MPT_ACTIVATION_SOFTSIGN = 9    /* z / (1 + |z|) */
} mpt_activation;

/* How a Dense layer's weights are drawn when its model is built: Keras's initializers of those names,
 * variance scale / n with n = fan_in (He: scale 2, LeCun: scale 1) or (fan_in + fan_out) / 2
 * (Glorot: scale 1); uniform in [-sqrt(3 scale / n), sqrt(3 scale / n)), or normal truncated to 2
 * stddev with the same variance. Biases start at 0. */
typedef enum mpt_initializer {
    MPT_INITIALIZER_GLOROT_UNIFORM = 0, /* the default, Keras's for Dense */
    MPT_INITIALIZER_GLOROT_NORMAL = 1,
    MPT_INITIALIZER_HE_UNIFORM = 2,
    MPT_INITIALIZER_HE_NORMAL = 3,      /* for ReLU layers (He et al. 2015) */
    MPT_INITIALIZER_LECUN_UNIFORM = 4,
    MPT_INITIALIZER_LECUN_NORMAL = 5    /* for SELU layers (self-normalising networks) */
} mpt_initializer;

/* How a loss reads the last layer. Cross-entropy (sparse or one-hot) after softmax or linear, and
 * binary cross-entropy after sigmoid, work on the logits (a linear layer's outputs are logits, as
 * Keras's from_logits=True). Other pairs follow Keras's from_logits=False: the outputs are taken
 * as probabilities (for cross-entropy renormalised to sum 1), clipped to [1e-7, 1 - 1e-7]; so a
 * last layer whose outputs are not probabilities there (relu, tanh, leaky_relu, elu, selu, softplus,
 * softsign; linear under binary cross-entropy) learns poorly. Unlike Keras, a row whose outputs sum to 0 or less is divided by
 * 1e-30 instead (all-zero relu outputs give -log(1e-7) per target and no gradient, not NaN).
 * The regression losses (mean squared error, mean absolute error, Huber) average their term
 * over the outputs, as Keras's: (y - t)^2; |y - t| (whose gradient is 0 where y = t); Huber's
 * (y - t)^2 / 2 where |y - t| <= delta, else delta (|y - t| - delta / 2).
 * Accuracy (fit's callbacks, evaluate): for binary cross-entropy, and for a regression loss with
 * one output, the fraction of outputs on the same side of 0.5 as their targets (the targets are
 * thresholded too, so soft targets count); otherwise the fraction of rows whose arg-max output is
 * the label, or the arg-max of the target row. */
typedef enum mpt_loss {
    MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 0, /* integer labels; softmax/linear last layer */
    MPT_LOSS_CATEGORICAL_CROSSENTROPY = 1, /* one-hot float targets, Keras semantics */
    MPT_LOSS_BINARY_CROSSENTROPY = 2,      /* float targets in [0,1]; sigmoid last layer */
    MPT_LOSS_MEAN_SQUARED_ERROR = 3,       /* float targets */
    MPT_LOSS_MEAN_ABSOLUTE_ERROR = 4,      /* float targets: mean |y - t| */
    MPT_LOSS_HUBER = 5                     /* float targets: Keras's Huber(delta), mpt_trainer_options_set_huber_delta */
} mpt_loss;

typedef enum mpt_optimizer {
    MPT_OPTIMIZER_SGD = 0,  /* momentum and Nesterov through the options */
    MPT_OPTIMIZER_ADAM = 1,
    MPT_OPTIMIZER_ADAMW = 2,
    MPT_OPTIMIZER_RMSPROP = 3, /* Keras's RMSprop; momentum (not Nesterov) through the options */
    MPT_OPTIMIZER_LION = 4     /* Keras's Lion: mpt_trainer_options_set_lion */
} mpt_optimizer;

/* Learning-rate schedules: see mpt_trainer_options_set_lr_schedule. */
typedef enum mpt_lr_schedule {
    MPT_LR_SCHEDULE_CONSTANT = 0, /* the base rate throughout (after any warm-up) */
    MPT_LR_SCHEDULE_LINEAR = 1,   /* down to base * factor in a straight line */
    MPT_LR_SCHEDULE_COSINE = 2,   /* down to base * factor along half a cosine period */
    MPT_LR_SCHEDULE_STEP = 3      /* multiplied by factor after every decay_steps steps */
} mpt_lr_schedule;

typedef enum mpt_loss_scaling {
    MPT_LOSS_SCALING_DEFAULT = 0, /* dynamic for fp16, off for bf16 and fp32 */
    MPT_LOSS_SCALING_OFF = 1,
    MPT_LOSS_SCALING_STATIC = 2,
    MPT_LOSS_SCALING_DYNAMIC = 3
} mpt_loss_scaling;

typedef enum mpt_log_level {
    MPT_LOG_LEVEL_DEBUG = 0,
    MPT_LOG_LEVEL_INFO = 1,
    MPT_LOG_LEVEL_WARNING = 2,
    MPT_LOG_LEVEL_ERROR = 3
} mpt_log_level;

typedef struct mpt_context mpt_context_t;
typedef struct mpt_context_options mpt_context_options_t;
typedef struct mpt_model mpt_model_t;
typedef struct mpt_dataset mpt_dataset_t;
typedef struct mpt_trainer mpt_trainer_t;
typedef struct mpt_trainer_options mpt_trainer_options_t;

/* ---------------------------------------------------------------------------------------------
 * Version, status, errors
 * ------------------------------------------------------------------------------------------- */

/** Version string "MAJOR.MINOR.PATCH" of the loaded library. Static storage. Thread-safe. */
MPT_API const char* mpt_version(void);

/** Static, human-readable name of a status ("MPT_STATUS_OK", ...). Unknown values give
 *  "MPT_STATUS_UNKNOWN". Thread-safe. */
MPT_API const char* mpt_status_string(mpt_status status);

/** Message of the last fallible call on this thread if it failed; "" if it succeeded (every
 *  fallible call clears the message as it starts). Owned by the library, valid until the next
 *  mptrain call on this thread. Thread-safe (thread-local). */
MPT_API const char* mpt_last_error(void);

/** Number of usable CUDA devices (0 when CUDA is not built in, or no driver or GPU exists).
 *  Thread-safe. */
MPT_API int mpt_cuda_device_count(void);

/* ---------------------------------------------------------------------------------------------
 * Context: backend, threads, seed, log callback, memory budget
 * ------------------------------------------------------------------------------------------- */

/** Log callback. `message` is valid only during the call. Called on the thread that made the
 *  mptrain call, possibly from the middle of an operation. It must not call back into mptrain on
 *  the same context: such calls fail with MPT_STATUS_INVALID_STATE (a log line can come from inside
 *  any call on that context's handles); the _destroy functions and other contexts may be used (a
 *  trainer destroyed there while it fits stops that fit with MPT_STATUS_CANCELLED, as from a
 *  progress callback). */
typedef void (*mpt_log_fn)(mpt_log_level level, const char* message, void* user_data);

/** Creates context options with defaults: backend AUTO, threads 0 (all cores), seed 42,
 *  device 0, no log callback, no memory budget.
 *  \param[out] out  new options; free with mpt_context_options_destroy. Thread-safe. */
MPT_API mpt_status mpt_context_options_create(mpt_context_options_t** out);
MPT_API void mpt_context_options_destroy(mpt_context_options_t* options);
/** Setters: one thread per handle at a time. */
MPT_API mpt_status mpt_context_options_set_backend(mpt_context_options_t* options, mpt_backend backend);
/** \param[in] threads  compute threads on the CPU backend; 0 = number of cores. */
MPT_API mpt_status mpt_context_options_set_threads(mpt_context_options_t* options, int threads);
MPT_API mpt_status mpt_context_options_set_seed(mpt_context_options_t* options, uint64_t seed);
MPT_API mpt_status mpt_context_options_set_device(mpt_context_options_t* options, int device);
MPT_API mpt_status mpt_context_options_set_log_callback(mpt_context_options_t* options,
                                                        mpt_log_fn callback, void* user_data);
/** Minimum level passed to the log callback (default INFO). */
MPT_API mpt_status mpt_context_options_set_log_level(mpt_context_options_t* options, mpt_log_level level);
/** Upper bound on the bytes of all arenas of this context; 0 = unlimited. Exceeding it at planning
 *  time fails with MPT_STATUS_OUT_OF_MEMORY before any work starts. Data sets kept in device memory
 *  count against it too (one that does not fit is streamed instead, see below), and so do the small
 *  buffers sized by the data set (row orders, staging slots), reserved when fit first needs them,
 *  the GPU backend's few KiB of reduction scratch (a budget below that fails context creation), and
 *  the CPU backend's GEMM scratch (packed operands per compute thread: about 1 MiB at batch 32 and
 *  6-9 MiB at batch 256 for a 3072-3000-1000-10 MLP in bf16 or fp16 on AMX), reserved as the GEMMs
 *  of a batch size first need it: a budget it exceeds fails that call with MPT_STATUS_OUT_OF_MEMORY
 *  before the step has changed any weight, and frees that scratch again. A trainer's weight copies
 *  for predictions (mpt_trainer_predict) count too, but give their room to anything that needs it. */
MPT_API mpt_status mpt_context_options_set_memory_budget(mpt_context_options_t* options, size_t bytes);
/** Device memory one data set may occupy on a GPU (its samples, labels and targets; a weighted
 *  data set's row weights are judged on their own, and should either stay in host memory the
 *  batches of that weighted data set are streamed). A data set within it is copied to the device on first use, and each batch is gathered and normalised there
 *  by one kernel. A larger one stays in host memory: each batch's rows are copied into one of two
 *  pinned buffers and sent on the copy stream while the previous batch computes. Default SIZE_MAX:
 *  resident whenever device memory and the memory budget allow, streamed otherwise; 0 streams every
 *  data set. The CPU backend reads data sets in place and ignores this. */
MPT_API mpt_status mpt_context_options_set_dataset_device_budget(mpt_context_options_t* options, size_t bytes);

/** Creates a context.
 *  \param[in]  options  may be NULL for defaults; not retained (may be destroyed afterwards).
 *  \param[out] out      new context; free with mpt_context_destroy. Thread-safe. */
MPT_API mpt_status mpt_context_create(const mpt_context_options_t* options, mpt_context_t** out);
/** Releases the caller's reference; the context lives on while models, datasets or trainers
 *  created from it exist. */
MPT_API void mpt_context_destroy(mpt_context_t* context);
/** The backend this context runs on (never AUTO). */
MPT_API mpt_status mpt_context_get_backend(const mpt_context_t* context, mpt_backend* out);
/** The precision that MPT_PRECISION_AUTO resolves to on this context. */
MPT_API mpt_status mpt_context_resolve_precision(const mpt_context_t* context, mpt_precision requested,
                                                 mpt_precision* out);
/** Bytes of backend memory this context holds now, and the most it ever held: its trainers' and
 *  models' arenas, datasets resident on the device, and the buffers trainers and the backend keep
 *  beside them (row orders, staging for streamed datasets, GEMM scratch). The memory budget bounds
 *  this number. The backend's scratch is held until the context goes. */
MPT_API mpt_status mpt_context_get_memory(const mpt_context_t* context, size_t* used_bytes,
                                          size_t* peak_bytes);
/** What this context runs on and how, as one JSON object (UTF-8, no whitespace), for logs and
 *  benchmark records. Members in every version: "version", "backend" ("cpu" or "cuda"), "device" (as
 *  the context's INFO log line names it), "auto_fallback" (why MPT_BACKEND_AUTO runs on the CPU
 *  although a GPU is present; "" otherwise), "memory_used_bytes", "memory_peak_bytes" (as
 *  mpt_context_get_memory) and "memory_budget_bytes" (0: none). Then the backend's:
 *  - cpu: "threads", "gemm_library", "amx" ("supported", "refused by Linux" or "absent"),
 *    "bf16_gemm" and "fp16_gemm" (how layers in that dtype multiply: "amx tiles", "avx512-bf16 dot
 *    products" (bf16 only) or "emulated in fp32"),
 *    "small_gemm" (the few-row GEMM kernels: "avx512", "avx512f", "avx2" or "none"),
 *    "max_abs_elements" (the values the updates' finiteness proofs have read so far).
 *  - cuda: "device_index", "compute_capability" ("9.0"), "multiprocessors"; "switches", the
 *    backend's paths as they are now (a path the device cannot run stays off whatever the
 *    environment asked; see the README's MPTRAIN_CUDA_* variables); "graphs" (step graphs
 *    "captures", "replays", "refusals" and "last_refusal", the reason the last one ran eagerly);
 *    "ops" (how many ops took each path, counted when an op runs eagerly or is captured, not per
 *    replay); "gemm" (cuBLASLt's refused fused epilogues and GEMM autotuning's counts).
 *  Later versions may add members; none is removed or renamed within a major version.
 *  Describing changes nothing (the CPU backend asks Linux for nothing, counters are only read).
 *  \param[out] length  the text's length in bytes, without the terminating NUL (not NULL).
 *  \param[out] text    when not NULL, the text and a NUL; `capacity` must then be at least
 *                      `*length + 1`, else MPT_STATUS_SHAPE_MISMATCH and nothing is written. Call once
 *                      with NULL to learn the length: nothing changes between the two calls unless
 *                      the context is used in between. */
MPT_API mpt_status mpt_context_describe(const mpt_context_t* context, char* text, size_t capacity, size_t* length);

/* ---------------------------------------------------------------------------------------------
 * Model: a sequential stack of Dense layers
 * ------------------------------------------------------------------------------------------- */

/** Creates an empty model taking `input_features` float inputs per sample (1 to 2^24).
 *  \param[out] out  new model (keeps `context` alive); free with mpt_model_destroy. */
MPT_API mpt_status mpt_model_create(mpt_context_t* context, int64_t input_features, mpt_model_t** out);
MPT_API void mpt_model_destroy(mpt_model_t* model);
/** Appends a Dense layer of 1 to 2^24 units (Glorot-uniform weights unless
 *  mpt_model_set_layer_initializer names another initializer, zero bias, as Keras; drawn from the
 *  context's seed alone, so models of one architecture created from one context start with the
 *  same weights: use contexts of different seeds, or mpt_model_set_weights, to start them apart). Fails with
 *  MPT_STATUS_INVALID_STATE once the model has been built (first trainer, predict or weight access).
 *  Softmax is allowed on the last layer only. */
MPT_API mpt_status mpt_model_add_dense(mpt_model_t* model, int64_t units, mpt_activation activation);
/** Overrides the compute dtype of one layer (Keras's dtype=): MPT_DTYPE_FP32 keeps that layer in
 *  fp32 under a mixed policy; MPT_DTYPE_DEFAULT follows the policy. Before the model is built. */
MPT_API mpt_status mpt_model_set_layer_dtype(mpt_model_t* model, int64_t layer, mpt_dtype dtype);
/** Layer `layer`'s dtype override: MPT_DTYPE_DEFAULT when it follows the policy; a layer out of
 *  range: MPT_STATUS_INVALID_ARGUMENT. */
MPT_API mpt_status mpt_model_get_layer_dtype(const mpt_model_t* model, int64_t layer, mpt_dtype* out);
/** Dropout after a hidden layer, as a Keras Dropout(rate) layer after it: while a trainer trains
 *  (fit, step), each of the layer's outputs is dropped (set to 0) with probability `rate` in [0, 1)
 *  and the kept ones are multiplied by 1 / (1 - rate); evaluate and predict use every output.
 *  0 (the default; -0 as 0) means none. A step's masks are drawn from the trainer's seed (the
 *  context's, or a checkpoint's) and its step count, so a run with one seed drops the same values
 *  on every backend and every resume, and a step's backward pass masks its gradient as its
 *  forward masked the outputs. The model's architecture: saved with it, and checkpoints must match
 *  it. Before the model is built; building a model whose last layer has dropout fails with
 *  MPT_STATUS_INVALID_STATE (the last layer's outputs are the model's). A rate near 1 scales the
 *  kept outputs by up to 1 / (1 - rate), which under mixed-fp16 can overflow (skipped steps).
 *  \param[in] layer  0 to the layer count - 1.
 *  \param[in] rate   in [0, 1); NaN and anything else fail with MPT_STATUS_INVALID_ARGUMENT.
 *  One thread per model at a time. */
MPT_API mpt_status mpt_model_set_layer_dropout(mpt_model_t* model, int64_t layer, float rate);
/** \param[in]  layer  0 to the layer count - 1.
 *  \param[out] out    layer `layer`'s dropout rate (0: none). */
MPT_API mpt_status mpt_model_get_layer_dropout(const mpt_model_t* model, int64_t layer, float* out);
/** Dropout on the inputs, as a Keras Dropout(rate) layer before the first Dense layer: while a
 *  trainer trains, each input value of a batch is dropped with probability `rate` in [0, 1) and the
 *  kept ones are multiplied by 1 / (1 - rate); evaluate and predict use every input. Its masks are
 *  drawn as a layer's (the trainer's seed and step count), apart from every layer's. The model's
 *  architecture, as a layer's dropout: saved with it, checkpoints must match it, set before the
 *  model is built (else MPT_STATUS_INVALID_STATE). A rate outside [0, 1), NaN included:
 *  MPT_STATUS_INVALID_ARGUMENT. One thread per model at a time. */
MPT_API mpt_status mpt_model_set_input_dropout(mpt_model_t* model, float rate);
MPT_API mpt_status mpt_model_get_input_dropout(const mpt_model_t* model, float* out);
/** Makes the model standardize its inputs, as a Keras Normalization layer before the first Dense
 *  layer: input feature f becomes (x - mean[f]) / max(stddev[f], 1e-7), each operation rounded in
 *  float32, before any rounding to the compute dtype, in fit, step, evaluate and predict_dataset
 *  (x: what the dataset gives, a uint8 sample after its scale and offset) and in mpt_model_predict
 *  and mpt_trainer_predict (x: the caller's input) alike. Saved with the model (model files and
 *  checkpoints, tensors "input.mean" and "input.stddev"), so a loaded model predicts from raw
 *  inputs as the trained one did; whether the model standardizes is its architecture (a checkpoint
 *  must match it), the values are state that loading a checkpoint restores (a file recording a
 *  standardization without both tensors, or either tensor without recording one, is corrupt data;
 *  an mptrain older than this function would ignore both). The values a model's
 *  inputs have as mpt_dataset_get_feature_statistics of its training set gives them (Keras's
 *  adapt), for example. `mean` and `stddev` hold `count` = input features values each (else
 *  MPT_STATUS_SHAPE_MISMATCH), means finite and standard deviations finite and >= 0 (else
 *  MPT_STATUS_INVALID_ARGUMENT naming the first feature outside that); they are copied and replace
 *  any the model had. Both NULL with `count` 0 removes it. A trainer refuses a standardized
 *  dataset (mpt_dataset_create_standardized) for such a model with MPT_STATUS_INVALID_ARGUMENT:
 *  that would standardize twice. At any time but while a trainer fits the model (a callback:
 *  MPT_STATUS_INVALID_STATE); the next step, evaluation or prediction reads it. On a GPU the 8
 *  bytes a feature live in device memory. What mpt_dataset_create_standardized says of features
 *  constant over the training rows holds here too. One thread per model at a time. */
MPT_API mpt_status mpt_model_set_input_standardization(mpt_model_t* model, const float* mean, const float* stddev,
                                                       int64_t count);
/** Whether the model standardizes its inputs, and by what (as set, or as its file held).
 *  \param[out] standardizes  1 when the model standardizes its inputs, else 0 (not NULL).
 *  \param[out] mean, stddev   when it does and they are not NULL, `count` = input features values
 *                             each (else MPT_STATUS_SHAPE_MISMATCH): the means and standard
 *                             deviations as set (not floored); untouched when it does not, or
 *                             when the call fails. Either or both may be NULL (`count` unread).
 *  One thread per model at a time. */
MPT_API mpt_status mpt_model_get_input_standardization(const mpt_model_t* model, float* mean, float* stddev,
                                                       int64_t count, int* standardizes);
/** How layer `layer`'s weights are drawn when the model is built (Keras's kernel_initializer; the
 *  default MPT_INITIALIZER_GLOROT_UNIFORM). A layer's draws depend on the context's seed, its place
 *  and its own initializer alone, so one seed gives one set of initial weights and another layer's
 *  initializer changes none of them. Uniform draws are exact float arithmetic; normal ones go
 *  through the C library's log and cos, so another platform's may differ in a last bit. Before the model is built (else
 *  MPT_STATUS_INVALID_STATE); not saved with the model, whose file holds the weights themselves (a
 *  loaded model reports the default). An unknown initializer or layer: MPT_STATUS_INVALID_ARGUMENT.
 *  One thread per model at a time. */
MPT_API mpt_status mpt_model_set_layer_initializer(mpt_model_t* model, int64_t layer, mpt_initializer initializer);
MPT_API mpt_status mpt_model_get_layer_initializer(const mpt_model_t* model, int64_t layer, mpt_initializer* out);
/** Freezes layer `layer` (`trainable` 0) or lets it train (non-zero; the default), as Keras's
 *  `layer.trainable` and PyTorch's `requires_grad`: for fine-tuning a loaded model's last layers, say.
 *  A trainer's steps leave a frozen layer's weights and bias, and their optimizer state, exactly as
 *  they are: they take no gradient of them (weight decay included), leave them out of the global
 *  norm that clipping takes (mpt_trainer_options_set_global_clipnorm, mpt_trainer_get_gradient_norm)
 *  and of the proof that a step is finite, and do not average them (weight averaging): swapping the
 *  averages in (mpt_trainer_swap_ema_weights) leaves a frozen layer as it is, and a layer that
 *  trains again starts its average from its weights. Gradients still flow through a frozen layer to
 *  the trainable ones below it; below the lowest trainable layer no input gradient is computed at
 *  all, so a step with the lower layers frozen costs less. At any time: the next step of every
 *  trainer of the model reads it (from a progress callback on a GPU, the next step not yet queued,
 *  as for mpt_trainer_set_learning_rate; each set of frozen layers is its own CUDA graph, captured
 *  on its second step). Adam keeps one step count for all layers' bias correction, as Keras does.
 *  Training with every layer frozen fails with MPT_STATUS_INVALID_STATE and changes nothing. Saved
 *  with the model (model files, and the model of a checkpoint file that mpt_model_load reads); a
 *  trainer loading a checkpoint keeps its model's own flags, so a run resumes bit-exactly only with
 *  the flags it had. A layer out of range: MPT_STATUS_INVALID_ARGUMENT. One thread per model at a
 *  time. */
MPT_API mpt_status mpt_model_set_layer_trainable(mpt_model_t* model, int64_t layer, int trainable);
/** \param[out] out  1 when layer `layer` trains, 0 when it is frozen. */
MPT_API mpt_status mpt_model_get_layer_trainable(const mpt_model_t* model, int64_t layer, int* out);
MPT_API mpt_status mpt_model_get_layer_count(const mpt_model_t* model, int64_t* out);
/** Layer `layer`'s width (its units) and activation, as added or as the loaded file holds them; a
 *  layer out of range: MPT_STATUS_INVALID_ARGUMENT. */
MPT_API mpt_status mpt_model_get_layer_units(const mpt_model_t* model, int64_t layer, int64_t* out);
MPT_API mpt_status mpt_model_get_layer_activation(const mpt_model_t* model, int64_t layer, mpt_activation* out);
MPT_API mpt_status mpt_model_get_input_features(const mpt_model_t* model, int64_t* out);
MPT_API mpt_status mpt_model_get_output_features(const mpt_model_t* model, int64_t* out);
/** Number of trainable parameters (weights + biases, unpadded). */
MPT_API mpt_status mpt_model_get_parameter_count(const mpt_model_t* model, int64_t* out);
/** Copies layer `layer`'s fp32 master weights (row-major [units, inputs]) and bias ([units]).
 *  Either pointer may be NULL to skip it. Counts must match exactly. Builds the model. */
MPT_API mpt_status mpt_model_get_weights(mpt_model_t* model, int64_t layer, float* weights,
                                         int64_t weight_count, float* bias, int64_t bias_count);
/** Sets layer `layer`'s weights and bias (same layout as get). Builds the model. Trainers that
 *  exist see the new values at their next step. NaN or Inf in either array gives
 *  MPT_STATUS_NON_FINITE and changes nothing. */
MPT_API mpt_status mpt_model_set_weights(mpt_model_t* model, int64_t layer, const float* weights,
                                         int64_t weight_count, const float* bias, int64_t bias_count);
/** Forward pass in fp32 for `rows` samples of `input_features` floats (standardized first when
 *  the model standardizes its inputs); writes the last layer's
 *  activation output ([rows, output_features]) to `out`. NaN or Inf in the inputs, or an input
 *  that standardizing makes infinite, gives MPT_STATUS_NON_FINITE before anything is written (a
 *  ReLU would otherwise turn it into plausible outputs). Builds the model. */
MPT_API mpt_status mpt_model_predict(mpt_model_t* model, const float* inputs, int64_t rows,
                                     float* out, int64_t out_count);

/** Saves the architecture and fp32 weights as a .safetensors file (8-byte header length, JSON header
 *  with architecture, precision and mptrain version in __metadata__, raw little-endian tensors
 *  "layers.<i>.weight" [units, inputs] and "layers.<i>.bias", and "input.mean" and "input.stddev"
 *  for a model that standardizes its inputs, each checksummed with CRC32C, as is
 *  the header itself), so the weights also open in Python's safetensors or numpy. The write is atomic and durable: a crash
 *  leaves the old file or the new one. Builds the model. MPT_STATUS_IO_ERROR when it cannot write. */
MPT_API mpt_status mpt_model_save(mpt_model_t* model, const char* path);
/** Loads a model written by mpt_model_save (or the model inside a training checkpoint). A truncated,
 *  corrupted or malformed file gives MPT_STATUS_CORRUPT_DATA, a file from another major version
 *  MPT_STATUS_UNSUPPORTED, a missing file MPT_STATUS_IO_ERROR; nothing is ever read out of bounds.
 *  \param[out] out  new model (keeps `context` alive). */
MPT_API mpt_status mpt_model_load(mpt_context_t* context, const char* path, mpt_model_t** out);

/* ---------------------------------------------------------------------------------------------
 * Dataset: samples (uint8 or float32) with int32 labels or float targets
 * ------------------------------------------------------------------------------------------- */

/** Copies `rows` samples of `features` bytes each plus one int32 label per sample. Samples are
 *  normalised as x * scale + offset when batched (CIFAR: scale 1/255, offset 0). Labels must lie in
 *  [0, num_classes). The caller's buffers are not retained.
 *  \param[out] out  new dataset (keeps `context` alive). */
MPT_API mpt_status mpt_dataset_create_u8(mpt_context_t* context, const uint8_t* samples, int64_t rows,
                                         int64_t features, const int32_t* labels, int32_t num_classes,
                                         float scale, float offset, mpt_dataset_t** out);
/** Copies float32 samples with int32 labels. With `check_finite` non-zero a NaN or Inf sample
 *  fails with MPT_STATUS_NON_FINITE. */
MPT_API mpt_status mpt_dataset_create_f32(mpt_context_t* context, const float* samples, int64_t rows,
                                          int64_t features, const int32_t* labels, int32_t num_classes,
                                          int check_finite, mpt_dataset_t** out);
/** Copies float32 samples with float32 targets ([rows, target_width]) for one-hot categorical,
 *  binary cross-entropy or the regression losses. `check_finite` as above (also checks targets). */
MPT_API mpt_status mpt_dataset_create_f32_targets(mpt_context_t* context, const float* samples,
                                                  int64_t rows, int64_t features, const float* targets,
                                                  int64_t target_width, int check_finite,
                                                  mpt_dataset_t** out);
/** Loads CIFAR-10 from the binary release's directory: `train` non-zero reads data_batch_1..5.bin
 *  (50,000 images), zero reads test_batch.bin (10,000). `limit` > 0 keeps only the first `limit`
 *  records and opens only the files they come from. Each file opened must be exactly 30,730,000
 *  bytes and every label read must be 0..9, else MPT_STATUS_CORRUPT_DATA (MPT_STATUS_IO_ERROR when
 *  a file is missing or unreadable). Samples stay uint8 and are scaled by 1/255 when batched. */
MPT_API mpt_status mpt_dataset_load_cifar10(mpt_context_t* context, const char* directory, int train,
                                            int64_t limit, mpt_dataset_t** out);
MPT_API void mpt_dataset_destroy(mpt_dataset_t* dataset);
MPT_API mpt_status mpt_dataset_get_rows(const mpt_dataset_t* dataset, int64_t* out);
MPT_API mpt_status mpt_dataset_get_features(const mpt_dataset_t* dataset, int64_t* out);
/** Copies the dataset's integer labels (a slice's own rows') to `out`, which holds `count` = its
 *  rows of them (else MPT_STATUS_SHAPE_MISMATCH); a dataset of float targets has none
 *  (MPT_STATUS_INVALID_ARGUMENT). With mpt_trainer_predict_dataset: a confusion matrix or per-class
 *  accuracy of a loaded data set. */
MPT_API mpt_status mpt_dataset_get_labels(const mpt_dataset_t* dataset, int32_t* out, int64_t count);
/** A dataset of rows [first, first + rows) of `dataset` that shares its storage: nothing is copied,
 *  and on a GPU one device copy of the whole storage serves `dataset` and all its slices (placed
 *  when any of them is first used, within the context's dataset device budget as a whole). Labels
 *  or targets, classes and normalisation are `dataset`'s. For a held-out validation set (Keras's
 *  validation_split holds out the last rows, before any shuffling) or a first or last fold: a slice
 *  is one range, so the rows around a middle fold are not one (mpt_dataset_create_subset copies
 *  any rows). The slice keeps the storage
 *  alive when `dataset` is destroyed; a slice of a slice counts from that slice's first row.
 *  `first` outside [0, rows of `dataset`) or `rows` outside [1, rows of `dataset` - first] gives
 *  MPT_STATUS_INVALID_ARGUMENT.
 *  \param[out] out  new dataset (keeps the context alive). */
MPT_API mpt_status mpt_dataset_create_slice(const mpt_dataset_t* dataset, int64_t first, int64_t rows,
                                            mpt_dataset_t** out);
/** A dataset of `dataset`'s rows with a weight per row: Keras's sample_weight, for fit and evaluate
 *  alike. In mpt_trainer_fit, mpt_trainer_step and mpt_trainer_evaluate each row's loss (and in
 *  training its gradient) is multiplied by its weight (in training also by its class weight, where
 *  the trainer has class weights: evaluate leaves those out), then averaged over the rows as
 *  before: the weights are not normalised (Keras's sum_over_batch_size), so the losses reported are
 *  the weighted ones. Accuracy counts every row once. Every loss takes row weights. `weights` holds `count` floats, one per row of `dataset`
 *  (count = its rows, else MPT_STATUS_SHAPE_MISMATCH), each finite and >= 0 (else
 *  MPT_STATUS_INVALID_ARGUMENT); they are copied, and replace any weights `dataset` had. The rows
 *  themselves are shared, not copied, as by a slice; a slice of a weighted dataset keeps its rows'
 *  weights. On a GPU the weights are placed on the device beside the rows (4 bytes a row).
 *  \param[out] out  new dataset (keeps the context alive). */
MPT_API mpt_status mpt_dataset_create_weighted(const mpt_dataset_t* dataset, const float* weights, int64_t count,
                                               mpt_dataset_t** out);
/** A dataset of copies of `dataset`'s rows rows[0], ..., rows[count - 1], in that order: any rows,
 *  where a slice is one range. For k-fold cross-validation (a fold's training rows are all the
 *  others), a stratified or shuffled split, or a bootstrap sample (a row may be listed more than
 *  once). Each row brings its label or targets and its weight (of a weighted dataset); classes
 *  and normalisation are `dataset`'s, and binary cross-entropy judges the subset's own targets.
 *  Unlike a slice the rows are copied, into a storage of the subset's own (on a GPU placed on the
 *  device apart from `dataset`'s, when first used); `dataset` may be destroyed afterwards.
 *  `rows` holds `count` >= 1 indices, each in [0, rows of `dataset`) (a slice's count from its own
 *  first row); anything else gives MPT_STATUS_INVALID_ARGUMENT naming the first index outside it.
 *  \param[out] out  new dataset (keeps the context alive). */
MPT_API mpt_status mpt_dataset_create_subset(const mpt_dataset_t* dataset, const int64_t* rows, int64_t count,
                                             mpt_dataset_t** out);
/** A dataset of `dataset`'s rows (shared, not copied, as by a slice) whose samples are
 *  standardized feature by feature, as Keras's Normalization layer does: feature f of every batch
 *  holds (x - mean[f]) / max(stddev[f], 1e-7), where x is what `dataset` gives (a uint8 sample
 *  after its scale and offset: CIFAR's byte / 255), each operation rounded in float32, before any
 *  rounding to the compute dtype. For fit, step, evaluate and predict_dataset alike;
 *  mpt_model_predict and mpt_trainer_predict take their inputs as given: to have those
 *  standardized too, and saved with the model, standardize in the model instead
 *  (mpt_model_set_input_standardization; a trainer refuses a standardized dataset for such a
 *  model). A uint8 data set stays 1 byte a value where standardized float copies would take 4.
 *  `mean` and `stddev` hold `count` = features values each (else MPT_STATUS_SHAPE_MISMATCH), means
 *  finite and standard deviations finite and >= 0 (else MPT_STATUS_INVALID_ARGUMENT naming the
 *  first feature outside that); they are copied and replace any standardization `dataset` had.
 *  Slices, weighted views and subsets of the result keep it. On a GPU the 8 bytes a feature live
 *  in device memory whatever the dataset device budget. Use the training set's statistics
 *  (mpt_dataset_get_feature_statistics) for the validation and test sets too. A feature constant
 *  over the training rows (deviation 0) but not in another set becomes (x - mean) / 1e-7 there,
 *  which mixed-fp16 cannot hold more than 6.5e-3 away from the mean (65504 x 1e-7: Inf in the
 *  batch): give such a feature a deviation of 1 to leave it unscaled, as scikit-learn's
 *  StandardScaler does.
 *  \param[out] out  new dataset (keeps the context alive). */
MPT_API mpt_status mpt_dataset_create_standardized(const mpt_dataset_t* dataset, const float* mean,
                                                   const float* stddev, int64_t count, mpt_dataset_t** out);
/** Each feature's mean and standard deviation (the population's, divided by the rows, as Keras's
 *  Normalization.adapt computes the variance) over the dataset's rows (a slice's own), of the
 *  values its batches hold in float32 (standardized ones, for a standardized dataset), summed in
 *  double in two passes. `mean` and `stddev` hold `count` = features values each (else
 *  MPT_STATUS_SHAPE_MISMATCH); either may be NULL when not wanted. Row weights play no part (nor
 *  do they in adapt). Then mpt_dataset_create_standardized with them gives features of mean 0 and
 *  standard deviation 1 (0, for a feature constant over the rows). A feature with a NaN or
 *  infinite value (a data set created without check_finite) gets a NaN or infinite mean or
 *  standard deviation, as adapt does, which mpt_dataset_create_standardized refuses. */
MPT_API mpt_status mpt_dataset_get_feature_statistics(const mpt_dataset_t* dataset, float* mean, float* stddev,
                                                      int64_t count);

/* ---------------------------------------------------------------------------------------------
 * Trainer options: precision, loss, optimizer, loss scaler
 * ------------------------------------------------------------------------------------------- */

/** Defaults: precision AUTO, loss sparse categorical cross-entropy (no label smoothing), SGD with
 *  lr 0.01 (for every optimizer), momentum 0,
 *  Adam betas 0.9/0.999 (Lion: 0.9/0.99), RMSprop rho 0.9, epsilon 1e-7 (Keras), weight decay 0 (AdamW: 0.004 as Keras),
 *  loss scaling DEFAULT with initial scale 2^15, growth factor 2, backoff 0.5, growth interval
 *  2000, bounds [1, 2^24]. Thread-safe. */
MPT_API mpt_status mpt_trainer_options_create(mpt_trainer_options_t** out);
MPT_API void mpt_trainer_options_destroy(mpt_trainer_options_t* options);
MPT_API mpt_status mpt_trainer_options_set_precision(mpt_trainer_options_t* options, mpt_precision precision);
MPT_API mpt_status mpt_trainer_options_set_loss(mpt_trainer_options_t* options, mpt_loss loss);
/** Huber's delta (MPT_LOSS_HUBER; default 1, Keras's): where |y - t| exceeds it the loss grows
 *  linearly and its gradient is +-delta, so outlying targets pull no harder than that. Finite and
 *  above 0, else MPT_STATUS_INVALID_ARGUMENT. Read by the Huber loss only; an option a checkpoint of
 *  a Huber trainer must match. One thread per options handle at a time. */
MPT_API mpt_status mpt_trainer_options_set_huber_delta(mpt_trainer_options_t* options, float delta);
/** Label smoothing s in [0, 1) for the cross-entropy losses (default 0: none; 1 would train every
 *  row towards the uniform target, learning nothing). Training then aims at
 *  t (1 - s) + s / n instead of each target t, with n the model's outputs (its classes) for the
 *  categorical losses (integer labels as one-hot rows over them) and 2 for binary cross-entropy: Keras's
 *  `label_smoothing` and PyTorch's `CrossEntropyLoss(label_smoothing=)`. A confident model is kept
 *  from pushing its logits without bound. The loss that fit, step and evaluate report is the
 *  smoothed one (as Keras's is), so it does not reach 0; accuracy still compares with the given
 *  labels. The regression losses (squared, absolute, Huber) take none: mpt_trainer_create refuses a non-zero s with them
 *  (MPT_STATUS_INVALID_ARGUMENT). Label smoothing is one of the options a checkpoint must match. */
MPT_API mpt_status mpt_trainer_options_set_label_smoothing(mpt_trainer_options_t* options, float label_smoothing);
/** Class weights for the categorical cross-entropy losses (sparse or one-hot), as Keras's
 *  `fit(class_weight=)`: in training (fit, step) each row's loss and gradient are multiplied by
 *  weights[c], c its label (for float targets, the first largest target), and still averaged over
 *  the batch's rows, so fit's and step's losses are the weighted ones. mpt_trainer_evaluate reports
 *  the unweighted loss (as Keras's evaluate, which takes no class weights), accuracy likewise.
 *  `count` must equal the model's outputs when the trainer is created (else mpt_trainer_create fails
 *  with MPT_STATUS_SHAPE_MISMATCH); weights are finite, >= 0 and not all 0. count 0 (weights may be
 *  NULL) removes them (the default: every weight 1). Other losses refuse class weights at
 *  mpt_trainer_create (MPT_STATUS_INVALID_ARGUMENT). The weights are copied, and are one of the
 *  options a checkpoint must match. */
MPT_API mpt_status mpt_trainer_options_set_class_weights(mpt_trainer_options_t* options, const float* weights,
                                                         int64_t count);
MPT_API mpt_status mpt_trainer_options_set_optimizer(mpt_trainer_options_t* options, mpt_optimizer optimizer);
MPT_API mpt_status mpt_trainer_options_set_learning_rate(mpt_trainer_options_t* options, float learning_rate);
/** SGD momentum in [0, 1); `nesterov` non-zero for Nesterov momentum. Keras's formulation:
 *  v = momentum * v - lr * g, then w += v (Nesterov: w += momentum * v - lr * g). RMSprop takes the
 *  momentum too (see mpt_trainer_options_set_rmsprop), not Nesterov's (with a momentum above 0,
 *  mpt_trainer_create then fails with MPT_STATUS_INVALID_ARGUMENT); Adam and Lion ignore it. -0 is 0. */
MPT_API mpt_status mpt_trainer_options_set_momentum(mpt_trainer_options_t* options, float momentum, int nesterov);
/** Adam and AdamW, as Keras computes them: m and v are the moving averages of g and g^2, and after t
 *  applied steps w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon). Epsilon is
 *  added to the uncorrected sqrt(v), so it weighs more than PyTorch's (which adds it to
 *  sqrt(v / (1 - beta2^t))): the same epsilon gives slightly different steps there. */
MPT_API mpt_status mpt_trainer_options_set_adam(mpt_trainer_options_t* options, float beta1, float beta2,
                                                float epsilon);
/** Lion (MPT_OPTIMIZER_LION; Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as
 *  Keras's keras.optimizers.Lion computes it: after each step's gradient g (the loss scale divided
 *  out), w -= lr * sign(beta1 * m + (1 - beta1) * g), then m = beta2 * m + (1 - beta2) * g. m starts
 *  at 0; sign(0) is 0. Besides the weight decay, every weight moves by the rate or not at all, so
 *  Lion wants a rate 3-10 times smaller than AdamW's (the default rate is 0.01 here, Keras's Lion
 *  takes 0.001); the paper raises the decay by as much, which mpt_trainer_options_set_weight_decay
 *  takes up to its bound below 1. One state array where Adam keeps two (4 bytes a parameter less).
 *  beta1 and beta2 in [0, 1) (MPT_STATUS_INVALID_ARGUMENT otherwise): unlike Keras, beta1 0 (the
 *  sign of the gradient alone, "signSGD") is taken and beta1 1 (the momentum alone) refused; -0 is
 *  0. Unset, Lion takes Keras's defaults 0.9 and 0.99. They are the betas
 *  mpt_trainer_options_set_adam sets too: the last call's. Lion ignores the momentum of
 *  mpt_trainer_options_set_momentum, as Adam does. */
MPT_API mpt_status mpt_trainer_options_set_lion(mpt_trainer_options_t* options, float beta1, float beta2);
/** RMSprop (MPT_OPTIMIZER_RMSPROP) as Keras computes it: after each step's gradient g,
 *  v = rho * v + (1 - rho) * g^2 and w -= lr * g / sqrt(v + epsilon), epsilon under the root (PyTorch
 *  adds it to sqrt(v), so the same epsilon gives slightly different steps there); with momentum m
 *  (mpt_trainer_options_set_momentum), u = m * u + lr * g / sqrt(v + epsilon) and w -= u. v starts
 *  at 0. rho in [0, 1), epsilon finite and > 0 (MPT_STATUS_INVALID_ARGUMENT otherwise; defaults 0.9
 *  and 1e-7). The epsilon is the one mpt_trainer_options_set_adam sets too: the last call's.
 *  Centered or not: mpt_trainer_options_set_rmsprop_centered. */
MPT_API mpt_status mpt_trainer_options_set_rmsprop(mpt_trainer_options_t* options, float rho, float epsilon);
/** Centered RMSprop (`centered` non-zero; default 0), Keras's `centered=True`: the gradients'
 *  average a = rho * a + (1 - rho) * g is kept as well (a third state array with momentum, a second
 *  without), and the root is of their variance estimate: w -= lr * g / sqrt(v - a^2 + epsilon), with
 *  v - a^2 taken as 0 where rounding leaves it below (Keras's root is NaN there once it is below
 *  -epsilon). It normalises by the gradients' spread rather than their size. PyTorch's
 *  `centered=True` differs as its uncentered RMSprop does (epsilon beside the root; with momentum
 *  the rate outside the velocity). Read by RMSprop only; an option a checkpoint of an RMSprop
 *  trainer must match. */
MPT_API mpt_status mpt_trainer_options_set_rmsprop_centered(mpt_trainer_options_t* options, int centered);
/** Decoupled weight decay, as Keras's optimizers' weight_decay (every one of them; PyTorch's AdamW):
 *  each step first multiplies every weight and bias (of the layers not frozen:
 *  mpt_model_set_layer_trainable) by (1 - rate * weight_decay), where rate is that
 *  step's learning rate (the schedule's included), and the optimizer's rule then applies the
 *  gradient. A value set here, 0 included, is kept whether it is set before or after the optimizer;
 *  otherwise AdamW uses 0.004 and the others 0. In [0, 1). Plain SGD (no momentum) keeps its fast
 *  paths with decay: the step is keep * w - rate * g, keep = 1 - rate * weight_decay, which the CPU
 *  writes as one GEMM into the weights and the GPU's fused SGD kernel as one pass over them. */
MPT_API mpt_status mpt_trainer_options_set_weight_decay(mpt_trainer_options_t* options, float weight_decay);
/** Gradient clipping by global norm, as Keras's `global_clipnorm` and PyTorch's
 *  `clip_grad_norm_(max_norm)` (default 0: off). Every step, the gradients of all weights and
 *  biases together (a frozen layer has none: mpt_model_set_layer_trainable) are scaled by
 *  clipnorm / max(norm, clipnorm), norm their L2 norm, before the
 *  optimizer sees them: a step's direction is kept and its length bounded. The norm is that of the
 *  true gradients: with loss scaling, of the gradients after the loss scale is divided out (as
 *  PyTorch's `scaler.unscale_` before clipping), so a clipped step does not depend on the loss
 *  scale. A step whose gradients are not finite is skipped as without clipping. Weight decay is
 *  not a gradient and is not clipped. clipnorm must be finite and > 0, or 0 to turn clipping off
 *  (MPT_STATUS_INVALID_ARGUMENT otherwise). Clipping keeps every layer's gradient in memory at once
 *  (4 bytes a parameter, in the step's memory) and reads them once more a step. It is one of the
 *  options a checkpoint must match. */
MPT_API mpt_status mpt_trainer_options_set_global_clipnorm(mpt_trainer_options_t* options, float clipnorm);
/** An exponential moving average of the weights (EMA; Keras's `use_ema` with `ema_momentum`,
 *  PyTorch's AveragedModel with get_ema_multi_avg_fn), for evaluation: after every applied step
 *  each weight's and bias's average becomes momentum * average + (1 - momentum) * weight, the first
 *  applied step copying the weights; a skipped step (non-finite gradients) leaves the averages, and
 *  a frozen layer (mpt_model_set_layer_trainable) is not averaged (swapped in, it keeps its weights).
 *  momentum must be in (0, 1) (0.99 and 0.999 are usual), or 0 (the default) to keep none
 *  (MPT_STATUS_INVALID_ARGUMENT otherwise). The averages take 4 bytes a parameter (of the layout
 *  padded to multiples of 8, as the weights) of the trainer's memory and one more pass over the parameters a step. mpt_trainer_swap_ema_weights puts them in
 *  the model. It is one of the options a checkpoint must match (which then holds the averages). */
MPT_API mpt_status mpt_trainer_options_set_ema(mpt_trainer_options_t* options, float momentum);
/** Gradient accumulation: a step over a batch of more than `rows` rows runs its forward and
 *  backward passes on micro-batches of `rows` rows (the last may have fewer), adds up their weight
 *  and bias gradients, then makes its one update, so that a large batch trains with the step memory
 *  of a small one, plus the sums: 4 bytes a parameter of the trainer's memory from its first step
 *  in micro-batches (mpt_trainer_get_memory). The step is the whole batch's: its mean loss, its
 *  gradients, their norm and clipping, one skip when any micro-batch's gradients are not finite,
 *  one step of the schedule, the loss scaler and the weights' average, the same dropout masks, so
 *  it equals the step in one pass but for rounding (sums taken in another order) and for the
 *  finiteness proof, which bounds each micro-batch's share of the sum and so, with gradients near
 *  fp32's overflow, may skip a step that one pass would apply. What fit and
 *  mpt_trainer_step count and report are still steps; the step's loss is the whole batch's. After a
 *  step in micro-batches, the micro-batch size is evaluate's and predict_dataset's default batch
 *  size (mpt_trainer_predict's the larger of it and 256). rows must be >= 0; 0 (the default) runs
 *  every batch in one pass (MPT_STATUS_INVALID_ARGUMENT otherwise). Not recorded in checkpoints: a
 *  run may resume with another micro-batch size. */
MPT_API mpt_status mpt_trainer_options_set_micro_batch_size(mpt_trainer_options_t* options, int64_t rows);
/** A learning-rate schedule that the library evaluates at every step (default: CONSTANT, no warm-up).
 *  Step s, counted from 0 over the trainer's life with skipped steps included (the count that
 *  mpt_trainer_get_progress gives and checkpoints keep), trains with the base rate
 *  (mpt_trainer_options_set_learning_rate, mpt_trainer_set_learning_rate) times a factor:
 *  (s + 1) / warmup_steps while s < warmup_steps (a linear warm-up; 0: none), then, with
 *  d = s - warmup_steps steps into the decay and f = `factor`:
 *   CONSTANT  1 (decay_steps must be 0 and factor 1);
 *   LINEAR    f + (1 - f) * (1 - d / decay_steps), and f from d = decay_steps on;
 *   COSINE    f + (1 - f) * (1 + cos(pi * d / decay_steps)) / 2, and f from d = decay_steps on
 *             (Keras's CosineDecay with alpha f; PyTorch's CosineAnnealingLR with eta_min base * f);
 *   STEP      f^floor(d / decay_steps) (PyTorch's StepLR with step_size decay_steps, gamma f).
 *  LINEAR and COSINE take decay_steps >= 1 and f in [0, 1], STEP decay_steps >= 1 and f in (0, 1];
 *  warmup_steps >= 0. The factor is computed in float where the step runs, on a GPU by the update
 *  kernels from the step count in device memory: the rate changes every step with no kernel
 *  argument changing, CUDA graphs keep replaying (unlike a rate set from a callback every step)
 *  and the run is the same on
 *  every backend, fit or mpt_trainer_step alike (on a GPU to within float rounding: the device's
 *  sine and power functions may differ from the CPU's in the last bits). A schedule may bring the
 *  rate to exactly 0 (LINEAR or COSINE to f = 0, or STEP after some 150 halvings): the gradient
 *  then moves no weight (SGD's momentum still does), and training goes on. The schedule is one of
 *  the options a checkpoint must match; the step count it reads is restored with the checkpoint. */
MPT_API mpt_status mpt_trainer_options_set_lr_schedule(mpt_trainer_options_t* options, mpt_lr_schedule schedule,
                                                       int64_t warmup_steps, int64_t decay_steps, float factor);
/** Loss scaling. Unless it is dynamic (DYNAMIC, or DEFAULT in fp16), a step whose loss or gradients
 *  are NaN or Inf skips its update and fit/step fail with MPT_STATUS_NON_FINITE. With dynamic
 *  scaling such a step is the scaler's business while it can back off: its update is skipped, the
 *  scale shrinks and training goes on (as in other frameworks), the skips readable through
 *  mpt_trainer_get_loss_scale. Once the scale is at its minimum (min_scale, 1 by default) backing
 *  off cannot help, so a step that overflows there is skipped and fit/step fail with
 *  MPT_STATUS_NON_FINITE (as DeepSpeed's raise_error_at_min_scale), rather than skip every step
 *  from then on unseen: with the default dynamics, a run whose loss diverged or whose data holds NaN
 *  or Inf fails at its 16th overflow from 2^15 without 2000 finite steps between them. On a GPU fit
 *  finds it as it finds any non-finite step: at the step's progress callback, or without one at the
 *  end of the epoch (whose other steps ran). The trainer stays usable: its scale stays at the
 *  minimum, and a finite step trains. To find NaN data before training, check it when creating the
 *  data set (`check_finite`). */
MPT_API mpt_status mpt_trainer_options_set_loss_scaling(mpt_trainer_options_t* options, mpt_loss_scaling mode,
                                                        float initial_scale);
/** Dynamic scaler parameters: growth factor > 1, backoff in (0, 1), interval >= 1,
 *  1 <= min_scale <= max_scale. */
MPT_API mpt_status mpt_trainer_options_set_loss_scaler_dynamics(mpt_trainer_options_t* options,
                                                                float growth_factor, float backoff_factor,
                                                                int64_t growth_interval, float min_scale,
                                                                float max_scale);

/** Reading options back. Each getter gives what the options hold now: the defaults above until a
 * setter changes them, after mpt_trainer_options_set_optimizer the optimizer's own defaults (AdamW's
 * weight decay 0.004, Lion's beta2 0.99) unless a value was set, and a -0 that was set as 0. So an
 * application reports the hyperparameters it trains with without repeating the library's defaults,
 * and mpt_trainer_get_options gives a trainer's. Out-parameters are written only on success. A getter
 * of one value takes no NULL out (MPT_STATUS_INVALID_ARGUMENT); a getter of several writes those not
 * NULL. Thread-safe with other readers; one thread per options handle while a setter runs. */
MPT_API mpt_status mpt_trainer_options_get_precision(const mpt_trainer_options_t* options, mpt_precision* out);
MPT_API mpt_status mpt_trainer_options_get_loss(const mpt_trainer_options_t* options, mpt_loss* out);
MPT_API mpt_status mpt_trainer_options_get_huber_delta(const mpt_trainer_options_t* options, float* out);
MPT_API mpt_status mpt_trainer_options_get_label_smoothing(const mpt_trainer_options_t* options, float* out);
/** The class weights held, 0 when there are none (every weight 1).
 *  \param[out] count    the number of weights held (not NULL).
 *  \param[out] weights  when not NULL, the weights; `capacity` must then be at least `*count`, else
 *                       MPT_STATUS_SHAPE_MISMATCH and nothing is written. */
MPT_API mpt_status mpt_trainer_options_get_class_weights(const mpt_trainer_options_t* options, float* weights,
                                                         int64_t capacity, int64_t* count);
MPT_API mpt_status mpt_trainer_options_get_optimizer(const mpt_trainer_options_t* options, mpt_optimizer* out);
MPT_API mpt_status mpt_trainer_options_get_learning_rate(const mpt_trainer_options_t* options, float* out);
/** \param[out] nesterov  1 for Nesterov momentum, else 0. */
MPT_API mpt_status mpt_trainer_options_get_momentum(const mpt_trainer_options_t* options, float* momentum,
                                                    int* nesterov);
/** Adam's betas and epsilon: the betas Lion reads too, the epsilon RMSprop reads too. */
MPT_API mpt_status mpt_trainer_options_get_adam(const mpt_trainer_options_t* options, float* beta1, float* beta2,
                                                float* epsilon);
/** Lion's betas: the ones mpt_trainer_options_get_adam gives. */
MPT_API mpt_status mpt_trainer_options_get_lion(const mpt_trainer_options_t* options, float* beta1, float* beta2);
MPT_API mpt_status mpt_trainer_options_get_rmsprop(const mpt_trainer_options_t* options, float* rho, float* epsilon);
/** \param[out] out  1 for centered RMSprop, else 0. */
MPT_API mpt_status mpt_trainer_options_get_rmsprop_centered(const mpt_trainer_options_t* options, int* out);
/** The weight decay the trainer applies: the value set, else the optimizer's default (AdamW 0.004,
 *  the others 0). */
MPT_API mpt_status mpt_trainer_options_get_weight_decay(const mpt_trainer_options_t* options, float* out);
MPT_API mpt_status mpt_trainer_options_get_global_clipnorm(const mpt_trainer_options_t* options, float* out);
MPT_API mpt_status mpt_trainer_options_get_ema(const mpt_trainer_options_t* options, float* out);
MPT_API mpt_status mpt_trainer_options_get_micro_batch_size(const mpt_trainer_options_t* options, int64_t* out);
MPT_API mpt_status mpt_trainer_options_get_lr_schedule(const mpt_trainer_options_t* options,
                                                       mpt_lr_schedule* schedule, int64_t* warmup_steps,
                                                       int64_t* decay_steps, float* factor);
MPT_API mpt_status mpt_trainer_options_get_loss_scaling(const mpt_trainer_options_t* options,
                                                        mpt_loss_scaling* mode, float* initial_scale);
MPT_API mpt_status mpt_trainer_options_get_loss_scaler_dynamics(const mpt_trainer_options_t* options,
                                                                float* growth_factor, float* backoff_factor,
                                                                int64_t* growth_interval, float* min_scale,
                                                                float* max_scale);

/** The options of the trainer that wrote the training checkpoint at `path`
 *  (mpt_trainer_save_checkpoint), so that a run resumes from the file alone, as Keras's load_model
 *  restores the optimizer: mpt_model_load(context, path, &model) (the checkpoint holds the model),
 *  this, mpt_trainer_create(model, options, &trainer), mpt_trainer_load_checkpoint(trainer, path),
 *  then fit. The precision and loss scaling are the ones the trainer ran (AUTO and DEFAULT resolved:
 *  e.g. MPT_PRECISION_MIXED_BF16 and MPT_LOSS_SCALING_OFF), the learning rate is the base rate of
 *  its next step, every other option its own value, set (a later mpt_trainer_options_set_optimizer
 *  keeps the weight decay and betas). A checkpoint records no micro-batch size: it is 0 (set it
 *  again for a run that used one), and options that the trainer's loss or optimizer does not read
 *  (Huber's delta without the Huber loss, RMSprop's rho without RMSprop) are not recorded and read
 *  as their defaults. A model file (not a checkpoint) gives MPT_STATUS_INVALID_ARGUMENT, a missing
 *  file MPT_STATUS_IO_ERROR, a damaged file or options no trainer takes MPT_STATUS_CORRUPT_DATA,
 *  another major version MPT_STATUS_UNSUPPORTED.
 *  \param[out] out  new options, the caller's to destroy (mpt_trainer_options_destroy). Thread-safe. */
MPT_API mpt_status mpt_trainer_options_create_from_checkpoint(const char* path, mpt_trainer_options_t** out);

/* ---------------------------------------------------------------------------------------------
 * Trainer: fit, step, evaluate, predict
 * ------------------------------------------------------------------------------------------- */

/** Per-step progress. Return non-zero to cancel fit (it then returns MPT_STATUS_CANCELLED; if every
 *  step of the epoch has run by then, the epoch is complete and still gets its epoch-end callback
 *  and automatic checkpoint first, as after a step that fails with MPT_STATUS_NON_FINITE there).
 *  `epoch` counts from 0 over the trainer's life; `step` runs from 1 to `steps_per_epoch` within it.
 *  `loss` and `accuracy` are the running means of the epoch so far, exactly as of that step. On the
 *  CPU it is called after each step. On a GPU the numbers come back asynchronously through pinned
 *  memory, so the call for a step arrives once the device has finished it (a few steps later; every
 *  step is reported, in order) and never stalls the device; a cancel then also stops the steps
 *  already queued behind it (at most 8). */
typedef int (*mpt_progress_fn)(int64_t epoch, int64_t step, int64_t steps_per_epoch, float loss,
                               float accuracy, void* user_data);
/** End of each epoch (`epoch` counts from 0); return non-zero to stop training (fit then returns
 *  MPT_STATUS_CANCELLED). `loss` and `accuracy` are the epoch's means. It runs before the epoch's
 *  automatic checkpoint (mpt_trainer_set_checkpointing), with no step queued on a GPU. */
typedef int (*mpt_epoch_end_fn)(int64_t epoch, float loss, float accuracy, void* user_data);

/** Creates a trainer for `model` (builds the model; keeps it alive). The arena is planned at the
 *  first step for that batch size and planned again only when a larger batch comes, or a step in
 *  one pass after the plan was made without one (by evaluate or predict, or by steps in
 *  micro-batches: mpt_trainer_options_set_micro_batch_size), for the gradient memory such a step
 *  may need; a new plan serves all the old one did. Its weight
 *  copies and optimizer state are allocated here: under a memory budget too small for them this
 *  fails with MPT_STATUS_OUT_OF_MEMORY.
 *  \param[in] options  may be NULL for defaults; not retained. */
MPT_API mpt_status mpt_trainer_create(mpt_model_t* model, const mpt_trainer_options_t* options,
                                      mpt_trainer_t** out);
MPT_API void mpt_trainer_destroy(mpt_trainer_t* trainer);
/** Callbacks used by mpt_trainer_fit; either may be NULL. They run on the thread that called fit,
 *  between two steps, and may call other mptrain functions, with these rules for this trainer:
 *   - fit, step, predict, mpt_trainer_load_checkpoint and mpt_trainer_set_checkpointing return
 *     MPT_STATUS_INVALID_STATE, and so does evaluate from the progress callback;
 *   - evaluate from the epoch-end callback runs (fit is between epochs there, nothing queued):
 *     validation each epoch, for early stopping or a schedule of the caller's own. It leaves fit's
 *     run as it was (weights, metrics, row order, the shuffle to come) and is not counted in the
 *     epoch's time; a batch size above fit's (0 takes fit's) plans the step buffers again, which on
 *     a GPU costs fit's next steps their CUDA graphs until captured again (should that plan not fit
 *     the memory budget, evaluate returns MPT_STATUS_OUT_OF_MEMORY and fit's next epoch plans its own
 *     buffers again);
 *   - mpt_trainer_save_checkpoint saves the run as of the steps issued so far (on a GPU possibly a
 *     few steps past the one reported), as an automatic checkpoint would;
 *   - mpt_trainer_swap_ema_weights runs from the epoch-end callback, as evaluate does (exchange back
 *     before it returns); another trainer of the same model may not exchange its averages from
 *     either callback (MPT_STATUS_INVALID_STATE: fit's next steps would train them);
 *   - mpt_trainer_destroy stops fit (it returns MPT_STATUS_CANCELLED) and the trainer is freed as
 *     fit returns;
 *   - mpt_trainer_set_learning_rate applies from the next step fit issues;
 *   - mpt_trainer_set_callbacks replaces the callbacks from the next call on (a progress callback
 *     set where fit started without one may be called from the next fit only).
 *  Destroying the data set being fitted, the model or the context is allowed: fit keeps what it
 *  uses until it returns. A callback written in C++ that throws stops training: fit returns
 *  MPT_STATUS_CANCELLED with the exception's message. */
MPT_API mpt_status mpt_trainer_set_callbacks(mpt_trainer_t* trainer, mpt_progress_fn progress,
                                             mpt_epoch_end_fn epoch_end, void* user_data);
/** Trains for `epochs` epochs in batches of `batch_size` (the last partial batch of an epoch is
 *  dropped unless it is the only one). `shuffle` non-zero reshuffles each epoch from the seed.
 *  An epoch left unfinished (fit cancelled or failed mid-epoch, or a checkpoint taken inside one) is
 *  finished first, in its order, when the data, the batch size and shuffling are the same, and
 *  counts as one of `epochs`; otherwise it is abandoned (an INFO log line says so) and a new epoch
 *  starts. The same data: the same rows (the dataset fit was given, a weighted or standardized view
 *  of it, or another slice of the same range), or, for an epoch loaded from a checkpoint, any data
 *  of the same number of rows. A fit that fails before the first step of a new epoch has run (out of memory
 *  for its scratch, say) leaves the shuffle where it was: called again, it trains what it would have. */
MPT_API mpt_status mpt_trainer_fit(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t epochs,
                                   int64_t batch_size, int shuffle);
/** One training step on rows [first, first + batch_size) of `dataset`, for custom loops. Its loss
 *  is no part of an epoch fit left unfinished: that epoch's running loss and accuracy (its
 *  callbacks', its checkpoints') leave it out, succeeded or failed, and fit still finishes the epoch
 *  (the step counts as a step everywhere else: progress, schedule, dropout masks, checkpoints).
 *  \param[out] loss  optional: the batch's mean loss (before scaling). */
MPT_API mpt_status mpt_trainer_step(mpt_trainer_t* trainer, const mpt_dataset_t* dataset, int64_t first,
                                    int64_t batch_size, float* loss);
/** Mean loss and accuracy over the whole dataset, in the trainer's precision, batches of
 *  `batch_size` (0 = the last training batch size, or its micro-batch size when smaller, or 256).
 *  Either output may be NULL. An epoch fit left unfinished keeps its running loss and accuracy,
 *  whether the evaluation succeeds or fails. */
MPT_API mpt_status mpt_trainer_evaluate(mpt_trainer_t* trainer, const mpt_dataset_t* dataset,
                                        int64_t batch_size, float* loss, float* accuracy);
/** Outputs of the last layer for `rows` float samples (standardized first when the model
 *  standardizes its inputs) as the trainer's loss reads them, in the
 *  trainer's precision: probabilities for softmax and sigmoid, and for a linear last layer under
 *  a cross-entropy loss the softmax of its logits (mpt_model_predict gives the logits themselves);
 *  `out` holds rows * output_features floats. NaN or Inf in the inputs (or standardized inputs)
 *  gives MPT_STATUS_NON_FINITE. On a CPU with AMX (and the
 *  AVX-512 small-GEMM kernels, which MPTRAIN_CPU_SMALL_GEMM can turn off), a mixed-precision
 *  trainer's predictions on a few rows (up to 6 in bf16, 8 in fp16) read 16-bit copies of the
 *  weights from the second prediction on unchanged weights on: the same outputs from half the
 *  bytes. The copies take 2 bytes per parameter of the context's memory (mpt_trainer_get_memory
 *  counts them) until this trainer's next fit, step or evaluate, its first prediction on changed
 *  weights, or a prediction on more rows than planned, gives them back. They are a cache: anything
 *  else in the context that needs their room under the memory budget (a data set, another trainer's
 *  plan, GEMM scratch; not another trainer's copies) takes it, except while a prediction reads them;
 *  where the budget has no room for them, predictions read the fp32 weights, with the same outputs. */
MPT_API mpt_status mpt_trainer_predict(mpt_trainer_t* trainer, const float* inputs, int64_t rows,
                                       float* out, int64_t out_count);
/** The outputs mpt_trainer_predict gives, for every row of `dataset` in order (Keras's
 *  model.predict on a dataset: the test set loaded by mpt_dataset_load_cifar10, a slice), in the
 *  trainer's precision, in batches of `batch_size` (0 = the last training batch size, or its
 *  micro-batch size when smaller, or 256). Only the samples are read: the dataset's labels, targets (of any width) and row weights play no part.
 *  `out` holds rows * output_features floats (else MPT_STATUS_SHAPE_MISMATCH). Like evaluate, it
 *  may run from fit's epoch-end callback, not from its progress callback. */
MPT_API mpt_status mpt_trainer_predict_dataset(mpt_trainer_t* trainer, const mpt_dataset_t* dataset,
                                               int64_t batch_size, float* out, int64_t out_count);
/** The precision this trainer runs in (AUTO resolved). */
MPT_API mpt_status mpt_trainer_get_precision(const mpt_trainer_t* trainer, mpt_precision* out);
/** Sets the base learning rate (finite, > 0) of the steps from the next one on: between fits, or
 *  from fit's callbacks (an epoch-end callback that sets the next epoch's rate: a schedule of the
 *  caller's own, such as a decay on a plateau). Under a schedule (mpt_trainer_options_set_lr_schedule)
 *  the steps train with this rate times the schedule's factor; a warm-up or a per-step decay is
 *  best left to that schedule. On a GPU the steps already queued when a progress callback
 *  runs (at most 8; see mpt_progress_fn) keep the rate they were issued with, so how many depends
 *  on timing: a schedule that must repeat exactly sets the rate from the epoch-end callback (which
 *  runs with no step queued) or between fits. A rate that none of the step's recent CUDA graphs was
 *  captured with costs the next steps their graphs until each of the two batch slots' steps has run
 *  once eagerly and once captured (four steps): a rate changed every step runs every step eagerly.
 *  The rate is part of the run: checkpoints save it and mpt_trainer_load_checkpoint restores it. */
MPT_API mpt_status mpt_trainer_set_learning_rate(mpt_trainer_t* trainer, float learning_rate);
/** The base learning rate: the options' until set or restored from a checkpoint. Without a
 *  schedule (mpt_trainer_options_set_lr_schedule) it is the rate of the next step. */
MPT_API mpt_status mpt_trainer_get_learning_rate(const mpt_trainer_t* trainer, float* out);
/** A copy of the options the trainer was created with, for reporting them or for creating another
 *  trainer like it (which, from the same initial weights, trains as this one did from its creation,
 *  but at this one's base rate now): the precision as given (AUTO stays AUTO; mpt_trainer_get_precision gives the one
 *  it runs in), the base learning rate as it is now (mpt_trainer_set_learning_rate or a checkpoint may
 *  have changed it), everything else as it was. Setters on the copy then behave as on the original
 *  options: a weight decay or betas that were set stay when the optimizer changes, defaults follow it.
 *  Used as the trainer's other calls are (one thread per context at a time; also from its
 *  callbacks).
 *  \param[out] out  new options, the caller's to destroy (mpt_trainer_options_destroy); they do not
 *                   keep the trainer alive. */
MPT_API mpt_status mpt_trainer_get_options(const mpt_trainer_t* trainer, mpt_trainer_options_t** out);
/** The rate the next step trains with: the base rate times the schedule's factor at the trainer's
 *  step count (mpt_trainer_get_progress: from a progress callback on a GPU, the rate of the step
 *  after the last one queued, a few steps past the one reported). Never waits for the device. */
MPT_API mpt_status mpt_trainer_get_scheduled_learning_rate(const mpt_trainer_t* trainer, float* out);
/** Loss scaler state: current scale, consecutive finite steps since the last change, and the number
 *  of updates skipped for non-finite gradients. Any pointer may be NULL. From a progress callback it
 *  is the state as of the step being reported (on a GPU a few steps behind the device, like the
 *  callback's loss), read from that step's report without waiting for the device. */
MPT_API mpt_status mpt_trainer_get_loss_scale(const mpt_trainer_t* trainer, float* scale,
                                              int64_t* growth_tracker, int64_t* skipped_steps);
/** The global L2 norm of the last step's gradients (all weights and biases of the layers not frozen,
 *  the loss scale divided out), before clipping: what gradient clipping compared with its bound, so that step was clipped
 *  when the norm exceeds it (mpt_trainer_options_set_global_clipnorm; PyTorch's clip_grad_norm_
 *  returns the same number). From a progress callback it is the reported step's, read as
 *  mpt_trainer_get_loss_scale reads the scaler. Only a clipping trainer computes it: NaN without
 *  clipping, before the first step, after a checkpoint is loaded, and for a skipped step (its
 *  gradients are not finite). To watch the norm without clipping, clip to a bound no norm reaches
 *  (FLT_MAX), at clipping's cost. */
MPT_API mpt_status mpt_trainer_get_gradient_norm(const mpt_trainer_t* trainer, float* out);
/** Exchanges the model's weights with the trainer's moving averages (mpt_trainer_options_set_ema;
 *  else MPT_STATUS_INVALID_STATE): afterwards evaluate, predict, mpt_model_get_weights,
 *  mpt_model_predict and mpt_model_save see the averaged weights; called again, it brings the
 *  trained weights back, bit for bit. Before the first applied step the averages are the weights
 *  themselves. While the model holds a trainer's averages, fit and step (of any trainer of the
 *  model), mpt_trainer_save_checkpoint and mpt_trainer_load_checkpoint return
 *  MPT_STATUS_INVALID_STATE, and while another trainer of the model is inside fit (this call from
 *  its callback) the exchange does: the trained weights and their averages must be in their places for
 *  those. Weights set in the model meanwhile (mpt_model_set_weights) are what the next exchange
 *  moves into the averages' place. Destroying the trainer while the model holds its averages
 *  leaves them there (Keras's way of finishing an EMA run). Allowed from fit's epoch-end callback
 *  (to evaluate the averages each epoch; exchange them back before it returns, or fit's next epoch
 *  and automatic checkpoint refuse), not from its progress callback.
 *  \param[out] holds_averages  optional: 1 when the model now holds the averages, 0 when its own. */
MPT_API mpt_status mpt_trainer_swap_ema_weights(mpt_trainer_t* trainer, int* holds_averages);
/** Optimizer steps taken (skipped updates included) and completed epochs. The steps are those issued
 *  so far: from a progress callback on a GPU, a few steps past the one reported, counted without
 *  waiting for the device (so a progress bar may call it every step). */
MPT_API mpt_status mpt_trainer_get_progress(const mpt_trainer_t* trainer, int64_t* steps, int64_t* epochs);
/** The rows of the trainer's last training step: fit's batch_size (the data set's rows when it has
 *  fewer) or mpt_trainer_step's rows, whole batches even when they run in micro-batches; 0 before
 *  any step. A call that issues no step (0 epochs, a failure first) leaves it. Allowed from fit's
 *  callbacks. A checkpoint saves it, but within an epoch fit left unfinished that epoch's batch size
 *  (which resuming the epoch takes, whatever step ran since), and mpt_trainer_load_checkpoint
 *  restores what was saved, so a program resuming a run can fit on in the saved run's batches.
 *  mpt_trainer_evaluate's and mpt_trainer_predict_dataset's batch_size 0 is this (or the
 *  micro-batch size, when smaller; 256 while it is 0). */
MPT_API mpt_status mpt_trainer_get_batch_size(const mpt_trainer_t* trainer, int64_t* rows);
/** The epoch that fit left unfinished (cancelled or failed mid-epoch, or captured mid-epoch in a
 *  checkpoint, which mpt_trainer_load_checkpoint restores): the steps of it that ran, the rows of
 *  the data set it trains on, and its batch size. All 0 when there is none: before any fit, after
 *  an epoch fit finished or stopped at its last step, and after a fit on other data abandoned it.
 *  The next fit finishes it when given the same data (for an epoch loaded from a checkpoint, any
 *  data of its rows), that batch size and the same `shuffle`, and otherwise abandons it
 *  (mpt_trainer_fit): so a program resuming a run can check that it has the saved run's data and
 *  batch size, and say where the epoch goes on. From a progress callback: the epoch in progress,
 *  its steps those issued so far (as mpt_trainer_get_progress counts them), or all 0 once every
 *  step of it is issued (the last step's callback; on a GPU, the last few). Any pointer may be NULL. */
MPT_API mpt_status mpt_trainer_get_unfinished_epoch(const mpt_trainer_t* trainer, int64_t* steps, int64_t* rows,
                                                    int64_t* batch_size);
/** Writes a training checkpoint to `path` (atomically and durably, in the model file's format):
 *  fp32 master weights, optimizer state, loss-scaler state, the base learning rate, step and epoch
 *  counters (the step count is where a learning-rate schedule goes on from), the position inside the epoch with its row order, the shuffle generator's state and the
 *  epoch's running metrics. Loading it into a trainer of the same architecture and options, whose
 *  model has the same layers frozen (mpt_model_set_layer_trainable: recorded with the model, not
 *  restored by mpt_trainer_load_checkpoint), and calling fit continues the run bit-exactly on the
 *  CPU backend. */
MPT_API mpt_status mpt_trainer_save_checkpoint(mpt_trainer_t* trainer, const char* path);
/** Restores a checkpoint. The whole file is validated before anything changes: a different
 *  architecture gives MPT_STATUS_SHAPE_MISMATCH; any different trainer option (precision, loss,
 *  optimizer and every one of its settings but the base learning rate, the learning-rate schedule,
 *  loss scaler: the message names them) MPT_STATUS_INVALID_ARGUMENT (builds from before schedules
 *  existed refuse a scheduled run's checkpoint so too), and so does a model file (not a checkpoint); another
 *  major version MPT_STATUS_UNSUPPORTED; a damaged file MPT_STATUS_CORRUPT_DATA. The base learning
 *  rate becomes the checkpoint's (mpt_trainer_set_learning_rate changes it after loading). If the
 *  checkpoint was taken inside an epoch, the next fit
 *  on data of the same size, batch size and shuffling finishes that epoch first, in the saved order
 *  (a fit interrupted by a callback continues the same way, on the same rows only). */
MPT_API mpt_status mpt_trainer_load_checkpoint(mpt_trainer_t* trainer, const char* path);
/** Checkpoints automatically during fit, every `every_steps` optimizer steps and/or at the end of
 *  every `every_epochs`-th epoch (0 = not on that trigger; one of them must be > 0), as `directory`/checkpoint-<step, 12 digits>.safetensors,
 *  keeping the newest `keep_last` (>= 1). `directory` must be an existing directory
 *  (MPT_STATUS_IO_ERROR otherwise) that holds one trainer's checkpoints: the names carry only the
 *  step, and keeping the newest removes the oldest checkpoint-*.safetensors there, whoever wrote
 *  them. NULL turns checkpointing off.
 *  At an epoch's end the epoch-end callback runs first and the checkpoint is written after it, so
 *  it holds what the callback changed (a schedule's learning rate) and a run resumed from it goes on
 *  as the uninterrupted one does; the callback does not see that epoch's file yet. The checkpoint
 *  is written even when the callback stops fit. A failed write stops fit with MPT_STATUS_IO_ERROR
 *  (or MPT_STATUS_OUT_OF_MEMORY) and keeps the previous checkpoints. */
MPT_API mpt_status mpt_trainer_set_checkpointing(mpt_trainer_t* trainer, const char* directory,
                                                 int64_t every_steps, int64_t every_epochs, int64_t keep_last);
/** Duration of the last epoch that fit completed and its step count (steps resumed from an
 *  interrupted epoch only): on a GPU the device time between CUDA events on the compute stream
 *  around the epoch's steps, on the CPU the host time of the same span. Both are 0 before the first
 *  completed epoch. Either pointer may be NULL. */
MPT_API mpt_status mpt_trainer_get_last_epoch_time(const mpt_trainer_t* trainer, double* seconds, int64_t* steps);
/** Arena bytes of this trainer: planned for the current batch size, and allocated. */
MPT_API mpt_status mpt_trainer_get_memory(const mpt_trainer_t* trainer, size_t* planned_bytes,
                                          size_t* allocated_bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MPTRAIN_H */
