// When the CUDA backend runs the last layer's forward, its loss head and its input gradient as one
// launch, K split across a cluster's blocks (src/backend/cuda/head_layer_case.h), how that launch
// shares the work out, and the executor's plan that lets it: checked on the CPU, where every build
// runs. One block may write the logits while another writes the input gradient below them, so
// buffers that share bytes would race. The executor's arena gives buffers whose lifetimes do not
// overlap the same bytes; were the logits not kept live until the input gradient below them is
// written, most one-hidden-layer models would have the two on the same bytes (3072 -> 128 -> 10 at
// batch 32 in mixed-bf16, for one).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/head_layer_case.h"
#include "nn/model.h"
#include "nn/trainer.h"
#include "support/training_fixture.h"

namespace {

using namespace mpt;
using namespace mpt::testing;

// The seed MLP's last layer at batch 32 in mixed-bf16 (1000 -> 16 padded outputs), its three ops'
// operands in one host block at offsets apart (never dereferenced: only their bytes are compared).
struct HeadLayerOps {
    DenseForwardArgs forward{};
    LossHeadArgs head{};
    DenseBackwardDataArgs data{};
    TrainState state{};
    double metrics[kMetricsCount] = {};

    // (One block for every instance, so that a copy's pointers and at()'s are into the same bytes.)
    static unsigned char* at(size_t offset) {
        static std::vector<unsigned char> memory(1 << 20);
        return memory.data() + offset;
    }
    HeadLayerOps() {
        const int64_t rows = 32, inputs = 1000, width = 16;
        forward.input = at(0);        // A: 32 x 1000 bf16, 64,000 bytes
        forward.weights = at(65536);  // 16 x 1000 bf16
        forward.bias = at(131072);    // 16 fp32
        forward.output = at(196608);  // logits: 32 x 16 fp32
        forward.rows = rows;
        forward.in_features = inputs;
        forward.out_features = width;
        forward.valid_out = 10;
        forward.activation = Activation::linear;
        forward.compute_dtype = DType::bf16;
        forward.bias_dtype = DType::fp32;
        forward.output_dtype = DType::fp32;
        head.logits = static_cast<const float*>(forward.output);
        head.labels = reinterpret_cast<const int32_t*>(at(917504));
        head.logits_grad = at(327680);  // 32 x 16 bf16
        head.logits_grad_dtype = DType::bf16;
        head.state = &state;
        head.metrics = metrics;
        head.rows = rows;
        head.width = width;
        head.classes = 10;
        head.activation = Activation::softmax;
        head.loss = LossKind::sparse_categorical_crossentropy;
        data.output_grad = head.logits_grad;
        data.weights = forward.weights;
        data.input = forward.input;
        data.input_grad = at(393216);  // dZ below: 32 x 1000 bf16
        data.rows = rows;
        data.in_features = inputs;
        data.out_features = width;
        data.input_activation = Activation::relu;
        data.compute_dtype = DType::bf16;
        data.input_grad_dtype = DType::bf16;
    }
    bool fusable(int max_blocks = kHeadLayerMaxBlocks) const {
        return head_layer_fusable(forward, head, data, max_blocks);
    }
};

}  // namespace

