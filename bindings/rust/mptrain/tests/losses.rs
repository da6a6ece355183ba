//! What the loss computes: label smoothing, class weights, mean absolute error and Huber, against
//! f64 recomputations from the predictions or bit-identical equivalents; their bad options refused.
mod common;
use common::*;
use mptrain::*;

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
