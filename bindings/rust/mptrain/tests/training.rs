//! Training through the safe API: fit, evaluate, predict, step, weights, options and callbacks.
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

#[test]
fn fit_learns_separable_blobs() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(300, 1);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    assert_eq!(
        (data.rows().unwrap(), data.features().unwrap()),
        (300, FEATURES)
    );
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let before = trainer.evaluate(&data, 0).unwrap();
    trainer.fit(&data, 5, 32, true).unwrap();
    let after = trainer.evaluate(&data, 0).unwrap();
    assert!(after.accuracy >= 0.95, "{after:?}");
    assert!(after.loss < before.loss);
    assert_eq!(
        trainer.progress().unwrap(),
        TrainingProgress {
            steps: 5 * (300 / 32),
            epochs: 5
        }
    );
    // Auto on the CPU: bf16 where AMX multiplies it natively, else fp32.
    let precision = trainer.precision().unwrap();
    assert!(
        matches!(precision, Precision::Fp32 | Precision::MixedBf16),
        "{precision:?}"
    );
    assert_eq!(ctx.resolve_precision(Precision::Auto).unwrap(), precision);
    let memory = trainer.memory().unwrap();
    assert!(memory.planned > 0 && memory.allocated >= memory.planned);
    let time = trainer.last_epoch_time().unwrap();
    assert!(time.steps == 300 / 32 && time.seconds > 0.0);
    assert_eq!(ctx.backend().unwrap(), Backend::Cpu);
    assert!(ctx.memory().unwrap().peak > 0);
}

#[test]
fn predict_gives_probabilities_of_the_right_class() {
    let ctx = context();
    let mut model = mlp(&ctx);
    let (x, y) = blobs(300, 2);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer.fit(&data, 5, 32, true).unwrap();
    let points = [2.5, 0.0, 0.0, 2.5, 0.0, 2.5, 0.0, 0.0, 0.0, 0.0, 2.5, 0.0];
    for out in [
        trainer.predict(&points).unwrap(),
        model.predict(&points).unwrap(),
    ] {
        assert_eq!(out.len(), 9);
        for (expected, row) in out.chunks(3).enumerate() {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
            let best = (0..3)
                .max_by(|&a, &b| row[a].partial_cmp(&row[b]).unwrap())
                .unwrap();
            assert_eq!(best, expected, "{row:?}");
        }
    }
}

#[test]
fn weights_round_trip_and_drive_predict() {
    let ctx = context();
    let mut model = Model::new(&ctx, 3).unwrap();
    model.add_dense(2, Activation::Linear).unwrap();
    model
        .set_weights(0, &[1.0, 2.0, 3.0, -1.0, 0.5, 0.0], &[0.5, -0.5])
        .unwrap();
    assert_eq!(
        model.weights(0).unwrap(),
        (vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0], vec![0.5, -0.5])
    );
    assert_eq!(model.predict(&[1.0, 1.0, 1.0]).unwrap(), vec![6.5, -1.0]); // W x + b by hand
    let mut out = [0.0f32; 2];
    model.predict_into(&[1.0, 1.0, 1.0], &mut out).unwrap();
    assert_eq!(out, [6.5, -1.0]);
    assert_eq!(model.parameter_count().unwrap(), 8);
    assert_eq!(
        (
            model.layer_count().unwrap(),
            model.output_features().unwrap()
        ),
        (1, 2)
    );
}

#[test]
fn step_returns_a_falling_batch_loss() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(120, 3);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(&model, &TrainerOptions::new().learning_rate(0.1)).unwrap();
    let losses: Vec<f32> = (0..20)
        .map(|_| trainer.step(&data, 0, 60).unwrap())
        .collect();
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(losses[19] < losses[0], "{losses:?}");
}

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

#[test]
fn u8_and_target_datasets_train_with_other_options() {
    let ctx = context();
    let (x, y) = blobs(120, 4);
    let bytes: Vec<u8> = x
        .iter()
        .map(|v| (v * 40.0 + 60.0).clamp(0.0, 255.0) as u8)
        .collect();
    let u8_data = Dataset::from_u8(&ctx, &bytes, FEATURES, &y, CLASSES, 1.0 / 255.0, 0.0).unwrap();
    assert_eq!(u8_data.rows().unwrap(), 120);
    let one_hot: Vec<f32> = y
        .iter()
        .flat_map(|&l| (0..CLASSES).map(move |c| if c == l { 1.0 } else { 0.0 }))
        .collect();
    let targets =
        Dataset::from_f32_targets(&ctx, &x, FEATURES, &one_hot, CLASSES as i64, true).unwrap();
    let mut model = Model::new(&ctx, FEATURES).unwrap();
    model
        .add_dense(8, Activation::Tanh)
        .unwrap()
        .add_dense(3, Activation::Softmax)
        .unwrap();
    let options = TrainerOptions::new()
        .loss(Loss::CategoricalCrossentropy)
        .optimizer(Optimizer::Sgd)
        .learning_rate(0.05)
        .momentum(0.9, true);
    let mut trainer = Trainer::new(&model, &options).unwrap();
    trainer.fit(&targets, 3, 16, true).unwrap();
    assert!(trainer.evaluate(&targets, 0).unwrap().accuracy > 0.8);
    let options = TrainerOptions::new()
        .precision(Precision::Fp32)
        .loss_scaling(LossScaling::Off, 1.0)
        .loss_scaler_dynamics(LossScalerDynamics {
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 100,
            min_scale: 1.0,
            max_scale: 65536.0,
        })
        .optimizer(Optimizer::AdamW)
        .adam(0.9, 0.999, 1e-7)
        .weight_decay(0.01);
    let mut regression = Model::new(&ctx, FEATURES).unwrap();
    regression.add_dense(1, Activation::Linear).unwrap();
    let values: Vec<f32> = y.iter().map(|&l| l as f32).collect();
    let data = Dataset::from_f32_targets(&ctx, &x, FEATURES, &values, 1, true).unwrap();
    let mut trainer =
        Trainer::new(&regression, &options.clone().loss(Loss::MeanSquaredError)).unwrap();
    trainer.fit(&data, 2, 16, false).unwrap();
    assert!(trainer.loss_scale().unwrap().skipped_steps == 0);
}