TEST_CASE(
    "the head layer in a cluster takes a linear last layer, its head and its input gradient whose buffers are apart") {
    HeadLayerOps ops;
    REQUIRE(ops.fusable());

    SUBCASE("shapes and dtypes outside the launch's case") {
        ops.head.rows = ops.forward.rows = ops.data.rows = kHeadLayerMaxRows + 1;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.forward.activation = Activation::relu;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.data.input_activation = Activation::softmax;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.data.output_grad = ops.at(458752);  // not the head's gradient
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.head.logits_grad_dtype = DType::fp32;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();  // fp32 layers: the launch loads 16-bit elements
        ops.forward.compute_dtype = ops.data.compute_dtype = ops.head.logits_grad_dtype = DType::fp32;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();  // a head that also writes its probabilities (predict): no gradient to pass on
        ops.head.probabilities = reinterpret_cast<float*>(ops.at(851968));
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();  // a layer without its bias
        ops.forward.bias = nullptr;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();  // 16-byte loads of every row
        ops.forward.in_features = ops.data.in_features = 1004;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();  // a lane a column in the head
        ops.forward.out_features = ops.data.out_features = ops.head.width = kHeadLayerMaxWidth + 8;
        CHECK_FALSE(ops.fusable());
    }
    SUBCASE("K in shares of 128 inputs, at most a cluster's blocks of them") {
        CHECK(head_layer_blocks(1000) == 8);
        CHECK_FALSE(ops.fusable(7));  // 8 shares, and a device that places clusters of 7 at most
        CHECK_FALSE(ops.fusable(1));  // no clusters
        ops.forward.in_features = ops.data.in_features = 1024;
        CHECK(ops.fusable());
        ops.forward.in_features = ops.data.in_features = 1032;  // 9 shares
        CHECK_FALSE(ops.fusable());
        ops.forward.in_features = ops.data.in_features = 128;  // one block: no cluster needed
        CHECK(ops.fusable(1));
        ops.forward.in_features = ops.data.in_features = 136;
        CHECK_FALSE(ops.fusable(1));
    }
    SUBCASE("the input gradient on any byte of the logits, their gradient or an operand read") {
        // (A is 64,000 bytes at 0, the weights 32,000 at 65,536, the bias 64 at 131,072, the logits 2,048
        // at 196,608, their gradient 1,024 at 327,680, the labels 128 at 917,504; the input gradient 64,000.)
        for (size_t offset : {size_t{196608}, size_t{196608 + 2047}, size_t{196608 - 63999}, size_t{327680 + 1023},
                              size_t{917504 - 100}, size_t{0}, size_t{64000 - 1}, size_t{65536 + 31999}}) {
            CAPTURE(offset);
            ops = HeadLayerOps();
            ops.data.input_grad = ops.at(offset);
            CHECK_FALSE(ops.fusable());
        }
        // Just past each: apart.
        for (size_t offset :
             {size_t{196608 + 2048}, size_t{196608 - 64000}, size_t{131072 + 64}, size_t{917504 + 128}}) {
            CAPTURE(offset);
            ops = HeadLayerOps();
            ops.data.input_grad = ops.at(offset);
            CHECK(ops.fusable());
        }
    }
    SUBCASE("the logits or their gradient on an operand, or on each other") {
        ops.head.logits_grad = ops.at(196608 + 1024);  // the logits' second half
        ops.data.output_grad = ops.head.logits_grad;
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.head.labels = reinterpret_cast<const int32_t*>(ops.at(196608 + 512));
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.head.row_weights = reinterpret_cast<const float*>(ops.at(327680));
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.head.metrics = reinterpret_cast<double*>(ops.at(131072));  // the bias
        CHECK_FALSE(ops.fusable());
    }
    SUBCASE("the maxima, the mask and the train state are buffers too") {
        ops.data.input_grad_max_abs = reinterpret_cast<float*>(ops.at(196608 + 4));  // in the logits
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.data.input_max_abs = reinterpret_cast<float*>(ops.at(327680));  // on the logits gradient
        CHECK_FALSE(ops.fusable());
        ops = HeadLayerOps();
        ops.data.input_grad_max_abs = reinterpret_cast<float*>(ops.at(786432));
        ops.data.input_max_abs = reinterpret_cast<float*>(ops.at(786432 + 4));
        CHECK(ops.fusable());
        ops.data.relu_mask = ops.at(786432 - 64);  // 32 rows of 128 bytes of bits: on both
        CHECK_FALSE(ops.fusable());
        ops.data.relu_mask = ops.at(786432 - 32 * 128);  // ends where the first begins
        CHECK(ops.fusable());
    }
    SUBCASE("an fp32 input gradient spans twice the bytes of a bf16 one") {
        ops.data.input_grad = ops.at(131200);  // 64,000 bf16 bytes end before the logits
        CHECK(ops.fusable());
        ops.data.input_grad_dtype = DType::fp32;  // 128,000 bytes do not
        CHECK_FALSE(ops.fusable());
    }
}

// The executor's step plan keeps a training step's logits apart from the input gradient below them
// (the last hidden layer's dZ): the head layer's launch writes the one while other blocks write the other.
TEST_CASE("a training step's plan keeps the logits apart from the input gradient below them") {
    auto context = make_context(MPT_BACKEND_CPU);
    const SyntheticData data = synthetic_data(512, 100, 5);
    auto dataset = to_dataset(context, data);
    const std::vector<std::vector<int64_t>> hidden_layers = {{128}, {512}, {48, 40}, {64, 128}, {3000 / 10}};
    for (const auto& hidden : hidden_layers)
        for (mpt_precision precision : {MPT_PRECISION_FP32, MPT_PRECISION_MIXED_BF16, MPT_PRECISION_MIXED_FP16})
            for (int64_t batch : {16, 32, 64, 256}) {
                CAPTURE(hidden.size());
                CAPTURE(hidden.front());
                CAPTURE(precision);
                CAPTURE(batch);
                auto model = std::make_shared<Model>(context, data.features);
                for (int64_t units : hidden) model->add_dense(units, Activation::relu);
                model->add_dense(10, Activation::softmax);
                model->build();
                TrainerConfig config;
                config.precision = precision;
                Trainer trainer(model, config);
                trainer.step(*dataset, 0, batch);
                const Executor& executor = trainer.executor();
                const size_t last = hidden.size();
                const auto logits = executor.planned_layer_bytes(last, false);
                const auto below = executor.planned_layer_bytes(last - 1, true);
                REQUIRE(logits.second > logits.first);
                REQUIRE(below.second > below.first);
                CHECK((logits.second <= below.first || below.second <= logits.first));
            }
}

