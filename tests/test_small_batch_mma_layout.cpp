// The small-batch tensor-core kernels' operand and result layouts
// (src/backend/cuda/small_batch_forward_layout.h and small_batch_backward_data_layout.h), checked on
// the CPU, where every build runs it: whole layers computed as the kernels compute them. Each lane's
// chunks of W, X and dZ are loaded as the kernels load them and turned into mma registers by the
// same functions the kernels call (a_register, b_register, dgrad_a_register, whose byte_perm runs
// here as the CUDA documentation defines __byte_perm), with elements travelling as codes of their
// place so that every half-word is checked; the mma is emulated by the PTX ISA's layout
// (mma_m16n8k16_reference.h), the warps' sums added through the shared-memory slots, and the
// epilogues' outputs and ReLU mask words placed as the kernels place them, against X W^T + b and
// dZ W computed directly. The kernels themselves run only on a GPU (test_cuda_ops compares them
// with the CPU backend, and the forward's mask with cuBLASLt's, there).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/small_batch_backward_data_layout.h"
#include "backend/cuda/small_batch_forward_layout.h"
#include "mma_m16n8k16_reference.h"

using namespace mpt::small_batch_mma;
using namespace mma_reference;

namespace {

struct Layer {
    int rows, features, k;
    std::vector<double> x, w, bias;  // [rows][k], [features][k], [features]
};

Layer random_layer(int rows, int features, int k, unsigned seed) {
    std::mt19937 random(seed);
    std::uniform_int_distribution<int> small(-4, 4);  // exact in doubles, whatever the order of sums
    Layer layer{rows, features, k, {}, {}, {}};
    layer.x.resize(static_cast<size_t>(rows) * k);
    layer.w.resize(static_cast<size_t>(features) * k);
    layer.bias.resize(features);
    for (double& v : layer.x) v = small(random);
    for (double& v : layer.w) v = small(random);
    for (double& v : layer.bias) v = small(random);
    return layer;
}

// Per warp, per mma tile (m, j): each lane's 4 accumulators.
using WarpSums = std::vector<std::vector<std::vector<Lanes8>>>;
WarpSums zero_sums(int tiles) {
    return WarpSums(kWarps, std::vector<std::vector<Lanes8>>(
                                kMmaRows, std::vector<Lanes8>(tiles, Lanes8(32, std::vector<double>(4)))));
}

// The slots as add_warp_sums fills them (warp w + kSlots stores, then warp w adds), with
// feature_of placing each accumulator; every place must be written by exactly one lane of each.
template <typename FeatureOf>
std::vector<double> add_through_slots(const WarpSums& sums, int tiles, FeatureOf feature_of) {
    const int padded_rows = 8 * tiles;
    std::vector<double> partial(static_cast<size_t>(kSlots) * padded_rows * kFeatures, -1e300);
    std::vector<int> writes(partial.size(), 0);
    for (int pass = 0; pass < 2; ++pass)
        for (int warp = pass == 0 ? kSlots : 0; warp < (pass == 0 ? kWarps : kSlots); ++warp)
            for (int lane = 0; lane < 32; ++lane)
                for (int m = 0; m < kMmaRows; ++m)
                    for (int j = 0; j < tiles; ++j)
                        for (int c = 0; c < 4; ++c) {
                            const int index = partial_index(warp % kSlots, accumulator_row(lane, j, c),
                                                            feature_of(lane, m, c), padded_rows);
                            REQUIRE(index >= 0);
                            REQUIRE(index < static_cast<int>(partial.size()));
                            const double value = sums[warp][m][j][lane][c];
                            partial[index] = pass == 0 ? value : value + partial[index];
                            ++writes[index];
                        }
    for (int count : writes) REQUIRE(count == 2);  // every place: once stored, once added to
    return partial;
}

// The block's sum for (row, feature) as block_sum adds the slots.
double slot_sum(const std::vector<double>& partial, int tiles, int row, int feature) {
    double sum = 0.0;
    for (int slot = 0; slot < kSlots; ++slot) sum += partial[partial_index(slot, row, feature, 8 * tiles)];
    return sum;
}

// Registers travel as 16-bit element codes (an element's place in the lane's loaded chunks): a word
// holds codes `first` and first + 1, as a 32-bit load puts two adjacent elements in its halves;
// decode gives the code in half `e` (0: low) of a register the layout's functions built.
uint32_t code_word(int first) { return static_cast<uint32_t>(first) | static_cast<uint32_t>(first + 1) << 16; }
int decode(uint32_t reg, int e) { return static_cast<int>((reg >> (16 * e)) & 0xffffu); }

// What one block writes: z for its [rows][kFeatures] outputs (before the activation) and its ReLU
// mask words, computed lane by lane as the kernel does.
struct BlockResult {
    std::vector<double> z;            // [row][feature of the block]
    std::vector<uint32_t> mask_word;  // [row]
};

// The rows of the batch each warp of each block of a cluster writes in the epilogue, as
// epilogue_first_row and epilogue_row_stride deal them: every row exactly once.
void check_epilogue_rows(int rows, int splits) {
    std::vector<int> writers(rows, 0);
    for (int split = 0; split < splits; ++split)
        for (int warp = 0; warp < kWarps; ++warp)
            for (int64_t row = epilogue_first_row(split, splits, warp); row < rows; row += epilogue_row_stride(splits))
                ++writers[row];
    for (int count : writers) REQUIRE(count == 1);
}

// The sums of the blocks that split K, as split_sum adds them: split 0's, then each next in order.
double add_splits(const std::vector<std::vector<double>>& split_partials, int tiles, int row, int feature) {
    double sum = slot_sum(split_partials[0], tiles, row, feature);
    for (size_t split = 1; split < split_partials.size(); ++split)
        sum += slot_sum(split_partials[split], tiles, row, feature);
    return sum;
}

BlockResult run_block(const Layer& layer, int block, const SplitK& split_of_k) {
    const int tiles = batch_tiles(layer.rows);
    const int64_t f0 = static_cast<int64_t>(block) * kFeatures;
    std::vector<std::vector<double>> split_partials;
    for (int split = 0; split < split_of_k.splits; ++split) {
        const int64_t k_begin = split_k_begin(split, split_of_k.k_per_block);
        const int64_t k_end = split_k_end(split, split_of_k.k_per_block, layer.k);
        REQUIRE(k_begin < k_end);  // no block without a share
        // One lane's chunk: 8 elements of `row` from k, or zeros where the kernel loads none.
        auto chunk = [&](const std::vector<double>& matrix, int64_t row, bool present, int64_t k) {
            std::vector<double> elements(kElementsPerLoad, 0.0);
            if (present && k < k_end)
                for (int e = 0; e < kElementsPerLoad; ++e) elements[e] = matrix[row * layer.k + k + e];
            return elements;
        };
        const int64_t steps = split_steps(k_begin, k_end);
        WarpSums sums = zero_sums(tiles);
        for (int warp = 0; warp < kWarps; ++warp)
            for (int64_t step = 0; step < steps; ++step)
                for (int h = 0; h < 2; ++h)
                    for (int m = 0; m < kMmaRows; ++m)
                        for (int j = 0; j < tiles; ++j) {
                            Lanes8 a(32, std::vector<double>(8)), b(32, std::vector<double>(4));
                            for (int lane = 0; lane < 32; ++lane) {
                                const int64_t k = k_begin + chunk_k(step, warp, lane);
                                // The lane's chunks of W's rows g and g + 8 of tile m, its words built
                                // by the layout's a_register as the kernel builds them.
                                const std::vector<double> rows[2] = {
                                    chunk(layer.w, f0 + a_feature(lane, m, 0),
                                          f0 + a_feature(lane, m, 0) < layer.features, k),
                                    chunk(layer.w, f0 + a_feature(lane, m, 1),
                                          f0 + a_feature(lane, m, 1) < layer.features, k)};
                                uint32_t words[2][4];
                                for (int half = 0; half < 2; ++half)
                                    for (int w = 0; w < 4; ++w) words[half][w] = code_word(8 * half + 2 * w);
                                for (int r = 0; r < 4; ++r)
                                    for (int e = 0; e < 2; ++e) {
                                        const int code = decode(a_register(words, h, r), e);
                                        a[lane][2 * r + e] = rows[code / 8][code % 8];
                                    }
                                const int row = b_row(lane, j);
                                const auto x = chunk(layer.x, row, row < layer.rows, k);
                                uint32_t x_words[4];
                                for (int w = 0; w < 4; ++w) x_words[w] = code_word(2 * w);
                                for (int r = 0; r < 2; ++r)
                                    for (int e = 0; e < 2; ++e)
                                        b[lane][2 * r + e] = x[decode(b_register(x_words, h, r), e)];
                            }
                            sums[warp][m][j] = emulated_mma(a, b, sums[warp][m][j]);
                        }
        split_partials.push_back(
            add_through_slots(sums, tiles, [](int lane, int m, int c) { return accumulator_feature(lane, m, c); }));
    }
    check_epilogue_rows(layer.rows, split_of_k.splits);
    BlockResult result;
    result.z.assign(static_cast<size_t>(layer.rows) * kFeatures, 0.0);
    result.mask_word.assign(layer.rows, 0);
    for (int row = 0; row < layer.rows; ++row) {
        uint32_t ballot = 0;
        for (int lane = 0; lane < 32; ++lane) {  // the epilogue: a lane per feature
            double z = add_splits(split_partials, tiles, row, lane);
            const int64_t f = f0 + lane;
            if (f < layer.features)
                z += layer.bias[f];
            else
                z = 0.0;
            result.z[row * kFeatures + lane] = z;
            if (f < layer.features && z > 0.0) ballot |= 1u << lane;
        }
        result.mask_word[row] = ballot;
    }
    return result;
}

// The backward-data product G[r][i] = sum_o dZ[r][o] W[o][i] of one block's 32 features, computed
// lane by lane as the kernel does: [row][feature of the block]. W's elements travel as 16-bit codes
// (their index in the matrix) through the kernel's words and byte permutes, and are looked up after.
std::vector<double> run_backward_block(const std::vector<double>& dz, const std::vector<double>& w, int rows, int in,
                                       int out, int block, const SplitK& split_of_o) {
    const int tiles = batch_tiles(rows);
    const int64_t f0 = static_cast<int64_t>(block) * kFeatures;
    REQUIRE(static_cast<int64_t>(out) * in < 65536);  // the codes fit 16 bits; code 0xffff: a zero load
    const uint16_t kZero = 0xffff;
    std::vector<std::vector<double>> split_partials;
    for (int split = 0; split < split_of_o.splits; ++split) {
        const int64_t o_begin = split_k_begin(split, split_of_o.k_per_block);
        const int64_t o_end = split_k_end(split, split_of_o.k_per_block, out);
        REQUIRE(o_begin < o_end);  // no block without a share
        const int64_t steps = split_steps(o_begin, o_end);
        WarpSums sums = zero_sums(tiles);
        for (int warp = 0; warp < kWarps; ++warp)
            for (int64_t step = 0; step < steps; ++step) {
                // Each lane's 8 rows of 8 bytes as the kernel holds them: 2 words a row, W's elements
                // as 16-bit codes (their index in W; kZero where the kernel loads zeros).
                struct LaneRows {
                    uint32_t words[kElementsPerLoad][2];
                };
                std::vector<LaneRows> lanes(32);
                for (int lane = 0; lane < 32; ++lane) {
                    const int64_t o = o_begin + chunk_k(step, warp, lane), column = f0 + w_feature0(lane);
                    const bool present = o < o_end && column < in;
                    for (int u = 0; u < kElementsPerLoad; ++u)
                        for (int word = 0; word < 2; ++word) {
                            uint16_t code[2] = {kZero, kZero};
                            for (int e = 0; e < 2; ++e)
                                if (present) code[e] = static_cast<uint16_t>((o + u) * in + column + 2 * word + e);
                            lanes[lane].words[u][word] = code[0] | static_cast<uint32_t>(code[1]) << 16;
                        }
                }
                for (int h = 0; h < 2; ++h)
                    for (int m = 0; m < kMmaRows; ++m)
                        for (int j = 0; j < tiles; ++j) {
                            Lanes8 a(32, std::vector<double>(8)), b(32, std::vector<double>(4));
                            for (int lane = 0; lane < 32; ++lane) {
                                for (int r = 0; r < 4; ++r)
                                    for (int e = 0; e < 2; ++e) {
                                        const int code = decode(dgrad_a_register(lanes[lane].words, h, m, r), e);
                                        a[lane][2 * r + e] = code == kZero ? 0.0 : w[code];
                                    }
                                const int64_t o = o_begin + chunk_k(step, warp, lane);
                                const int row = b_row(lane, j);
                                uint32_t dz_words[4];
                                for (int word = 0; word < 4; ++word) dz_words[word] = code_word(2 * word);
                                for (int r = 0; r < 2; ++r)
                                    for (int e = 0; e < 2; ++e) {
                                        const int64_t k = o + decode(b_register(dz_words, h, r), e);
                                        b[lane][2 * r + e] = row < rows && o < o_end ? dz[row * out + k] : 0.0;
                                    }
                            }
                            sums[warp][m][j] = emulated_mma(a, b, sums[warp][m][j]);
                        }
            }
        split_partials.push_back(add_through_slots(
            sums, tiles, [](int lane, int m, int c) { return dgrad_accumulator_feature(lane, m, c); }));
    }
    check_epilogue_rows(rows, split_of_o.splits);
    std::vector<double> g(static_cast<size_t>(rows) * kFeatures, 0.0);
    for (int row = 0; row < rows; ++row)
        for (int lane = 0; lane < kFeatures; ++lane)
            g[row * kFeatures + lane] = add_splits(split_partials, tiles, row, lane);
    return g;
}

// The splits of K a test runs a layer with: none (no clusters), an H200's (132 SMs), the most.
std::vector<SplitK> splits_to_check(int64_t k, int64_t feature_tiles) {
    std::vector<SplitK> splits;
    for (const SplitK& split : {split_k(k, feature_tiles, 132, false), split_k(k, feature_tiles, 132, true),
                                split_k(k, feature_tiles, 1 << 20, true)}) {
        bool seen = false;
        for (const SplitK& other : splits) seen = seen || other.splits == split.splits;
        if (!seen) splits.push_back(split);
    }
    return splits;
}

}  // namespace