#[test]
fn callbacks_see_every_step_and_break_stops_training() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(300, 5);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let epochs = Arc::new(Mutex::new(Vec::new()));
    {
        let steps = steps.clone();
        trainer
            .on_progress(move |p| {
                steps
                    .lock()
                    .unwrap()
                    .push((p.epoch, p.step, p.steps_per_epoch));
                ControlFlow::Continue(())
            })
            .unwrap();
        let epochs = epochs.clone();
        trainer
            .on_epoch_end(move |e| {
                epochs.lock().unwrap().push(e.epoch);
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    trainer.fit(&data, 2, 100, true).unwrap();
    assert_eq!(
        *steps.lock().unwrap(),
        vec![
            (0, 1, 3),
            (0, 2, 3),
            (0, 3, 3),
            (1, 1, 3),
            (1, 2, 3),
            (1, 3, 3)
        ]
    );
    assert_eq!(*epochs.lock().unwrap(), vec![0, 1]);

    trainer
        .on_progress(|p| {
            if p.step == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch::default()
    );
    let error = trainer.fit(&data, 3, 100, true).unwrap_err();
    assert_eq!(error.status, Status::Cancelled);
    assert!(!error.message.is_empty());
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch {
            steps: 2,
            rows: 300,
            batch_size: 100
        }
    );
    trainer.clear_callbacks().unwrap();
    trainer.fit(&data, 1, 100, true).unwrap(); // finishes that epoch
    assert_eq!(trainer.progress().unwrap().steps, 9);
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch::default()
    );
}

#[test]
fn a_panic_in_a_callback_stops_fit_and_resumes_after_it() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(90, 6);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    trainer
        .on_progress(move |_| {
            *counter.lock().unwrap() += 1;
            panic!("from the callback");
        })
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        trainer.fit(&data, 2, 30, true)
    }));
    let payload = result.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"from the callback"));
    assert_eq!(*calls.lock().unwrap(), 1);
    trainer.clear_callbacks().unwrap();
    trainer.fit(&data, 1, 30, true).unwrap(); // still usable
}

#[test]
fn callbacks_may_use_the_model_during_fit() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(90, 7);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    let biases = Arc::new(Mutex::new(Vec::new()));
    let seen = biases.clone();
    let mut model = model; // moved into the callback: the same context, the same (reentrant) lock
    trainer
        .on_epoch_end(move |_| {
            seen.lock().unwrap().push(model.weights(1).unwrap().1);
            ControlFlow::Continue(())
        })
        .unwrap();
    trainer.fit(&data, 2, 30, true).unwrap();
    let biases = biases.lock().unwrap();
    assert_eq!(biases.len(), 2);
    assert_ne!(biases[0], biases[1]);
}

#[test]
fn log_callback_gets_messages_and_a_panicking_logger_is_contained() {
    let (x, y) = blobs(60, 8);
    let messages = Arc::new(Mutex::new(Vec::<(LogLevel, String)>::new()));
    let sink = messages.clone();
    for panicking in [false, true] {
        let sink = sink.clone();
        let ctx = Context::builder()
            .backend(Backend::Cpu)
            .threads(1)
            .log_level(LogLevel::Debug)
            .log(move |level, text| {
                if panicking {
                    panic!("logger");
                }
                sink.lock().unwrap().push((level, text.to_string()));
            })
            .build()
            .unwrap();
        let model = mlp(&ctx);
        let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        drop(ctx); // the model keeps the C context, and so the logger, alive
        let mut trainer = Trainer::with_defaults(&model).unwrap();
        trainer.fit(&data, 1, 20, true).unwrap();
    }
    assert!(messages
        .lock()
        .unwrap()
        .iter()
        .all(|(_, text)| !text.contains('\0')));
}

#[test]
fn objects_may_be_dropped_in_any_order() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(60, 9);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    drop(ctx);
    drop(model);
    trainer.fit(&data, 1, 20, true).unwrap();
    drop(data);
    assert_eq!(trainer.predict(&[0.0; FEATURES as usize]).unwrap().len(), 3);
}

#[test]
fn the_log_callback_cannot_call_back_into_its_own_context() {
    // The header forbids it: the library may log halfway through a call, holding its own locks (a
    // data set streamed from host memory on a GPU logs with its upload mutex held).
    let (x, y) = blobs(30, 10);
    let other_context = context(); // other contexts are fair game
    let other_data = Dataset::from_f32(&other_context, &x, FEATURES, &y, CLASSES, true).unwrap();
    let reachable = Arc::new(Mutex::new(None::<Dataset>));
    let doomed = Arc::new(Mutex::new(None::<Dataset>));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let ctx = {
        let (reachable, doomed, answers) = (reachable.clone(), doomed.clone(), answers.clone());
        Context::builder()
            .backend(Backend::Cpu)
            .threads(1)
            .log_level(LogLevel::Debug)
            .log(move |_, _| {
                if let Some(data) = reachable.lock().unwrap().as_ref() {
                    let own = data.rows().map_err(|error| error.status);
                    answers.lock().unwrap().push((own, other_data.rows()));
                }
                // Dropping cannot fail: the C object is destroyed once the logging call returns.
                drop(doomed.lock().unwrap().take());
            })
            .build()
            .unwrap()
    };
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    *reachable.lock().unwrap() = Some(data);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    *doomed.lock().unwrap() = Some(data);
    let model = mlp(&ctx);
    let mut trainer = Trainer::with_defaults(&model).unwrap(); // logs its precision (Debug)
    assert_eq!(
        answers.lock().unwrap().first(),
        Some(&(Err(Status::InvalidState), Ok(30)))
    );
    assert!(doomed.lock().unwrap().is_none());
    // Outside the callback the data set is usable again.
    let data = reachable.lock().unwrap().take().unwrap();
    trainer.fit(&data, 1, 10, true).unwrap();
}

