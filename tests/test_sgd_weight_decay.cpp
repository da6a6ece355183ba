// Plain SGD (no momentum) with weight decay keeps plain SGD's fast paths: the step is
// keep * w - rate * g with keep = 1 - rate * decay, which the CPU applies as one GEMM into the
// weights (beta = keep) and a column sum into the biases, with no gradient tensor planned. Each
// step is checked against the undecayed step from the same weights, which the decay must only
// shift by rate * decay * w (the step's scheduled rate), at batch sizes on either side of the CPU's
// clipping threshold and in every precision; ctest runs it once more with the small-batch GEMM
// off (the blob model's GEMMs are small-GEMM problems on AVX2), for OpenBLAS's and the portable
// GEMM's beta. The optimizer's formula itself is checked in training/loss_and_optimizer_cases.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mptrain/mptrain.h"
#include "support/capi_fixture.h"

namespace {

using mpt_test::Blobs;
using mpt_test::BlobTrainer;
using mpt_test::BlobTrainerSetup;
using mpt_test::kBlobClasses;
using mpt_test::kBlobFeatures;

constexpr float kDecay = 0.3f;
constexpr int64_t kHidden = 300;

// Gives every bias of `trainer` a non-zero value (a fresh model's are 0, which decay leaves alone).
void set_nonzero_biases(const BlobTrainer& trainer) {
    for (int64_t layer = 0; layer < 2; ++layer) {
        const int64_t units = layer == 0 ? trainer.hidden : trainer.outputs;
        const int64_t inputs = layer == 0 ? kBlobFeatures : trainer.hidden;
        std::vector<float> w(static_cast<size_t>(units * inputs)), b(static_cast<size_t>(units));
        REQUIRE_OK(mpt_model_get_weights(trainer.model, layer, w.data(), units * inputs, b.data(), units));
        for (int64_t i = 0; i < units; ++i) b[static_cast<size_t>(i)] = 0.05f * static_cast<float>(i % 7 - 3) + 0.02f;
        REQUIRE_OK(mpt_model_set_weights(trainer.model, layer, w.data(), units * inputs, b.data(), units));
    }
}

// One step of `setup` over the first `batch` rows of `blobs`, from the seeded weights with the
// biases set_nonzero_biases gives: the parameters before and after, and the step's rate.
struct StepResult {
    std::vector<float> before, after;
    float rate = 0.0f;
};
StepResult one_step(const BlobTrainerSetup& setup, const Blobs& blobs, int64_t batch) {
    BlobTrainer trainer(setup);
    set_nonzero_biases(trainer);
    StepResult result;
    result.before = trainer.weights();
    REQUIRE_OK(mpt_trainer_get_scheduled_learning_rate(trainer.trainer, &result.rate));
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, batch, nullptr));
    mpt_dataset_destroy(dataset);
    result.after = trainer.weights();
    return result;
}

// The memory `setup`'s trainer plans for steps of `batch` rows (planned at the first step).
size_t planned_bytes(const BlobTrainerSetup& setup, const Blobs& blobs, int64_t batch) {
    BlobTrainer trainer(setup);
    mpt_dataset_t* dataset = trainer.labels(blobs);
    REQUIRE_OK(mpt_trainer_step(trainer.trainer, dataset, 0, batch, nullptr));
    mpt_dataset_destroy(dataset);
    size_t planned = 0, allocated = 0;
    REQUIRE_OK(mpt_trainer_get_memory(trainer.trainer, &planned, &allocated));
    return planned;
}

}  // namespace

