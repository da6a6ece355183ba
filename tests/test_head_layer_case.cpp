// When the CUDA backend runs the last layer's forward, its loss head and its input gradient as one
// launch (src/backend/cuda/head_layer_case.h), and the executor's plan that lets it: checked on the
// CPU, where every build runs. The launch's warps run its three phases with no barrier between
// them, so a warp may write its rows' input gradient while another still reads its rows' logits:
// buffers that share bytes would race. The executor's arena gives buffers whose lifetimes do not
// overlap the same bytes; before the logits were kept live until the input gradient below them is
// written, most one-hidden-layer models had the two on the same bytes (3072 -> 128 -> 10 at batch
// 32 in mixed-bf16, for one), where the fused launch would have mixed them.
#include <doctest/doctest.h>

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
    bool fusable() const { return head_layer_fusable(forward, head, data); }
};

}  // namespace

TEST_CASE("the fused head layer takes a linear last layer, its head and its input gradient whose buffers are apart") {
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
    SUBCASE("an fp32 input gradient spans twice the bytes of a bf16 one") {
        ops.data.input_grad = ops.at(131200);  // 64,000 bf16 bytes end before the logits
        CHECK(ops.fusable());
        ops.data.input_grad_dtype = DType::fp32;  // 128,000 bytes do not
        CHECK_FALSE(ops.fusable());
    }
}

// The executor's step plan keeps a training step's logits apart from the input gradient below them
// (the last hidden layer's dZ): the fused head layer writes the one while other warps read the other.
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