#[test]
fn the_epoch_end_closure_may_evaluate_a_validation_set_as_between_one_epoch_fits() {
    let (x, y) = blobs(160, 31);
    let (held_x, held_y) = blobs(70, 32);
    // Two contexts of one seed: the same initial weights and shuffles.
    let open = || {
        let ctx = context();
        let model = mlp(&ctx);
        let trainer = Trainer::new(&model, &adam()).unwrap();
        let training = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let validation =
            Dataset::from_f32(&ctx, &held_x, FEATURES, &held_y, CLASSES, true).unwrap();
        (trainer, training, validation)
    };

    let (mut validated, training, validation) = open();
    let validation = Arc::new(Mutex::new(validation));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let from_progress = Arc::new(Mutex::new(None));
    let foreign = Arc::new(Mutex::new(None));
    {
        let (at_epoch_end, seen) = (validation.clone(), seen.clone());
        let stranger = {
            let other = context();
            Dataset::from_f32(&other, &held_x, FEATURES, &held_y, CLASSES, true).unwrap()
        };
        let foreign = foreign.clone();
        validated
            .on_epoch_end_with(move |end, control| {
                let evaluation = control.evaluate(&at_epoch_end.lock().unwrap(), 0).unwrap();
                seen.lock().unwrap().push((end.epoch, evaluation));
                foreign
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| control.evaluate(&stranger, 0));
                ControlFlow::Continue(())
            })
            .unwrap();
        let (validation, from_progress) = (validation.clone(), from_progress.clone());
        validated
            .on_progress_with(move |progress, control| {
                if progress.step == 2 {
                    from_progress
                        .lock()
                        .unwrap()
                        .get_or_insert_with(|| control.evaluate(&validation.lock().unwrap(), 0));
                }
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    validated.fit(&training, 3, 16, true).unwrap();
    assert_eq!(
        validated.progress().unwrap(),
        TrainingProgress {
            steps: 30,
            epochs: 3
        }
    );
    // Mid-epoch steps are in flight: the library's refusal.
    let error = from_progress.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidState, "{error}");
    let error = foreign.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");

    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|(epoch, _)| *epoch).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let (mut between, training, validation) = open();
    for (epoch, (_, during_fit)) in seen.iter().enumerate() {
        between.fit(&training, 1, 16, true).unwrap();
        let evaluation = between.evaluate(&validation, 0).unwrap();
        // Bit for bit on the CPU.
        assert_eq!(
            (evaluation.loss.to_bits(), evaluation.accuracy.to_bits()),
            (during_fit.loss.to_bits(), during_fit.accuracy.to_bits()),
            "epoch {epoch}: {evaluation:?} between fits, {during_fit:?} during fit"
        );
    }
    assert!(seen[2].1.loss < seen[0].1.loss, "{seen:?}");
}

/// The mean over rows of `(1 - s) (-log p_label) + s mean_c(-log p_c)`, in f64 from the
/// probabilities: the cross-entropy towards the labels smoothed as mptrain.h defines it.
fn smoothed_cross_entropy(probabilities: &[f32], labels: &[i32], smoothing: f64) -> f64 {
    let classes = CLASSES as usize;
    let total: f64 = labels
        .iter()
        .enumerate()
        .map(|(row, &label)| {
            let p = &probabilities[row * classes..(row + 1) * classes];
            let towards_uniform = p.iter().map(|&q| -(q as f64).ln()).sum::<f64>() / classes as f64;
            (1.0 - smoothing) * -(p[label as usize] as f64).ln() + smoothing * towards_uniform
        })
        .sum();
    total / labels.len() as f64
}

#[test]
fn label_smoothing_makes_the_loss_the_smoothed_cross_entropy_of_the_predictions() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(90, 51);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let fp32 = || adam().precision(Precision::Fp32);
    let mut plain = Trainer::new(&model, &fp32()).unwrap();
    let mut smoothed = Trainer::new(&model, &fp32().label_smoothing(0.1)).unwrap();
    let probabilities = plain.predict(&x).unwrap();
    let towards_label = smoothed_cross_entropy(&probabilities, &y, 0.0);
    let expected = smoothed_cross_entropy(&probabilities, &y, 0.1f32 as f64);
    assert!(
        (expected - towards_label).abs() > 1e-3 * towards_label,
        "the two can be told apart"
    );
    let without = plain.evaluate(&data, 0).unwrap();
    let with = smoothed.evaluate(&data, 0).unwrap();
    assert_close(without.loss, towards_label, "loss without smoothing");
    assert_close(with.loss, expected, "loss with smoothing 0.1");
    assert_eq!(
        with.accuracy, without.accuracy,
        "the metric reads the given labels"
    );

    // Training follows the smoothed targets: a step's loss is its batch's smoothed one, and one
    // step from equal weights ends elsewhere than without smoothing.
    let step_from_start = |smoothing: f32| {
        let ctx = context();
        let mut model = mlp(&ctx);
        let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let mut trainer = Trainer::new(&model, &fp32().label_smoothing(smoothing)).unwrap();
        let rows = 30;
        let batch = trainer.predict(&x[..rows * FEATURES as usize]).unwrap();
        let batch_expected = smoothed_cross_entropy(&batch, &y[..rows], smoothing as f64);
        let loss = trainer.step(&data, 0, rows as i64).unwrap();
        assert_close(
            loss,
            batch_expected,
            &format!("step loss with smoothing {smoothing}"),
        );
        drop(trainer);
        weight_bits(&mut model)
    };
    assert_ne!(step_from_start(0.1), step_from_start(0.0));
}

#[test]
fn label_smoothing_outside_0_1_or_with_mean_squared_error_is_refused() {
    let ctx = context();
    let model = mlp(&ctx);
    for refused in [-0.01f32, 1.0, 1.5, f32::NAN, f32::INFINITY] {
        let options = TrainerOptions::new().label_smoothing(refused);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{refused}");
        assert!(error.message.contains("label_smoothing"), "{error}");
    }
    for (loss, name) in [
        (Loss::MeanSquaredError, "mean_squared_error"),
        (Loss::MeanAbsoluteError, "mean_absolute_error"),
        (Loss::Huber, "huber"),
    ] {
        let regression = || TrainerOptions::new().loss(loss);
        Trainer::new(&model, &regression().label_smoothing(0.0)).expect("0 is no smoothing");
        let error = Trainer::new(&model, &regression().label_smoothing(0.1))
            .expect_err("refused with a regression loss");
        assert_eq!(error.status, Status::InvalidArgument, "{loss:?}");
        assert!(
            error.message.contains(&format!("{name} has no labels")),
            "{error}"
        );
    }
}

/// fp32 SGD at rate 0.05 from seed 5 over `steps` batches of 10 rows of `x`, `y`: the weights' bits
/// after them, the L2 norm of the change of all weights and biases over the rate (for one plain SGD
/// step, the norm of the gradient it applied), and the trainer's gradient norm before the first step
/// and after each (`by_fit`: the steps are one unshuffled `fit`'s over all rows, the norms read from
/// its progress closure).
fn clipnorm_sgd(
    x: &[f32],
    y: &[i32],
    steps: i64,
    momentum: f32,
    clipnorm: Option<f32>,
    by_fit: bool,
) -> (Vec<u32>, f64, Vec<f32>) {
    let ctx = seeded_context(5);
    let mut model = mlp(&ctx);
    let data = Dataset::from_f32(&ctx, x, FEATURES, y, CLASSES, true).unwrap();
    let mut options = TrainerOptions::new()
        .precision(Precision::Fp32)
        .optimizer(Optimizer::Sgd)
        .learning_rate(0.05)
        .momentum(momentum, false);
    if let Some(clipnorm) = clipnorm {
        options = options.global_clipnorm(clipnorm);
    }
    let mut trainer = Trainer::new(&model, &options).unwrap();
    let start = weight_bits(&mut model);
    let norms = Arc::new(Mutex::new(vec![trainer.gradient_norm().unwrap()]));
    if by_fit {
        assert_eq!(steps as usize, y.len() / 10);
        let record = norms.clone();
        trainer
            .on_progress_with(move |_, control| {
                record
                    .lock()
                    .unwrap()
                    .push(control.gradient_norm().unwrap());
                ControlFlow::Continue(())
            })
            .unwrap();
        trainer.fit(&data, 1, 10, false).unwrap();
    } else {
        for step in 0..steps {
            trainer.step(&data, 10 * step, 10).unwrap();
            norms.lock().unwrap().push(trainer.gradient_norm().unwrap());
        }
    }
    drop(trainer);
    let trained = weight_bits(&mut model);
    let value = |bits: u32| f32::from_bits(bits) as f64;
    let change: f64 = trained
        .iter()
        .zip(&start)
        .map(|(&after, &before)| (value(after) - value(before)).powi(2))
        .sum();
    let norms = norms.lock().unwrap().clone();
    (trained, change.sqrt() / 0.05f32 as f64, norms)
}

