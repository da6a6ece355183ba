// Frozen layers (mpt_model_set_layer_trainable): a step leaves them exactly as they are, and trains
// the other layers exactly as a model without them would: with the first layer frozen, the layers
// above train bit for bit as a model of those layers alone on its outputs, under every optimizer,
// clipping (whose norm leaves the frozen layer out), micro-batches, weight averaging and mixed
// precision; with the last layer frozen, the layers below train as when a callback puts the last
// layer back after every step. Flags change between fits, are saved with the model, and a model
// with every layer frozen does not train.
#include <doctest/doctest.h>

#include <mptrain/mptrain.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/capi_fixture.h"
#include "support/temp_dir.h"

namespace {

using mpt_test::same_bits;

constexpr int64_t kRows = 96, kFeatures = 16, kClasses = 4, kBatch = 16;

struct Recipe {
    mpt_precision precision = MPT_PRECISION_FP32;
    mpt_optimizer optimizer = MPT_OPTIMIZER_SGD;
    float momentum = 0.0f;
    float weight_decay = -1.0f;  // < 0: the optimizer's default
    float clipnorm = 0.0f;
    float ema = 0.0f;
    int64_t micro_batch = 0;
};

std::string describe(const Recipe& recipe) {
    return std::string(recipe.precision == MPT_PRECISION_FP32 ? "fp32" : recipe.precision == MPT_PRECISION_MIXED_BF16 ? "bf16" : "fp16") +
           " optimizer " + std::to_string(recipe.optimizer) + " momentum " + std::to_string(recipe.momentum) +
           " decay " + std::to_string(recipe.weight_decay) + " clipnorm " + std::to_string(recipe.clipnorm) + " ema " +
           std::to_string(recipe.ema) + " micro " + std::to_string(recipe.micro_batch);
}

// A context, a model of Dense layers of `units` (relu, the last softmax) on `features` inputs, its
// trainer under `recipe` and a data set, destroyed together.
struct Stack : mpt_test::Handles {
    int64_t features;
    std::vector<int64_t> units;

    Stack(const Recipe& recipe, int64_t input_features, std::vector<int64_t> layer_units, const std::vector<float>& x,
          const std::vector<int32_t>& y)
        : features(input_features), units(std::move(layer_units)) {
        context = mpt_test::create_context(MPT_BACKEND_CPU, 11);
        REQUIRE_OK(mpt_model_create(context, features, &model));
        for (size_t i = 0; i < units.size(); ++i)
            REQUIRE_OK(mpt_model_add_dense(model, units[i], i + 1 == units.size() ? MPT_ACTIVATION_SOFTMAX : MPT_ACTIVATION_RELU));
        mpt_trainer_options_t* options = nullptr;
        REQUIRE_OK(mpt_trainer_options_create(&options));
        REQUIRE_OK(mpt_trainer_options_set_precision(options, recipe.precision));
        REQUIRE_OK(mpt_trainer_options_set_optimizer(options, recipe.optimizer));
        REQUIRE_OK(mpt_trainer_options_set_learning_rate(options, 0.02f));
        if (recipe.optimizer == MPT_OPTIMIZER_SGD) REQUIRE_OK(mpt_trainer_options_set_momentum(options, recipe.momentum, 0));
        if (recipe.weight_decay >= 0.0f) REQUIRE_OK(mpt_trainer_options_set_weight_decay(options, recipe.weight_decay));
        REQUIRE_OK(mpt_trainer_options_set_global_clipnorm(options, recipe.clipnorm));
        REQUIRE_OK(mpt_trainer_options_set_ema(options, recipe.ema));
        REQUIRE_OK(mpt_trainer_options_set_micro_batch_size(options, recipe.micro_batch));
        REQUIRE_OK(mpt_trainer_create(model, options, &trainer));
        mpt_trainer_options_destroy(options);
        REQUIRE_OK(mpt_dataset_create_f32(context, x.data(), static_cast<int64_t>(y.size()), features, y.data(), kClasses, 1,
                                          &dataset));
    }

