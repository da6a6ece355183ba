//! Learning-rate schedules, each step's rate against the header's formula; the RMSprop and Lion
//! optimizers train, their options change the steps or default as Keras's; bad ones are refused.
mod common;
use common::*;
use mptrain::*;

/// The factor on the base rate at `step` as mptrain.h defines each schedule, in f64.
fn schedule_factor(schedule: LrSchedule, warmup: i64, decay: i64, factor: f64, step: i64) -> f64 {
    if step < warmup {
        return (step + 1) as f64 / warmup as f64;
    }
    let decayed = (step - warmup) as f64;
    let progress = if decay > 0 {
        (decayed / decay as f64).min(1.0)
    } else {
        0.0
    };
    match schedule {
        LrSchedule::Constant => 1.0,
        LrSchedule::Linear => factor + (1.0 - factor) * (1.0 - progress),
        LrSchedule::Cosine => {
            factor + (1.0 - factor) * (1.0 + (std::f64::consts::PI * progress).cos()) / 2.0
        }
        LrSchedule::Step => factor.powf((decayed / decay as f64).floor()),
    }
}

#[test]
fn a_learning_rate_schedule_gives_each_step_the_rate_of_the_header_formula() {
    let ctx = context();
    let (x, y) = blobs(200, 43);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let cases = [
        (LrSchedule::Cosine, 3, 5, 0.25f32), // warm-up, half a cosine, then the floor
        (LrSchedule::Constant, 4, 0, 1.0),   // a warm-up alone
        (LrSchedule::Linear, 2, 4, 0.5),
        (LrSchedule::Step, 1, 3, 0.5),
    ];
    for (schedule, warmup, decay, factor) in cases {
        let model = mlp(&ctx);
        let options = adam().lr_schedule(schedule, warmup, decay, factor);
        let mut trainer = Trainer::new(&model, &options).unwrap();
        for step in 0..11 {
            assert_eq!(trainer.progress().unwrap().steps, step);
            let expected = 0.01 * schedule_factor(schedule, warmup, decay, factor as f64, step);
            let rate = trainer.scheduled_learning_rate().unwrap() as f64;
            assert!(
                (rate - expected).abs() <= 1e-6 * expected,
                "{schedule:?} step {step}: {rate} against {expected}"
            );
            trainer.step(&data, (step * 20) % 200, 20).unwrap();
        }
        // The schedule multiplies the base rate and never changes it.
        assert_eq!(trainer.learning_rate().unwrap(), 0.01, "{schedule:?}");
    }

    let model = mlp(&ctx);
    let refused = [
        (LrSchedule::Cosine, 2, 0, 0.0),   // no decay length
        (LrSchedule::Linear, 0, 10, 1.5),  // above the base rate
        (LrSchedule::Step, 0, 3, 0.0),     // a step factor must be > 0
        (LrSchedule::Constant, 0, 5, 1.0), // a constant schedule has no decay
        (LrSchedule::Cosine, -1, 10, 0.0),
    ];
    for (schedule, warmup, decay, factor) in refused {
        let options = TrainerOptions::new().lr_schedule(schedule, warmup, decay, factor);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(
            error.status,
            Status::InvalidArgument,
            "{schedule:?} {warmup} {decay} {factor}"
        );
        assert!(!error.message.is_empty());
    }
    let unscheduled = Trainer::new(&model, &TrainerOptions::new().learning_rate(0.05)).unwrap();
    assert_eq!(unscheduled.scheduled_learning_rate().unwrap(), 0.05);

    // Inside fit, the epoch-end closure reads the rate of the next epoch's first step: 10 steps an
    // epoch of 200 rows in batches of 20, a step decay halving every 10 steps.
    let model = mlp(&ctx);
    let options = adam().lr_schedule(LrSchedule::Step, 0, 10, 0.5);
    let mut trainer = Trainer::new(&model, &options).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    trainer
        .on_epoch_end_with(move |_, control| {
            record
                .lock()
                .unwrap()
                .push(control.scheduled_learning_rate().unwrap());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    trainer.fit(&data, 3, 20, true).unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![0.005f32, 0.0025, 0.00125]);
}

/// An fp32 RMSprop trainer at rate 0.01 with this rho (epsilon 1e-7).
fn rmsprop(rho: f32) -> TrainerOptions {
    TrainerOptions::new()
        .precision(Precision::Fp32)
        .optimizer(Optimizer::RmsProp)
        .learning_rate(0.01)
        .rmsprop(rho, 1e-7)
}

#[test]
fn rmsprop_fit_lowers_the_loss_with_and_without_momentum() {
    let ctx = context();
    let data = blob_data(&ctx, 300, 1);
    for momentum in [0.0f32, 0.5] {
        let model = mlp(&ctx);
        let mut trainer = Trainer::new(&model, &rmsprop(0.9).momentum(momentum, false)).unwrap();
        let before = trainer.evaluate(&data, 0).unwrap();
        trainer.fit(&data, 3, 32, true).unwrap();
        let after = trainer.evaluate(&data, 0).unwrap();
        assert!(
            after.loss < 0.5 * before.loss,
            "momentum {momentum}: {before:?} -> {after:?}"
        );
        assert!(after.accuracy >= 0.95, "momentum {momentum}: {after:?}");
    }
}

#[test]
fn rmsprop_rho_and_centered_change_the_steps_the_same_options_give_the_same_weights() {
    let train = |rho: f32, centered: bool| {
        let ctx = seeded_context(5); // one seed: the same initial weights
        let mut model = mlp(&ctx);
        let data = blob_data(&ctx, 30, 73);
        let initial = weight_bits(&mut model);
        let mut trainer = Trainer::new(&model, &rmsprop(rho).rmsprop_centered(centered)).unwrap();
        for step in 0..3 {
            trainer.step(&data, 10 * step, 10).unwrap();
        }
        let trained = weight_bits(&mut model);
        assert_ne!(trained, initial, "the steps moved the weights");
        trained
    };
    let rho_08 = train(0.8, false);
    assert_eq!(train(0.8, false), rho_08);
    assert_ne!(train(0.5, false), rho_08);
    let centered = train(0.8, true);
    assert_ne!(centered, rho_08);
    assert_eq!(train(0.8, true), centered);
}

#[test]
fn rmsprop_rho_outside_0_1_a_non_positive_epsilon_and_nesterov_are_refused() {
    let ctx = context();
    let model = mlp(&ctx);
    for (rho, epsilon, named) in [
        (1.5f32, 1e-7f32, "rho"),
        (1.0, 1e-7, "rho"),
        (-0.1, 1e-7, "rho"),
        (0.9, 0.0, "epsilon"),
        (0.9, -1e-7, "epsilon"),
        (0.9, f32::NAN, "epsilon"),
    ] {
        let options = TrainerOptions::new()
            .optimizer(Optimizer::RmsProp)
            .rmsprop(rho, epsilon);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{rho} {epsilon}");
        assert!(error.message.contains(named), "{error}");
    }
    let nesterov = rmsprop(0.9).momentum(0.9, true);
    let error = Trainer::new(&model, &nesterov).expect_err("refused");
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    assert!(error.message.contains("Nesterov"), "{error}");
    // Plain momentum is RMSprop's too, and rho 0 is in range.
    Trainer::new(&model, &rmsprop(0.0).momentum(0.9, false)).expect("accepted");
    assert_eq!(Optimizer::from_code(3), Some(Optimizer::RmsProp));
}

/// An fp32 Lion trainer at this rate, with these betas (none: the library's defaults).
fn lion(learning_rate: f32, betas: Option<(f32, f32)>) -> TrainerOptions {
    let options = TrainerOptions::new()
        .precision(Precision::Fp32)
        .optimizer(Optimizer::Lion)
        .learning_rate(learning_rate);
    match betas {
        Some((beta1, beta2)) => options.lion(beta1, beta2),
        None => options,
    }
}

#[test]
fn lion_fit_lowers_the_loss() {
    let ctx = context();
    let data = blob_data(&ctx, 300, 1);
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &lion(0.003, Some((0.9, 0.99)))).unwrap();
    let before = trainer.evaluate(&data, 0).unwrap();
    trainer.fit(&data, 3, 32, true).unwrap();
    let after = trainer.evaluate(&data, 0).unwrap();
    assert!(after.loss.is_finite(), "{after:?}");
    assert!(after.loss < before.loss, "{before:?} -> {after:?}");
    assert_eq!(Optimizer::from_code(4), Some(Optimizer::Lion));
}

