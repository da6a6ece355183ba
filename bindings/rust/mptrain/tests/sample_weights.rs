//! Dataset::weighted (Keras's sample_weight): weights 2 train as twice the learning rate bit for bit;
//! weighted steps and evaluations report the mean of each row's loss times its weight, recomputed
//! from the trainer's predictions, with accuracy unweighted; slices keep their rows' weights and
//! weighting again replaces them; bad counts and values are refused; a weighted dataset outlives its
//! source.
mod common;
use common::*;
use mptrain::*;

const ROWS: usize = 48;

/// Weights that differ from row to row with no period (a slice sees other weights than its source's
/// first rows): 0.2 + 0.05 r, one row in seven 0.
fn varied_weights(rows: usize) -> Vec<f32> {
    (0..rows)
        .map(|r| {
            if r % 7 == 3 {
                0.0
            } else {
                0.2 + 0.05 * r as f32
            }
        })
        .collect()
}

/// The mean over rows of `-log p(label)` times the row's weight (and its class's weight, with
/// `class_weights`), in f64 from the predicted probabilities.
fn weighted_cross_entropy(
    probabilities: &[f32],
    labels: &[i32],
    weights: &[f32],
    class_weights: Option<&[f32]>,
) -> f64 {
    let classes = CLASSES as usize;
    assert_eq!(weights.len(), labels.len());
    let total: f64 = labels
        .iter()
        .enumerate()
        .map(|(row, &label)| {
            let p = probabilities[row * classes + label as usize] as f64;
            let class_weight = class_weights.map_or(1.0, |w| w[label as usize] as f64);
            -p.ln() * class_weight * weights[row] as f64
        })
        .sum();
    total / labels.len() as f64
}

#[test]
fn weights_of_2_train_one_sgd_step_as_twice_the_learning_rate_bit_for_bit() {
    let (x, y) = blobs(ROWS, 21);
    // Every row weight 2 doubles each row's loss and gradient, exactly in fp32; so does doubling the
    // rate.
    let one_step = |learning_rate: f32, row_weights: Option<&[f32]>| {
        let ctx = seeded_context(5);
        let mut model = mlp(&ctx);
        let plain = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let data = match row_weights {
            Some(weights) => plain.weighted(weights).unwrap(),
            None => plain,
        };
        let options = TrainerOptions::new()
            .precision(Precision::Fp32)
            .optimizer(Optimizer::Sgd)
            .learning_rate(learning_rate)
            .momentum(0.0, false);
        let mut trainer = Trainer::new(&model, &options).unwrap();
        let start = weight_bits(&mut model);
        let loss = trainer.step(&data, 0, ROWS as i64).unwrap();
        drop(trainer);
        let weights = weight_bits(&mut model);
        assert_ne!(weights, start, "the step moves the weights");
        (loss, weights)
    };
    let (unweighted_loss, unweighted) = one_step(0.05, None);
    let (doubled_rate_loss, doubled_rate) = one_step(2.0 * 0.05, None);
    let (weighted_loss, weighted) = one_step(0.05, Some(&[2.0; ROWS]));
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
fn a_weighted_step_and_evaluate_report_the_mean_of_each_rows_loss_times_its_weight() {
    let (x, y) = blobs(ROWS, 22);
    let weights = varied_weights(ROWS);
    let ctx = seeded_context(9);
    let model = mlp(&ctx);
    let plain = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let data = plain.weighted(&weights).unwrap();
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    trainer.fit(&data, 2, 16, true).unwrap();
    let probabilities = trainer.predict(&x).unwrap();
    let unweighted_loss = weighted_cross_entropy(&probabilities, &y, &[1.0; ROWS], None);
    let expected = weighted_cross_entropy(&probabilities, &y, &weights, None);
    assert!(
        (expected - unweighted_loss).abs() > 1e-2 * unweighted_loss,
        "the two can be told apart"
    );
    for batch_size in [0, 16, 5] {
        let weighted = trainer.evaluate(&data, batch_size).unwrap();
        let unweighted = trainer.evaluate(&plain, batch_size).unwrap();
        assert_close(
            weighted.loss,
            expected,
            &format!("evaluate's loss (weighted), batches of {batch_size}"),
        );
        assert_close(
            unweighted.loss,
            unweighted_loss,
            &format!("evaluate's loss without weights, batches of {batch_size}"),
        );
        assert_eq!(
            weighted.accuracy, unweighted.accuracy,
            "accuracy counts every row once"
        );
    }
    assert_close(
        trainer.step(&data, 0, ROWS as i64).unwrap(),
        expected,
        "step's loss (weighted)",
    );
    // A step on some rows averages their weighted losses over those rows.
    let probabilities = trainer.predict(&x).unwrap();
    let (first, rows) = (10, 20);
    let batch = &probabilities[first * CLASSES as usize..(first + rows) * CLASSES as usize];
    let expected = weighted_cross_entropy(
        batch,
        &y[first..first + rows],
        &weights[first..first + rows],
        None,
    );
    assert_close(
        trainer.step(&data, first as i64, rows as i64).unwrap(),
        expected,
        "the loss of a step on rows 10..30",
    );
}

#[test]
fn row_weights_multiply_class_weights_in_training_and_evaluate_keeps_only_the_row_weights() {
    let (x, y) = blobs(ROWS, 24);
    let (weights, class_weights) = (varied_weights(ROWS), [0.5f32, 3.0, 1.0]);
    let ctx = seeded_context(9);
    let model = mlp(&ctx);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true)
        .unwrap()
        .weighted(&weights)
        .unwrap();
    let options = adam()
        .precision(Precision::Fp32)
        .class_weights(&class_weights);
    let mut trainer = Trainer::new(&model, &options).unwrap();
    let probabilities = trainer.predict(&x).unwrap();
    let rows_only = weighted_cross_entropy(&probabilities, &y, &weights, None);
    let both = weighted_cross_entropy(&probabilities, &y, &weights, Some(&class_weights));
    assert!(
        (both - rows_only).abs() > 1e-2 * rows_only,
        "the two can be told apart"
    );
    assert_close(
        trainer.evaluate(&data, 0).unwrap().loss,
        rows_only,
        "evaluate's loss (row weights only)",
    );
    assert_close(
        trainer.step(&data, 0, ROWS as i64).unwrap(),
        both,
        "step's loss (row and class weights)",
    );
}

