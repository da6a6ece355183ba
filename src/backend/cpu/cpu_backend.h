// The CPU backend: the reference implementation of every backend operation. Low-precision dtypes
// are emulated in fp32 storage by rounding GEMM inputs (stored rounded) and outputs, so overflow and
// underflow happen where they would on a GPU. On a CPU with AMX-BF16, bf16 and fp16 layers multiply
// on its tiles (amx_gemm.h) instead of in fp32 GEMMs: bf16's products summed in another order
// (subnormal inputs count as zero), fp16's as four exact parts each, from their fp32 masters
// rounded as they are packed (no low-precision copies kept). GEMMs with a few rows or columns of
// C take small_gemm.h where it runs: in every dtype with AVX-512, in fp32 (the emulation) with AVX2.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/amx_gemm.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/thread_pool.h"
#include "sched/cpu_scheduler.h"

namespace mpt {

class CpuBackend final : public Backend {
public:
    // `memory`, when given (a context's), is charged with the GEMMs' scratch buffers as they grow.
    CpuBackend(int threads, MemoryTracker* memory);

    BackendKind kind() const override { return BackendKind::cpu; }
    std::string device_name() const override;
    void describe(JsonWriter& out) const override;
    // OpenBLAS on slow kernels; environment settings it does not know.
    std::string setup_warning() const override;
    std::string emulation_warning(DType compute_dtype) const override;
    size_t storage_size(DType) const override { return sizeof(float); }
    // bf16 where AMX tiles or AVX512-BF16 dot products multiply it natively (faster than fp32 SGEMM,
    // and than fp16's four products); else fp32, since emulating a low dtype in fp32 GEMMs costs time
    // and gains nothing.
    DType preferred_compute_dtype() const override {
        return native_gemm_available(DType::bf16) ? DType::bf16 : DType::fp32;
    }
    size_t relu_mask_bytes(int64_t, int64_t) const override { return 0; }
    size_t gemm_workspace_bytes() const override { return 0; }
    bool rounds_parameters_on_read(DType compute_dtype) const override { return native_gemm_available(compute_dtype); }
    int64_t weight_words_max_rows(DType compute_dtype) const override;
    void write_weight_words(const float* masters, uint16_t* words, DType dtype, int64_t count) override;
    void reserve_update_scratch(const DenseUpdateShape* layers, int count, int64_t rows, bool clipping) override;
    bool update_needs_gradient_scratch(const OptimizerConfig& optimizer, int64_t, const DenseUpdateShape*,
                                       int) const override {
        return !is_plain_sgd(optimizer);
    }

    void* allocate(size_t bytes) override;
    void release(void* pointer) noexcept override;
    void* allocate_host(size_t bytes) override { return allocate(bytes); }
    void release_host(void* pointer) noexcept override { release(pointer); }
    void copy_to_device(void* destination, const void* source, size_t bytes) override;
    void copy_to_host(void* destination, const void* source, size_t bytes) override;
    void fill_zero(void* destination, size_t bytes) override;
    void copy_to_host_async(void* host, const void* source, size_t bytes) override { copy_to_host(host, source, bytes); }
    void convert_from_fp32(void* destination, DType dtype, const float* source, int64_t count) override;
    void convert_to_fp32(float* destination, const void* source, DType dtype, int64_t count) override;

    Scheduler& scheduler() override { return scheduler_; }

    void fill_order(int32_t* order, int64_t rows, bool shuffle, uint64_t seed) override;
    void gather_batch(const GatherArgs& args) override;
    void dense_forward(const DenseForwardArgs& args) override;
    void loss_head(const LossHeadArgs& args) override;
    bool dense_backward_data(const DenseBackwardDataArgs& args) override;
    void dropout(const DropoutArgs& args) override;
    void begin_step(TrainState* state) override;
    void max_abs(const MaxAbsInput* inputs, int count, float* out) override;
    void decide_update(const float* max_abs_pairs, int layer_count, int64_t rows, TrainState* state) override;
    void dense_update(const DenseUpdateArgs& args, const OptimizerConfig& optimizer) override;
    void clip_factor(const float* gradients, int64_t count, float clipnorm, TrainState* state) override;
    bool clips_from_batch(int64_t rows) const override;
    void clip_factor_from_batch(const DenseUpdateArgs* layers, int count, const float* max_abs_pairs, float clipnorm,
                                TrainState* state) override;
    void average_weights(const float* masters, float* averages, int64_t count, float momentum,
                         const TrainState* state) override;
    void swap_values(float* first, float* second, int64_t count) override;
    void finish_step(TrainState* state, const LossScalerConfig& scaler, const double* metrics,
                     double* committed_metrics) override;

    int threads() const { return pool_.threads(); }

private:
    // op(A) . op(B) for a layer computing in `dtype` (see cpu_sgemm): the AMX GEMM for a bf16 or fp16
    // layer where this CPU has it, else fp32 SGEMM (every product of two bf16 or two fp16 values is
    // exact in fp32; amx_gemm.h says how its sums differ).
    void gemm(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
              const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc);
    // The kernel gemm runs for a layer computing in `dtype`, C being m x n over depth k.
    enum class GemmKernel { small, amx, sgemm };
    GemmKernel gemm_kernel(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k) const;
    // The most rows (or columns) of C for which a bf16 or fp16 GEMM takes small_gemm over AMX, as
    // dot products (the streamed side contiguous over the depth) or not.
    static int64_t small_gemm_rows(DType dtype, bool dot_products);
    // Reserves in the pool's scratch what gemm of this shape will use.
    void reserve_gemm(DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k);
    // Runs `work` (GEMMs); should it run out of memory or budget for their scratch (before any of C
    // is written), what the scratch held goes too, so that smaller work fits the budget again.
    template <typename Work>
    void freeing_scratch_on_failure(const Work& work);
    // Column sums of dZ (the bias gradient), times `factor`, into `out`; with `keep` non-zero added
    // to keep * out (plain SGD's bias update), with 0 replacing it.
    void column_sums(const float* output_grad, int64_t rows, int64_t columns, float factor, float* out, float keep);
    float max_abs_one(const float* values, int64_t count);
    void write_low_copy(const float* master, void* low, DType dtype, int64_t count);

    ThreadPool pool_;
    std::vector<uint64_t> order_keys_;  // fill_order's scratch, kept between epochs
    bool clip_from_batch_ = true;       // MPTRAIN_CPU_CLIP_FROM_BATCH=0: clip from the gradients always
    // Elements max_abs has read (describe's "max_abs_elements"): what the update's finiteness proof
    // costs. Atomic: a description may be asked for from another thread while a step runs.
    std::atomic<uint64_t> max_abs_elements_{0};
    CpuScheduler scheduler_;
};

}  // namespace mpt