TEST_CASE("the small-batch forward's layout computes X W^T + b and cuBLASLt's ReLU mask") {
    struct Shape {
        int rows, features, k;
    };
    // Batches of 1 to 64 rows (each tile count and partial tiles), features past a block's 32 and
    // short of them, K short of a step, a whole number of steps and a tail of 8 elements.
    const Shape shapes[] = {{1, 10, 8},   {3, 16, 24},   {8, 32, 256},  {9, 40, 264},  {16, 33, 520},
                            {17, 64, 64}, {31, 70, 512}, {32, 96, 768}, {33, 45, 200}, {64, 32, 1032}};
    unsigned seed = 1;
    for (const Shape& shape : shapes) {
        CAPTURE(shape.rows);
        CAPTURE(shape.features);
        CAPTURE(shape.k);
        const Layer layer = random_layer(shape.rows, shape.features, shape.k, seed++);
        const int64_t ld_bits = (shape.features + 127) / 128 * 128;  // relu_mask_ld_bits
        std::vector<uint8_t> mask(static_cast<size_t>(ld_bits / 8 * shape.rows), 0);
        const int blocks = (shape.features + kFeatures - 1) / kFeatures;
        for (const SplitK& split : splits_to_check(shape.k, blocks)) {
            CAPTURE(split.splits);
            int checked = 0, positive = 0;
            for (int block = 0; block < blocks; ++block) {
                const BlockResult result = run_block(layer, block, split);
                const int64_t f0 = static_cast<int64_t>(block) * kFeatures;
                for (int row = 0; row < shape.rows; ++row) {
                    // The mask word, stored little-endian at its 32-bit index as the kernel's store does.
                    const int64_t bit = mask_bit(f0, row, ld_bits);
                    REQUIRE(bit % 32 == 0);
                    REQUIRE(bit / 8 + 4 <= static_cast<int64_t>(mask.size()));
                    for (int byte = 0; byte < 4; ++byte)
                        mask[bit / 8 + byte] = static_cast<uint8_t>(result.mask_word[row] >> (8 * byte));
                    for (int lane = 0; lane < kFeatures; ++lane) {
                        const int64_t f = f0 + lane;
                        if (f >= shape.features) continue;
                        double expected = layer.bias[f];
                        for (int k = 0; k < shape.k; ++k)
                            expected += layer.x[row * shape.k + k] * layer.w[f * shape.k + k];
                        CHECK(result.z[row * kFeatures + lane] == expected);
                        ++checked;
                        positive += expected > 0.0;
                    }
                }
            }
            CHECK(checked == shape.rows * shape.features);
            CHECK(positive > 0);
            // cuBLASLt's layout, read independently: bit f + row * ld, least significant bit first.
            for (int row = 0; row < shape.rows; ++row)
                for (int f = 0; f < shape.features; ++f) {
                    double z = layer.bias[f];
                    for (int k = 0; k < shape.k; ++k) z += layer.x[row * shape.k + k] * layer.w[f * shape.k + k];
                    const int64_t bit = f + row * ld_bits;
                    CHECK(((mask[bit / 8] >> (bit % 8)) & 1) == (z > 0.0 ? 1 : 0));
                }
        }
    }
}

