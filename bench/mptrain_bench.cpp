// mptrain-bench: trains the seed MLP (3072 → 3000 relu → 1000 relu → 10 softmax, SGD lr 0.01; other
// hidden widths with --hidden) on CIFAR-shaped uint8 data held by the library, and reports the median
// µs per training step over repeated epochs after a warm-up epoch (which also captures the CUDA
// graphs), heap allocations per step, the peak of the context's memory accounting (arenas, resident
// data, the buffers beside them; not the CUDA context's or cuBLASLt's own memory) and, on the CPU,
// the step time over its bare-GEMM floor measured in the same run. On a GPU it also reports how much
// the device's used memory grew during the run, as the driver sees it (data set, arenas, cuBLASLt,
// graphs: all of it). The step time is the trainer's epoch time (mpt_trainer_get_last_epoch_time):
// CUDA events on the compute stream on a GPU, the host clock on the CPU; the host's wall-clock time
// per step, which adds fit's setup and final drain, is reported beside it.
#include <mptrain/mptrain.h>
#if defined(MPTRAIN_BENCH_CUDA)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation_counter.h"
#include "gemm_floor.h"

namespace {

struct Options {
    std::string backend = "cpu";
    std::vector<std::string> precisions = {"fp32", "mixed-fp16", "mixed-bf16", "auto"};
    std::vector<int64_t> batches = {32, 256, 4096};
    // --hidden: the hidden layers' widths (the seed MLP's by default). A narrow MLP's step is the
    // latency of its kernels and of the host's issuing, with little work in them.
    std::vector<int64_t> hidden = {3000, 1000};
    int64_t steps = 0;  // per timed epoch; 0 = chosen per batch size
    int repeats = 3;
    int threads = 0;
    bool streamed = false;  // keep the data set in host memory and stream it (GPU)
    bool cosine = false;    // --lr-schedule cosine: the library's per-step schedule (no new graph per rate)
    float clipnorm = 0.0f;  // --clipnorm: gradient clipping by global norm; 0 = none
    float ema = 0.0f;       // --ema: the weights' moving average's momentum; 0 = none
    float dropout = 0.0f;   // --dropout: both hidden layers' dropout rate; 0 = none
    float weight_decay = 0.0f;  // --weight-decay: the optimizer's decoupled weight decay; 0 = none
    std::string optimizer = "sgd";  // --optimizer: sgd, adam, adamw, rmsprop or lion
    float momentum = 0.0f;          // --momentum: SGD's or RMSprop's
    bool centered = false;          // --centered: centered RMSprop
    int64_t micro_batch = 0;        // --micro-batch: gradient accumulation's rows per pass; 0 = whole batches
    int frozen = 0;                 // --frozen: the first N layers frozen (fine-tuning the rest)
    bool standardized = false;      // --standardize: the data set standardized by its feature statistics
    std::string json;
    std::vector<int64_t> predict_rows;  // --predict: prediction latency at these row counts instead
};

struct Record {
    std::string backend, precision, resolved;
    std::vector<int64_t> hidden;
    int64_t batch, steps;
    double us_per_step, wall_us_per_step, gemm_floor_us, allocations_per_step;
    size_t peak_bytes;
    int64_t device_bytes;  // driver-level growth of the device's used memory during the run; -1 on the CPU
    bool streamed;
    bool cosine;
    float clipnorm;
    float ema;
    float dropout;
    float weight_decay;
    std::string optimizer;
    float momentum;
    bool centered;
    int64_t micro_batch;
    int frozen;
    bool standardized;
    bool split_k;  // false under MPTRAIN_CUDA_SPLIT_K=0 (cuBLASLt never splits K)
    bool fused_epilogues;  // false under MPTRAIN_CUDA_FUSED_EPILOGUES=0 (the backend's own epilogue kernels)
    bool gemm_autotune;    // MPTRAIN_CUDA_GEMM_AUTOTUNE=1: cuBLASLt's algorithms chosen by timing
    bool small_batch_forward;   // MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1: forward layers of <= 64 rows on one kernel each
    bool small_batch_backward;  // MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1: their input gradients likewise
    bool dependent_launch;      // MPTRAIN_CUDA_DEPENDENT_LAUNCH=1: each kernel's launch overlapping the one before
    bool grouped_sgd;           // MPTRAIN_CUDA_GROUPED_SGD=1: the layers' fused SGD updates as one launch
    bool split_k_small_outputs;  // MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1: K split only where outputs have few tiles
    bool relu_from_output;       // MPTRAIN_CUDA_RELU_FROM_OUTPUT=1: ReLU's derivative from its output, no aux mask
    bool fused_sgd_three_blocks;  // MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1: the fused SGD kernel at 3 blocks an SM
    bool gradient_into_masters;   // MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1: SGD past 64 rows as a GEMM into the masters
    bool fused_sgd_32_rows;       // MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: the fused SGD kernel compiled for 32 rows
    bool bulk_copy_sgd;           // MPTRAIN_CUDA_BULK_COPY_SGD=1: fused SGD by bulk copies and tensor cores
    bool head_layer_cluster;      // MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1: the last layer in its head's launch, K in a cluster
    // mpt_context_describe after the timed epochs: the switches the backend had on (the fields above
    // say what the environment asked for), its graph captures, replays and refusals, the ops' paths.
    std::string context;
};

[[noreturn]] void usage(int code) {
    std::fprintf(code ? stderr : stdout,
                 "usage: mptrain-bench [--backend cpu|cuda] [--precision LIST] [--batch LIST] [--steps N]\n"
                 "                     [--repeats N] [--threads N] [--streamed] [--lr-schedule constant|cosine]\n"
                 "                     [--clipnorm X] [--ema M] [--dropout R] [--weight-decay X]\n"
                 "                     [--optimizer sgd|adam|adamw|rmsprop|lion] [--momentum M] [--centered]\n"
                 "                     [--micro-batch N] [--frozen N] [--standardize] [--hidden LIST] [--json FILE]\n"
                 "       mptrain-bench --predict LIST [--backend cpu|cuda] [--precision LIST] [--repeats N] [--threads N]\n"
                 "  LIST is comma-separated, e.g. --precision fp32,mixed-bf16 --batch 32,256\n"
                 "  --streamed keeps the data set in host memory (GPU: batches staged through pinned memory)\n"
                 "  --lr-schedule cosine trains under a cosine schedule with warm-up (the library's, per step)\n"
                 "  --clipnorm X clips every step's gradients to a global norm of X (the library's clipping)\n"
                 "  --ema M keeps a moving average of the weights with momentum M in (0, 1) (the library's EMA)\n"
                 "  --dropout R drops both hidden layers' outputs at rate R in [0, 1) (the library's dropout)\n"
                 "  --weight-decay X decays every weight and bias by lr * X a step (the optimizer's weight decay)\n"
                 "  --optimizer O trains with that optimizer (default sgd); --momentum M is SGD's or RMSprop's,\n"
                 "    --centered makes RMSprop centered (one more state array); Adam and Lion take no momentum\n"
                 "  --micro-batch N runs each batch in micro-batches of N rows (the library's gradient accumulation)\n"
                 "  --frozen N freezes the first N layers (at most the hidden ones; the library's frozen layers), as\n"
                 "    fine-tuning the rest does\n"
                 "  --hidden LIST the hidden layers' widths, 1 to 4 of them (default 3000,1000: the seed MLP); a\n"
                 "    narrow MLP's step is the latency of its kernels and of the host's issuing\n"
                 "  --standardize trains on the data set standardized by its own feature statistics (the\n"
                 "    library's standardized datasets: a subtraction and a division a value in the gather)\n"
                 "  --predict 1,2,4,8 times mpt_trainer_predict on that many rows instead of training steps:\n"
                 "    the median of 20 x repeats calls per precision, the precisions taking turns\n");
    std::exit(code);
}

std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> parts;
    std::stringstream stream(text);
    for (std::string part; std::getline(stream, part, ',');)
        if (!part.empty()) parts.push_back(part);
    return parts;
}

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") usage(0);
        if (flag == "--streamed") {
            options.streamed = true;
            continue;
        }
        if (flag == "--centered") {
            options.centered = true;
            continue;
        }
        if (flag == "--standardize") {
            options.standardized = true;
            continue;
        }
        if (i + 1 >= argc) usage(2);
        const std::string value = argv[++i];
        if (flag == "--backend") options.backend = value;
        else if (flag == "--precision") options.precisions = split(value);
        else if (flag == "--batch") {
            options.batches.clear();
            for (const std::string& part : split(value)) options.batches.push_back(std::atoll(part.c_str()));
        } else if (flag == "--predict") {
            for (const std::string& part : split(value)) options.predict_rows.push_back(std::atoll(part.c_str()));
        } else if (flag == "--steps") options.steps = std::atoll(value.c_str());
        else if (flag == "--repeats") options.repeats = std::atoi(value.c_str());
        else if (flag == "--threads") options.threads = std::atoi(value.c_str());
        else if (flag == "--json") options.json = value;
        else if (flag == "--lr-schedule" && (value == "constant" || value == "cosine")) options.cosine = value == "cosine";
        else if (flag == "--clipnorm") options.clipnorm = std::strtof(value.c_str(), nullptr);
        else if (flag == "--ema") options.ema = std::strtof(value.c_str(), nullptr);
        else if (flag == "--dropout") options.dropout = std::strtof(value.c_str(), nullptr);
        else if (flag == "--weight-decay") options.weight_decay = std::strtof(value.c_str(), nullptr);
        else if (flag == "--optimizer") options.optimizer = value;
        else if (flag == "--momentum") options.momentum = std::strtof(value.c_str(), nullptr);
        else if (flag == "--micro-batch") options.micro_batch = std::atoll(value.c_str());
        else if (flag == "--frozen") options.frozen = std::atoi(value.c_str());
        else if (flag == "--hidden") {
            options.hidden.clear();
            for (const std::string& part : split(value)) options.hidden.push_back(std::atoll(part.c_str()));
        }
        else usage(2);
    }
    if (options.backend != "cpu" && options.backend != "cuda") usage(2);
    if (options.repeats < 1 || options.steps < 0 || !(options.clipnorm >= 0.0f) ||
        !(options.ema >= 0.0f && options.ema < 1.0f) || !(options.dropout >= 0.0f && options.dropout < 1.0f) ||
        !(options.weight_decay >= 0.0f && options.weight_decay < 1.0f) ||
        !(options.momentum >= 0.0f && options.momentum < 1.0f) || options.micro_batch < 0 ||
        options.frozen < 0 || options.frozen > static_cast<int>(options.hidden.size()) ||
        options.hidden.empty() || options.hidden.size() > 4 ||
        // The library keeps SGD's and RMSprop's momentum; Adam's and Lion's moments are their own.
        (options.momentum != 0.0f &&
         (options.optimizer == "adam" || options.optimizer == "adamw" || options.optimizer == "lion")) ||
        (options.optimizer != "sgd" && options.optimizer != "adam" && options.optimizer != "adamw" &&
         options.optimizer != "rmsprop" && options.optimizer != "lion"))
        usage(2);
    for (int64_t batch : options.batches)
        if (batch <= 0) usage(2);
    for (int64_t width : options.hidden)
        if (width <= 0) usage(2);
    for (int64_t rows : options.predict_rows)
        if (rows <= 0) usage(2);
    return options;
}