#[test]
fn global_clipnorm_bounds_a_steps_gradient_norm_and_one_above_it_changes_nothing_bit_for_bit() {
    let (x, y) = blobs(30, 71);
    let train = |steps: i64, momentum: f32, clipnorm: Option<f32>| {
        let (trained, change, _) = clipnorm_sgd(&x, &y, steps, momentum, clipnorm, false);
        (trained, change)
    };
    // A bound far above the gradients' norm: momentum SGD steps as without clipping, bit for bit.
    let (plain, _) = train(3, 0.9, None);
    assert_ne!(plain, train(0, 0.9, None).0, "the steps move the weights");
    assert!(
        train(3, 0.9, Some(1e30)).0 == plain,
        "a bound of 1e30 steps as no clipping, bit for bit"
    );
    // A bound far below it: the first plain SGD step's gradient is scaled down to the bound's length.
    let (unclipped, gradient_norm) = train(1, 0.0, None);
    let (clipped, clipped_norm) = train(1, 0.0, Some(1e-3));
    assert!(
        gradient_norm > 100.0 * 1e-3,
        "so that the bound clips: {gradient_norm}"
    );
    assert!(
        (clipped_norm - 1e-3).abs() <= 1e-3 * 1e-3,
        "the clipped step's gradient norm {clipped_norm} against the bound 1e-3"
    );
    assert!(clipped != unclipped, "clipping moves the step");
}

#[test]
fn gradient_norm_is_the_last_steps_before_clipping_and_nan_where_none_was_taken() {
    let (x, y) = blobs(30, 71);
    // The norm of the gradient one unclipped plain SGD step applied, from its weight change.
    let (_, gradient_norm, unclipped_norms) = clipnorm_sgd(&x, &y, 1, 0.0, None, false);
    let (_, _, norms) = clipnorm_sgd(&x, &y, 1, 0.0, Some(1e-3), false);
    assert!(norms[0].is_nan(), "before the first step: {}", norms[0]);
    let norm = norms[1] as f64;
    assert!(
        (norm - gradient_norm).abs() <= 1e-4 * gradient_norm,
        "the clipped step's norm before clipping {norm} against the unclipped step's {gradient_norm}"
    );
    assert!(norm > 1e-3, "so that step was clipped: {norm}");
    assert!(
        unclipped_norms[1].is_nan(),
        "no clipping, none taken: {}",
        unclipped_norms[1]
    );
    // From a progress closure of a clipping fit (one epoch of the same three batches, unshuffled):
    // each reported step's norm, finite and as step by step, with the same weights after it.
    let (stepped, _, step_norms) = clipnorm_sgd(&x, &y, 3, 0.0, Some(1e-3), false);
    let (fitted, _, fit_norms) = clipnorm_sgd(&x, &y, 3, 0.0, Some(1e-3), true);
    assert!(fitted == stepped, "fit takes the steps taken one by one");
    assert_eq!(fit_norms.len(), 4, "{fit_norms:?}");
    assert!(
        fit_norms[1..]
            .iter()
            .all(|norm| norm.is_finite() && *norm > 1e-3),
        "{fit_norms:?}"
    );
    assert_eq!(fit_norms[1..], step_norms[1..]);
    assert!(
        fit_norms[1] != fit_norms[2] && fit_norms[2] != fit_norms[3],
        "three steps' own norms, not one read three times: {fit_norms:?}"
    );
}

#[test]
fn global_clipnorm_negative_nan_or_infinite_is_refused() {
    let ctx = context();
    let model = mlp(&ctx);
    for refused in [-1.0f32, -1e-30, f32::NAN, f32::INFINITY] {
        let options = TrainerOptions::new().global_clipnorm(refused);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{refused}");
        assert!(error.message.contains("global_clipnorm"), "{error}");
    }
    Trainer::new(&model, &TrainerOptions::new().global_clipnorm(0.0)).expect("0 is no clipping");
}

/// An fp32 plain-SGD trainer at rate 0.05 from seed 5 keeping a moving average at momentum 0.5,
/// with its model and 30 rows of blobs.
fn ema_run() -> (Context, Model, Trainer, Dataset) {
    let ctx = seeded_context(5);
    let model = mlp(&ctx);
    let (x, y) = blobs(30, 73);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let options = TrainerOptions::new()
        .precision(Precision::Fp32)
        .optimizer(Optimizer::Sgd)
        .learning_rate(0.05)
        .momentum(0.0, false)
        .ema_momentum(0.5);
    let trainer = Trainer::new(&model, &options).unwrap();
    (ctx, model, trainer, data)
}

#[test]
fn swap_ema_weights_exchanges_the_weights_with_their_moving_average_and_back_bit_for_bit() {
    let (_ctx, mut model, mut trainer, data) = ema_run();
    // Before any step the averages are the weights: the exchange changes no value.
    let initial = weight_bits(&mut model);
    assert!(trainer.swap_ema_weights().unwrap());
    assert_eq!(weight_bits(&mut model), initial);
    assert!(!trainer.swap_ema_weights().unwrap());
    // Keras's average after each step (the first copies the weights); with momentum 0.5 each product
    // is exact, so f32 arithmetic here rounds as the library's.
    let mut expected: Vec<f32> = Vec::new();
    for step in 0..3 {
        trainer.step(&data, 10 * step, 10).unwrap();
        let weights: Vec<f32> = weight_bits(&mut model)
            .into_iter()
            .map(f32::from_bits)
            .collect();
        if step == 0 {
            expected = weights;
        } else {
            for (average, weight) in expected.iter_mut().zip(&weights) {
                *average = 0.5 * *average + 0.5 * weight;
            }
        }
    }
    let trained = weight_bits(&mut model);
    let trained_loss = trainer.evaluate(&data, 0).unwrap().loss;
    assert!(trainer.swap_ema_weights().unwrap());
    let averaged = weight_bits(&mut model);
    assert_ne!(averaged, trained);
    assert_eq!(averaged, bits(&expected));
    assert_ne!(
        trainer.evaluate(&data, 0).unwrap().loss,
        trained_loss,
        "evaluate sees the averages"
    );
    // Meanwhile training and checkpoints are refused, and change nothing.
    let refusals = [
        trainer.step(&data, 0, 10).map(|_| ()),
        trainer.fit(&data, 1, 10, false),
        trainer.save_checkpoint(std::env::temp_dir().join("mptrain-refused-ema.safetensors")),
    ];
    for refused in refusals {
        let error = refused.expect_err("refused while the model holds the averages");
        assert_eq!(error.status, Status::InvalidState, "{error}");
        assert!(error.message.contains("averaged weights"), "{error}");
    }
    assert_eq!(weight_bits(&mut model), averaged);
    assert!(!trainer.swap_ema_weights().unwrap());
    assert_eq!(weight_bits(&mut model), trained);
    assert_eq!(
        trainer.evaluate(&data, 0).unwrap().loss.to_bits(),
        trained_loss.to_bits()
    );
    trainer.step(&data, 0, 10).expect("trains again");
}