TEST_CASE("each small-batch forward load is one aligned 16-byte chunk, and a block step's are contiguous") {
    for (int rows = 1; rows <= kMaxRows;
         ++rows) {  // the instance for each batch covers it with the fewest tiles of 1, 2, 4, 8
        const int tiles = batch_tiles(rows);
        CHECK(8 * tiles >= rows);
        CHECK((tiles == 1 || 4 * tiles < rows));
    }
    for (int64_t step = 0; step < 3; ++step) {
        std::set<int64_t> starts;
        for (int warp = 0; warp < kWarps; ++warp)
            for (int lane = 0; lane < 32; ++lane) {
                const int64_t k = chunk_k(step, warp, lane);
                CHECK(k % kElementsPerLoad == 0);  // with K a multiple of 8, 16-byte aligned in every row
                starts.insert(k);
            }
        // 8 warps x 4 chunks of a row: the 256 k from step * 256, each chunk loaded by 8 lanes (one per row g)
        CHECK(starts.size() == static_cast<size_t>(kBlockStepK / kElementsPerLoad));
        CHECK(*starts.begin() == step * kBlockStepK);
        CHECK(*starts.rbegin() == (step + 1) * kBlockStepK - kElementsPerLoad);
    }
    // Within one mma, A's and B's k agree: the ISA's k of each lane's register halves maps to the
    // same place in the lane's chunk for both operands, and the 16 k of an mma are 16 distinct
    // elements of the 4 lanes' chunks.
    for (int h = 0; h < 2; ++h) {
        std::set<int> places;
        for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 8; ++i) {  // A element i: register i / 2, half i % 2
                const int k = ptx_a(lane, i).col;
                const int place = kElementsPerLoad * (lane & 3) + 2 * a_word(h, i / 2) + i % 2;
                for (int bi = 0; bi < 4; ++bi)  // B's element at the same ISA k, in a lane of the same t
                    if (ptx_b(lane, bi).row == k)
                        CHECK(kElementsPerLoad * (lane & 3) + 2 * b_word(h, bi / 2) + bi % 2 == place);
                places.insert(place);
            }
        }
        CHECK(places.size() == 16);
    }
}