mpt_optimizer optimizer_value(const std::string& name) {
    if (name == "adam") return MPT_OPTIMIZER_ADAM;
    if (name == "adamw") return MPT_OPTIMIZER_ADAMW;
    if (name == "rmsprop") return MPT_OPTIMIZER_RMSPROP;
    if (name == "lion") return MPT_OPTIMIZER_LION;
    return MPT_OPTIMIZER_SGD;
}

// Whether the environment sets `variable` to exactly `value` (the CUDA backend's switches, which a
// record names so that the summary can set each run against the default).
bool environment_is(const char* variable, const char* value) {
    const char* set = std::getenv(variable);
    return set && std::strcmp(set, value) == 0;
}

bool parse_precision(const std::string& name, mpt_precision& out) {
    if (name == "fp32") out = MPT_PRECISION_FP32;
    else if (name == "mixed-fp16") out = MPT_PRECISION_MIXED_FP16;
    else if (name == "mixed-bf16") out = MPT_PRECISION_MIXED_BF16;
    else if (name == "auto") out = MPT_PRECISION_AUTO;
    else return false;
    return true;
}

const char* precision_name(mpt_precision precision) {
    switch (precision) {
        case MPT_PRECISION_FP32: return "fp32";
        case MPT_PRECISION_MIXED_FP16: return "mixed-fp16";
        case MPT_PRECISION_MIXED_BF16: return "mixed-bf16";
        default: return "auto";
    }
}

