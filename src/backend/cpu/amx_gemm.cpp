// See amx_gemm.h. One AMX instruction, TDPBF16PS, adds a 16 x 32 bf16 tile times a 32 x 16 bf16
// tile into a 16 x 16 fp32 tile. The left tile holds 16 rows of 32 products' worth of values;
// the right one holds its 32 x 16 values as 16 rows of 16 pairs, the two values a sum takes from
// consecutive depths side by side. C is computed 32 x 32 at a time: four C tiles, two left tiles,
// two right ones, all eight tile registers. Where the tiles cannot run, bf16 (not fp16) runs on
// AVX512-BF16's dot products over the same packing instead (multiply_block_by_dot_products).
//
// Which operand goes on the left: a value pair of the right tile comes from two consecutive depths,
// so an operand stored depth-contiguous (a transposed B, as every forward GEMM has: X . W^T) would
// need a transposition there, while on the left it is read as it lies. When B is stored that way,
// C^T = op(B)^T . op(A)^T is computed instead, and its blocks are written transposed into C.
//
// Work split: one operand is packed whole first, in parallel, into one buffer the threads share; the
// other is packed 32 rows (or columns) at a time by the task that multiplies them, inside that task,
// so every value is converted once (streams_right_side says which: the smaller, unless the one along
// C's rows fits L2). So that tiles load from L2, not L3, a depth over 1024 is taken in passes
// (multiply_streamed), and a shallow product walks a large packed side in panels
// (multiply_in_panels). Each C block sums its depth in one fixed order, so which thread computes it
// changes nothing. The buffers are the pool's scratch (worker_scratch.h: per participant, grow-only,
// charged to the context's memory): the caller's holds the side packed whole, each task's its own
// packed blocks and its sums between passes (up to 2 MiB); all of them are reserved before any of C
// is written. Large ones are on huge pages where Linux gives them (host_block.h).
//
// fp16 operands: every fp16 value is the exact sum of two bf16 values (its leading 8 significant
// bits, and the remaining 3, which bf16's exponent range always holds), so a product of two fp16
// values is the sum of four exact bf16 products. Each side is packed as two planes, the leading
// parts and the remainders, and the kernel multiplies all four pairings into the same sums. The
// tile unit rounds each product into its sum on its own, so an fp16 sum of k products carries up
// to 4k fp32 roundings rather than k (no ordering avoids it: AMX multiplies only bf16).
#include "backend/cpu/amx_gemm.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/avx512_rounding.h"
#include "backend/cpu/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "memory/host_block.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define MPTRAIN_AMX_BUILD 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mpt {

namespace {

struct AmxSupport {
    bool available = false;
    std::string reason;  // why not
};

#if defined(MPTRAIN_AMX_BUILD)

// Linux's requests about extended states (asm/prctl.h; spelled out for older headers).
constexpr int kArchGetSupportedComponents = 0x1021;
constexpr int kArchRequestComponentPermission = 0x1023;
constexpr int kTileDataComponent = 18;

// What the CPU and the kernel offer; changes nothing.
AmxSupport detect_support() {
    if (const char* setting = std::getenv("MPTRAIN_CPU_AMX"); setting && std::strcmp(setting, "0") == 0)
        return {false, "MPTRAIN_CPU_AMX=0"};
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) || !(edx & (1u << 22)))
        return {false, "this CPU has no AMX-BF16"};
    // The packing converts with AVX512-BF16 (every AMX CPU so far has it; checked all the same).
    if (!cpu_has_avx512_bf16()) return {false, "this CPU has AMX-BF16 but not AVX512-BF16 and AVX512-BW"};
    unsigned long components = 0;
    if (syscall(SYS_arch_prctl, kArchGetSupportedComponents, &components) != 0 ||
        !(components & (1ul << kTileDataComponent)))
        return {false, "this Linux does not support the AMX tile state"};
    return {true, {}};
}

#else

AmxSupport detect_support() { return {false, "AMX needs Linux on x86-64"}; }

#endif

// Read once, so that the two answers below cannot disagree over a later change to the environment.
const AmxSupport& cpu_support() {
    static const AmxSupport support = detect_support();
    return support;
}

// The permission, asked once per process, and only for work in bf16 or fp16: once it is granted
// Linux holds the whole process to larger signal stacks (sigaltstack), which an application that
// never trains in them should not have to know about.
AmxSupport request_permission() {
    const AmxSupport& support = cpu_support();
#if defined(MPTRAIN_AMX_BUILD)
    if (support.available && syscall(SYS_arch_prctl, kArchRequestComponentPermission, kTileDataComponent) != 0)
        return {false, std::string("Linux did not grant the AMX tile state (arch_prctl: ") + std::strerror(errno) + ")"};
#endif
    return support;
}

std::atomic<bool> permission_refused{false};

const AmxSupport& amx_support() {
    static const AmxSupport support = [] {
        AmxSupport asked = request_permission();
        if (cpu_support().available && !asked.available) permission_refused.store(true);
        return asked;
    }();
    return support;
}

}  // namespace