    int64_t inputs_of(int64_t layer) const { return layer == 0 ? features : units[static_cast<size_t>(layer - 1)]; }
    // Layer `layer`'s weights then bias.
    std::vector<float> layer(int64_t layer) const {
        const int64_t out = units[static_cast<size_t>(layer)], in = inputs_of(layer);
        std::vector<float> w(static_cast<size_t>(out * in)), b(static_cast<size_t>(out));
        REQUIRE_OK(mpt_model_get_weights(model, layer, w.data(), out * in, b.data(), out));
        w.insert(w.end(), b.begin(), b.end());
        return w;
    }
    void set_layer(int64_t layer, const std::vector<float>& values) {
        const int64_t out = units[static_cast<size_t>(layer)], in = inputs_of(layer);
        REQUIRE(static_cast<int64_t>(values.size()) == out * in + out);
        REQUIRE_OK(mpt_model_set_weights(model, layer, values.data(), out * in, values.data() + out * in, out));
    }
    float gradient_norm() const {
        float norm = 0.0f;
        REQUIRE_OK(mpt_trainer_get_gradient_norm(trainer, &norm));
        return norm;
    }
};

// Inputs and a first layer whose products and sums are exact in fp32 (multiples of 1/32, below 2^10
// in magnitude), so that the first layer's outputs are the same whatever order a GEMM sums in: the
// data set of those outputs is what the layers above read from it, in every precision.
struct ExactFirstLayer {
    static constexpr int64_t kUnits = 32;
    std::vector<float> x;
    std::vector<int32_t> y;
    std::vector<float> weights;  // [kUnits, kFeatures] then the bias [kUnits]
    std::vector<float> outputs;  // relu(x W^T + b), [kRows, kUnits]

    ExactFirstLayer() {
        mpt_test::TestRng rng(5);
        for (int64_t r = 0; r < kRows; ++r) {
            const int32_t label = static_cast<int32_t>(r % kClasses);
            y.push_back(label);
            for (int64_t f = 0; f < kFeatures; ++f)
                x.push_back(static_cast<float>(static_cast<int>(rng.uniform(-8, 9)) + (f % kClasses == label ? 6 : 0)) / 4.0f);
        }
        for (int64_t i = 0; i < kUnits * kFeatures + kUnits; ++i)
            weights.push_back(static_cast<float>(static_cast<int>(rng.uniform(-8, 9))) / 8.0f);
        for (int64_t r = 0; r < kRows; ++r)
            for (int64_t u = 0; u < kUnits; ++u) {
                double sum = weights[static_cast<size_t>(kUnits * kFeatures + u)];
                for (int64_t f = 0; f < kFeatures; ++f)
                    sum += static_cast<double>(x[static_cast<size_t>(r * kFeatures + f)]) * weights[static_cast<size_t>(u * kFeatures + f)];
                outputs.push_back(static_cast<float>(sum > 0.0 ? sum : 0.0));
            }
    }
};

void fit(Stack& stack, int64_t epochs, int64_t batch = kBatch) {
    REQUIRE_OK(mpt_trainer_fit(stack.trainer, stack.dataset, epochs, batch, 1));
}

}  // namespace

TEST_CASE("with the first layer frozen, the layers above train bit for bit as a model of them alone on its outputs") {
    const ExactFirstLayer first;
    Recipe sgd, momentum, adamw_clipped, bf16_adam_micro, fp16_rmsprop_ema, fp32_micro_clipped_ema, fp16_lion_decay;
    momentum.momentum = 0.9f;
    momentum.weight_decay = 0.01f;
    adamw_clipped.optimizer = MPT_OPTIMIZER_ADAMW;
    adamw_clipped.clipnorm = 0.5f;
    bf16_adam_micro.precision = MPT_PRECISION_MIXED_BF16;
    bf16_adam_micro.optimizer = MPT_OPTIMIZER_ADAM;
    bf16_adam_micro.micro_batch = 6;
    fp16_rmsprop_ema.precision = MPT_PRECISION_MIXED_FP16;
    fp16_rmsprop_ema.optimizer = MPT_OPTIMIZER_RMSPROP;
    fp16_rmsprop_ema.ema = 0.9f;
    fp32_micro_clipped_ema.micro_batch = 5;
    fp32_micro_clipped_ema.clipnorm = 0.25f;
    fp32_micro_clipped_ema.ema = 0.8f;
    fp16_lion_decay.precision = MPT_PRECISION_MIXED_FP16;
    fp16_lion_decay.optimizer = MPT_OPTIMIZER_LION;
    fp16_lion_decay.weight_decay = 0.1f;
    for (const Recipe& recipe :
         {sgd, momentum, adamw_clipped, bf16_adam_micro, fp16_rmsprop_ema, fp32_micro_clipped_ema, fp16_lion_decay}) {
        CAPTURE(describe(recipe));
        Stack whole(recipe, kFeatures, {ExactFirstLayer::kUnits, 16, kClasses}, first.x, first.y);
        Stack above(recipe, ExactFirstLayer::kUnits, {16, kClasses}, first.outputs, first.y);
        whole.set_layer(0, first.weights);
        whole.set_layer(1, above.layer(0));
        whole.set_layer(2, above.layer(1));
        REQUIRE_OK(mpt_model_set_layer_trainable(whole.model, 0, 0));
        const std::vector<float> initial = above.layer(0);
        fit(whole, 3);
        fit(above, 3);
        CHECK(same_bits(whole.layer(0), first.weights));
        CHECK(same_bits(whole.layer(1), above.layer(0)));
        CHECK(same_bits(whole.layer(2), above.layer(1)));
        CHECK(whole.layer(1) != initial);  // trained
        CHECK(same_bits({whole.gradient_norm()}, {above.gradient_norm()}));  // NaN alike without clipping
        float whole_loss = 0.0f, above_loss = 0.0f;
        REQUIRE_OK(mpt_trainer_evaluate(whole.trainer, whole.dataset, 0, &whole_loss, nullptr));
        REQUIRE_OK(mpt_trainer_evaluate(above.trainer, above.dataset, 0, &above_loss, nullptr));
        CHECK(same_bits({whole_loss}, {above_loss}));
        if (recipe.ema > 0.0f) {
            // The frozen layer's average is its weights: swapped in, it is as it was.
            int holds = 0;
            REQUIRE_OK(mpt_trainer_swap_ema_weights(whole.trainer, &holds));
            REQUIRE_OK(mpt_trainer_swap_ema_weights(above.trainer, &holds));
            CHECK(holds == 1);
            CHECK(same_bits(whole.layer(0), first.weights));
            CHECK(same_bits(whole.layer(1), above.layer(0)));
            CHECK(same_bits(whole.layer(2), above.layer(1)));
        }
    }
}