TEST_CASE("the small-batch backward-data layout computes dZ W, W paired row by row in registers") {
    struct Shape {
        int rows, in, out;
    };
    // Batches of 1 to 64 rows; input features past a block's 32 and short of them; output features
    // (K) short of a lane's 8 rows per warp, a whole step and a tail.
    const Shape shapes[] = {{1, 8, 8},    {5, 40, 16},   {8, 32, 24},   {12, 64, 256}, {16, 72, 264},
                            {29, 96, 48}, {32, 200, 40}, {33, 16, 520}, {64, 48, 72}};
    unsigned seed = 100;
    for (const Shape& shape : shapes) {
        CAPTURE(shape.rows);
        CAPTURE(shape.in);
        CAPTURE(shape.out);
        const Layer dz_layer = random_layer(shape.rows, 1, shape.out, seed++);  // dZ [rows][out]
        const Layer w_layer = random_layer(shape.out, 1, shape.in, seed++);     // W [out][in]
        const std::vector<double>& dz = dz_layer.x;
        const std::vector<double>& w = w_layer.x;
        const int blocks = (shape.in + kFeatures - 1) / kFeatures;
        for (const SplitK& split : splits_to_check(shape.out, blocks)) {
            CAPTURE(split.splits);
            int checked = 0;
            for (int block = 0; block < blocks; ++block) {
                const std::vector<double> g = run_backward_block(dz, w, shape.rows, shape.in, shape.out, block, split);
                for (int row = 0; row < shape.rows; ++row)
                    for (int lane = 0; lane < kFeatures; ++lane) {
                        const int64_t i = static_cast<int64_t>(block) * kFeatures + lane;
                        if (i >= shape.in) continue;
                        double expected = 0.0;
                        for (int o = 0; o < shape.out; ++o) expected += dz[row * shape.out + o] * w[o * shape.in + i];
                        CHECK(g[row * kFeatures + lane] == expected);
                        ++checked;
                    }
            }
            CHECK(checked == shape.rows * shape.in);
        }
    }
}