bool amx_gemm_refused() { return permission_refused.load(); }

bool amx_gemm_supported() { return cpu_support().available; }

bool amx_gemm_available() { return amx_support().available; }
const std::string& amx_gemm_unavailable_reason() { return amx_support().reason; }

namespace {

// Why the dot-product kernel cannot run here; empty when it can. Read once.
const std::string& dot_products_unavailable_reason() {
    static const std::string reason = [] {
        if (const char* setting = std::getenv("MPTRAIN_CPU_BF16_DOT"); setting && std::strcmp(setting, "0") == 0)
            return std::string("MPTRAIN_CPU_BF16_DOT=0");
#if defined(MPTRAIN_AMX_BUILD)
        if (!cpu_has_avx512_bf16()) return std::string("no AVX512-BF16");
        return std::string();
#else
        return std::string("no AVX512-BF16 build");
#endif
    }();
    return reason;
}

}  // namespace

bool amx_gemm_dot_products_supported() { return dot_products_unavailable_reason().empty(); }

bool native_gemm_available(DType operands) {
    if (operands != DType::bf16 && operands != DType::fp16) return false;
    if (amx_gemm_available()) return true;
    return operands == DType::bf16 && amx_gemm_dot_products_supported();
}

NativeGemm native_gemm_kind(DType operands) {
    if (operands != DType::bf16 && operands != DType::fp16) return NativeGemm::emulated;
    if (!amx_gemm_refused() && amx_gemm_supported()) return NativeGemm::amx_tiles;
    if (operands == DType::bf16 && amx_gemm_dot_products_supported()) return NativeGemm::dot_products;
    return NativeGemm::emulated;
}

const char* native_gemm_name(NativeGemm kind) {
    switch (kind) {
        case NativeGemm::amx_tiles:
            return "amx tiles";
        case NativeGemm::dot_products:
            return "avx512-bf16 dot products";
        case NativeGemm::emulated:
            break;
    }
    return "emulated in fp32";
}

std::string native_gemm_unavailable_reason(DType operands) {
    if (native_gemm_available(operands)) return {};
    if (operands == DType::bf16) return amx_gemm_unavailable_reason() + "; " + dot_products_unavailable_reason();
    if (amx_gemm_dot_products_supported())
        return amx_gemm_unavailable_reason() + "; AVX512-BF16 multiplies bf16 only, and fp16 as four bf16 products " +
               "would be slower than fp32";
    return amx_gemm_unavailable_reason();
}

#if defined(MPTRAIN_AMX_BUILD)

