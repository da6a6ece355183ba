//! Trainer::options: a trainer's options read back through the TrainerOptions getters, the library's
//! defaults among them, and a trainer created from them that trains as the original. The copies of
//! a value the library keeps once (Adam's and Lion's betas, Adam's and RMSprop's epsilon) must agree:
//! a read-back edited in one copy is refused before a trainer is created, one edited in every copy
//! reads back the new values.
mod common;
use common::*;
use mptrain::*;

/// A value other than the default for every option the library lets this trainer take (Nesterov's
/// momentum only where the optimizer is not RMSprop, which refuses it), no two alike where they
/// could be mistaken for each other. Neither a weight decay nor Lion's betas are set: they read
/// back as the optimizer's defaults and Adam's betas.
fn every_option(optimizer: Optimizer) -> TrainerOptions {
    TrainerOptions::new()
        .precision(Precision::MixedFp16)
        .loss(Loss::CategoricalCrossentropy)
        .huber_delta(2.5)
        .label_smoothing(0.125)
        .class_weights(&[0.5, 2.0, 1.25])
        .optimizer(optimizer)
        .learning_rate(0.03)
        .momentum(0.75, optimizer != Optimizer::RmsProp)
        .adam(0.8, 0.95, 1e-5)
        // The library keeps one epsilon for Adam and RMSprop: the same here, so that each reads
        // back as given.
        .rmsprop(0.7, 1e-5)
        .rmsprop_centered(true)
        .global_clipnorm(0.9)
        .ema_momentum(0.5)
        .micro_batch_size(5)
        .lr_schedule(LrSchedule::Cosine, 3, 40, 0.25)
        .loss_scaling(LossScaling::Dynamic, 64.0)
        .loss_scaler_dynamics(LossScalerDynamics {
            growth_factor: 4.0,
            backoff_factor: 0.375,
            growth_interval: 7,
            min_scale: 2.0,
            max_scale: 1024.0,
        })
}

/// `blobs(rows, seed)` with one-hot targets, for the categorical cross-entropy of every_option.
fn one_hot_blobs(ctx: &Context, rows: usize, seed: u64) -> Dataset {
    let (x, y) = blobs(rows, seed);
    Dataset::from_f32_targets(ctx, &x, FEATURES, &one_hot(&y), CLASSES as i64, true).unwrap()
}

#[test]
fn a_trainer_reads_back_every_option_it_was_created_with_and_the_learning_rate_set_since() {
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &every_option(Optimizer::AdamW)).unwrap();
    let options = trainer.options().unwrap();
    assert_eq!(options.get_precision(), Some(Precision::MixedFp16));
    assert_eq!(options.get_loss(), Some(Loss::CategoricalCrossentropy));
    assert_eq!(options.get_huber_delta(), Some(2.5));
    assert_eq!(options.get_label_smoothing(), Some(0.125));
    assert_eq!(options.get_class_weights(), Some(&[0.5, 2.0, 1.25][..]));
    assert_eq!(options.get_optimizer(), Some(Optimizer::AdamW));
    assert_eq!(options.get_learning_rate(), Some(0.03));
    assert_eq!(options.get_momentum(), Some((0.75, true)));
    assert_eq!(options.get_adam(), Some((0.8, 0.95, 1e-5)));
    assert_eq!(options.get_lion(), Some((0.8, 0.95)), "Adam's betas");
    assert_eq!(options.get_rmsprop(), Some((0.7, 1e-5)));
    assert!(options.get_rmsprop_centered());
    assert_eq!(options.get_weight_decay(), Some(0.004), "AdamW's default");
    assert_eq!(options.get_global_clipnorm(), Some(0.9));
    assert_eq!(options.get_ema_momentum(), Some(0.5));
    assert_eq!(options.get_micro_batch_size(), 5);
    assert_eq!(
        options.get_lr_schedule(),
        Some((LrSchedule::Cosine, 3, 40, 0.25))
    );
    assert_eq!(
        options.get_loss_scaling(),
        Some((LossScaling::Dynamic, 64.0))
    );
    assert_eq!(
        options.get_loss_scaler_dynamics(),
        Some(LossScalerDynamics {
            growth_factor: 4.0,
            backoff_factor: 0.375,
            growth_interval: 7,
            min_scale: 2.0,
            max_scale: 1024.0,
        })
    );

    // The base rate as it is now; nothing else changes with it.
    trainer.set_learning_rate(0.02).unwrap();
    let after = trainer.options().unwrap();
    assert_eq!(after.get_learning_rate(), Some(0.02));
    assert_eq!(after, options.learning_rate(0.02));
}