// A failed call ends its run (precision x batch), not the bench: the others still measure and the
// JSON keeps every finished record.
struct RunFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void check(mpt_status status, const char* what) {
    if (status == MPT_STATUS_OK) return;
    throw RunFailed(std::string(what) + ": " + mpt_status_string(status) + ": " + mpt_last_error());
}

// Destroys a run's handles however it ends.
struct RunHandles {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;
    ~RunHandles() {
        mpt_trainer_destroy(trainer);
        mpt_dataset_destroy(dataset);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
};

// The MLP 3072 -> hidden... (relu) -> 10 softmax (the seed MLP's hidden widths are 3000 and 1000),
// as handles.model in handles.context. Dropout (`dropout` > 0) after every hidden layer.
void add_mlp(RunHandles& handles, const std::vector<int64_t>& hidden, float dropout = 0.0f) {
    check(mpt_model_create(handles.context, 3072, &handles.model), "model");
    for (size_t layer = 0; layer < hidden.size(); ++layer) {
        check(mpt_model_add_dense(handles.model, hidden[layer], MPT_ACTIVATION_RELU), "hidden layer");
        check(mpt_model_set_layer_dropout(handles.model, static_cast<int>(layer), dropout), "dropout");
    }
    check(mpt_model_add_dense(handles.model, 10, MPT_ACTIVATION_SOFTMAX), "dense 10");
}

// "seed MLP 3072-3000-1000-10", or the other MLP's widths.
std::string model_title(const std::vector<int64_t>& hidden) {
    std::string title = hidden == std::vector<int64_t>{3000, 1000} ? "seed MLP 3072" : "MLP 3072";
    for (int64_t width : hidden) title += "-" + std::to_string(width);
    return title + "-10";
}

// Device memory in use (total - free) as the driver reports it, so the bench also shows what the
// library's own accounting leaves out (the cuBLASLt handle, CUDA graphs, CUB's temporaries).
#if defined(MPTRAIN_BENCH_CUDA)
size_t device_bytes_in_use() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return total - free;
}
#else
size_t device_bytes_in_use() { return 0; }
#endif