namespace {

constexpr int64_t kTileRows = 16;
constexpr int64_t kDepthStep = 32;                         // values per left-tile row: 64 bytes of bf16
constexpr int64_t kTileValues = kTileRows * kDepthStep;    // 512 bf16, 1 KiB: every tile of either side
constexpr int64_t kBlock = 2 * kTileRows;                  // C is computed kBlock x kBlock at a time

// One side of the product as the kernel reads it: value (x, q) at data[x * x_stride + q * q_stride],
// x a row of the left side or a column of the right, q the depth. One of the strides is 1.
struct Side {
    const float* data;
    int64_t x_stride;
    int64_t q_stride;
    int64_t count;  // rows of C (left) or columns of C (right)
};

struct Problem {
    Side left, right;
    int64_t depth;
    int64_t steps;   // depth in kDepthStep blocks, zero-padded
    int64_t planes;  // bf16 planes per value: 1 for bf16 operands, 2 for fp16 (leading part, remainder)
    float alpha, beta;
    float* c;
    int64_t c_left_stride;   // C's element (left x, right x) is c[x_left * c_left_stride + x_right * c_right_stride]
    int64_t c_right_stride;
};

#define MPTRAIN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define MPTRAIN_AMX_BF16 __attribute__((target("amx-tile,amx-bf16")))

MPTRAIN_AVX512_BF16 inline __m512i as_words(__m512bh values) { return (__m512i)values; }

// Values rounded to fp16 (nearest, ties to even; overflow to Inf), as leading + remainder, two
// vectors of bf16 values (in fp32) whose sum is exact. A non-finite value is all leading part.
MPTRAIN_AVX512_BF16 inline void split_half(__m512 values, __m512& leading, __m512& remainder) {
    const __m512 half = rounded_to_fp16(values);
    leading = rounded_to_bf16(half);
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(half), _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    remainder = _mm512_maskz_sub_ps(finite, half, leading);
}

// The bf16 words of each plane from two vectors of 16 values (`first` gives words 0-15): rounded
// to bf16 (nearest, ties to even), or, for fp16 operands, split into two planes.
MPTRAIN_AVX512_BF16 inline void plane_words(__m512 first, __m512 second, int64_t planes, __m512i words[2]) {
    if (planes == 1) {
        words[0] = as_words(_mm512_cvtne2ps_pbh(second, first));
        return;
    }
    __m512 first_leading, first_remainder, second_leading, second_remainder;
    split_half(first, first_leading, first_remainder);
    split_half(second, second_leading, second_remainder);
    words[0] = as_words(_mm512_cvtne2ps_pbh(second_leading, first_leading));
    words[1] = as_words(_mm512_cvtne2ps_pbh(second_remainder, first_remainder));
}

// Packs `tiles` tiles of 16 x-values (rows of the left side, columns of the right) starting at x0,
// over the depth steps [step0, step1), zero-padded past the side's count and the depth: per tile,
// `planes` planes of step1 - step0 depth steps. In 32-bit words (a pair of bf16 from depths 2p and 2p+1), a tile's
// depth step is a 16 x 16 matrix: the left side stores it word[x][p], the right side word[p][x].
MPTRAIN_AVX512_BF16 void pack_side(const Problem& g, const Side& side, int64_t x0, int64_t tiles, bool right,
                                   int64_t step0, int64_t step1, uint16_t* out) {
    const int64_t depth = g.depth, steps = step1 - step0, planes = g.planes;
    // The 16 word offsets of a column of a 16 x 16 word matrix, for the transposed stores.
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(kTileRows));
    // Words [lo0, hi0, lo1, hi1, ...] from [lo0..lo15, hi0..hi15]: interleaves two depths' values.
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const int64_t plane_values = steps * kTileValues;
    for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t first_x = x0 + tile * kTileRows;
        for (int64_t step = 0; step < steps; ++step) {
            uint32_t* block = reinterpret_cast<uint32_t*>(out + tile * planes * plane_values + step * kTileValues);
            const int64_t plane_words_apart = plane_values / 2;  // the same block in the next plane
            const int64_t q0 = (step0 + step) * kDepthStep;
            __m512i words[2];
            if (side.q_stride == 1) {
                // Each x's 32 depths are contiguous: one row of words over p.
                const int64_t valid_q = std::min<int64_t>(kDepthStep, depth - q0);
                const __mmask16 low_mask = static_cast<__mmask16>(valid_q >= 16 ? 0xFFFF : (1u << valid_q) - 1);
                const __mmask16 high_mask =
                    static_cast<__mmask16>(valid_q >= 32 ? 0xFFFF : valid_q <= 16 ? 0 : (1u << (valid_q - 16)) - 1);
                for (int64_t r = 0; r < kTileRows; ++r) {
                    const int64_t x = first_x + r;
                    __m512 low = _mm512_setzero_ps(), high = _mm512_setzero_ps();
                    if (x < side.count) {
                        const float* values = side.data + x * side.x_stride + q0;
                        low = _mm512_maskz_loadu_ps(low_mask, values);
                        high = _mm512_maskz_loadu_ps(high_mask, values + 16);
                    }
                    plane_words(low, high, planes, words);
                    for (int64_t plane = 0; plane < planes; ++plane) {
                        uint32_t* plane_block = block + plane * plane_words_apart;
                        if (right) _mm512_i32scatter_epi32(plane_block + r, column, words[plane], 4);
                        else _mm512_storeu_si512(plane_block + r * kTileRows, words[plane]);
                    }
                }
            } else {
                // Each depth's 16 x-values are contiguous: one row of words over x, two depths at a time.
                const int64_t valid_x = std::min<int64_t>(kTileRows, side.count - first_x);
                const __mmask16 mask = static_cast<__mmask16>(valid_x >= 16 ? 0xFFFF : valid_x <= 0 ? 0 : (1u << valid_x) - 1);
                for (int64_t p = 0; p < kTileRows; ++p) {
                    const int64_t q = q0 + 2 * p;
                    const float* values = side.data + q * side.q_stride + first_x;
                    const __m512 even = q < depth ? _mm512_maskz_loadu_ps(mask, values) : _mm512_setzero_ps();
                    const __m512 odd = q + 1 < depth ? _mm512_maskz_loadu_ps(mask, values + side.q_stride) : _mm512_setzero_ps();
                    plane_words(even, odd, planes, words);
                    for (int64_t plane = 0; plane < planes; ++plane) {
                        uint32_t* plane_block = block + plane * plane_words_apart;
                        const __m512i pairs = _mm512_permutexvar_epi16(interleave, words[plane]);
                        if (right) _mm512_storeu_si512(plane_block + p * kTileRows, pairs);
                        else _mm512_i32scatter_epi32(plane_block + p, column, pairs, 4);
                    }
                }
            }
        }
    }
}

// The tile registers' shapes (palette 1): all eight are 16 rows of 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t row_bytes[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

MPTRAIN_AMX_BF16 void load_tile_config() {
    static const TileConfig config;
    _tile_loadconfig(&config);
}

MPTRAIN_AMX_BF16 void release_tiles() { _tile_release(); }

// A packed block as multiply_block reads it: the first depth step to multiply, and how many steps
// the packing holds (the distance between a block's planes and tiles).
struct PackedBlock {
    const uint16_t* first_step;
    int64_t packed_steps;
};