TEST_CASE("plain SGD with weight decay steps as without it, less rate * decay * w, at every batch size and precision") {
    const Blobs blobs = mpt_test::make_blobs(256, 5, 1.0);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_FP16, MPT_PRECISION_MIXED_BF16}) {
        // 64 rows is the most the CPU clips from the batch (Gram matrices), with the update one GEMM
        // scaled by the clip factor; above it clips from written gradients, in parts.
        // A warm-up's first step trains at a quarter of the base rate: the decay is the step's.
        for (float clipnorm : {0.0f, 0.05f}) {
            for (int64_t batch : {int64_t{8}, int64_t{64}, int64_t{96}, int64_t{256}}) {
              for (int64_t warmup : {int64_t{0}, int64_t{4}}) {
                CAPTURE(static_cast<int>(precision));
                CAPTURE(clipnorm);
                CAPTURE(batch);
                CAPTURE(warmup);
                BlobTrainerSetup undecayed;
                undecayed.precision = precision;
                undecayed.hidden = kHidden;
                undecayed.learning_rate = 0.1f;
                undecayed.global_clipnorm = clipnorm;
                if (warmup > 0) {
                    undecayed.lr_schedule = MPT_LR_SCHEDULE_COSINE;
                    undecayed.warmup_steps = warmup;
                    undecayed.decay_steps = 100;
                }
                BlobTrainerSetup decayed = undecayed;
                decayed.weight_decay = kDecay;
                const StepResult plain = one_step(undecayed, blobs, batch);
                const StepResult decaying = one_step(decayed, blobs, batch);
                REQUIRE(mpt_test::same_bits(plain.before, decaying.before));
                REQUIRE(decaying.rate == plain.rate);
                CHECK(decaying.rate == (warmup > 0 ? undecayed.learning_rate / static_cast<float>(warmup)
                                                   : undecayed.learning_rate));
                // decaying.after = plain.after - rate * decay * before, each difference against the
                // whole step's size (the decay is about half of it here, so a step without decay, or
                // with it on the weights but not the biases, is far outside the bound).
                const double shrink = static_cast<double>(decaying.rate) * kDecay;
                double weight_gap = 0.0, bias_gap = 0.0, largest_step = 0.0;
                size_t index = 0;
                for (int64_t layer = 0; layer < 2; ++layer) {
                    const int64_t units = layer == 0 ? kHidden : kBlobClasses;
                    const int64_t weights = units * (layer == 0 ? kBlobFeatures : kHidden);
                    for (int64_t k = 0; k < weights + units; ++k, ++index) {
                        const double w = plain.before[index];
                        const double error = std::fabs(decaying.after[index] - (plain.after[index] - shrink * w));
                        double& gap = k < weights ? weight_gap : bias_gap;
                        gap = std::max(gap, error);
                        largest_step = std::max(largest_step, std::fabs(decaying.after[index] - w));
                    }
                }
                INFO("largest gap: weights " << weight_gap << ", biases " << bias_gap << "; largest step "
                                             << largest_step);
                CHECK(largest_step > 0.0);
                CHECK(weight_gap <= 1e-5 * largest_step + 1e-7);
                CHECK(bias_gap <= 1e-5 * largest_step + 1e-7);
              }
            }
        }
    }
}

TEST_CASE("plain SGD with weight decay plans no gradient tensor: the memory of plain SGD without it") {
    const Blobs blobs = mpt_test::make_blobs(256, 5, 1.0);
    for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16}) {
        for (int64_t batch : {int64_t{32}, int64_t{256}}) {
            CAPTURE(static_cast<int>(precision));
            CAPTURE(batch);
            BlobTrainerSetup plain;
            plain.precision = precision;
            plain.hidden = kHidden;
            BlobTrainerSetup decayed = plain;
            decayed.weight_decay = kDecay;
            BlobTrainerSetup momentum = decayed;  // keeps a velocity and a gradient per parameter
            momentum.momentum = 0.9f;
            const size_t plain_bytes = planned_bytes(plain, blobs, batch);
            const size_t decayed_bytes = planned_bytes(decayed, blobs, batch);
            const size_t momentum_bytes = planned_bytes(momentum, blobs, batch);
            INFO("planned bytes: plain " << plain_bytes << ", decayed " << decayed_bytes << ", momentum "
                                         << momentum_bytes);
            CHECK(decayed_bytes == plain_bytes);
            CHECK(momentum_bytes > decayed_bytes);
        }
    }
}
