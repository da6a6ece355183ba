// See weight_words.h.
#include "backend/cpu/weight_words.h"

#include <algorithm>

#include "backend/cpu/avx512_rounding.h"
#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace mpt {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

#define MPTRAIN_WEIGHT_WORDS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

template <DType operands>
MPTRAIN_WEIGHT_WORDS_TARGET void write_range(const float* values, uint16_t* words, int64_t count) {
    for (int64_t i = 0; i < count; i += 16) {
        const int64_t valid = std::min<int64_t>(16, count - i);
        const __mmask16 mask = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1);
        const __m512 loaded = _mm512_maskz_loadu_ps(mask, values + i);
        const __m256i rounded = operands == DType::bf16 ? bf16_words(loaded) : fp16_words(loaded);
        _mm256_mask_storeu_epi16(words + i, mask, rounded);
    }
}

#undef MPTRAIN_WEIGHT_WORDS_TARGET

}  // namespace

bool weight_words_supported() { return cpu_has_avx512_bf16(); }

void write_weight_words(DType operands, const float* values, uint16_t* words, int64_t count, ThreadPool& pool) {
    if (!weight_words_supported() || operands == DType::fp32)
        fail(MPT_STATUS_INTERNAL, "write_weight_words called where it cannot run");
    constexpr int64_t kChunk = int64_t{1} << 16;  // words per task: a multiple of the 16 lanes
    pool.parallel_for((count + kChunk - 1) / kChunk, 1, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * kChunk, last = std::min(count, end * kChunk);
        if (operands == DType::bf16) write_range<DType::bf16>(values + first, words + first, last - first);
        else write_range<DType::fp16>(values + first, words + first, last - first);
    });
}

#else

bool weight_words_supported() { return false; }

void write_weight_words(DType, const float*, uint16_t*, int64_t, ThreadPool&) {
    fail(MPT_STATUS_INTERNAL, "write_weight_words called in a build without AVX-512");
}

#endif

}  // namespace mpt