#[test]
fn fit_control_swaps_the_averages_in_at_epoch_end_but_not_from_the_progress_closure() {
    let (ctx, _model, mut trainer, data) = ema_run();
    // The same rows to evaluate on, owned by the epoch-end closure.
    let (x, y) = blobs(30, 73);
    let evaluation = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let losses = Arc::new(Mutex::new(Vec::new()));
    let from_progress = Arc::new(Mutex::new(None));
    {
        let losses = losses.clone();
        trainer
            .on_epoch_end_with(move |_, control| {
                assert!(control.swap_ema_weights().unwrap());
                let loss = control.evaluate(&evaluation, 0).unwrap().loss;
                losses.lock().unwrap().push(loss);
                assert!(!control.swap_ema_weights().unwrap());
                ControlFlow::Continue(())
            })
            .unwrap();
        let from_progress = from_progress.clone();
        trainer
            .on_progress_with(move |_, control| {
                from_progress
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| control.swap_ema_weights());
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    // Two epochs: the second runs only if the first epoch's closure exchanged the weights back.
    trainer.fit(&data, 2, 10, false).unwrap();
    let error = from_progress.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidState, "{error}");
    let losses = losses.lock().unwrap().clone();
    assert_eq!(losses.len(), 2);
    // The last epoch's evaluation was of the averages the trainer holds after fit.
    let trained_loss = trainer.evaluate(&data, 0).unwrap().loss;
    assert!(trainer.swap_ema_weights().unwrap());
    let averaged_loss = trainer.evaluate(&data, 0).unwrap().loss;
    assert_eq!(averaged_loss.to_bits(), losses[1].to_bits());
    assert_ne!(averaged_loss, trained_loss);
}

#[test]
fn ema_momentum_outside_0_1_is_refused_and_a_trainer_without_averages_refuses_the_swap() {
    let ctx = context();
    let mut model = mlp(&ctx);
    for refused in [1.5f32, 1.0, -0.5, f32::NAN] {
        let options = TrainerOptions::new().ema_momentum(refused);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{refused}");
        assert!(error.message.contains("ema momentum"), "{error}");
    }
    let initial = weight_bits(&mut model);
    for options in [adam(), adam().ema_momentum(0.0)] {
        // 0 keeps no average: accepted, with nothing to exchange.
        let mut plain = Trainer::new(&model, &options).unwrap();
        let error = plain.swap_ema_weights().expect_err("no averages");
        assert_eq!(error.status, Status::InvalidState, "{error}");
    }
    assert_eq!(weight_bits(&mut model), initial);
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

const LINE_ROWS: usize = 100;

/// LINE_ROWS points x evenly in [-1, 1] on y = 2x + 1, every tenth target 20 above it.
fn line_with_outliers() -> (Vec<f32>, Vec<f32>) {
    let xs: Vec<f32> = (0..LINE_ROWS)
        .map(|row| -1.0 + 2.0 * row as f32 / (LINE_ROWS - 1) as f32)
        .collect();
    let targets = xs
        .iter()
        .enumerate()
        .map(|(row, &x)| 2.0 * x + 1.0 + if row % 10 == 3 { 20.0 } else { 0.0 })
        .collect();
    (xs, targets)
}

/// One output's loss as mptrain.h defines it, in f64: `(y - t)^2`, `|y - t|`, or Huber's
/// `(y - t)^2 / 2` up to `|y - t| = delta`, then `delta (|y - t| - delta / 2)`.
fn regression_term(loss: Loss, difference: f64, delta: f64) -> f64 {
    let size = difference.abs();
    match loss {
        Loss::MeanSquaredError => difference * difference,
        Loss::MeanAbsoluteError => size,
        Loss::Huber if size <= delta => 0.5 * difference * difference,
        Loss::Huber => delta * (size - 0.5 * delta),
        other => panic!("not a regression loss: {other:?}"),
    }
}

/// A fit of one input, one linear output.
#[derive(Debug)]
struct LineFit {
    slope: f32,
    intercept: f32,
    /// evaluate's loss.
    evaluated: f32,
    /// The mean loss of the predictions, in f64.
    expected: f64,
}

/// One input, one linear output fitted by fp32 Adam (rate 0.05, seed 5) to `line_with_outliers`
/// under `loss` (and Huber's delta, when given).
fn fit_line(loss: Loss, huber_delta: Option<f32>) -> LineFit {
    let (xs, targets) = line_with_outliers();
    let ctx = seeded_context(5);
    let mut model = Model::new(&ctx, 1).unwrap();
    model.add_dense(1, Activation::Linear).unwrap();
    let data = Dataset::from_f32_targets(&ctx, &xs, 1, &targets, 1, true).unwrap();
    let mut options = TrainerOptions::new()
        .precision(Precision::Fp32)
        .loss(loss)
        .optimizer(Optimizer::Adam)
        .learning_rate(0.05);
    if let Some(delta) = huber_delta {
        options = options.huber_delta(delta);
    }
    let mut trainer = Trainer::new(&model, &options).unwrap();
    trainer.fit(&data, 200, 20, true).unwrap();
    let evaluated = trainer.evaluate(&data, 0).unwrap().loss;
    drop(trainer);
    let (weights, bias) = model.weights(0).unwrap();
    let predictions = model.predict(&xs).unwrap();
    let delta = huber_delta.unwrap_or(1.0) as f64;
    let expected = predictions
        .iter()
        .zip(&targets)
        .map(|(&y, &t)| regression_term(loss, y as f64 - t as f64, delta))
        .sum::<f64>()
        / LINE_ROWS as f64;
    LineFit {
        slope: weights[0],
        intercept: bias[0],
        evaluated,
        expected,
    }
}

/// The weights' bits after three fp32 SGD steps (rate 0.1, batches of 20, seed 5) of one linear
/// output on `line_with_outliers` under `options`.
fn line_steps(options: TrainerOptions) -> Vec<u32> {
    let (xs, targets) = line_with_outliers();
    let ctx = seeded_context(5); // one seed: the same initial weights
    let mut model = Model::new(&ctx, 1).unwrap();
    model.add_dense(1, Activation::Linear).unwrap();
    let data = Dataset::from_f32_targets(&ctx, &xs, 1, &targets, 1, true).unwrap();
    let options = options
        .precision(Precision::Fp32)
        .optimizer(Optimizer::Sgd)
        .learning_rate(0.1);
    let initial = weight_bits(&mut model);
    let mut trainer = Trainer::new(&model, &options).unwrap();
    for step in 0..3 {
        trainer.step(&data, 20 * step, 20).unwrap();
    }
    drop(trainer);
    let trained = weight_bits(&mut model);
    assert_ne!(trained, initial, "the steps moved the weights");
    trained
}

#[test]
fn mean_absolute_error_and_huber_fit_the_line_where_mean_squared_error_is_pulled_to_the_outliers() {
    let squared = fit_line(Loss::MeanSquaredError, None);
    let absolute = fit_line(Loss::MeanAbsoluteError, None);
    let huber = fit_line(Loss::Huber, None);
    for fit in [&squared, &absolute, &huber] {
        // The loss each variant stands for.
        assert_close(fit.evaluated, fit.expected, &format!("{fit:?}"));
    }
    // The least-squares intercept is 1 + 20 / 10 (the outliers' mean pull); the median's is 1, and
    // Huber's (delta 1) 1 + 10 / 90 (each outlier pulls with delta against 90 points on the line).
    assert!(squared.intercept > 2.5, "{squared:?}");
    for fit in [&absolute, &huber] {
        assert!((fit.intercept - 1.0).abs() < 0.25, "{fit:?}");
        assert!((fit.slope - 2.0).abs() < 0.1, "{fit:?}");
        assert!(
            (fit.intercept - 1.0).abs() < (squared.intercept - 1.0).abs(),
            "{fit:?}"
        );
    }
    assert_eq!(Loss::from_code(4), Some(Loss::MeanAbsoluteError));
    assert_eq!(Loss::from_code(5), Some(Loss::Huber));
}

#[test]
fn the_huber_delta_changes_what_huber_trains_and_defaults_to_1() {
    let huber = || TrainerOptions::new().loss(Loss::Huber);
    let delta_1 = line_steps(huber().huber_delta(1.0));
    assert_eq!(line_steps(huber()), delta_1, "the library's default");
    assert_ne!(line_steps(huber().huber_delta(0.25)), delta_1);
    // A delta above every residual leaves Huber quadratic: pulled to the outliers as mean squared
    // error.
    let wide = fit_line(Loss::Huber, Some(100.0));
    assert!(wide.intercept > 2.5, "{wide:?}");
}

#[test]
fn a_huber_delta_of_0_negative_nan_or_infinite_is_refused() {
    let ctx = context();
    let model = mlp(&ctx);
    for refused in [
        0.0f32,
        -0.0,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ] {
        let options = TrainerOptions::new().loss(Loss::Huber).huber_delta(refused);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{refused}");
        assert!(error.message.contains("Huber delta"), "{error}");
    }
    // Any finite delta above 0 is accepted.
    let options = TrainerOptions::new().loss(Loss::Huber).huber_delta(1e-3);
    Trainer::new(&model, &options).expect("accepted");
}

/// The status of a call's error (panics when it succeeded), with its message checked non-empty.
fn status_of<T: std::fmt::Debug>(result: Result<T>) -> Status {
    let error = result.expect_err("expected an error");
    assert!(!error.message.is_empty(), "{error}");
    error.status
}

#[test]
fn a_frozen_layer_keeps_its_weights_while_the_others_train_and_thawed_it_trains() {
    let ctx = context();
    let mut model = mlp(&ctx);
    let data = blob_data(&ctx, 300, 1);
    assert!(model.layer_trainable(0).unwrap() && model.layer_trainable(1).unwrap());
    model.set_layer_trainable(0, false).unwrap();
    assert!(!model.layer_trainable(0).unwrap());
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let layer_0 = |model: &mut Model| {
        let (weights, bias) = model.weights(0).unwrap();
        bits(&weights)
            .into_iter()
            .chain(bits(&bias))
            .collect::<Vec<_>>()
    };
    let before = weight_bits(&mut model);
    let frozen = layer_0(&mut model);
    trainer.fit(&data, 1, 32, true).unwrap();
    assert_eq!(layer_0(&mut model), frozen, "the frozen layer, bit for bit");
    assert_ne!(weight_bits(&mut model), before, "the other layer trained");
    model.set_layer_trainable(0, true).unwrap(); // between fits
    trainer.fit(&data, 1, 32, true).unwrap();
    assert_ne!(layer_0(&mut model), frozen);
    assert_eq!(
        status_of(model.set_layer_trainable(2, false)),
        Status::InvalidArgument
    );
    model.set_layer_trainable(0, false).unwrap();
    model.set_layer_trainable(1, false).unwrap();
    let error = trainer
        .fit(&data, 1, 32, true)
        .expect_err("every layer frozen");
    assert_eq!(error.status, Status::InvalidState);
    assert!(error.message.contains("frozen"), "{error}");
}

#[test]
fn a_dropout_rate_set_reads_back_on_its_layer_alone_and_minus_0_as_0() {
    let ctx = context();
    let mut model = mlp(&ctx);
    for layer in 0..2 {
        assert_eq!(model.layer_dropout(layer).unwrap(), 0.0, "none by default");
    }
    model.set_layer_dropout(0, 0.25).unwrap();
    assert_eq!(model.layer_dropout(0).unwrap(), 0.25);
    assert_eq!(model.layer_dropout(1).unwrap(), 0.0);
    model.set_layer_dropout(0, -0.0).unwrap();
    assert_eq!(
        model.layer_dropout(0).unwrap().to_bits(),
        0.0f32.to_bits(),
        "+0, not -0"
    );
    let largest = f32::from_bits(1.0f32.to_bits() - 1); // the largest rate below 1 is in range
    model.set_layer_dropout(0, largest).unwrap();
    assert_eq!(model.layer_dropout(0).unwrap(), largest);
}

#[test]
fn a_dropout_rate_outside_0_1_or_a_layer_out_of_range_is_refused_the_rate_unchanged() {
    let ctx = context();
    let mut model = mlp(&ctx);
    model.set_layer_dropout(0, 0.5).unwrap();
    for rate in [1.0f32, -0.1, f32::NAN, 1.5, f32::INFINITY] {
        assert_eq!(
            status_of(model.set_layer_dropout(0, rate)),
            Status::InvalidArgument,
            "rate {rate}"
        );
        assert_eq!(model.layer_dropout(0).unwrap(), 0.5, "rate {rate}");
    }
    for layer in [2usize, usize::MAX, i64::MAX as usize + 1] {
        assert_eq!(
            status_of(model.set_layer_dropout(layer, 0.25)),
            Status::InvalidArgument,
            "layer {layer}"
        );
        assert_eq!(
            status_of(model.layer_dropout(layer)),
            Status::InvalidArgument,
            "layer {layer}"
        );
    }
    Trainer::new(&model, &adam()).expect("the refusals left a model that builds");
}

#[test]
fn dropout_on_the_last_layer_makes_building_fail_with_invalid_state_and_a_built_models_rates_are_fixed(
) {
    let ctx = context();
    let mut model = mlp(&ctx);
    model.set_layer_dropout(1, 0.5).unwrap(); // accepted: only building refuses it
    assert_eq!(model.layer_dropout(1).unwrap(), 0.5);
    let error = Trainer::new(&model, &adam()).expect_err("refused");
    assert_eq!(error.status, Status::InvalidState, "{error}");
    assert!(error.message.contains("last layer"), "{error}");
    assert_eq!(
        status_of(model.predict(&[1.0; FEATURES as usize])),
        Status::InvalidState
    );
    model.set_layer_dropout(1, 0.0).unwrap(); // the refused builds left the model unbuilt
    let _trainer = Trainer::new(&model, &adam()).unwrap();
    assert_eq!(
        status_of(model.set_layer_dropout(0, 0.25)),
        Status::InvalidState
    );
    assert_eq!(model.layer_dropout(0).unwrap(), 0.0);
}

#[test]
fn a_fit_with_dropout_on_a_hidden_layer_learns_and_trains_otherwise_and_inference_uses_every_output(
) {
    let (points, _) = blobs(30, 83);
    let options = || adam().precision(Precision::Fp32);
    let run = |dropout: f32| {
        let ctx = seeded_context(5); // one seed: the same initial weights
        let mut model = mlp(&ctx);
        model.set_layer_dropout(0, dropout).unwrap();
        let mut trainer = Trainer::new(&model, &options()).unwrap();
        let initial = weight_bits(&mut model);
        let data = blob_data(&ctx, 240, 81);
        trainer.fit(&data, 5, 16, true).unwrap();
        (model, trainer, data, initial)
    };
    let (mut model, mut trainer, data, initial) = run(0.5);
    let (mut plain, _, _, plain_initial) = run(0.0);
    assert_eq!(initial, plain_initial);
    assert_ne!(
        weight_bits(&mut model),
        weight_bits(&mut plain),
        "the dropped outputs changed the steps"
    );
    let evaluation = trainer.evaluate(&data, 0).unwrap();
    assert!(evaluation.accuracy >= 0.9, "{evaluation:?}");

    // The trained weights in a model without dropout: every evaluation and prediction the same, bit
    // for bit.
    let copy_ctx = seeded_context(9);
    let mut copy = mlp(&copy_ctx);
    for layer in 0..2 {
        let (weights, bias) = model.weights(layer).unwrap();
        copy.set_weights(layer, &weights, &bias).unwrap();
    }
    let mut copy_trainer = Trainer::new(&copy, &options()).unwrap();
    let copy_evaluation = copy_trainer
        .evaluate(&blob_data(&copy_ctx, 240, 81), 0)
        .unwrap();
    assert_eq!(
        evaluation_bits(evaluation),
        evaluation_bits(copy_evaluation)
    );
    let predicted = bits(&model.predict(&points).unwrap());
    assert_eq!(predicted, bits(&copy.predict(&points).unwrap()));
    assert_eq!(
        bits(&trainer.predict(&points).unwrap()),
        bits(&copy_trainer.predict(&points).unwrap())
    );
    assert_eq!(
        predicted,
        bits(&model.predict(&points).unwrap()),
        "no mask at inference"
    );
}

/// The mean over rows of `-sum_c t_c log p_c`, each row's times `weights[c]`, `c` its first
/// largest target (every weight 1 without weights), in f64 from the probabilities: class weights as
/// mptrain.h defines them. `targets`: rows * CLASSES floats.
fn weighted_cross_entropy(probabilities: &[f32], targets: &[f32], weights: Option<&[f32]>) -> f64 {
    let classes = CLASSES as usize;
    let rows = targets.len() / classes;
    let total: f64 = (0..rows)
        .map(|row| {
            let p = &probabilities[row * classes..(row + 1) * classes];
            let t = &targets[row * classes..(row + 1) * classes];
            let loss: f64 = (0..classes)
                .filter(|&c| t[c] != 0.0)
                .map(|c| -(t[c] as f64) * (p[c] as f64).ln())
                .sum();
            let first_largest =
                (0..classes).fold(0, |best, c| if t[c] > t[best] { c } else { best });
            weights.map_or(1.0, |w| w[first_largest] as f64) * loss
        })
        .sum();
    total / rows as f64
}

#[test]
fn class_weights_of_2_train_one_sgd_step_as_twice_the_learning_rate_bit_for_bit() {
    let (x, y) = blobs(30, 61);
    // Every weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the rate.
    let one_step = |learning_rate: f32, class_weights: Option<&[f32]>| {
        let ctx = seeded_context(5);
        let mut model = mlp(&ctx);
        let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let mut options = TrainerOptions::new()
            .precision(Precision::Fp32)
            .optimizer(Optimizer::Sgd)
            .learning_rate(learning_rate)
            .momentum(0.0, false);
        if let Some(weights) = class_weights {
            options = options.class_weights(weights);
        }
        let mut trainer = Trainer::new(&model, &options).unwrap();
        let start = weight_bits(&mut model);
        let loss = trainer.step(&data, 0, 30).unwrap();
        drop(trainer);
        let weights = weight_bits(&mut model);
        assert_ne!(weights, start, "the step moves the weights");
        (loss, weights)
    };
    let (unweighted_loss, unweighted) = one_step(0.05, None);
    let (doubled_rate_loss, doubled_rate) = one_step(2.0 * 0.05, None);
    let (weighted_loss, weighted) = one_step(0.05, Some(&[2.0, 2.0, 2.0]));
    assert!(
        weighted == doubled_rate,
        "weights 2 step as twice the rate, bit for bit"
    );
    assert!(weighted != unweighted, "and elsewhere than the rate alone");
    assert_eq!(
        doubled_rate_loss, unweighted_loss,
        "the loss is that of the weights before the step"
    );
    assert_eq!(weighted_loss, 2.0 * unweighted_loss);
}

#[test]
fn class_weights_weight_steps_loss_by_each_rows_class_and_leave_evaluates_unweighted() {
    let weights = [0.5f32, 2.0, 1.25];
    let (x, y) = blobs(30, 62);
    let fp32 = || adam().precision(Precision::Fp32);
    {
        let ctx = seeded_context(9);
        let model = mlp(&ctx);
        let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let mut weighted = Trainer::new(&model, &fp32().class_weights(&weights)).unwrap();
        let mut plain = Trainer::new(&model, &fp32()).unwrap();
        let probabilities = weighted.predict(&x).unwrap();
        let unweighted_loss = weighted_cross_entropy(&probabilities, &one_hot(&y), None);
        let expected = weighted_cross_entropy(&probabilities, &one_hot(&y), Some(&weights));
        assert!(
            (expected - unweighted_loss).abs() > 1e-3 * unweighted_loss,
            "the two can be told apart"
        );
        let evaluation = weighted.evaluate(&data, 0).unwrap();
        assert_close(
            evaluation.loss,
            unweighted_loss,
            "evaluate's loss (unweighted)",
        );
        assert_eq!(evaluation.loss, plain.evaluate(&data, 0).unwrap().loss);
        assert_close(
            weighted.step(&data, 0, 30).unwrap(),
            expected,
            "step's loss (weighted)",
        );
    }

    // Float targets weigh a row by its first largest target: row 0 ties classes 1 and 2 (weight 2).
    let mut targets = one_hot(&y);
    targets[..6].copy_from_slice(&[0.0, 0.5, 0.5, 0.2, 0.3, 0.5]);
    let ctx = seeded_context(9);
    let model = mlp(&ctx);
    let data =
        Dataset::from_f32_targets(&ctx, &x, FEATURES, &targets, CLASSES as i64, true).unwrap();
    let options = fp32()
        .loss(Loss::CategoricalCrossentropy)
        .class_weights(&weights);
    let mut categorical = Trainer::new(&model, &options).unwrap();
    let probabilities = categorical.predict(&x).unwrap();
    let expected = weighted_cross_entropy(&probabilities, &targets, Some(&weights));
    let mut tie_to_the_last = targets.clone(); // row 0 weighed as class 2 (1.25) instead
    tie_to_the_last[2] = 0.500_000_1;
    let other = weighted_cross_entropy(&probabilities, &tie_to_the_last, Some(&weights));
    assert!(
        (other - expected).abs() > 1e-4 * expected,
        "the tie's readings can be told apart"
    );
    let loss = categorical.step(&data, 0, 30).unwrap();
    assert_close(loss, expected, "step's loss on float targets");
}

#[test]
fn class_weights_are_refused_by_value_count_or_loss() {
    let ctx = context();
    let model = mlp(&ctx);
    let refusals: [&[f32]; 4] = [
        &[1.0, -0.5, 1.0],
        &[1.0, f32::NAN, 1.0],
        &[f32::INFINITY, 1.0, 1.0],
        &[0.0, 0.0, 0.0],
    ];
    for refused in refusals {
        let options = TrainerOptions::new().class_weights(refused);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{refused:?}");
        assert!(error.message.contains("class weights"), "{error}");
    }
    for count in [2, 4] {
        let options = TrainerOptions::new().class_weights(&vec![1.0; count]);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::ShapeMismatch, "{count}");
    }
    Trainer::new(&model, &TrainerOptions::new().class_weights(&[])).expect("empty: none");
    Trainer::new(
        &model,
        &TrainerOptions::new().class_weights(&[0.0, 1.0, 0.0]),
    )
    .expect("some zeros");
    for loss in [Loss::BinaryCrossentropy, Loss::MeanSquaredError] {
        Trainer::new(&model, &TrainerOptions::new().loss(loss))
            .expect("accepted without class weights");
        let options = TrainerOptions::new()
            .loss(loss)
            .class_weights(&[1.0, 2.0, 3.0]);
        let error = Trainer::new(&model, &options).expect_err("refused");
        assert_eq!(error.status, Status::InvalidArgument, "{loss:?}");
    }
}

#[test]
fn micro_batches_train_the_whole_batchs_steps_in_less_memory() {
    let train = |micro: i64| {
        let ctx = seeded_context(5); // one seed: the same initial weights
        let mut model = Model::new(&ctx, FEATURES).unwrap();
        model
            .add_dense(256, Activation::Relu)
            .unwrap()
            .add_dense(CLASSES as i64, Activation::Softmax)
            .unwrap();
        let data = blob_data(&ctx, 120, 21);
        // SGD with momentum: linear in the gradients, so their rounding stays as small as it is.
        let options = TrainerOptions::new()
            .precision(Precision::Fp32)
            .learning_rate(0.05)
            .momentum(0.9, false)
            .micro_batch_size(micro);
        let mut trainer = Trainer::new(&model, &options).unwrap();
        let losses: Vec<f32> = (0..3)
            .map(|step| trainer.step(&data, 40 * step, 40).unwrap())
            .collect();
        let planned = trainer.memory().unwrap().planned;
        let weights: Vec<f32> = weight_bits(&mut model)
            .into_iter()
            .map(f32::from_bits)
            .collect();
        (weights, losses, planned)
    };
    let (whole, whole_losses, whole_planned) = train(0);
    let (parts, parts_losses, parts_planned) = train(16); // micro-batches of 16, 16 and 8 rows
    let largest = whole.iter().fold(0.0f32, |m, w| m.max(w.abs()));
    for (a, b) in parts.iter().zip(&whole) {
        assert!(
            (a - b).abs() <= 1e-6 * largest,
            "{a} against {b} in one pass"
        );
    }
    for (a, b) in parts_losses.iter().zip(&whole_losses) {
        assert!((a - b).abs() <= 1e-6 * b.abs(), "loss {a} against {b}");
    }
    assert!(
        parts_planned < whole_planned,
        "{parts_planned} against {whole_planned}"
    );
    let same: Vec<u32> = train(40).0.into_iter().map(f32::to_bits).collect();
    let whole_bits: Vec<u32> = whole.into_iter().map(f32::to_bits).collect();
    assert_eq!(
        same, whole_bits,
        "a micro-batch as large as the batch: one pass"
    );
    let ctx = context();
    let error =
        Trainer::new(&mlp(&ctx), &TrainerOptions::new().micro_batch_size(-1)).expect_err("refused");
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    assert!(error.message.contains("micro-batch"), "{error}");
}