#[test]
fn a_trainer_created_from_the_options_read_back_trains_bit_for_bit_as_the_original() {
    // Each trainer in a context of its own of one seed: the same initial weights and shuffles.
    let run = |options: &TrainerOptions| {
        let ctx = seeded_context(11);
        let mut model = mlp(&ctx);
        let start = weight_bits(&mut model);
        let trainer = Trainer::new(&model, options).unwrap();
        (ctx, model, trainer, start)
    };
    for optimizer in [
        Optimizer::AdamW,
        Optimizer::Lion,
        Optimizer::RmsProp,
        Optimizer::Sgd,
    ] {
        let (ctx, mut model, mut original, start) = run(&every_option(optimizer));
        // A base rate of its own since creation, which the copy must take too.
        original.set_learning_rate(0.02).unwrap();
        let options = original.options().unwrap();
        let (copy_ctx, mut copy_model, mut copy, copy_start) = run(&options);
        assert_eq!(copy_start, start, "{optimizer:?}: the same initial weights");
        assert_eq!(copy.options().unwrap(), options, "{optimizer:?}");

        original
            .fit(&one_hot_blobs(&ctx, 90, 4), 3, 15, true)
            .unwrap();
        copy.fit(&one_hot_blobs(&copy_ctx, 90, 4), 3, 15, true)
            .unwrap();
        let trained = weight_bits(&mut model);
        assert_ne!(trained, start, "{optimizer:?}: training moves the weights");
        assert!(
            weight_bits(&mut copy_model) == trained,
            "{optimizer:?}: the copy trains bit for bit as the original"
        );
        assert_eq!(
            copy.loss_scale().unwrap(),
            original.loss_scale().unwrap(),
            "{optimizer:?}"
        );
        // The weights' averages too (a copy without them refuses the swap).
        assert!(original.swap_ema_weights().unwrap());
        assert!(copy.swap_ema_weights().unwrap());
        assert!(
            weight_bits(&mut copy_model) == weight_bits(&mut model),
            "{optimizer:?}: the copy's weight averages are the original's"
        );

        // The options make the difference: a trainer of the defaults (but for the loss the one-hot
        // targets need) trains the same weights otherwise.
        let (plain_ctx, mut plain_model, mut plain, _) =
            run(&TrainerOptions::new().loss(Loss::CategoricalCrossentropy));
        plain
            .fit(&one_hot_blobs(&plain_ctx, 90, 4), 3, 15, true)
            .unwrap();
        assert!(
            weight_bits(&mut plain_model) != trained,
            "{optimizer:?}: the defaults train otherwise"
        );
    }
}

#[test]
fn a_default_trainer_reads_back_the_defaults_the_header_documents() {
    let ctx = context();
    let model = mlp(&ctx);
    let documented = TrainerOptions::new()
        .precision(Precision::Auto)
        .loss(Loss::SparseCategoricalCrossentropy)
        .huber_delta(1.0)
        .label_smoothing(0.0)
        .class_weights(&[])
        .optimizer(Optimizer::Sgd)
        .learning_rate(0.01)
        .momentum(0.0, false)
        .adam(0.9, 0.999, 1e-7)
        .lion(0.9, 0.999) // Adam's betas: Lion's beta2 0.99 is the default under Lion only
        .rmsprop(0.9, 1e-7)
        .rmsprop_centered(false)
        .weight_decay(0.0)
        .global_clipnorm(0.0)
        .ema_momentum(0.0)
        .micro_batch_size(0)
        .lr_schedule(LrSchedule::Constant, 0, 0, 1.0)
        .loss_scaling(LossScaling::Default, 32768.0)
        .loss_scaler_dynamics(LossScalerDynamics {
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            min_scale: 1.0,
            max_scale: 16777216.0,
        });
    let defaults = Trainer::with_defaults(&model).unwrap().options().unwrap();
    assert_eq!(defaults, documented);

    // The optimizer's own defaults: AdamW's weight decay, Lion's beta2.
    let of = |optimizer| {
        let options = TrainerOptions::new().optimizer(optimizer);
        Trainer::new(&model, &options).unwrap().options().unwrap()
    };
    assert_eq!(
        of(Optimizer::AdamW),
        documented
            .clone()
            .optimizer(Optimizer::AdamW)
            .weight_decay(0.004)
    );
    assert_eq!(
        of(Optimizer::Lion),
        documented
            .optimizer(Optimizer::Lion)
            .adam(0.9, 0.99, 1e-7)
            .lion(0.9, 0.99)
    );
}

#[test]
fn options_read_back_keep_the_optimizers_defaults_as_values_when_the_optimizer_changes() {
    let ctx = context();
    let model = mlp(&ctx);
    let adamw = Trainer::new(&model, &TrainerOptions::new().optimizer(Optimizer::AdamW)).unwrap();
    // Every value read back is set: AdamW's decay stays, as a decay given to the builder would.
    let sgd = adamw.options().unwrap().optimizer(Optimizer::Sgd);
    let trainer = Trainer::new(&model, &sgd).unwrap();
    assert_eq!(trainer.options().unwrap().get_weight_decay(), Some(0.004));
}

