// See gemm_floor.h. Widths are padded to multiples of 8 exactly as mptrain pads them, so the floor
// does the same arithmetic as the library's step.
#include "gemm_floor.h"

#include <algorithm>
#include <chrono>

#if defined(MPTRAIN_HAVE_OPENBLAS)
#include <cblas.h>
#endif

double measure_gemm_floor_us(const std::vector<int64_t>& widths, int64_t batch, int repeats) {
#if defined(MPTRAIN_HAVE_OPENBLAS)
    std::vector<int64_t> padded;
    for (int64_t width : widths) padded.push_back((width + 7) / 8 * 8);
    int64_t widest = *std::max_element(padded.begin(), padded.end());
    std::vector<float> activations_in(static_cast<size_t>(batch * widest), 0.5f);
    std::vector<float> activations_out(static_cast<size_t>(batch * widest), 0.0f);
    std::vector<float> weights(static_cast<size_t>(widest * widest), 0.01f);
    std::vector<float> gradients(static_cast<size_t>(widest * widest), 0.0f);
    auto one_step = [&] {
        for (size_t layer = 0; layer + 1 < padded.size(); ++layer) {
            const int in = static_cast<int>(padded[layer]), out = static_cast<int>(padded[layer + 1]);
            const int rows = static_cast<int>(batch);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, activations_in.data(), in,
                        weights.data(), in, 0.0f, activations_out.data(), out);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0f, activations_out.data(), out,
                        activations_in.data(), in, 0.0f, gradients.data(), in);
            if (layer > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f, activations_out.data(), out,
                            weights.data(), in, 0.0f, activations_in.data(), in);
        }
    };
    // The floor is OpenBLAS at its best: its own threading over all cores (mptrain runs it
    // single-threaded inside its own pool), restored afterwards.
    const int library_threads = openblas_get_num_threads();
    openblas_set_num_threads(openblas_get_num_procs());
    one_step();  // warm-up
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        one_step();
        times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    openblas_set_num_threads(library_threads);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
#else
    (void)widths;
    (void)batch;
    (void)repeats;
    return -1.0;
#endif
}