#[test]
fn a_slice_of_a_weighted_dataset_equals_weighting_that_slice_and_weighting_again_replaces() {
    let (x, y) = blobs(ROWS, 26);
    let weights = varied_weights(ROWS);
    let (first, rows) = (10usize, 30usize);
    let ctx = seeded_context(9);
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    let whole = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    // Weighted, then sliced (the weighted dataset dropped: the slice keeps the weights)...
    let weighted = whole.weighted(&weights).unwrap();
    let slice_of_weighted = weighted.slice(first as i64, rows as i64).unwrap();
    drop(weighted);
    // ... against sliced, then weighted with the same rows' weights.
    let plain_slice = whole.slice(first as i64, rows as i64).unwrap();
    let weighted_slice = plain_slice.weighted(&weights[first..first + rows]).unwrap();
    // The slice's own first rows' weights would be another dataset.
    let misaligned = plain_slice.weighted(&weights[..rows]).unwrap();
    trainer.fit(&whole, 1, 16, true).unwrap();
    for batch_size in [0, 8] {
        let sliced = trainer.evaluate(&slice_of_weighted, batch_size).unwrap();
        assert_eq!(
            evaluation_bits(sliced),
            evaluation_bits(trainer.evaluate(&weighted_slice, batch_size).unwrap()),
            "batches of {batch_size}: the same loss and accuracy, bit for bit"
        );
        let unweighted = trainer.evaluate(&plain_slice, batch_size).unwrap();
        assert_ne!(
            sliced.loss, unweighted.loss,
            "batches of {batch_size}: the slice is weighted"
        );
        assert_eq!(sliced.accuracy, unweighted.accuracy);
        assert_ne!(
            sliced.loss,
            trainer.evaluate(&misaligned, batch_size).unwrap().loss,
            "batches of {batch_size}: the slice keeps its own rows' weights"
        );
    }
    // A step on either trains from the same loss.
    let probabilities = trainer.predict(&x[first * FEATURES as usize..]).unwrap();
    let expected = weighted_cross_entropy(
        &probabilities[..rows * CLASSES as usize],
        &y[first..first + rows],
        &weights[first..first + rows],
        None,
    );
    assert_close(
        trainer.step(&slice_of_weighted, 0, rows as i64).unwrap(),
        expected,
        "a step on the slice of the weighted dataset",
    );

    // Weighting again replaces the weights: ones give the plain slice's numbers.
    let reweighted = slice_of_weighted.weighted(&[1.0; 30]).unwrap();
    let evaluation = trainer.evaluate(&reweighted, 0).unwrap();
    assert_eq!(
        evaluation_bits(evaluation),
        evaluation_bits(trainer.evaluate(&plain_slice, 0).unwrap())
    );
    assert_ne!(
        evaluation.loss,
        trainer.evaluate(&slice_of_weighted, 0).unwrap().loss
    );
    assert_eq!(reweighted.rows().unwrap(), rows as i64);
}

