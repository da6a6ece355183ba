// See gemm_floor.h. Widths are padded to multiples of 8 exactly as mptrain pads them, so the floor
// does the same arithmetic as the library's step.
#include "gemm_floor.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <new>
#include <thread>

#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/thread_pool.h"
#include "memory/host_block.h"

#if defined(MPTRAIN_HAVE_OPENBLAS)
#include "backend/cpu/openblas_library.h"
#endif

namespace {

// Row-major C = alpha * op(A) * op(B) + beta * C, the signature both ways share.
using Gemm = std::function<void(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                int64_t, float, float*, int64_t)>;

// Floats in memory of the kind the CPU backend's arenas use (huge pages where Linux gives them), so
// the floor's GEMMs meet the same TLB as the step's.
class HostFloats {
public:
    HostFloats(int64_t count, float value)
        : block_(mpt::allocate_host_block(static_cast<size_t>(count) * sizeof(float))) {
        if (!block_) throw std::bad_alloc();
        std::fill(data(), data() + count, value);
    }
    float* data() const { return static_cast<float*>(block_.get()); }

private:
    mpt::HostBlock block_;
};

double fastest_step_us(const std::vector<int64_t>& widths, int64_t batch, int repeats, size_t frozen_layers,
                       const Gemm& gemm) {
    std::vector<int64_t> padded;
    for (int64_t width : widths) padded.push_back((width + 7) / 8 * 8);
    const int64_t widest = *std::max_element(padded.begin(), padded.end());
    HostFloats activations_in(batch * widest, 0.5f);
    HostFloats activations_out(batch * widest, 0.0f);
    HostFloats input_gradients(batch * widest, 0.0f);
    std::vector<HostFloats> weights;
    for (size_t layer = 0; layer + 1 < padded.size(); ++layer) weights.emplace_back(padded[layer] * padded[layer + 1], 0.01f);
    // The weight gradient accumulates into the weights (beta 1), as the step's fused SGD does: the
    // cheapest form of that GEMM (no separate gradient to write). alpha is tiny and not 0, which
    // BLAS may skip: the weights barely move over the repeats.
    constexpr float kLearningRate = 1e-9f;
    auto one_step = [&] {
        for (size_t layer = 0; layer + 1 < padded.size(); ++layer) {
            const int64_t in = padded[layer], out = padded[layer + 1];
            float* w = weights[layer].data();
            gemm(false, true, batch, out, in, 1.0f, activations_in.data(), in, w, in, 0.0f, activations_out.data(), out);
            if (layer >= frozen_layers)  // a frozen layer has no weight gradient
                gemm(true, false, out, in, batch, -kLearningRate, activations_out.data(), out, activations_in.data(), in,
                     1.0f, w, in);
            if (layer > frozen_layers)  // input gradients down to the lowest trainable layer
                gemm(false, false, batch, in, out, 1.0f, activations_out.data(), out, w, in, 0.0f,
                     input_gradients.data(), in);
        }
    };
    one_step();  // warm-up
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        one_step();
        times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    return *std::min_element(times.begin(), times.end());
}

}  // namespace

double measure_gemm_floor_us(const std::vector<int64_t>& widths, int64_t batch, int repeats, int threads,
                             mpt::DType compute, int frozen_layers) {
    const size_t frozen = static_cast<size_t>(std::max(0, frozen_layers));
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    mpt::ThreadPool pool(threads);
    if (mpt::native_gemm_available(compute))
        return fastest_step_us(widths, batch, repeats, frozen,
                               [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
                                   mpt::amx_gemm(compute, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
                               });
    double floor = fastest_step_us(widths, batch, repeats, frozen,
                                  [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
                                      mpt::cpu_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool);
                                  });
#if defined(MPTRAIN_HAVE_OPENBLAS)
    if (const mpt::OpenBlas* blas = mpt::openblas().api) {
        // OpenBLAS's own threading, restored afterwards (mptrain runs it single-threaded).
        const int library_threads = blas->get_num_threads();
        blas->set_num_threads(threads);
        floor = std::min(floor, fastest_step_us(widths, batch, repeats, frozen,
                                               [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                                                   float* c, int64_t ldc) {
                                                   blas->sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                                                               tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                                                               static_cast<int>(n), static_cast<int>(k), alpha, a,
                                                               static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                                                               static_cast<int>(ldc));
                                               }));
        blas->set_num_threads(library_threads);
    }
#endif
    return floor;
}