TEST_CASE("a layer frozen after steps that trained it leaves the clipped norm to the others, in one pass and in micro-batches") {
    // The gradients' memory still holds the frozen layer's from the steps before: the norm must not
    // read them. Plain SGD keeps no state, so both models start over from the same weights after
    // the same number of steps. Batches of 16 take the CPU's norm from the batch (Gram matrices),
    // those of 96 from the gradients themselves, micro-batches from their sums.
    const ExactFirstLayer first;
    struct Shape {
        int64_t batch, micro_batch;
    };
    for (const Shape shape : {Shape{kBatch, 0}, Shape{kBatch, 5}, Shape{kRows, 0}, Shape{kRows, 40}}) {
        CAPTURE(shape.batch);
        CAPTURE(shape.micro_batch);
        Recipe recipe;
        recipe.clipnorm = 0.25f;
        recipe.micro_batch = shape.micro_batch;
        Stack whole(recipe, kFeatures, {ExactFirstLayer::kUnits, 16, kClasses}, first.x, first.y);
        Stack above(recipe, ExactFirstLayer::kUnits, {16, kClasses}, first.outputs, first.y);
        const std::vector<float> initial[2] = {above.layer(0), above.layer(1)};
        fit(whole, 1, shape.batch);
        fit(above, 1, shape.batch);
        whole.set_layer(0, first.weights);
        for (int64_t layer = 0; layer < 2; ++layer) {
            whole.set_layer(layer + 1, initial[layer]);
            above.set_layer(layer, initial[layer]);
        }
        REQUIRE_OK(mpt_model_set_layer_trainable(whole.model, 0, 0));
        fit(whole, 2, shape.batch);
        fit(above, 2, shape.batch);
        CHECK(same_bits(whole.layer(0), first.weights));
        CHECK(same_bits(whole.layer(1), above.layer(0)));
        CHECK(same_bits(whole.layer(2), above.layer(1)));
        CHECK(same_bits({whole.gradient_norm()}, {above.gradient_norm()}));
    }
}

namespace {

struct Restore {
    Stack* stack;
    std::vector<float> last_layer;
};

int restore_last_layer(int64_t, int64_t, int64_t, float, float, void* user_data) {
    Restore& restore = *static_cast<Restore*>(user_data);
    restore.stack->set_layer(static_cast<int64_t>(restore.stack->units.size()) - 1, restore.last_layer);
    return 0;
}

}  // namespace