// The context's description (a JSON object), or "null" should it fail: a record is worth keeping
// without it.
std::string describe_context(const mpt_context_t* context) {
    size_t length = 0;
    if (mpt_context_describe(context, nullptr, 0, &length) != MPT_STATUS_OK) return "null";
    std::string text(length + 1, '\0');
    if (mpt_context_describe(context, text.data(), text.size(), &length) != MPT_STATUS_OK) return "null";
    text.resize(length);
    return text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The library's log: its warnings to stderr, and the line naming the device (backend, threads, the
// CPU's GEMM kernels or the GPU) printed once, so that every table says what it ran on.
void log_to_console(mpt_log_level level, const char* message, void*) {
    static bool device_printed = false;
    const std::string text = message;
    if (level >= MPT_LOG_LEVEL_WARNING) {
        std::fprintf(stderr, "mptrain: %s\n", message);
    } else if (!device_printed && text.rfind("mptrain ", 0) == 0 && text.find(" on ") != std::string::npos) {
        std::printf("device: %s\n", text.substr(text.find(" on ") + 4).c_str());
        std::fflush(stdout);
        device_printed = true;
    }
}

// A context for one run: the requested backend and threads, data sets in host memory when
// `streamed`, the log as above.
mpt_context_t* create_context(const Options& options, bool streamed) {
    mpt_context_options_t* context_options = nullptr;
    check(mpt_context_options_create(&context_options), "context options");
    mpt_status status = mpt_context_options_set_backend(
        context_options, options.backend == "cuda" ? MPT_BACKEND_CUDA : MPT_BACKEND_CPU);
    if (status == MPT_STATUS_OK) status = mpt_context_options_set_threads(context_options, options.threads);
    if (status == MPT_STATUS_OK && streamed) status = mpt_context_options_set_dataset_device_budget(context_options, 0);
    if (status == MPT_STATUS_OK) status = mpt_context_options_set_log_callback(context_options, &log_to_console, nullptr);
    mpt_context_t* context = nullptr;
    if (status == MPT_STATUS_OK) status = mpt_context_create(context_options, &context);
    mpt_context_options_destroy(context_options);
    check(status, "context");
    return context;
}

// Prints the device line before the table (a context made and dropped); a failure here is the
// runs' to report.
void print_device(const Options& options) {
    try {
        mpt_context_destroy(create_context(options, options.streamed));
    } catch (const RunFailed&) {
    }
}

int64_t default_steps(const Options& options, int64_t batch) {
    if (options.steps > 0) return options.steps;
    if (options.backend == "cuda") return 200;
    return std::max<int64_t>(3, 4096 / batch);  // about 4096 samples per timed epoch on the CPU
}

Record run_one(const Options& options, const std::string& precision_text, int64_t batch,
               const std::vector<uint8_t>& samples, const std::vector<int32_t>& labels, int64_t rows) {
    mpt_precision precision;
    if (!parse_precision(precision_text, precision)) usage(2);
    const bool on_device = options.backend == "cuda";
    // Read before the context exists (this also creates the process's primary CUDA context, which the
    // library then shares, so the context itself is not counted). Sampled between epochs, it is the
    // growth the run keeps (steps allocate nothing), not a transient peak inside fit.
    const size_t device_before = on_device ? device_bytes_in_use() : 0;
    size_t device_peak = device_before;
    RunHandles handles;
    handles.context = create_context(options, options.streamed);
    mpt_context_t* context = handles.context;

    add_mlp(handles, options.hidden, options.dropout);
    mpt_model_t* model = handles.model;
    for (int layer = 0; layer < options.frozen; ++layer)
        check(mpt_model_set_layer_trainable(model, layer, 0), "frozen layer");
    check(mpt_dataset_create_u8(context, samples.data(), rows, 3072, labels.data(), 10, 1.0f / 255.0f, 0.0f,
                                &handles.dataset),
          "dataset");
    if (options.standardized) {
        std::vector<float> mean(3072), stddev(3072);
        check(mpt_dataset_get_feature_statistics(handles.dataset, mean.data(), stddev.data(), 3072), "statistics");
        mpt_dataset_t* standardized = nullptr;
        check(mpt_dataset_create_standardized(handles.dataset, mean.data(), stddev.data(), 3072, &standardized),
              "standardized dataset");
        mpt_dataset_destroy(handles.dataset);  // the view keeps the rows
        handles.dataset = standardized;
    }
    mpt_dataset_t* dataset = handles.dataset;
    mpt_trainer_options_t* trainer_options = nullptr;
    check(mpt_trainer_options_create(&trainer_options), "trainer options");
    mpt_status configured = mpt_trainer_options_set_precision(trainer_options, precision);
    if (configured == MPT_STATUS_OK) configured = mpt_trainer_options_set_learning_rate(trainer_options, 0.01f);
    // Warm-up, then a cosine over every step the bench takes: the rate differs at each timed step.
    if (configured == MPT_STATUS_OK && options.cosine)
        configured = mpt_trainer_options_set_lr_schedule(trainer_options, MPT_LR_SCHEDULE_COSINE, 10,
                                                         (options.repeats + 1) * (rows / batch), 0.1f);
    if (configured == MPT_STATUS_OK) configured = mpt_trainer_options_set_global_clipnorm(trainer_options, options.clipnorm);
    if (configured == MPT_STATUS_OK) configured = mpt_trainer_options_set_ema(trainer_options, options.ema);
    if (configured == MPT_STATUS_OK)
        configured = mpt_trainer_options_set_optimizer(trainer_options, optimizer_value(options.optimizer));
    if (configured == MPT_STATUS_OK)
        configured = mpt_trainer_options_set_momentum(trainer_options, options.momentum, 0);
    if (configured == MPT_STATUS_OK)
        configured = mpt_trainer_options_set_rmsprop_centered(trainer_options, options.centered ? 1 : 0);
    if (configured == MPT_STATUS_OK)
        configured = mpt_trainer_options_set_weight_decay(trainer_options, options.weight_decay);
    if (configured == MPT_STATUS_OK)
        configured = mpt_trainer_options_set_micro_batch_size(trainer_options, options.micro_batch);
    if (configured == MPT_STATUS_OK) configured = mpt_trainer_create(model, trainer_options, &handles.trainer);
    mpt_trainer_options_destroy(trainer_options);
    check(configured, "trainer");
    mpt_trainer_t* trainer = handles.trainer;
    mpt_precision resolved;
    check(mpt_trainer_get_precision(trainer, &resolved), "precision");

    const int64_t steps = rows / batch;
    check(mpt_trainer_fit(trainer, dataset, 1, batch, 1), "warm-up epoch");
    // Steps allocate nothing, so sampling between epochs sees the peak.
    if (on_device) device_peak = std::max(device_peak, device_bytes_in_use());
    std::vector<double> per_step, wall_per_step;
    uint64_t allocations = 0;
    for (int r = 0; r < options.repeats; ++r) {
        const uint64_t before = mpt::testing::allocation_count();
        const auto start = std::chrono::steady_clock::now();
        check(mpt_trainer_fit(trainer, dataset, 1, batch, 1), "timed epoch");
        const double wall_seconds = seconds_since(start);
        allocations += mpt::testing::allocation_count() - before;  // before the bench's own push_backs
        wall_per_step.push_back(wall_seconds * 1e6 / static_cast<double>(steps));
        double seconds = 0.0;
        int64_t timed_steps = 0;
        check(mpt_trainer_get_last_epoch_time(trainer, &seconds, &timed_steps), "epoch time");
        if (timed_steps != steps)
            throw RunFailed("the epoch timed " + std::to_string(timed_steps) + " steps, expected " +
                            std::to_string(steps));
        per_step.push_back(seconds * 1e6 / static_cast<double>(steps));
        if (on_device) device_peak = std::max(device_peak, device_bytes_in_use());
    }
    std::sort(per_step.begin(), per_step.end());
    std::sort(wall_per_step.begin(), wall_per_step.end());
    size_t peak = 0;
    check(mpt_context_get_memory(context, nullptr, &peak), "memory");

    Record record;
    record.backend = options.backend;
    record.precision = precision_text;
    record.resolved = precision_name(resolved);
    record.batch = batch;
    record.steps = steps;
    record.us_per_step = per_step[per_step.size() / 2];
    record.wall_us_per_step = wall_per_step[wall_per_step.size() / 2];
    record.streamed = options.streamed && options.backend == "cuda";
    record.cosine = options.cosine;
    record.clipnorm = options.clipnorm;
    record.ema = options.ema;
    record.dropout = options.dropout;
    record.weight_decay = options.weight_decay;
    record.optimizer = options.optimizer;
    record.momentum = options.momentum;
    record.centered = options.centered;
    record.micro_batch = options.micro_batch;
    record.frozen = options.frozen;
    record.hidden = options.hidden;
    record.standardized = options.standardized;
    record.split_k = !environment_is("MPTRAIN_CUDA_SPLIT_K", "0");
    record.fused_epilogues = !environment_is("MPTRAIN_CUDA_FUSED_EPILOGUES", "0");
    record.gemm_autotune = environment_is("MPTRAIN_CUDA_GEMM_AUTOTUNE", "1");
    record.small_batch_forward = environment_is("MPTRAIN_CUDA_SMALL_BATCH_FORWARD", "1");
    record.small_batch_backward = environment_is("MPTRAIN_CUDA_SMALL_BATCH_BACKWARD", "1");
    record.dependent_launch = environment_is("MPTRAIN_CUDA_DEPENDENT_LAUNCH", "1");
    record.grouped_sgd = environment_is("MPTRAIN_CUDA_GROUPED_SGD", "1");
    record.split_k_small_outputs = environment_is("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS", "1");
    record.relu_from_output = environment_is("MPTRAIN_CUDA_RELU_FROM_OUTPUT", "1");
    record.fused_sgd_three_blocks = environment_is("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS", "1");
    record.gradient_into_masters = environment_is("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS", "1");
    record.fused_sgd_32_rows = environment_is("MPTRAIN_CUDA_FUSED_SGD_32_ROWS", "1");
    record.bulk_copy_sgd = environment_is("MPTRAIN_CUDA_BULK_COPY_SGD", "1");
    record.head_layer_cluster = environment_is("MPTRAIN_CUDA_HEAD_LAYER_CLUSTER", "1");
    const mpt::DType compute = resolved == MPT_PRECISION_MIXED_BF16   ? mpt::DType::bf16
                               : resolved == MPT_PRECISION_MIXED_FP16 ? mpt::DType::fp16
                                                                      : mpt::DType::fp32;
    std::vector<int64_t> widths = {3072};
    widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
    widths.push_back(10);
    record.gemm_floor_us =
        options.backend == "cpu" ? measure_gemm_floor_us(widths, batch, 5, options.threads, compute, options.frozen) : -1.0;
    record.allocations_per_step = static_cast<double>(allocations) / static_cast<double>(steps * options.repeats);
    record.peak_bytes = peak;
    record.device_bytes = on_device ? static_cast<int64_t>(device_peak - device_before) : -1;
    record.context = describe_context(context);
    return record;
}

// --predict: the latency of mpt_trainer_predict on the seed MLP (random weights and inputs) for
// each row count, one trainer per precision on one model, the precisions taking turns call by call
// so that a machine's changing speed reaches them alike. Returns the number of failed precisions.
int predict_latency(const Options& options) {
    std::printf("%-7s %-11s %-11s %6s %14s %14s\n", "backend", "precision", "runs as", "rows", "us/predict",
                "best us");
    RunHandles handles;
    handles.context = create_context(options, false);
    add_mlp(handles, options.hidden);
    std::vector<mpt_trainer_t*> trainers;
    std::vector<mpt_precision> resolved;
    int failed = 0;
    for (const std::string& text : options.precisions) {
        mpt_precision precision;
        if (!parse_precision(text, precision)) usage(2);
        mpt_trainer_options_t* trainer_options = nullptr;
        check(mpt_trainer_options_create(&trainer_options), "trainer options");
        mpt_trainer_t* trainer = nullptr;
        mpt_status created = mpt_trainer_options_set_precision(trainer_options, precision);
        if (created == MPT_STATUS_OK) created = mpt_trainer_create(handles.model, trainer_options, &trainer);
        mpt_trainer_options_destroy(trainer_options);
        mpt_precision runs_as = precision;
        if (created == MPT_STATUS_OK) created = mpt_trainer_get_precision(trainer, &runs_as);
        if (created != MPT_STATUS_OK) {
            std::printf("%-7s %-11s FAILED: %s\n", options.backend.c_str(), text.c_str(), mpt_last_error());
            mpt_trainer_destroy(trainer);
            trainer = nullptr;
            ++failed;
        }
        trainers.push_back(trainer);
        resolved.push_back(runs_as);
    }
    const int64_t most_rows = *std::max_element(options.predict_rows.begin(), options.predict_rows.end());
    std::vector<float> inputs(static_cast<size_t>(most_rows * 3072)), outputs(static_cast<size_t>(most_rows * 10));
    std::mt19937 generator(11);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (float& value : inputs) value = uniform(generator);
    const int calls = 20 * options.repeats;
    for (int64_t rows : options.predict_rows) {
        std::vector<std::vector<double>> times(trainers.size());
        for (int call = -1; call < calls; ++call)  // call -1 warms up (plans the arenas)
            for (size_t t = 0; t < trainers.size(); ++t) {
                if (!trainers[t]) continue;
                const auto start = std::chrono::steady_clock::now();
                check(mpt_trainer_predict(trainers[t], inputs.data(), rows, outputs.data(), rows * 10), "predict");
                if (call >= 0) times[t].push_back(seconds_since(start) * 1e6);
            }
        for (size_t t = 0; t < trainers.size(); ++t) {
            if (!trainers[t]) continue;
            std::sort(times[t].begin(), times[t].end());
            std::printf("%-7s %-11s %-11s %6lld %14.1f %14.1f\n", options.backend.c_str(), options.precisions[t].c_str(),
                        precision_name(resolved[t]), static_cast<long long>(rows), times[t][times[t].size() / 2],
                        times[t].front());
        }
        std::fflush(stdout);
    }
    for (mpt_trainer_t* trainer : trainers) mpt_trainer_destroy(trainer);
    return failed;
}

// Rewritten after every record, through a temporary file, so a run killed at its time limit leaves
// every finished record in valid JSON.
void write_json(const std::string& path, const std::vector<Record>& records) {
    const std::string temporary = path + ".partial";
    std::FILE* file = std::fopen(temporary.c_str(), "w");
    if (!file) {
        std::fprintf(stderr, "mptrain-bench: cannot write %s\n", temporary.c_str());
        std::exit(1);
    }
    std::fprintf(file, "[\n");
    for (size_t i = 0; i < records.size(); ++i) {
        const Record& r = records[i];
        std::string hidden;
        for (int64_t width : r.hidden) hidden += (hidden.empty() ? "" : ", ") + std::to_string(width);
        std::fprintf(file,
                     "  {\"hidden\": [%s], \"backend\": \"%s\", \"precision\": \"%s\", \"resolved_precision\": \"%s\", \"batch\": %lld, "
                     "\"steps\": %lld, \"us_per_step\": %.1f, \"wall_us_per_step\": %.1f, \"data\": \"%s\", "
                     "\"lr_schedule\": \"%s\", \"global_clipnorm\": %g, \"ema_momentum\": %g, \"dropout\": %g, "
                     "\"weight_decay\": %g, \"optimizer\": \"%s\", \"momentum\": %g, \"centered\": %s, "
                     "\"micro_batch\": %lld, \"frozen_layers\": %d, \"standardized\": %s, \"split_k\": %s, \"fused_epilogues\": %s, "
                     "\"gemm_autotune\": %s, \"small_batch_forward\": %s, \"small_batch_backward\": %s, "
                     "\"dependent_launch\": %s, \"grouped_sgd\": %s, \"split_k_small_outputs\": %s, "
                     "\"relu_from_output\": %s, \"fused_sgd_three_blocks\": %s, \"gradient_into_masters\": %s, "
                     "\"fused_sgd_32_rows\": %s, \"bulk_copy_sgd\": %s, \"head_layer_cluster\": %s, ",
                     hidden.c_str(), r.backend.c_str(), r.precision.c_str(), r.resolved.c_str(), static_cast<long long>(r.batch),
                     static_cast<long long>(r.steps), r.us_per_step, r.wall_us_per_step,
                     r.streamed ? "streamed" : "resident", r.cosine ? "cosine" : "constant", static_cast<double>(r.clipnorm),
                     static_cast<double>(r.ema), static_cast<double>(r.dropout),
                     static_cast<double>(r.weight_decay), r.optimizer.c_str(), static_cast<double>(r.momentum),
                     r.centered ? "true" : "false", static_cast<long long>(r.micro_batch), r.frozen,
                     r.standardized ? "true" : "false", r.split_k ? "true" : "false", r.fused_epilogues ? "true" : "false",
                     r.gemm_autotune ? "true" : "false",
                     r.small_batch_forward ? "true" : "false", r.small_batch_backward ? "true" : "false",
                     r.dependent_launch ? "true" : "false",
                     r.grouped_sgd ? "true" : "false", r.split_k_small_outputs ? "true" : "false",
                     r.relu_from_output ? "true" : "false", r.fused_sgd_three_blocks ? "true" : "false",
                     r.gradient_into_masters ? "true" : "false", r.fused_sgd_32_rows ? "true" : "false",
                     r.bulk_copy_sgd ? "true" : "false", r.head_layer_cluster ? "true" : "false");
        if (r.gemm_floor_us >= 0) std::fprintf(file, "\"gemm_floor_us\": %.1f, \"floor_ratio\": %.3f, ", r.gemm_floor_us, r.us_per_step / r.gemm_floor_us);
        else std::fprintf(file, "\"gemm_floor_us\": null, \"floor_ratio\": null, ");
        std::fprintf(file, "\"allocations_per_step\": %.3f, \"peak_bytes\": %zu, \"device_bytes\": %lld, \"context\": %s}%s\n",
                     r.allocations_per_step, r.peak_bytes, static_cast<long long>(r.device_bytes),
                     r.context.empty() ? "null" : r.context.c_str(), i + 1 < records.size() ? "," : "");
    }
    std::fprintf(file, "]\n");
    std::fclose(file);
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        std::fprintf(stderr, "mptrain-bench: cannot write %s\n", path.c_str());
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options options = parse(argc, argv);
    if (!options.predict_rows.empty()) {
        std::printf("mptrain %s bench, backend %s, %s, prediction latency\n", mpt_version(), options.backend.c_str(),
                    model_title(options.hidden).c_str());
        print_device(options);
        try {
            return predict_latency(options) == 0 ? 0 : 1;
        } catch (const RunFailed& failure) {
            std::printf("FAILED: %s\n", failure.what());
            return 1;
        }
    }
    char clipping[96] = "", averaging[64] = "", dropping[64] = "", decaying[64] = "";
    if (options.clipnorm > 0.0f)
        std::snprintf(clipping, sizeof clipping, ", gradients clipped to a global norm of %g",
                      static_cast<double>(options.clipnorm));
    if (options.ema > 0.0f)
        std::snprintf(averaging, sizeof averaging, ", weights averaged (ema %g)", static_cast<double>(options.ema));
    if (options.dropout > 0.0f)
        std::snprintf(dropping, sizeof dropping, ", hidden outputs dropped (rate %g)", static_cast<double>(options.dropout));
    if (options.weight_decay > 0.0f)
        std::snprintf(decaying, sizeof decaying, ", weight decay %g", static_cast<double>(options.weight_decay));
    std::string optimizer = options.optimizer == "sgd" ? "SGD" : options.optimizer;
    if (options.momentum > 0.0f) {
        char momentum[32];
        std::snprintf(momentum, sizeof momentum, " momentum %g", static_cast<double>(options.momentum));
        optimizer += momentum;
    }
    if (options.centered && options.optimizer == "rmsprop") optimizer += " centered";
    char micro[96] = "";
    if (options.micro_batch > 0)
        std::snprintf(micro, sizeof micro, ", micro-batches of %lld rows", static_cast<long long>(options.micro_batch));
    if (options.frozen > 0)
        std::snprintf(micro + std::strlen(micro), sizeof micro - std::strlen(micro), ", first %d layer%s frozen",
                      options.frozen, options.frozen > 1 ? "s" : "");
    if (options.standardized)
        std::snprintf(micro + std::strlen(micro), sizeof micro - std::strlen(micro), ", inputs standardized");
    std::printf("mptrain %s bench, backend %s, %s, %s%s%s%s%s%s\n", mpt_version(), options.backend.c_str(),
                model_title(options.hidden).c_str(), optimizer.c_str(), decaying, clipping, averaging, dropping, micro);
    print_device(options);
    std::printf("%-7s %-11s %-11s %6s %6s %12s %12s %12s %7s %11s %9s %11s\n", "backend", "precision", "runs as",
                "batch", "steps", "us/step", "wall us/step", "gemm floor", "ratio", "allocs/step", "peak MiB",
                "device MiB");
    std::vector<Record> records;
    int failed = 0;
    std::mt19937 generator(7);
    for (int64_t batch : options.batches) {
        const int64_t rows = batch * default_steps(options, batch);
        std::vector<uint8_t> samples(static_cast<size_t>(rows * 3072));
        std::vector<int32_t> labels(static_cast<size_t>(rows));
        // Four bytes a draw: at batch 4096 the set is 629 MB, which a draw per byte took 4 s to fill on
        // a development VM (1 s here), in every stage of the device check that times batch 4096.
        for (size_t at = 0; at < samples.size(); at += 4) {
            const uint32_t word = static_cast<uint32_t>(generator());
            std::memcpy(samples.data() + at, &word, std::min<size_t>(4, samples.size() - at));
        }
        for (auto& label : labels) label = static_cast<int32_t>(generator() % 10);
        for (const std::string& precision : options.precisions) {
            Record r;
            try {
                r = run_one(options, precision, batch, samples, labels, rows);
            } catch (const RunFailed& failure) {
                std::printf("%-7s %-11s FAILED at batch %lld: %s\n", options.backend.c_str(), precision.c_str(),
                            static_cast<long long>(batch), failure.what());
                std::fflush(stdout);
                ++failed;
                continue;
            }
            char floor_text[32] = "-", ratio_text[32] = "-";
            if (r.gemm_floor_us >= 0) {
                std::snprintf(floor_text, sizeof floor_text, "%.0f", r.gemm_floor_us);
                std::snprintf(ratio_text, sizeof ratio_text, "%.2fx", r.us_per_step / r.gemm_floor_us);
            }
            char device_text[32] = "-";
            if (r.device_bytes >= 0)
                std::snprintf(device_text, sizeof device_text, "%.1f", static_cast<double>(r.device_bytes) / (1 << 20));
            std::printf("%-7s %-11s %-11s %6lld %6lld %12.1f %12.1f %12s %7s %11.2f %9.1f %11s\n", r.backend.c_str(),
                        r.precision.c_str(), r.resolved.c_str(), static_cast<long long>(r.batch),
                        static_cast<long long>(r.steps), r.us_per_step, r.wall_us_per_step, floor_text, ratio_text,
                        r.allocations_per_step, static_cast<double>(r.peak_bytes) / (1 << 20), device_text);
            std::fflush(stdout);
            records.push_back(r);
            if (!options.json.empty()) write_json(options.json, records);
        }
    }
    if (!options.json.empty()) write_json(options.json, records);
    return failed == 0 ? 0 : 1;
}