// The four products of a 2 x 2 block of C tiles (tiles 0-3) from the left tiles 4, 5 and the right
// tiles 6, 7.
MPTRAIN_AMX_BF16 inline void multiply_loaded_tiles() {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

// out[32][32] (rows `out_stride` floats apart) = left rows [2 tiles] . right columns [2 tiles] over
// `steps` depth steps, in fp32, added to the sums already in `out` when `continue_sums` (an earlier
// part of the depth, stored and reloaded in fp32). With two planes, all four pairings of them at
// each depth step, in the order leading x leading, leading x remainder, remainder x remainder,
// remainder x leading: each pairing shares a side with the one before, so a step loads 10 tiles
// for its 16 products (pairing by pairing over the whole depth took 16; 1.01-1.36x faster on the
// seed MLP's GEMMs, bench/NOTES.md).
MPTRAIN_AMX_BF16 void multiply_block(PackedBlock left, PackedBlock right, int64_t steps, int64_t planes,
                                    bool continue_sums, float* out, int64_t out_stride) {
    const int64_t left_plane = left.packed_steps * kTileValues, right_plane = right.packed_steps * kTileValues;
    const uint16_t* left0 = left.first_step;
    const uint16_t* left1 = left0 + planes * left_plane;
    const uint16_t* right0 = right.first_step;
    const uint16_t* right1 = right0 + planes * right_plane;
    const int64_t stride = out_stride * static_cast<int64_t>(sizeof(float));
    if (continue_sums) {
        _tile_loadd(0, out, stride);
        _tile_loadd(1, out + kTileRows, stride);
        _tile_loadd(2, out + kTileRows * out_stride, stride);
        _tile_loadd(3, out + kTileRows * out_stride + kTileRows, stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t step = 0; step < steps; ++step) {
        const int64_t offset = step * kTileValues;
        _tile_loadd(4, left0 + offset, 64);
        _tile_loadd(5, left1 + offset, 64);
        _tile_loadd(6, right0 + offset, 64);
        _tile_loadd(7, right1 + offset, 64);
        multiply_loaded_tiles();
        if (planes == 1) continue;
        _tile_loadd(6, right0 + right_plane + offset, 64);
        _tile_loadd(7, right1 + right_plane + offset, 64);
        multiply_loaded_tiles();
        _tile_loadd(4, left0 + left_plane + offset, 64);
        _tile_loadd(5, left1 + left_plane + offset, 64);
        multiply_loaded_tiles();
        _tile_loadd(6, right0 + offset, 64);
        _tile_loadd(7, right1 + offset, 64);
        multiply_loaded_tiles();
    }
    _tile_stored(0, out, stride);
    _tile_stored(1, out + kTileRows, stride);
    _tile_stored(2, out + kTileRows * out_stride, stride);
    _tile_stored(3, out + kTileRows * out_stride + kTileRows, stride);
}

// multiply_block's product on a CPU with AVX512-BF16 but no AMX tiles, from the same packed blocks
// (bf16 only: one plane): VDPBF16PS adds two exact bf16 products to each of 16 fp32 sums, the two
// values of a right-tile word times a left word broadcast, which is the packing's pair layout
// as it lies. C's 32 x 32 block in four groups of 8 rows, 16 sums (two vectors a row) in registers
// through the whole depth; every right word is loaded once a group, every left word once. The last
// step multiplies only its `last_pairs` pairs that hold depths (the packing's zeros past them add
// nothing): a weight gradient at batch 4 would otherwise take 8 times its products.
MPTRAIN_AVX512_BF16 void multiply_block_by_dot_products(PackedBlock left, PackedBlock right, int64_t steps,
                                                        int64_t last_pairs, bool continue_sums, float* out,
                                                        int64_t out_stride) {
    constexpr int kGroupRows = 8;
    const int64_t left_tile_words = left.packed_steps * kTileValues / 2;
    const int64_t right_tile_words = right.packed_steps * kTileValues / 2;
    const uint32_t* right0 = reinterpret_cast<const uint32_t*>(right.first_step);
    const uint32_t* right1 = right0 + right_tile_words;
    for (int64_t group = 0; group < kBlock / kGroupRows; ++group) {
        const int64_t tile = group * kGroupRows / kTileRows, row0 = group * kGroupRows % kTileRows;
        const uint32_t* left_rows =
            reinterpret_cast<const uint32_t*>(left.first_step) + tile * left_tile_words + row0 * kTileRows;
        float* out_rows = out + group * kGroupRows * out_stride;
        // (Every loop over the rows unrolled, so that the sums stay in registers at -O2 too.)
        __m512 sums[kGroupRows][2];
#pragma GCC unroll 8
        for (int r = 0; r < kGroupRows; ++r) {
            sums[r][0] = continue_sums ? _mm512_loadu_ps(out_rows + r * out_stride) : _mm512_setzero_ps();
            sums[r][1] = continue_sums ? _mm512_loadu_ps(out_rows + r * out_stride + kTileRows) : _mm512_setzero_ps();
        }
        for (int64_t step = 0; step < steps; ++step) {
            const int64_t offset = step * kTileValues / 2;
            const uint32_t* lefts = left_rows + offset;
            const int64_t pairs = step + 1 == steps ? last_pairs : kTileRows;
            for (int64_t p = 0; p < pairs; ++p) {
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512(right0 + offset + p * kTileRows);
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512(right1 + offset + p * kTileRows);
#pragma GCC unroll 8
                for (int r = 0; r < kGroupRows; ++r) {
                    const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(lefts[r * kTileRows + p]));
                    sums[r][0] = _mm512_dpbf16_ps(sums[r][0], a, b0);
                    sums[r][1] = _mm512_dpbf16_ps(sums[r][1], a, b1);
                }
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < kGroupRows; ++r) {
            _mm512_storeu_ps(out_rows + r * out_stride, sums[r][0]);
            _mm512_storeu_ps(out_rows + r * out_stride + kTileRows, sums[r][1]);
        }
    }
}

// multiply_block on the tiles where this process has them, else by dot products (bf16 only: what
// check_runs_here lets through).
class BlockMultiplier {
public:
    BlockMultiplier() : tiles_(amx_gemm_available()) {
        if (tiles_) load_tile_config();
    }
    ~BlockMultiplier() {
        if (tiles_) release_tiles();
    }
    BlockMultiplier(const BlockMultiplier&) = delete;
    BlockMultiplier& operator=(const BlockMultiplier&) = delete;

    // `last_pairs`: the pairs of depths the last of the steps holds (16 but at the depth's end).
    void operator()(PackedBlock left, PackedBlock right, int64_t steps, int64_t last_pairs, int64_t planes,
                    bool continue_sums, float* out, int64_t out_stride) const {
        if (tiles_)
            multiply_block(left, right, steps, planes, continue_sums, out, out_stride);
        else
            multiply_block_by_dot_products(left, right, steps, last_pairs, continue_sums, out, out_stride);
    }

private:
    bool tiles_;
};

// A strip of C, `lefts` x `rights` from (left0, right0), = alpha * sums + beta * C (beta 0 ignores
// C, NaN included), sums[left][right] with rows `stride` floats apart. C is
// written one row at a time, each row's part of the strip in one contiguous pass.
MPTRAIN_AVX512_BF16 void store_strip(const Problem& g, const float* sums, int64_t stride, int64_t left0, int64_t lefts,
                                     int64_t right0, int64_t rights) {
    const int64_t offset = left0 * g.c_left_stride + right0 * g.c_right_stride;
    const float alpha = g.alpha, beta = g.beta;
    const bool rows_are_left = g.c_right_stride == 1;  // else C^T was computed: C's rows are the right side
    const int64_t c_rows = rows_are_left ? lefts : rights, c_columns = rows_are_left ? rights : lefts;
    const int64_t c_row_stride = rows_are_left ? g.c_left_stride : g.c_right_stride;
    // Where element t of C's row r sits in sums: r * row_step + t * column_step.
    const int64_t row_step = rows_are_left ? stride : 1, column_step = rows_are_left ? 1 : stride;
    for (int64_t r = 0; r < c_rows; ++r) {
        float* c_row = g.c + offset + r * c_row_stride;
        const float* sum_row = sums + r * row_step;
        if (column_step == 1) {  // the common case, in vectors (-O2 does not vectorise the loops below)
            const __m512 alphas = _mm512_set1_ps(alpha), betas = _mm512_set1_ps(beta);
            for (int64_t t = 0; t < c_columns; t += 16) {
                const __mmask16 mask = c_columns - t >= 16 ? static_cast<__mmask16>(0xFFFF)
                                                           : static_cast<__mmask16>((1u << (c_columns - t)) - 1);
                const __m512 scaled = _mm512_mul_ps(alphas, _mm512_maskz_loadu_ps(mask, sum_row + t));
                // (As the scalar alpha * sum + beta * c: two roundings, no fused multiply-add.)
                const __m512 value =
                    beta == 0.0f ? scaled
                                 : _mm512_add_ps(scaled, _mm512_mul_ps(betas, _mm512_maskz_loadu_ps(mask, c_row + t)));
                _mm512_mask_storeu_ps(c_row + t, mask, value);
            }
        } else if (beta == 0.0f) {
            for (int64_t t = 0; t < c_columns; ++t) c_row[t] = alpha * sum_row[t * column_step];
        } else {
            for (int64_t t = 0; t < c_columns; ++t) c_row[t] = alpha * sum_row[t * column_step] + beta * c_row[t];
        }
    }
}

int64_t blocks_of(int64_t count) { return (count + kBlock - 1) / kBlock; }

// The pairs of depths in the last of the depth steps [step0, step1): all 16 but at the depth's end.
int64_t last_pairs_of(const Problem& g, int64_t step1) {
    if (step1 < g.steps) return kTileRows;
    return (g.depth - (g.steps - 1) * kDepthStep + 1) / 2;
}

// bf16 values a packed block of 32 rows (or columns) takes: 2 tiles of `planes` planes.
int64_t block_values(const Problem& g) { return 2 * g.planes * g.steps * kTileValues; }

// Which side the tasks stream (the other is packed whole first). A task multiplies its streamed
// block by every packed block, walking C along the packed side. When the side that runs along C's
// rows (stride 1 in C) packs into L2 (2 MiB on every AMX core so far), it is the packed one, so
// tasks write C in row strips: a weight gradient (small depth, C the size of the weights) then
// streams through memory once instead of in 128-byte pieces a row apart, each in another page (at
// batch 256 the first layer's packs into 1.5 MiB, and row strips made its GEMM 1.5-1.7x faster).
// Otherwise the smaller side is packed, so the larger (the weights, at small batches) is read from
// memory once.
bool streams_right_side(const Problem& g) {
    constexpr int64_t kPackedBytesInL2 = int64_t{2} << 20;
    const Side& along_rows = g.c_right_stride == 1 ? g.right : g.left;
    const int64_t packed_bytes = blocks_of(along_rows.count) * block_values(g) * int64_t{sizeof(uint16_t)};
    if (packed_bytes <= kPackedBytesInL2) return g.c_right_stride != 1;
    return g.right.count >= g.left.count;
}

// Packs the whole of one side into `shared`, in parallel.
void pack_whole_side(const Problem& g, bool right, uint16_t* shared, ThreadPool& pool) {
    const Side& side = right ? g.right : g.left;
    pool.parallel_for(blocks_of(side.count), 1, [&](int64_t begin, int64_t end) {
        pack_side(g, side, begin * kBlock, (end - begin) * 2, right, 0, g.steps, shared + begin * block_values(g));
    });
}

// A shallow product (one pass over the depth) whose packed side is larger than kPanelBytes: a task
// packs all its streamed blocks first (kOwnBytes at most, so only for small depths, as a weight
// gradient's batch) and then walks the packed side a panel of kPanelBytes at a time, multiplying
// every one of its blocks by the panel, so that the panel stays in L2 while they use it. Without
// panels each streamed block read the whole packed side (the first layer's weight gradient at batch
// 256: 1.5 MiB, with the gradient's own rows streaming through L2 beside it); with them that GEMM
// measured 1.18-1.27x faster, the second layer's 1.24-1.33x (bench/NOTES.md). Same bits: each C
// block still sums its whole depth in one multiply_block.
constexpr int64_t kPanelBytes = int64_t{256} << 10;
constexpr int64_t kOwnBytes = int64_t{2} << 20;

constexpr int64_t kChunkSteps = 32;                    // 1024 depths: 64 KiB of a bf16 block
constexpr int64_t kGroupSumsBytes = int64_t{2} << 20;  // multiply_streamed's sums between passes

int64_t chunk_steps_of(const Problem& g) { return std::min(kChunkSteps, g.steps); }
int64_t panel_blocks_of(const Problem& g) {
    return std::max<int64_t>(1, kPanelBytes / (block_values(g) * int64_t{sizeof(uint16_t)}));
}

bool multiplies_in_panels(const Problem& g, bool stream_right, int64_t streamed_blocks, int64_t chunk_steps) {
    const int64_t block_bytes = block_values(g) * int64_t{sizeof(uint16_t)};
    const int64_t packed_bytes = blocks_of((stream_right ? g.left : g.right).count) * block_bytes;
    return chunk_steps == g.steps && packed_bytes > kPanelBytes && streamed_blocks * block_bytes <= kOwnBytes;
}

// The streamed blocks that multiply_streamed takes through the depth together (their sums wait
// between passes).
int64_t streamed_group(const Problem& g, bool stream_right, int64_t begin, int64_t end) {
    if (chunk_steps_of(g) == g.steps) return 1;
    const int64_t strip_floats = blocks_of((stream_right ? g.left : g.right).count) * kBlock * kBlock;
    return std::clamp<int64_t>(kGroupSumsBytes / (strip_floats * int64_t{sizeof(float)}), 1, end - begin);
}

// A task's buffers (in its thread's pool scratch): its own packed blocks and its fp32 sums.
struct TaskBuffers {
    uint16_t* own;
    float* sums;
};

// Reserves the buffers of the task over the streamed blocks [begin, end), on the calling thread.
TaskBuffers task_buffers(const Problem& g, bool stream_right, int64_t begin, int64_t end, ThreadPool& pool) {
    const int64_t chunk_steps = chunk_steps_of(g);
    int64_t own_words = 0, sum_floats = 0;
    if (multiplies_in_panels(g, stream_right, end - begin, chunk_steps)) {
        own_words = (end - begin) * block_values(g);
        sum_floats = panel_blocks_of(g) * kBlock * kBlock;
    } else {
        const Side& whole = stream_right ? g.left : g.right;
        own_words = 2 * g.planes * chunk_steps * kTileValues;
        sum_floats = streamed_group(g, stream_right, begin, end) * blocks_of(whole.count) * kBlock * kBlock;
    }
    return {pool.scratch(ScratchUse::amx_own_blocks).reserve<uint16_t>(own_words),
            pool.scratch(ScratchUse::amx_sums).reserve<float>(sum_floats)};
}

void multiply_in_panels(const Problem& g, bool stream_right, const uint16_t* packed, int64_t begin, int64_t end,
                        const TaskBuffers& buffers) {
    const Side& streamed = stream_right ? g.right : g.left;
    const Side& whole = stream_right ? g.left : g.right;
    const int64_t packed_blocks = blocks_of(whole.count), values = block_values(g);
    const int64_t panel_blocks = panel_blocks_of(g);
    uint16_t* own = buffers.own;
    pack_side(g, streamed, begin * kBlock, (end - begin) * 2, stream_right, 0, g.steps, own);
    float* strip = buffers.sums;
    // The strip is [left][right]: 32 x the panel when the left side streams, the panel x 32 otherwise.
    const int64_t stride = stream_right ? kBlock : panel_blocks * kBlock;
    const BlockMultiplier multiply;
    const int64_t last_pairs = last_pairs_of(g, g.steps);
    for (int64_t panel = 0; panel < packed_blocks; panel += panel_blocks) {
        const int64_t panel_end = std::min(packed_blocks, panel + panel_blocks);
        const int64_t panel_first = panel * kBlock, panel_count = std::min(whole.count, panel_end * kBlock) - panel_first;
        for (int64_t block = begin; block < end; ++block) {
            const PackedBlock own_block{own + (block - begin) * values, g.steps};
            for (int64_t other = panel; other < panel_end; ++other) {
                const PackedBlock other_block{packed + other * values, g.steps};
                if (stream_right)
                    multiply(other_block, own_block, g.steps, last_pairs, g.planes, false,
                             strip + (other - panel) * kBlock * stride, stride);
                else
                    multiply(own_block, other_block, g.steps, last_pairs, g.planes, false,
                             strip + (other - panel) * kBlock, stride);
            }
            const int64_t first = block * kBlock, count = std::min(kBlock, streamed.count - first);
            if (stream_right) store_strip(g, strip, stride, panel_first, panel_count, first, count);
            else store_strip(g, strip, stride, first, count, panel_first, panel_count);
        }
    }
}

// The blocks [begin, end) of the streamed side, each multiplied by every block of the packed side
// into a strip of sums (32 x the whole packed side), which then goes to C. `stream_right`: the
// streamed side is the right one. A shallow product with a large packed side goes to
// multiply_in_panels instead.
//
// A deep product is taken kChunkSteps depth steps at a time, for a group of streamed blocks per
// pass: each block's part is packed here, and the packed side's part (a fraction of it as large as
// a chunk is of the depth) is what every block of the group reads next, so it stays in L2. Without
// the split, a step at batch 256 read the whole packed side (1.5 MiB) per streamed block, which
// with the block itself no longer fits L2: tiles then load from L3 at about a third of the rate.
// The split measured 1.06-1.31x faster on the forward GEMMs at batch 256 (bench/NOTES.md). The
// group's sums wait in fp32 between passes (kGroupSumsBytes at most), so bf16 gives the same bits
// as in one pass; fp16 takes its four plane pairings within each pass, an order of roundings of its
// own (within amx_gemm.h's bound, and the same on any thread count).
void multiply_streamed(const Problem& g, bool stream_right, const uint16_t* packed, int64_t begin, int64_t end,
                       const TaskBuffers& buffers) {
    const Side& streamed = stream_right ? g.right : g.left;
    const Side& whole = stream_right ? g.left : g.right;
    const int64_t packed_blocks = blocks_of(whole.count);
    const int64_t chunk_steps = chunk_steps_of(g);
    if (multiplies_in_panels(g, stream_right, end - begin, chunk_steps)) {
        multiply_in_panels(g, stream_right, packed, begin, end, buffers);
        return;
    }
    const int64_t strip_floats = packed_blocks * kBlock * kBlock;
    const int64_t group = streamed_group(g, stream_right, begin, end);
    uint16_t* own = buffers.own;
    float* sums = buffers.sums;
    // A strip is [left][right]: 32 x all when the left side streams, all x 32 otherwise.
    const int64_t stride = stream_right ? kBlock : packed_blocks * kBlock;
    const BlockMultiplier multiply;
    for (int64_t group_begin = begin; group_begin < end; group_begin += group) {
        const int64_t group_end = std::min(end, group_begin + group);
        for (int64_t step0 = 0; step0 < g.steps; step0 += chunk_steps) {
            const int64_t steps = std::min(chunk_steps, g.steps - step0);
            const int64_t last_pairs = last_pairs_of(g, step0 + steps);
            for (int64_t block = group_begin; block < group_end; ++block) {
                pack_side(g, streamed, block * kBlock, 2, stream_right, step0, step0 + steps, own);
                float* strip = sums + (block - group_begin) * strip_floats;
                const PackedBlock own_block{own, steps};
                for (int64_t other = 0; other < packed_blocks; ++other) {
                    const PackedBlock other_block{packed + other * block_values(g) + step0 * kTileValues, g.steps};
                    if (stream_right)
                        multiply(other_block, own_block, steps, last_pairs, g.planes, step0 > 0,
                                 strip + other * kBlock * stride, stride);
                    else
                        multiply(own_block, other_block, steps, last_pairs, g.planes, step0 > 0, strip + other * kBlock,
                                 stride);
                }
                if (step0 + steps < g.steps) continue;
                const int64_t first = block * kBlock, count = std::min(kBlock, streamed.count - first);
                if (stream_right) store_strip(g, strip, stride, 0, whole.count, first, count);
                else store_strip(g, strip, stride, first, count, 0, whole.count);
            }
        }
    }
}

// C = alpha * op(A) . op(B) + beta * C as the kernels see it (m, n, k > 0).
Problem describe(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    // op(A)(i, q) and op(B)(q, j) as sides: A's rows are C's rows, B's columns C's columns.
    const Side a_side{a, transpose_a ? 1 : lda, transpose_a ? lda : 1, m};
    const Side b_side{b, transpose_b ? ldb : 1, transpose_b ? 1 : ldb, n};
    Problem g{};
    if (transpose_b) {  // B is depth-contiguous: it goes on the left, and C^T is computed
        g.left = b_side;
        g.right = a_side;
        g.c_left_stride = 1;
        g.c_right_stride = ldc;
    } else {
        g.left = a_side;
        g.right = b_side;
        g.c_left_stride = ldc;
        g.c_right_stride = 1;
    }
    g.depth = k;
    g.steps = (k + kDepthStep - 1) / kDepthStep;
    g.planes = operands == DType::fp16 ? 2 : 1;
    g.alpha = alpha;
    g.beta = beta;
    g.c = c;
    return g;
}

int64_t streamed_tasks(const Problem& g, bool stream_right) {
    return blocks_of((stream_right ? g.right : g.left).count);
}

// Every buffer the GEMM will use, on every thread, before any of C is written: the caller's for
// the side packed whole (returned), and each task's in a loop of their own (the same ranges on the
// same threads as the loop that multiplies). Running out of memory or budget then stops the GEMM
// with C untouched (plain SGD's weight-gradient GEMM writes the weights themselves).
uint16_t* reserve_buffers(const Problem& g, bool stream_right, ThreadPool& pool) {
    const Side& whole = stream_right ? g.left : g.right;
    uint16_t* shared =
        pool.scratch(ScratchUse::amx_whole_side).reserve<uint16_t>(blocks_of(whole.count) * block_values(g));
    pool.parallel_for(streamed_tasks(g, stream_right), 1,
                      [&](int64_t begin, int64_t end) { task_buffers(g, stream_right, begin, end, pool); });
    return shared;
}

void check_runs_here(DType operands) {
    if (operands != DType::bf16 && operands != DType::fp16)
        fail(MPT_STATUS_INTERNAL, std::string("amx_gemm multiplies bf16 or fp16, not ") + dtype_name(operands));
    // The check also asks Linux for the tile state on first use: without it a tile instruction faults.
    if (!native_gemm_available(operands))
        fail(MPT_STATUS_INTERNAL, std::string("amx_gemm called where it cannot multiply ") + dtype_name(operands) +
                                      ": " + native_gemm_unavailable_reason(operands));
}

}  // namespace

void amx_gemm(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              ThreadPool& pool) {
    check_runs_here(operands);
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // no products: C = beta * C
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    const Problem g = describe(operands, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    const bool stream_right = streams_right_side(g);
    uint16_t* shared = reserve_buffers(g, stream_right, pool);
    pack_whole_side(g, !stream_right, shared, pool);
    pool.parallel_for(streamed_tasks(g, stream_right), 1, [&](int64_t begin, int64_t end) {
        multiply_streamed(g, stream_right, shared, begin, end, task_buffers(g, stream_right, begin, end, pool));
    });
}

void amx_gemm_reserve(DType operands, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                      ThreadPool& pool) {
    check_runs_here(operands);
    if (m <= 0 || n <= 0 || k <= 0) return;
    // Only the shapes matter (strides as the backend's tight row-major operands would have them).
    const int64_t lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
    const Problem g = describe(operands, transpose_a, transpose_b, m, n, k, 1.0f, nullptr, lda, nullptr, ldb, 0.0f,
                               nullptr, n);
    reserve_buffers(g, streams_right_side(g), pool);
}

#else

void amx_gemm(DType, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
              float*, int64_t, ThreadPool&) {
    fail(MPT_STATUS_INTERNAL, "amx_gemm called in a build without AMX support");
}

void amx_gemm_reserve(DType, bool, bool, int64_t, int64_t, int64_t, ThreadPool&) {
    fail(MPT_STATUS_INTERNAL, "amx_gemm_reserve called in a build without AMX support");
}

#endif

}  // namespace mpt
