// Trainer options read back through the C++ wrapper: the defaults, each value set and a trainer's own; a
// trainer created from another's options, and a run resumed from its checkpoint alone, train bit for bit.

#include "wrapper_test_support.h"

namespace {

// Every option set away from its default, the optimizer `optimizer` (RMSprop refuses Nesterov's momentum).
mptrain::TrainerOptions every_option(mpt_optimizer optimizer) {
    mptrain::TrainerOptions options;
    options.precision(MPT_PRECISION_MIXED_FP16)
        .loss(MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
        .huber_delta(2.5f)
        .label_smoothing(0.125f)
        .class_weights({0.5f, 2.0f, 1.25f})
        .learning_rate(0.03f)
        .momentum(0.75f, optimizer != MPT_OPTIMIZER_RMSPROP)
        .adam(0.8f, 0.95f, 1e-5f)
        .rmsprop(0.7f, 1e-6f)
        .rmsprop_centered(true)
        .weight_decay(0.01f)
        .global_clipnorm(0.9f)
        .ema_momentum(0.5f)
        .micro_batch_size(5)
        .lr_schedule(MPT_LR_SCHEDULE_COSINE, 3, 40, 0.25f)
        .loss_scaling(MPT_LOSS_SCALING_DYNAMIC, 64.0f)
        .loss_scaler_dynamics(4.0f, 0.25f, 3, 2.0f, 1024.0f)
        .optimizer(optimizer);
    return options;
}

}  // namespace

TEST_CASE("trainer options read back through the wrapper: the defaults, each value set, and a trainer's own") {
    const mptrain::TrainerOptions defaults;
    CHECK(defaults.precision() == MPT_PRECISION_AUTO);
    CHECK(defaults.optimizer() == MPT_OPTIMIZER_SGD);
    CHECK(defaults.learning_rate() == 0.01f);
    CHECK(defaults.class_weights().empty());
    CHECK(defaults.adam().beta2 == 0.999f);
    CHECK(defaults.lr_schedule().factor == 1.0f);
    CHECK(defaults.loss_scaler_dynamics().max_scale == 16777216.0f);
    CHECK(mptrain::TrainerOptions().optimizer(MPT_OPTIMIZER_ADAMW).weight_decay() == 0.004f);

    const mptrain::Context context = cpu_context();
    mptrain::Model model = mlp(context);
    mptrain::Trainer trainer(model, every_option(MPT_OPTIMIZER_ADAM));
    trainer.set_learning_rate(0.125f);
    const mptrain::TrainerOptions read = trainer.options();
    CHECK(read.precision() == MPT_PRECISION_MIXED_FP16);
    CHECK(read.loss() == MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    CHECK(read.huber_delta() == 2.5f);
    CHECK(read.label_smoothing() == 0.125f);
    CHECK(read.class_weights() == std::vector<float>{0.5f, 2.0f, 1.25f});
    CHECK(read.optimizer() == MPT_OPTIMIZER_ADAM);
    CHECK(read.learning_rate() == 0.125f);
    CHECK(read.momentum().momentum == 0.75f);
    CHECK(read.momentum().nesterov);
    CHECK(read.adam().beta1 == 0.8f);
    CHECK(read.adam().beta2 == 0.95f);
    CHECK(read.adam().epsilon == 1e-6f);  // RMSprop's, set last: the two share it
    CHECK(read.lion().beta1 == 0.8f);
    CHECK(read.lion().beta2 == 0.95f);
    CHECK(read.rmsprop().rho == 0.7f);
    CHECK(read.rmsprop_centered());
    CHECK(read.weight_decay() == 0.01f);
    CHECK(read.global_clipnorm() == 0.9f);
    CHECK(read.ema_momentum() == 0.5f);
    CHECK(read.micro_batch_size() == 5);
    CHECK(read.lr_schedule().schedule == MPT_LR_SCHEDULE_COSINE);
    CHECK(read.lr_schedule().warmup_steps == 3);
    CHECK(read.lr_schedule().decay_steps == 40);
    CHECK(read.lr_schedule().factor == 0.25f);
    CHECK(read.loss_scaling().mode == MPT_LOSS_SCALING_DYNAMIC);
    CHECK(read.loss_scaling().initial_scale == 64.0f);
    CHECK(read.loss_scaler_dynamics().growth_factor == 4.0f);
    CHECK(read.loss_scaler_dynamics().backoff_factor == 0.25f);
    CHECK(read.loss_scaler_dynamics().growth_interval == 3);
    CHECK(read.loss_scaler_dynamics().min_scale == 2.0f);
    CHECK(read.loss_scaler_dynamics().max_scale == 1024.0f);
}

TEST_CASE("a trainer created from another's options through the wrapper trains bit for bit as that one") {
    for (mpt_optimizer optimizer : {MPT_OPTIMIZER_ADAMW, MPT_OPTIMIZER_RMSPROP}) {
        CAPTURE(optimizer);
        // Three contexts of one seed: the same initial weights, each trainer its own data set.
        const mptrain::Context contexts[3] = {cpu_context(), cpu_context(), cpu_context()};
        mptrain::Model first = mlp(contexts[0]), second = mlp(contexts[1]), plain = mlp(contexts[2]);
        mptrain::Trainer original(first, every_option(optimizer));
        mptrain::Trainer recreated(second, original.options());
        mptrain::Trainer untuned(plain);
        REQUIRE(weight_bits(second) == weight_bits(first));
        mptrain::Trainer* trainers[3] = {&original, &recreated, &untuned};
        for (int i = 0; i < 3; ++i) trainers[i]->fit(blobs(contexts[i], 90, 5), 3, 15);
        CHECK(weight_bits(second) == weight_bits(first));
        CHECK(weight_bits(plain) != weight_bits(first));
    }
}

TEST_CASE("a run resumes through the wrapper from its checkpoint alone, bit for bit; a model file gives no options") {
    TempDir directory;
    const std::string path = directory.file("run.safetensors");
    const mptrain::Context context = cpu_context();
    mptrain::Model model = mlp(context);
    mptrain::Trainer original(model, every_option(MPT_OPTIMIZER_ADAMW).micro_batch_size(0));
    const mptrain::Dataset data = blobs(context, 90, 5);
    original.fit(data, 2, 15);
    original.set_learning_rate(0.0125f);  // the run's rate, not its options': the file's
    original.save_checkpoint(path);

    const mptrain::Context elsewhere = cpu_context(99);  // another seed: everything from the file
    mptrain::Model resumed_model = mptrain::Model::load(elsewhere, path);
    const mptrain::TrainerOptions read = mptrain::TrainerOptions::from_checkpoint(path);
    CHECK(read.precision() == MPT_PRECISION_MIXED_FP16);
    CHECK(read.learning_rate() == 0.0125f);
    CHECK(read.weight_decay() == 0.01f);
    CHECK(read.class_weights() == std::vector<float>{0.5f, 2.0f, 1.25f});
    mptrain::Trainer resumed(resumed_model, read);
    resumed.load_checkpoint(path);
    original.fit(data, 2, 15);
    resumed.fit(blobs(elsewhere, 90, 5), 2, 15);
    CHECK(weight_bits(resumed_model) == weight_bits(model));

    const std::string model_path = directory.file("model.safetensors");
    model.save(model_path);
    CHECK(status_of([&] { mptrain::TrainerOptions::from_checkpoint(model_path); }) == MPT_STATUS_INVALID_ARGUMENT);
    CHECK(status_of([&] { mptrain::TrainerOptions::from_checkpoint(directory.file("missing")); }) == MPT_STATUS_IO_ERROR);
}