TEST_CASE("with the last layer frozen, the layers below train as when a callback puts it back after every step") {
    // Plain SGD keeps no state, so putting a layer back after each step is freezing it; gradients
    // flow through the frozen layer's weights.
    const ExactFirstLayer data;
    Recipe recipe;
    Stack frozen(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y);
    Stack restored(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y);
    const std::vector<float> last = frozen.layer(2);
    REQUIRE(same_bits(restored.layer(2), last));
    REQUIRE_OK(mpt_model_set_layer_trainable(frozen.model, 2, 0));
    Restore restore{&restored, last};
    REQUIRE_OK(mpt_trainer_set_callbacks(restored.trainer, &restore_last_layer, nullptr, &restore));
    fit(frozen, 2);
    fit(restored, 2);
    CHECK(same_bits(frozen.layer(2), last));
    CHECK(same_bits(frozen.layer(0), restored.layer(0)));
    CHECK(same_bits(frozen.layer(1), restored.layer(1)));
    CHECK(frozen.layer(0) != Stack(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y).layer(0));  // trained
}

TEST_CASE("a middle layer frozen stays as it is; layers freeze and thaw between fits, and a thawed layer's average starts from its weights") {
    const ExactFirstLayer data;
    Recipe recipe;
    recipe.optimizer = MPT_OPTIMIZER_ADAM;
    recipe.ema = 0.5f;
    Stack stack(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y);
    const std::vector<float> before[3] = {stack.layer(0), stack.layer(1), stack.layer(2)};
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 1, 0));
    int trainable = -1;
    REQUIRE_OK(mpt_model_get_layer_trainable(stack.model, 1, &trainable));
    CHECK(trainable == 0);
    REQUIRE_OK(mpt_model_get_layer_trainable(stack.model, 0, &trainable));
    CHECK(trainable == 1);
    fit(stack, 1);
    CHECK(same_bits(stack.layer(1), before[1]));
    CHECK(stack.layer(0) != before[0]);
    CHECK(stack.layer(2) != before[2]);
    // Thawed: it trains; its average was its weights while frozen, so one step of averaging at 0.5
    // puts it halfway between the weights before and after that step.
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 1, 1));
    REQUIRE_OK(mpt_trainer_step(stack.trainer, stack.dataset, 0, kBatch, nullptr));
    const std::vector<float> after = stack.layer(1);
    CHECK(after != before[1]);
    int holds = 0;
    REQUIRE_OK(mpt_trainer_swap_ema_weights(stack.trainer, &holds));
    const std::vector<float> average = stack.layer(1);
    for (size_t i = 0; i < average.size(); ++i) {
        CAPTURE(i);
        CHECK(average[i] == 0.5f * before[1][i] + 0.5f * after[i]);
    }
}

TEST_CASE("averaged weights swapped in leave a frozen layer as it is: frozen after training, set while frozen, after a skipped step") {
    // mixed-fp16 with dynamic loss scaling, whose overflowing steps are skipped.
    const ExactFirstLayer data;
    Recipe recipe;
    recipe.precision = MPT_PRECISION_MIXED_FP16;
    recipe.optimizer = MPT_OPTIMIZER_ADAM;
    recipe.ema = 0.9f;
    Stack stack(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y);
    fit(stack, 1);  // every layer trains: their averages lag their weights
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 0, 0));
    int holds = 0;
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        if (round >= 1) {  // weights set on the frozen layer (its average left behind)
            std::vector<float> set = stack.layer(0);
            for (float& value : set) value *= 0.5f;
            stack.set_layer(0, set);
        }
        if (round == 2) {  // a skipped step last: logits of weights of 1e30 overflow fp16
            const std::vector<float> last = stack.layer(2);
            stack.set_layer(2, std::vector<float>(last.size(), 1e30f));
            int64_t skipped_before = 0, skipped_after = 0;
            REQUIRE_OK(mpt_trainer_get_loss_scale(stack.trainer, nullptr, nullptr, &skipped_before));
            REQUIRE_OK(mpt_trainer_step(stack.trainer, stack.dataset, 0, kBatch, nullptr));
            REQUIRE_OK(mpt_trainer_get_loss_scale(stack.trainer, nullptr, nullptr, &skipped_after));
            REQUIRE(skipped_after == skipped_before + 1);
            stack.set_layer(2, last);
        }
        const std::vector<float> frozen = stack.layer(0), middle = stack.layer(1);
        REQUIRE_OK(mpt_trainer_swap_ema_weights(stack.trainer, &holds));
        CHECK(holds == 1);
        CHECK(same_bits(stack.layer(0), frozen));
        CHECK(stack.layer(1) != middle);  // the trainable layer's average
        REQUIRE_OK(mpt_trainer_swap_ema_weights(stack.trainer, &holds));
        CHECK(holds == 0);
        CHECK(same_bits(stack.layer(0), frozen));
        CHECK(same_bits(stack.layer(1), middle));
    }
}

