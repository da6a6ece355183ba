// libFuzzer target for the C API's argument paths: the input is a little program of API calls
// (create, slice, weight and standardize datasets, add layers, standardize a model's inputs, set
// options and read them back from a trainer, fit, step, evaluate, predict rows and datasets, get/set
// weights and labels, save and load files) with fuzzed arguments, NULLs and out-of-range values.
// Every call must return a status and leave every handle usable; sanitizers catch anything else.
// Sizes are bounded to keep it fast. The input is read in one order whatever the compiler: a call's
// arguments are read into locals first (C++ leaves their order unspecified; GCC, which builds the
// replays, and clang, which builds the fuzzer, take opposite ones), so a kept input replays the
// program it was found as.
// fuzz-options: -max_len=512
#include <mptrain/mptrain.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

class Input {
public:
    Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    bool empty() const { return position_ >= size_; }
    uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
    int64_t small(int64_t bound) { return static_cast<int64_t>(byte()) % bound; }
    // Mostly sane, sometimes hostile integers.
    int64_t count() {
        switch (byte() % 8) {
            case 0: return -1 - small(3);
            case 1: return 0;
            case 2: return std::numeric_limits<int64_t>::max() - small(3);
            default: return 1 + small(40);
        }
    }
    float real() {
        switch (byte() % 8) {
            case 0: return NAN;
            case 1: return INFINITY;
            case 2: return -1.0f;
            case 3: return 0.0f;
            default: return static_cast<float>(byte()) / 64.0f;
        }
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t position_ = 0;
};

const std::string& file_path() {
    static const std::string path = [] {
        char pattern[] = "/tmp/mptrain-fuzz-capi-XXXXXX";
        return std::string(mkdtemp(pattern)) + "/file.safetensors";
    }();
    return path;
}

// Every value the options hold, as bytes, through the getters (asking for the class weights with a
// capacity of `capacity`, hostile or not): equal options give equal bytes.
std::vector<unsigned char> option_bytes(const mpt_trainer_options_t* options, int64_t capacity) {
    std::vector<unsigned char> bytes;
    auto add = [&bytes](const auto& value) {
        const auto* first = reinterpret_cast<const unsigned char*>(&value);
        bytes.insert(bytes.end(), first, first + sizeof value);
    };
    mpt_precision precision{};
    mpt_loss loss{};
    mpt_optimizer optimizer{};
    mpt_lr_schedule schedule{};
    mpt_loss_scaling scaling{};
    float reals[20] = {};
    int flags[2] = {};
    int64_t integers[5] = {};
    float weights[8] = {};
    // A status that is not OK from a valid handle and out-parameters would be a defect.
    const mpt_status statuses[] = {
        mpt_trainer_options_get_precision(options, &precision),
        mpt_trainer_options_get_loss(options, &loss),
        mpt_trainer_options_get_huber_delta(options, &reals[0]),
        mpt_trainer_options_get_label_smoothing(options, &reals[1]),
        mpt_trainer_options_get_class_weights(options, nullptr, 0, &integers[0]),
        mpt_trainer_options_get_optimizer(options, &optimizer),
        mpt_trainer_options_get_learning_rate(options, &reals[2]),
        mpt_trainer_options_get_momentum(options, &reals[3], &flags[0]),
        mpt_trainer_options_get_adam(options, &reals[4], &reals[5], &reals[6]),
        mpt_trainer_options_get_lion(options, &reals[7], &reals[8]),
        mpt_trainer_options_get_rmsprop(options, &reals[9], &reals[10]),
        mpt_trainer_options_get_rmsprop_centered(options, &flags[1]),
        mpt_trainer_options_get_weight_decay(options, &reals[11]),
        mpt_trainer_options_get_global_clipnorm(options, &reals[12]),
        mpt_trainer_options_get_ema(options, &reals[13]),
        mpt_trainer_options_get_micro_batch_size(options, &integers[1]),
        mpt_trainer_options_get_lr_schedule(options, &schedule, &integers[2], &integers[3], &reals[14]),
        mpt_trainer_options_get_loss_scaling(options, &scaling, &reals[15]),
        mpt_trainer_options_get_loss_scaler_dynamics(options, &reals[16], &reals[17], &integers[4], &reals[18],
                                                     &reals[19]),
    };
    for (mpt_status status : statuses)
        if (status != MPT_STATUS_OK) std::abort();
    // The class weights themselves: refused (nothing written) when the capacity is short.
    int64_t count = -1;
    const mpt_status read = mpt_trainer_options_get_class_weights(options, weights, std::min<int64_t>(capacity, 8), &count);
    if ((read == MPT_STATUS_OK) != (std::min<int64_t>(capacity, 8) >= integers[0])) std::abort();
    if (read == MPT_STATUS_OK ? count != integers[0] : count != -1) std::abort();
    add(precision), add(loss), add(optimizer), add(schedule), add(scaling), add(reals), add(flags), add(integers);
    if (read == MPT_STATUS_OK) bytes.insert(bytes.end(), reinterpret_cast<unsigned char*>(weights),
                                            reinterpret_cast<unsigned char*>(weights + count));
    return bytes;
}

// MPTRAIN_FUZZ_CAPI_BACKEND=cuda: the calls on the CUDA backend (a GPU's, or the emulated one's that
// fuzz_replay_capi_emulated links), else the CPU's.
mpt_backend backend_under_fuzz() {
    static const mpt_backend backend = [] {
        const char* value = std::getenv("MPTRAIN_FUZZ_CAPI_BACKEND");
        return value && std::strcmp(value, "cuda") == 0 ? MPT_BACKEND_CUDA : MPT_BACKEND_CPU;
    }();
    return backend;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Input in(data, size);
    mpt_context_options_t* options = nullptr;
    mpt_context_options_create(&options);
    mpt_context_options_set_backend(options, backend_under_fuzz());
    mpt_context_options_set_threads(options, 1);
    mpt_context_options_set_memory_budget(options, in.byte() % 2 ? 0 : static_cast<size_t>(in.byte()) * 4096);
    mpt_context_t* context = nullptr;
    const mpt_status created = mpt_context_create(options, &context);
    mpt_context_options_destroy(options);
    // A CUDA context keeps its step state on the device from the start (9 KiB): a budget below that
    // is refused as out of memory, and nothing is made. The CPU's takes any budget.
    if (created == MPT_STATUS_OUT_OF_MEMORY && backend_under_fuzz() == MPT_BACKEND_CUDA && context == nullptr) return 0;
    if (created != MPT_STATUS_OK) std::abort();

    const int64_t features = 1 + in.small(12);
    mpt_model_t* model = nullptr;
    mpt_model_create(context, in.byte() % 16 ? features : in.count(), &model);
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;
    mpt_trainer_options_t* trainer_options = nullptr;
    mpt_trainer_options_create(&trainer_options);
    std::vector<float> buffer(4096, 0.5f);
    std::vector<int32_t> labels(512, 0);

    for (int operation = 0; operation < 24 && !in.empty(); ++operation) {
        mpt_model_t* maybe_model = in.byte() % 16 ? model : nullptr;
        switch (in.byte() % 16) {
            case 0: {
                const int64_t units = in.count();
                const int64_t activation = in.small(12) - 1;
                mpt_model_add_dense(maybe_model, units, static_cast<mpt_activation>(activation));
                break;
            }
            case 1:  // a layer's dtype, dropout, initializer or trainable flag (hostile layers, values; a last
                     // layer's dropout refused at build; every layer frozen refused at fit and step), or the
                     // model's input standardization
                if (in.byte() % 5 == 0) {
                    int trainable = 1;
                    const int64_t set_layer = in.small(4) - 1;
                    const int flag = in.byte() % 3 - 1;
                    mpt_model_set_layer_trainable(maybe_model, set_layer, flag);
                    const int64_t get_layer = in.small(4) - 1;
                    int* out = in.byte() % 8 ? &trainable : nullptr;
                    mpt_model_get_layer_trainable(maybe_model, get_layer, out);
                } else if (in.byte() % 3 == 0) {
                    const int64_t layer = in.small(4) - 1;
                    const int64_t dtype = in.small(6) - 1;
                    mpt_model_set_layer_dtype(maybe_model, layer, static_cast<mpt_dtype>(dtype));
                } else if (in.byte() % 4 == 0) {
                    // Removed (both NULL, count 0) or set (mostly the model's count of finite
                    // statistics, so that it takes them; else a hostile count, a hostile value, NULL
                    // arrays; a standardized dataset refused at fit, files and checkpoints keep it),
                    // then read back into bounded arrays (hostile count, NULL outputs and flag).
                    // Arguments read into locals first: their order of evaluation is unspecified.
                    if (in.byte() % 4 == 0) {
                        mpt_model_set_input_standardization(maybe_model, nullptr, nullptr, 0);
                    } else {
                        const int64_t count = in.byte() % 4 ? features : std::min<int64_t>(in.count(), 64);
                        for (int64_t i = 0; i < count; ++i) {
                            buffer[static_cast<size_t>(3700 + i)] = static_cast<float>(in.byte()) / 16.0f - 8.0f;
                            buffer[static_cast<size_t>(3800 + i)] = static_cast<float>(in.byte()) / 64.0f;
                        }
                        if (count > 0 && in.byte() % 4 == 0) {
                            const int64_t array = in.byte() % 2 ? 3700 : 3800;
                            const int64_t at = in.small(count);
                            buffer[static_cast<size_t>(array + at)] = in.real();
                        }
                        const float* mean = in.byte() % 8 ? buffer.data() + 3700 : nullptr;
                        const float* stddev = in.byte() % 8 ? buffer.data() + 3800 : nullptr;
                        mpt_model_set_input_standardization(maybe_model, mean, stddev, count);
                    }
                    int standardizes = 0;
                    const int64_t count = in.byte() % 4 ? features : std::min<int64_t>(in.count(), 64);
                    float* mean = in.byte() % 8 ? buffer.data() + 3900 : nullptr;
                    float* stddev = in.byte() % 8 ? buffer.data() + 3980 : nullptr;
                    mpt_model_get_input_standardization(maybe_model, mean, stddev, count,
                                                        in.byte() % 8 ? &standardizes : nullptr);
                } else if (in.byte() % 2) {
                    mpt_initializer initializer = MPT_INITIALIZER_GLOROT_UNIFORM;
                    const int64_t set_layer = in.small(4) - 1;
                    const int64_t kind = in.small(8) - 1;
                    mpt_model_set_layer_initializer(maybe_model, set_layer, static_cast<mpt_initializer>(kind));
                    const int64_t get_layer = in.small(4) - 1;
                    mpt_initializer* out = in.byte() % 8 ? &initializer : nullptr;
                    mpt_model_get_layer_initializer(maybe_model, get_layer, out);
                } else {
                    float rate = 0.0f;
                    const int64_t set_layer = in.small(4) - 1;
                    const float set_rate = in.real() / 4.0f;
                    mpt_model_set_layer_dropout(maybe_model, set_layer, set_rate);
                    if (in.byte() % 4 == 0) mpt_model_set_input_dropout(maybe_model, in.real() / 4.0f);
                    mpt_model_get_input_dropout(maybe_model, in.byte() % 8 ? &rate : nullptr);
                    const int64_t get_layer = in.small(4) - 1;
                    float* out = in.byte() % 8 ? &rate : nullptr;
                    mpt_model_get_layer_dropout(maybe_model, get_layer, out);
                }
                break;
            case 2: {
                if (dataset && in.byte() % 4 == 0) {
                    // A slice of it (hostile bounds), a subset (hostile indices and count), the same
                    // rows weighted (hostile weights and count) or standardized (mostly finite
                    // statistics, after its own into bounded arrays) replaces it, the
                    // source destroyed first.
                    mpt_dataset_t* derived = nullptr;
                    mpt_status status;
                    const int kind = in.byte() % 4;
                    if (kind == 0) {
                        const int64_t first = in.count() - 2, rows = in.count() - 1;
                        status = mpt_dataset_create_slice(dataset, first, rows, &derived);
                    } else if (kind == 1) {
                        const int64_t count = std::min<int64_t>(in.count(), 64) - 1;
                        std::vector<int64_t> indices(64, 0);
                        for (int64_t i = 0; i < count; ++i) indices[static_cast<size_t>(i)] = in.count() - 2;
                        status = mpt_dataset_create_subset(dataset, in.byte() % 8 ? indices.data() : nullptr, count, &derived);
                    } else if (kind == 3) {
                        // Mostly the dataset's count of finite statistics, so that a standardized
                        // dataset is made and trained on; else a hostile count or one hostile value.
                        int64_t dataset_features = 0;
                        mpt_dataset_get_features(dataset, &dataset_features);
                        const int64_t count = std::min<int64_t>(in.byte() % 4 ? dataset_features : in.count(), 64);
                        float* means = in.byte() % 8 ? buffer.data() + 3500 : nullptr;
                        float* deviations = in.byte() % 8 ? buffer.data() + 3600 : nullptr;
                        mpt_dataset_get_feature_statistics(dataset, means, deviations, count);
                        for (int64_t i = 0; i < count; ++i) {
                            buffer[static_cast<size_t>(3300 + i)] = static_cast<float>(in.byte()) / 16.0f - 8.0f;
                            buffer[static_cast<size_t>(3400 + i)] = static_cast<float>(in.byte()) / 64.0f;
                        }
                        if (count > 0 && in.byte() % 4 == 0) {
                            const int64_t array = in.byte() % 2 ? 3300 : 3400;
                            const int64_t at = in.small(count);
                            buffer[static_cast<size_t>(array + at)] = in.real();
                        }
                        status = mpt_dataset_create_standardized(dataset, in.byte() % 8 ? buffer.data() + 3300 : nullptr,
                                                                 buffer.data() + 3400, count, &derived);
                    } else {
                        const int64_t count = std::min<int64_t>(in.count(), 64);
                        for (int64_t i = 0; i < count; ++i) buffer[static_cast<size_t>(3200 + i)] = in.real();
                        status = mpt_dataset_create_weighted(dataset, buffer.data() + 3200, count, &derived);
                    }
                    if (status == MPT_STATUS_OK) {
                        mpt_dataset_destroy(dataset);
                        dataset = derived;
                    } else if (derived) {
                        std::abort();  // out written on failure
                    }
                    break;
                }
                const int64_t rows = 1 + in.small(64);
                for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>(in.small(6) - 1);
                for (int64_t i = 0; i < rows * features; ++i) buffer[static_cast<size_t>(i)] = in.real();
                mpt_dataset_destroy(dataset);
                dataset = nullptr;
                const int64_t dataset_features = in.byte() % 8 ? features : in.count();
                const int32_t classes = static_cast<int32_t>(in.small(6));
                const int check_finite = in.byte() % 2;
                mpt_dataset_create_f32(context, buffer.data(), rows, dataset_features, labels.data(), classes,
                                       check_finite, &dataset);
                break;
            }
            case 3: mpt_trainer_options_set_precision(trainer_options, static_cast<mpt_precision>(in.small(6) - 1)); break;
            case 4:  // an optimizer (-1 and one past the last too), RMSprop's rho and epsilon or Lion's betas (hostile values) or centered
                if (in.byte() % 4) {
                    mpt_trainer_options_set_optimizer(trainer_options, static_cast<mpt_optimizer>(in.small(7) - 1));
                } else {
                    switch (in.byte() % 3) {
                        case 1: {
                            const float rho = in.real() / 4.0f, epsilon = in.real();
                            mpt_trainer_options_set_rmsprop(trainer_options, rho, epsilon);
                            break;
                        }
                        case 2: {  // [0, 1), exactly 1 (192 / 64 / 3) and past it, -1/3, NaN, infinity
                            const float beta1 = in.real() / 3.0f, beta2 = in.real() / 3.0f;
                            mpt_trainer_options_set_lion(trainer_options, beta1, beta2);
                            break;
                        }
                        default: mpt_trainer_options_set_rmsprop_centered(trainer_options, static_cast<int>(in.small(3)) - 1);
                    }
                }
                break;
            case 5:
                switch (in.byte() % 3) {
                    case 0: mpt_trainer_options_set_learning_rate(trainer_options, in.real()); break;
                    case 1: mpt_trainer_set_learning_rate(trainer, in.real()); break;  // the run's, saved by checkpoints
                    default: {  // a schedule (an option checkpoints must match), read back at the step count
                        // Read in this order (arguments have none); the kind stays an int until the call, as
                        // an enum object holding no enumerator's value would be undefined behaviour here.
                        const int64_t kind = in.small(6) - 1, warmup = in.count(), decay = in.count();
                        mpt_trainer_options_set_lr_schedule(trainer_options, static_cast<mpt_lr_schedule>(kind), warmup,
                                                            decay, in.real() / 4.0f);
                        float rate;
                        mpt_trainer_get_scheduled_learning_rate(trainer, &rate);
                    }
                }
                break;
            case 6:  // the loss, Huber's delta, label smoothing, class weights, clipping or averaging (hostile values; checked again at create)
                switch (in.byte() % 6) {
                    case 0: mpt_trainer_options_set_loss(trainer_options, static_cast<mpt_loss>(in.small(8) - 1)); break;
                    case 4: mpt_trainer_options_set_huber_delta(trainer_options, in.real()); break;
                    case 1: mpt_trainer_options_set_label_smoothing(trainer_options, in.real() / 4.0f); break;
                    case 2: mpt_trainer_options_set_global_clipnorm(trainer_options, in.real()); break;
                    case 3: mpt_trainer_options_set_ema(trainer_options, in.real() / 4.0f); break;
                    default: {
                        const int64_t count = in.small(8) - 1;  // -1 to 6, against the model's outputs
                        for (int64_t i = 0; i < std::max<int64_t>(count, 0); ++i)
                            buffer[static_cast<size_t>(3072 + i)] = in.real();
                        mpt_trainer_options_set_class_weights(trainer_options, in.byte() % 8 ? buffer.data() + 3072 : nullptr,
                                                              count);
                    }
                }
                break;
            case 7:  // loss scaling, or a micro-batch size (-1 to 5 rows: against the fuzz batches' sizes)
                if (in.byte() % 4) {
                    const int64_t mode = in.small(6) - 1;
                    const float initial_scale = in.real() * 65536.0f;
                    mpt_trainer_options_set_loss_scaling(trainer_options, static_cast<mpt_loss_scaling>(mode),
                                                         initial_scale);
                } else {
                    mpt_trainer_options_set_micro_batch_size(trainer_options, in.small(7) - 1);
                }
                break;
            case 8: {
                mpt_trainer_destroy(trainer);
                trainer = nullptr;
                const bool given = in.byte() % 8;
                if (mpt_trainer_create(maybe_model, given ? trainer_options : nullptr, &trainer) != MPT_STATUS_OK ||
                    !given || in.byte() % 4)
                    break;
                // The trainer's copy of its options reads back as the options it was created from, and
                // replaces them (a copy's setters must behave as the original's).
                mpt_trainer_options_t* copy = nullptr;
                if (mpt_trainer_get_options(trainer, &copy) != MPT_STATUS_OK) std::abort();
                const int64_t capacity = in.count();
                if (option_bytes(copy, capacity) != option_bytes(trainer_options, capacity)) std::abort();
                mpt_trainer_options_destroy(trainer_options);
                trainer_options = copy;
                break;
            }
            case 9: {
                const mpt_dataset_t* data = in.byte() % 8 ? dataset : nullptr;
                const int64_t epochs = in.small(3);
                const int64_t batch = in.count();
                const int verbose = in.byte() % 2;
                mpt_trainer_fit(trainer, data, epochs, batch, verbose);
                break;
            }
            case 10: {
                const int64_t first = in.count() - 1;
                const int64_t batch = in.count();
                mpt_trainer_step(trainer, dataset, first, batch, nullptr);
                break;
            }
            case 11: {
                if (in.byte() % 2) {
                    float loss, accuracy;
                    mpt_trainer_evaluate(trainer, dataset, in.count(), &loss, &accuracy);
                } else {  // predictions over the dataset and its labels, into buffers of hostile sizes
                    const int64_t count = std::min<int64_t>(in.count(), 1024);
                    mpt_trainer_predict_dataset(trainer, dataset, in.count() - 1, buffer.data(), count);
                    mpt_dataset_get_labels(dataset, labels.data(), std::min<int64_t>(in.count(), 512));
                }
                break;
            }
            case 12: {
                const int64_t rows = in.count();
                mpt_trainer_predict(trainer, buffer.data(), rows, buffer.data() + 2048, in.count());
                mpt_model_predict(maybe_model, buffer.data(), rows, buffer.data() + 2048, in.count());
                break;
            }
            case 13: {
                const int64_t layer = in.small(4) - 1;
                const bool get = in.byte() % 2;
                const int64_t weight_count = in.count();
                const int64_t bias_count = in.count();
                if (get)
                    mpt_model_get_weights(maybe_model, layer, buffer.data(), weight_count, buffer.data() + 2048,
                                          bias_count);
                else
                    mpt_model_set_weights(maybe_model, layer, buffer.data(), weight_count, buffer.data() + 2048,
                                          bias_count);
                break;
            }
            case 14:  // checkpoints, their options (replacing the ones set), and the averaged weights' exchange
                switch (in.byte() % 4) {
                    case 0: mpt_trainer_save_checkpoint(trainer, file_path().c_str()); break;
                    case 1: mpt_trainer_load_checkpoint(trainer, file_path().c_str()); break;
                    case 2: {
                        mpt_trainer_options_t* recorded = nullptr;
                        if (mpt_trainer_options_create_from_checkpoint(file_path().c_str(), &recorded) == MPT_STATUS_OK) {
                            mpt_trainer_options_destroy(trainer_options);
                            trainer_options = recorded;
                        } else if (recorded) {
                            std::abort();  // out written on failure
                        }
                        break;
                    }
                    default: {
                        int holds = 0;
                        mpt_trainer_swap_ema_weights(trainer, in.byte() % 2 ? &holds : nullptr);
                    }
                }
                break;
            case 15: {
                mpt_model_save(maybe_model, file_path().c_str());
                mpt_model_t* loaded = nullptr;
                if (mpt_model_load(context, file_path().c_str(), &loaded) == MPT_STATUS_OK) mpt_model_destroy(loaded);
                break;
            }
        }
        if (mpt_last_error() == nullptr) std::abort();
    }
    mpt_trainer_options_destroy(trainer_options);
    mpt_trainer_destroy(trainer);
    mpt_dataset_destroy(dataset);
    mpt_model_destroy(model);
    mpt_context_destroy(context);
    return 0;
}