// The forward's tiles and slices cover every logit of every share once, each slice a whole number of
// 16-byte loads within the block's threads; the backward's items cover every (row, input) of a share
// once.
TEST_CASE("the head layer's launch sums every product of its share once, forward and backward") {
    for (int64_t rows : {1, 3, 4, 17, 32, 33, 40, 64})
        for (int64_t width : {1, 2, 8, 10, 16, 24, 32})
            for (int64_t in_features : {8, 40, 128, 136, 1000, 1024}) {
                CAPTURE(rows);
                CAPTURE(width);
                CAPTURE(in_features);
                const HeadLayerForwardSplit split = head_layer_forward_split(rows, width);
                REQUIRE(split.row_tiles * split.feature_tiles * split.slices <= kHeadLayerThreads);
                CHECK(split.slices >= 1);
                CHECK(split.slices <= kHeadLayerMaxSlices);
                CHECK(split.slice_k % kHeadLayerElementsPerLoad == 0);
                CHECK(split.slice_k * split.slices >= kHeadLayerShareK);
                const int blocks = head_layer_blocks(in_features);
                std::vector<int> forward(static_cast<size_t>(rows * width * in_features), 0);
                std::vector<int> places(static_cast<size_t>(kHeadLayerThreads * kHeadLayerItemSums), 0);
                for (int block = 0; block < blocks; ++block) {
                    const int64_t begin = head_layer_share_begin(block), end = head_layer_share_end(block, in_features);
                    REQUIRE(begin < end);
                    std::fill(places.begin(), places.end(), 0);
                    for (int thread = 0; thread < split.row_tiles * split.feature_tiles * split.slices; ++thread) {
                        const int tile = thread / split.slices, slice = thread % split.slices;
                        const int r0 = tile / split.feature_tiles * kHeadLayerItemRows;
                        const int f0 = tile % split.feature_tiles * kHeadLayerItemColumns;
                        const int64_t slice_begin = begin + slice * split.slice_k;
                        const int64_t slice_end = std::min(end, slice_begin + split.slice_k);
                        for (int i = 0; i < kHeadLayerItemRows; ++i)
                            for (int j = 0; j < kHeadLayerItemColumns; ++j) {
                                ++places[static_cast<size_t>(head_layer_slice_sum(tile, slice, split.slices, i, j))];
                                if (r0 + i >= rows || f0 + j >= width) continue;
                                for (int64_t k = slice_begin; k < slice_end; ++k)
                                    ++forward[static_cast<size_t>(((r0 + i) * width + f0 + j) * in_features + k)];
                            }
                    }
                    CHECK(*std::max_element(places.begin(), places.end()) <= 1);  // each slice sum its own place
                    // The backward's items of this share.
                    const int64_t share = end - begin;
                    std::vector<int> backward(static_cast<size_t>(rows * share), 0);
                    const int64_t quads = (share + kHeadLayerItemColumns - 1) / kHeadLayerItemColumns;
                    for (int64_t item = 0; item < head_layer_backward_items(rows, share); ++item) {
                        const int64_t r0 = item / quads * kHeadLayerItemRows, k0 = item % quads * kHeadLayerItemColumns;
                        for (int64_t i = 0; i < kHeadLayerItemRows && r0 + i < rows; ++i)
                            for (int64_t j = 0; j < kHeadLayerItemColumns; ++j) {
                                if (k0 + j >= share) FAIL("an item past its share");  // shares: multiples of 8
                                ++backward[static_cast<size_t>((r0 + i) * share + k0 + j)];
                            }
                    }
                    CHECK(std::count(backward.begin(), backward.end(), 1) == static_cast<long>(backward.size()));
                }
                CHECK(std::count(forward.begin(), forward.end(), 1) == static_cast<long>(forward.size()));
            }
}