TEST_CASE("training a model whose layers are all frozen fails with INVALID_STATE and changes nothing") {
    const ExactFirstLayer data;
    Recipe recipe;
    Stack stack(recipe, kFeatures, {24, kClasses}, data.x, data.y);
    const std::vector<float> before[2] = {stack.layer(0), stack.layer(1)};
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 0, 0));
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 1, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_fit(stack.trainer, stack.dataset, 1, kBatch, 1));
    CHECK(std::string(mpt_last_error()).find("frozen") != std::string::npos);
    REQUIRE_OK(mpt_trainer_fit(stack.trainer, stack.dataset, 0, kBatch, 1));  // 0 epochs: nothing to train
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_step(stack.trainer, stack.dataset, 0, kBatch, nullptr));
    int64_t steps = -1;
    REQUIRE_OK(mpt_trainer_get_progress(stack.trainer, &steps, nullptr));
    CHECK(steps == 0);
    CHECK(same_bits(stack.layer(0), before[0]));
    CHECK(same_bits(stack.layer(1), before[1]));
    float loss = 0.0f;  // evaluating and predicting need no trainable layer
    REQUIRE_OK(mpt_trainer_evaluate(stack.trainer, stack.dataset, 0, &loss, nullptr));
    // A progress callback that freezes the last trainable layer stops fit at the next step.
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 1, 1));
    auto freeze_all = [](int64_t, int64_t, int64_t, float, float, void* model) -> int {
        mpt_model_set_layer_trainable(static_cast<mpt_model_t*>(model), 1, 0);
        return 0;
    };
    REQUIRE_OK(mpt_trainer_set_callbacks(stack.trainer, freeze_all, nullptr, stack.model));
    CHECK_FAILS(MPT_STATUS_INVALID_STATE, mpt_trainer_fit(stack.trainer, stack.dataset, 1, kBatch, 1));
    REQUIRE_OK(mpt_trainer_get_progress(stack.trainer, &steps, nullptr));
    CHECK(steps == 1);
    // Thawed again, fit finishes the interrupted epoch.
    REQUIRE_OK(mpt_trainer_set_callbacks(stack.trainer, nullptr, nullptr, nullptr));
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 1, 1));
    REQUIRE_OK(mpt_trainer_fit(stack.trainer, stack.dataset, 1, kBatch, 1));
    REQUIRE_OK(mpt_trainer_get_progress(stack.trainer, &steps, nullptr));
    CHECK(steps == kRows / kBatch);
}

TEST_CASE("which layers are frozen is saved with the model, and a checkpoint loads whatever they are now") {
    mpt_test::TempDir directory("mptrain-frozen-layers");
    const std::string model_path = (directory.path / "model.safetensors").string();
    const std::string checkpoint_path = (directory.path / "checkpoint.safetensors").string();
    const ExactFirstLayer data;
    Recipe recipe;
    Stack stack(recipe, kFeatures, {24, 12, kClasses}, data.x, data.y);
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 0, 0));
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 2, 0));
    fit(stack, 1);
    REQUIRE_OK(mpt_model_save(stack.model, model_path.c_str()));
    REQUIRE_OK(mpt_trainer_save_checkpoint(stack.trainer, checkpoint_path.c_str()));
    mpt_model_t* loaded = nullptr;
    REQUIRE_OK(mpt_model_load(stack.context, model_path.c_str(), &loaded));
    for (int64_t layer = 0; layer < 3; ++layer) {
        CAPTURE(layer);
        int trainable = -1;
        REQUIRE_OK(mpt_model_get_layer_trainable(loaded, layer, &trainable));
        CHECK(trainable == (layer == 1 ? 1 : 0));
    }
    mpt_model_destroy(loaded);
    // Thawed, the model still takes the checkpoint (its flags are the model's, not the run's).
    REQUIRE_OK(mpt_model_set_layer_trainable(stack.model, 0, 1));
    REQUIRE_OK(mpt_trainer_load_checkpoint(stack.trainer, checkpoint_path.c_str()));
    int trainable = -1;
    REQUIRE_OK(mpt_model_get_layer_trainable(stack.model, 0, &trainable));
    CHECK(trainable == 1);
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_trainable(stack.model, 3, 0));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_trainable(stack.model, -1, &trainable));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_get_layer_trainable(stack.model, 0, nullptr));
    CHECK_FAILS(MPT_STATUS_INVALID_ARGUMENT, mpt_model_set_layer_trainable(nullptr, 0, 0));
}