#[test]
fn a_wrong_count_or_a_negative_nan_or_infinite_weight_is_refused() {
    let ctx = context();
    let data = blob_data(&ctx, ROWS, 27);
    for count in [0, 1, ROWS - 1, ROWS + 1, 2 * ROWS] {
        let error = data
            .weighted(&vec![1.0; count])
            .err()
            .unwrap_or_else(|| panic!("{count} weights for {ROWS} rows"));
        assert_eq!(error.status, Status::ShapeMismatch, "{count}: {error}");
        assert!(!error.message.is_empty());
        assert!(error.to_string().starts_with("MPT_STATUS_SHAPE_MISMATCH: "));
    }
    for bad in [
        -1.0f32,
        -0.5,
        -f32::MIN_POSITIVE,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ] {
        for row in [0, 7, ROWS - 1] {
            let mut weights = vec![1.0f32; ROWS];
            weights[row] = bad;
            let error = data.weighted(&weights).expect_err("refused");
            assert_eq!(error.status, Status::InvalidArgument, "{bad} at row {row}");
            assert!(
                error.message.contains(&format!("row {row}")),
                "the library's message names the row: {}",
                error.message
            );
        }
    }
    // A slice's weights are one per row of the slice.
    let slice = data.slice(5, 10).unwrap();
    for count in [ROWS, 9, 11] {
        let error = slice.weighted(&vec![1.0; count]).expect_err("refused");
        assert_eq!(
            error.status,
            Status::ShapeMismatch,
            "{count} weights for a slice of 10"
        );
    }
    assert_eq!(slice.weighted(&[1.0; 10]).unwrap().rows().unwrap(), 10);
    // Zeros (-0 included) and large finite weights are weights like any other.
    let mut weights = vec![0.0f32; ROWS];
    weights[3] = -0.0;
    weights[4] = f32::MAX;
    let accepted = data.weighted(&weights).unwrap();
    assert_eq!(
        (accepted.rows().unwrap(), accepted.features().unwrap()),
        (ROWS as i64, FEATURES)
    );
}

#[test]
fn a_weighted_dataset_keeps_working_after_its_source_and_context_are_dropped() {
    let (x, y) = blobs(ROWS, 28);
    let weights = varied_weights(ROWS);
    let ctx = seeded_context(9);
    let mut model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    let source = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let weighted = source.weighted(&weights).unwrap();
    drop(source);
    let copy = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true)
        .unwrap()
        .weighted(&weights)
        .unwrap();
    drop(ctx);
    assert_eq!(
        (weighted.rows().unwrap(), weighted.features().unwrap()),
        (ROWS as i64, FEATURES)
    );
    for round in 0..2 {
        let evaluation = trainer.evaluate(&weighted, 16).unwrap();
        assert_eq!(
            evaluation_bits(evaluation),
            evaluation_bits(trainer.evaluate(&copy, 16).unwrap()),
            "round {round}"
        );
        let probabilities = trainer.predict(&x).unwrap();
        assert_close(
            evaluation.loss,
            weighted_cross_entropy(&probabilities, &y, &weights, None),
            &format!("round {round}: the weights survive the source"),
        );
        let before = weight_bits(&mut model);
        trainer.fit(&weighted, 2, 16, true).unwrap();
        trainer.step(&weighted, 4, 16).unwrap();
        assert_ne!(
            weight_bits(&mut model),
            before,
            "round {round}: training moved the weights"
        );
    }
    // Moved to another thread, the weighted dataset still owns its rows and weights.
    let rows = std::thread::spawn(move || weighted.slice(1, 5).unwrap().rows().unwrap())
        .join()
        .unwrap();
    assert_eq!(rows, 5);
}