#[test]
fn lion_unset_betas_are_kerass_0_9_and_0_99() {
    let train = |betas: Option<(f32, f32)>| {
        let ctx = seeded_context(5); // one seed: the same initial weights
        let mut model = mlp(&ctx);
        let data = blob_data(&ctx, 30, 73);
        let initial = weight_bits(&mut model);
        let mut trainer = Trainer::new(&model, &lion(0.001, betas)).unwrap();
        for step in 0..3 {
            assert!(trainer.step(&data, 10 * step, 10).unwrap().is_finite());
        }
        let trained = weight_bits(&mut model);
        assert_ne!(trained, initial, "the steps moved the weights");
        trained
    };
    let defaults = train(None);
    assert_eq!(train(Some((0.9, 0.99))), defaults);
    assert_ne!(
        train(Some((0.9, 0.999))),
        defaults,
        "Adam's beta2 is not Lion's default"
    );
}

#[test]
fn lion_betas_outside_0_1_are_refused() {
    let ctx = context();
    let model = mlp(&ctx);
    for (beta1, beta2, named) in [
        (1.0f32, 0.99f32, "beta1"),
        (f32::NAN, 0.99, "beta1"),
        (-0.1, 0.99, "beta1"),
        (0.9, 1.0, "beta2"),
        (0.9, f32::NAN, "beta2"),
    ] {
        let error = Trainer::new(&model, &lion(0.001, Some((beta1, beta2)))).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{beta1} {beta2}");
        assert!(error.message.contains(named), "{error}");
    }
    Trainer::new(&model, &lion(0.001, Some((0.0, 0.0)))).expect("0 is in range");
}