TEST_CASE("K is split across at most a cluster's blocks, none empty, in the fewest rounds of loads") {
    // The seed MLP at batch 32 on an H200 (132 SMs, 2 blocks each): the forwards' K (3072, 3000, 1000
    // over 94, 32 and 1 tiles of 32 features) and the input gradients' (1000 and 16 over 94 and 32).
    struct Expected {
        int64_t k, tiles;
        int splits;
        int64_t k_per_block;
    };
    const Expected seed[] = {
        {3072, 94, 2, 1536}, {3000, 32, 6, 512}, {1000, 1, 2, 512}, {1000, 94, 2, 512}, {16, 32, 1, 32}};
    for (const Expected& e : seed) {
        CAPTURE(e.k);
        CAPTURE(e.tiles);
        const SplitK split = split_k(e.k, e.tiles, 132, true);
        CHECK(split.splits == e.splits);
        CHECK(split.k_per_block == e.k_per_block);
        CHECK(split_k(e.k, e.tiles, 132, false).splits == 1);  // no clusters: one block a tile
    }
    // Every K a multiple of 8, every tile count, SM count and batch: at most kMaxSplits blocks, shares
    // that are whole warp steps and cover K once, the last one not empty, and no more rounds than the
    // other splits allowed (one block a tile among them).
    for (int64_t k = 8; k <= 4096; k += 8)
        for (int64_t tiles : {1, 2, 7, 32, 94, 1000})
            for (int multiprocessors : {0, 1, 16, 132, 1 << 20})
                for (int batch_tile_count : {1, 8}) {
                    const SplitK split = split_k(k, tiles, multiprocessors, true, batch_tile_count);
                    CAPTURE(k);
                    CAPTURE(tiles);
                    CAPTURE(multiprocessors);
                    REQUIRE(split.splits >= 1);
                    REQUIRE(split.splits <= kMaxSplits);
                    REQUIRE(split.k_per_block % kStepK == 0);
                    REQUIRE(split_k_begin(split.splits - 1, split.k_per_block) < k);
                    REQUIRE(split_k_end(split.splits - 1, split.k_per_block, k) == k);
                    REQUIRE(split_k_begin(split.splits, split.k_per_block) >= k);
                    const int64_t most =
                        std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (k + kMinSplitK - 1) / kMinSplitK));
                    REQUIRE(split.splits <= most);
                    const int64_t capacity = int64_t{multiprocessors} * kBlocksPerMultiprocessor;
                    if (capacity == 0) {
                        REQUIRE(split.splits == 1);
                        continue;
                    }
                    const int steps = steps_in_flight(batch_tile_count);
                    const int64_t rounds = split_rounds(k, split.splits, tiles, capacity, steps);
                    for (int64_t other = 1; other <= most; ++other)
                        REQUIRE(rounds <= split_rounds(k, other, tiles, capacity, steps));
                }
}

TEST_CASE("the backward's byte permutes pair two rows' elements of one feature") {
    // Words of features (2q, 2q + 1) from two rows: the selector for row g takes each row's low
    // element, the one for row g + 8 each row's high element, the first row's in the low half.
    const uint32_t first = 0xBBBBAAAAu, second = 0xDDDDCCCCu;
    CHECK(byte_perm(first, second, dgrad_selector(0)) == 0xCCCCAAAAu);
    CHECK(byte_perm(first, second, dgrad_selector(1)) == 0xDDDDBBBBu);
    CHECK(dgrad_selector(2) == dgrad_selector(0));
    CHECK(dgrad_selector(3) == dgrad_selector(1));
}
