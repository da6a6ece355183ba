// mptrain-soak: a long run that shows flat memory and no growth of threads or handles. Each round
// trains one more epoch on a long-lived trainer, predicts a few rows three times on its new weights
// (on AMX CPUs the second makes 16-bit weight words, which the next round's fit gives back), and
// also creates, uses and destroys a whole context, model, dataset and trainer; it prints resident
// memory, thread count and arena bytes per round, and fails when any of them keeps growing after
// warm-up. Not a test: run it by hand or nightly.
#include <mptrain/mptrain.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

long status_field(const char* name) {
    std::ifstream status("/proc/self/status");
    std::string line;
    const size_t length = std::strlen(name);
    while (std::getline(status, line))
        if (line.compare(0, length, name) == 0) return std::atol(line.c_str() + length + 1);
    return -1;
}

void check(mpt_status status, const char* what) {
    if (status == MPT_STATUS_OK) return;
    std::fprintf(stderr, "mptrain-soak: %s: %s: %s\n", what, mpt_status_string(status), mpt_last_error());
    std::exit(1);
}

struct Handles {
    mpt_context_t* context = nullptr;
    mpt_model_t* model = nullptr;
    mpt_dataset_t* dataset = nullptr;
    mpt_trainer_t* trainer = nullptr;
};

Handles make(const std::vector<uint8_t>& samples, const std::vector<int32_t>& labels, int64_t rows, mpt_precision precision) {
    Handles h;
    mpt_context_options_t* options = nullptr;
    check(mpt_context_options_create(&options), "options");
    check(mpt_context_options_set_backend(options, MPT_BACKEND_CPU), "backend");
    check(mpt_context_create(options, &h.context), "context");
    mpt_context_options_destroy(options);
    check(mpt_model_create(h.context, 768, &h.model), "model");
    check(mpt_model_add_dense(h.model, 256, MPT_ACTIVATION_RELU), "dense");
    check(mpt_model_add_dense(h.model, 10, MPT_ACTIVATION_SOFTMAX), "dense");
    check(mpt_dataset_create_u8(h.context, samples.data(), rows, 768, labels.data(), 10, 1.0f / 255, 0, &h.dataset), "dataset");
    mpt_trainer_options_t* trainer_options = nullptr;
    check(mpt_trainer_options_create(&trainer_options), "trainer options");
    check(mpt_trainer_options_set_precision(trainer_options, precision), "precision");
    check(mpt_trainer_create(h.model, trainer_options, &h.trainer), "trainer");
    mpt_trainer_options_destroy(trainer_options);
    return h;
}

void destroy(Handles& h) {
    mpt_trainer_destroy(h.trainer);
    mpt_dataset_destroy(h.dataset);
    mpt_model_destroy(h.model);
    mpt_context_destroy(h.context);
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
    // glibc keeps freed blocks of the first rounds; after a quarter of the run the curve must be flat.
    const int warmup = std::max(10, rounds / 4);
    const int64_t rows = 2048;
    std::mt19937 generator(1);
    std::vector<uint8_t> samples(static_cast<size_t>(rows * 768));
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (auto& s : samples) s = static_cast<uint8_t>(generator());
    for (auto& l : labels) l = static_cast<int32_t>(generator() % 10);

    std::vector<float> inputs(4 * 768), outputs(4 * 10);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = samples[i] / 255.0f;
    Handles long_lived = make(samples, labels, rows, MPT_PRECISION_MIXED_FP16);
    long rss_after_warmup = 0, threads_after_warmup = 0, max_rss = 0, max_threads = 0;
    std::printf("%6s %10s %8s %12s %10s\n", "round", "rss_kB", "threads", "arena_bytes", "loss");
    for (int round = 1; round <= rounds; ++round) {
        check(mpt_trainer_fit(long_lived.trainer, long_lived.dataset, 1, 64, 1), "fit");
        for (int i = 0; i < 3; ++i) check(mpt_trainer_predict(long_lived.trainer, inputs.data(), 4, outputs.data(),
                                                              static_cast<int64_t>(outputs.size())), "predict");
        Handles scratch = make(samples, labels, rows, MPT_PRECISION_MIXED_BF16);
        float loss = 0.0f;
        check(mpt_trainer_step(scratch.trainer, scratch.dataset, 0, 128, &loss), "step");
        destroy(scratch);
        float eval_loss = 0.0f;
        check(mpt_trainer_evaluate(long_lived.trainer, long_lived.dataset, 0, &eval_loss, nullptr), "evaluate");
        size_t used = 0;
        check(mpt_context_get_memory(long_lived.context, &used, nullptr), "memory");
        const long rss = status_field("VmRSS:"), threads = status_field("Threads:");
        if (round == warmup) {
            rss_after_warmup = rss;
            threads_after_warmup = threads;
        }
        if (round > warmup) {
            max_rss = std::max(max_rss, rss);
            max_threads = std::max(max_threads, threads);
        }
        if (round % 10 == 0 || round == 1) std::printf("%6d %10ld %8ld %12zu %10.4f\n", round, rss, threads, used, eval_loss);
        std::fflush(stdout);
    }
    destroy(long_lived);
    if (rounds <= warmup) return 0;
    // Allow allocator noise (2 MiB) but no trend.
    const bool flat = max_rss <= rss_after_warmup + 2048 && max_threads <= threads_after_warmup;
    std::printf("after warm-up: rss %ld kB -> max %ld kB, threads %ld -> max %ld: %s\n", rss_after_warmup, max_rss,
                threads_after_warmup, max_threads, flat ? "flat" : "GROWING");
    return flat ? 0 : 1;
}
