//! Training through the safe API: fit, evaluate, predict, step and weights; u8 and target
//! datasets; micro-batches; handles dropped in any order.
mod common;
use common::*;
use mptrain::*;

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
