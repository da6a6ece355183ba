// Shared by the C API test suites (which link libmptrain.so only): status checks that print the
// call, its status and mpt_last_error(); deterministic random numbers independent of the library;
// and the small labelled data set most cases train on.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mptrain/mptrain.h"

#define REQUIRE_OK(call)                                                                                  \
    do {                                                                                                  \
        const mpt_status status_ = (call);                                                                \
        const std::string error_ = mpt_last_error();                                                      \
        REQUIRE_MESSAGE(status_ == MPT_STATUS_OK,                                                         \
                        #call << " -> " << std::string(mpt_status_string(status_)) << ": " << error_);    \
    } while (0)

// The call fails with `expected` and leaves a non-empty message.
#define CHECK_FAILS(expected, call)                                                                       \
    do {                                                                                                  \
        const mpt_status status_ = (call);                                                                \
        const std::string error_ = mpt_last_error();                                                      \
        CHECK_MESSAGE(status_ == (expected), #call << " -> " << std::string(mpt_status_string(status_))   \
                                                   << " (expected " << std::string(mpt_status_string(expected)) \
                                                   << "): " << error_);                                   \
        CHECK_MESSAGE(!error_.empty(), #call << " left no message in mpt_last_error()");                 \
    } while (0)

namespace mpt_test {

// Deterministic data independent of the library: splitmix64 + Box-Muller.
class TestRng {
public:
    explicit TestRng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    double uniform(double low, double high) { return low + (high - low) * uniform(); }
    double normal() {
        const double u1 = uniform() + 1e-300, u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    uint64_t state_;
};

// Three Gaussian blobs in 4 dimensions, well separated at the default spread; row r has label r % 3.
constexpr int64_t kBlobFeatures = 4;
constexpr int32_t kBlobClasses = 3;

struct Blobs {
    std::vector<float> x;
    std::vector<int32_t> y;
    int64_t rows() const { return static_cast<int64_t>(y.size()); }
};

inline Blobs make_blobs(int64_t rows, uint64_t seed, double spread = 0.5) {
    static const double centres[kBlobClasses][kBlobFeatures] = {{2, 0, -1, 0}, {-2, 1, 1, 0}, {0, -2, 0, 2}};
    TestRng rng(seed);
    Blobs blobs;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t label = static_cast<int32_t>(r % kBlobClasses);
        for (int64_t f = 0; f < kBlobFeatures; ++f)
            blobs.x.push_back(static_cast<float>(centres[label][f] + spread * rng.normal()));
        blobs.y.push_back(label);
    }
    return blobs;
}

// The blobs as a data set of integer labels, or of their one-hot rows (float targets).
inline mpt_dataset_t* blob_labels(mpt_context_t* context, const Blobs& blobs) {
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32(context, blobs.x.data(), blobs.rows(), kBlobFeatures, blobs.y.data(), kBlobClasses,
                                      1, &dataset));
    return dataset;
}
inline mpt_dataset_t* blob_one_hot_rows(mpt_context_t* context, const Blobs& blobs) {
    std::vector<float> targets(static_cast<size_t>(blobs.rows() * kBlobClasses), 0.0f);
    for (int64_t r = 0; r < blobs.rows(); ++r) targets[static_cast<size_t>(r * kBlobClasses + blobs.y[r])] = 1.0f;
    mpt_dataset_t* dataset = nullptr;
    REQUIRE_OK(mpt_dataset_create_f32_targets(context, blobs.x.data(), blobs.rows(), kBlobFeatures, targets.data(),
                                              kBlobClasses, 1, &dataset));
    return dataset;
}

// Bit-identical floats (NaN included), not merely equal.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A context on `backend` with 2 CPU threads, `seed` and a memory budget (0: none).
inline mpt_context_t* create_context(mpt_backend backend, uint64_t seed, size_t budget = 0) {
    mpt_context_options_t* options = nullptr;
    REQUIRE_OK(mpt_context_options_create(&options));
    REQUIRE_OK(mpt_context_options_set_backend(options, backend));
    REQUIRE_OK(mpt_context_options_set_threads(options, 2));
    REQUIRE_OK(mpt_context_options_set_seed(options, seed));
    REQUIRE_OK(mpt_context_options_set_memory_budget(options, budget));
    mpt_context_t* context = nullptr;
    REQUIRE_OK(mpt_context_create(options, &context));
    mpt_context_options_destroy(options);
    return context;
}

}  // namespace mpt_test