/// Expects `options` refused by Trainer::new with InvalidArgument, naming `first` and `second` as one
/// value, before a trainer is created: `model` is still unbuilt, so its initializers can change.
fn refused_as_one_value(model: &mut Model, options: &TrainerOptions, first: &str, second: &str) {
    let error = Trainer::new(model, options).expect_err("refused");
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    for part in [first, second, "one value in the library"] {
        assert!(error.message.contains(part), "{error} names {part}");
    }
    // Refused with InvalidState once the model is built.
    model
        .set_layer_initializer(0, Initializer::HeNormal)
        .expect("the model is still unbuilt");
}

#[test]
fn a_read_back_with_one_copy_of_a_shared_value_edited_is_refused_before_a_trainer_is_created() {
    let ctx = context();
    let read_back = Trainer::new(&mlp(&ctx), &every_option(Optimizer::Adam))
        .unwrap()
        .options()
        .unwrap();
    let (beta1, beta2, epsilon) = read_back.get_adam().unwrap();
    let (rho, _) = read_back.get_rmsprop().unwrap();
    let mut model = mlp(&ctx);
    // Adam's betas edited, Lion's left.
    let adam_betas = read_back.clone().adam(0.5, 0.6, epsilon);
    refused_as_one_value(
        &mut model,
        &adam_betas,
        "adam's beta1 0.5",
        "lion's beta1 0.8",
    );
    // Adam's epsilon edited, RMSprop's left.
    let adam_epsilon = read_back.clone().adam(beta1, beta2, 1e-3);
    refused_as_one_value(
        &mut model,
        &adam_epsilon,
        "adam's epsilon 0.001",
        "rmsprop's epsilon",
    );
    // And the other way round: Lion's beta2, RMSprop's epsilon.
    let lion_beta2 = read_back.clone().lion(beta1, 0.6);
    refused_as_one_value(
        &mut model,
        &lion_beta2,
        "adam's beta2 0.95",
        "lion's beta2 0.6",
    );
    let rmsprop_epsilon = read_back.rmsprop(rho, 1e-3);
    refused_as_one_value(
        &mut model,
        &rmsprop_epsilon,
        "adam's epsilon",
        "rmsprop's epsilon 0.001",
    );
}

#[test]
fn a_read_back_edited_in_every_copy_creates_a_trainer_that_reads_back_the_new_values() {
    let ctx = context();
    let model = mlp(&ctx);
    let read_back = Trainer::new(&model, &every_option(Optimizer::Adam))
        .unwrap()
        .options()
        .unwrap();
    let (rho, _) = read_back.get_rmsprop().unwrap();
    let edited = read_back
        .adam(0.5, 0.6, 1e-3)
        .lion(0.5, 0.6)
        .rmsprop(rho, 1e-3);
    let options = Trainer::new(&model, &edited).unwrap().options().unwrap();
    assert_eq!(options.get_adam(), Some((0.5, 0.6, 1e-3)));
    assert_eq!(options.get_lion(), Some((0.5, 0.6)));
    assert_eq!(options.get_rmsprop(), Some((rho, 1e-3)));
    assert_eq!(options, edited);
}

#[test]
fn the_closures_read_the_options_of_the_trainer_fitting_with_the_rate_set_meanwhile() {
    use std::sync::{Arc, Mutex};
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &every_option(Optimizer::AdamW)).unwrap();
    let before = trainer.options().unwrap();
    let at_epoch_ends = Arc::new(Mutex::new(Vec::new()));
    let at_first_step = Arc::new(Mutex::new(Vec::new()));
    let (ends, steps) = (at_epoch_ends.clone(), at_first_step.clone());
    trainer
        .on_epoch_end_with(move |_, control| {
            let rate = control.learning_rate().unwrap();
            control.set_learning_rate(rate / 2.0).unwrap();
            ends.lock().unwrap().push(control.options().unwrap());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    trainer
        .on_progress_with(move |progress, control| {
            if progress.epoch == 0 && progress.step == 1 {
                steps.lock().unwrap().push(control.options().unwrap());
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    trainer
        .fit(&one_hot_blobs(&ctx, 90, 4), 3, 15, true)
        .unwrap();

    assert_eq!(*at_first_step.lock().unwrap(), vec![before.clone()]);
    let ends = at_epoch_ends.lock().unwrap();
    assert_eq!(ends.len(), 3);
    for (epoch, options) in ends.iter().enumerate() {
        let halved = 0.03 / 2f32.powi(epoch as i32 + 1);
        assert_eq!(options.get_learning_rate(), Some(halved), "epoch {epoch}");
        // Every other value as the trainer was created with.
        assert_eq!(options.clone().learning_rate(0.03), before, "epoch {epoch}");
    }
    assert_eq!(trainer.options().unwrap(), ends[2]);
}
