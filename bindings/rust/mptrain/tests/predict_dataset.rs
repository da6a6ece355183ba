//! Trainer::predict_dataset (Keras's model.predict on a dataset) and Dataset::labels: predictions over
//! a dataset are Trainer::predict's on the same float rows, bit for bit in one batch and within 1e-5
//! in smaller ones, whatever the labels, targets or weights; a slice's predictions and labels are its
//! rows'; labels and predictions make a confusion matrix whose diagonal is evaluate's accuracy; the
//! epoch-end closure predicts as between one-epoch fits (FitControl::predict_dataset); and the
//! refusals (targets have no labels, another context, another feature count, a negative batch).
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

const ROWS: usize = 60;
const F: usize = FEATURES as usize;
const C: usize = CLASSES as usize;

/// Outputs of other batch sizes: the CPU's GEMMs block a batch by its rows, so sums of the same
/// products may round differently (in fp32 some 1e-7 of a probability).
fn assert_outputs_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: output count");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-5,
            "{what}: output {i} is {a}, expected {e}"
        );
    }
}

/// The class of the largest probability of each row (the first of equals, as evaluate counts).
fn predicted_classes(probabilities: &[f32]) -> Vec<usize> {
    probabilities
        .chunks(C)
        .map(|row| (1..C).fold(0, |best, c| if row[c] > row[best] { c } else { best }))
        .collect()
}

#[test]
fn predictions_over_a_dataset_are_predicts_on_its_rows_bit_for_bit_in_one_batch_else_close() {
    let (x, y) = blobs(ROWS, 31);
    for precision in [Precision::Fp32, Precision::MixedFp16, Precision::MixedBf16] {
        let ctx = context();
        let model = mlp(&ctx);
        let mut trainer = Trainer::new(&model, &adam().precision(precision)).unwrap();
        let labels = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let targets =
            Dataset::from_f32_targets(&ctx, &x, FEATURES, &one_hot(&y), CLASSES as i64, true)
                .unwrap();
        trainer.fit(&labels, 2, 16, true).unwrap();
        let expected = trainer.predict(&x).unwrap();
        assert_eq!(expected.len(), ROWS * C);
        for batch in [ROWS as i64, 1000] {
            // One batch, as Trainer::predict's on 60 rows.
            let what = format!("{precision:?}, batches of {batch}");
            let got = trainer.predict_dataset(&labels, batch).unwrap();
            assert_eq!(got.len(), ROWS * C, "{what}: output count");
            assert!(
                bits(&got) == bits(&expected),
                "{what}: labels' predictions bit for bit"
            );
            let got = trainer.predict_dataset(&targets, batch).unwrap();
            assert!(
                bits(&got) == bits(&expected),
                "{what}: targets play no part"
            );
        }
        for batch in [0, 1, 7, 16] {
            let what = format!("{precision:?}, batches of {batch}");
            let batched = trainer.predict_dataset(&labels, batch).unwrap();
            assert_outputs_close(&batched, &expected, &what);
            let from_targets = trainer.predict_dataset(&targets, batch).unwrap();
            assert!(
                bits(&from_targets) == bits(&batched),
                "{what}: targets play no part"
            );
        }

        // A slice's predictions are its rows', and row weights change nothing.
        let (first, rows) = (25usize, 20usize);
        let slice = labels.slice(first as i64, rows as i64).unwrap();
        let weighted = slice.weighted(&vec![3.0; rows]).unwrap();
        let slice_rows = &x[first * F..(first + rows) * F];
        let what = format!(
            "{precision:?}, rows {first}..{} of the dataset",
            first + rows
        );
        let one_batch = trainer.predict_dataset(&slice, rows as i64).unwrap();
        assert!(
            bits(&one_batch) == bits(&trainer.predict(slice_rows).unwrap()),
            "{what}: bit for bit as predict on its rows in one batch"
        );
        let batched = trainer.predict_dataset(&slice, 8).unwrap();
        assert_outputs_close(&batched, &expected[first * C..(first + rows) * C], &what);
        let from_weighted = trainer.predict_dataset(&weighted, 8).unwrap();
        assert!(
            bits(&from_weighted) == bits(&batched),
            "{what}: weights play no part"
        );
        // A slice of a targets dataset is its rows' too.
        let target_slice = targets.slice(first as i64, rows as i64).unwrap();
        let got = trainer.predict_dataset(&target_slice, rows as i64).unwrap();
        assert!(bits(&got) == bits(&one_batch), "{what}: a slice of targets");
    }
}

#[test]
fn uint8_samples_are_predicted_from_their_normalised_values() {
    let (x, y) = blobs(ROWS, 32);
    let (scale, offset) = (0.05f32, -6.4f32);
    let bytes: Vec<u8> = x
        .iter()
        .map(|v| (v * 20.0 + 128.0).round().clamp(0.0, 255.0) as u8)
        .collect();
    let normalised: Vec<f32> = bytes.iter().map(|&b| b as f32 * scale + offset).collect();
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    let data = Dataset::from_u8(&ctx, &bytes, FEATURES, &y, CLASSES, scale, offset).unwrap();
    let got = trainer.predict_dataset(&data, 0).unwrap();
    let expected = trainer.predict(&normalised).unwrap();
    // One rounding of x * scale + offset (fused or not) apart.
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1e-3),
            "output {i}: {g} vs {e}"
        );
    }
    assert_eq!(data.labels().unwrap(), y, "a u8 dataset's labels");
}

#[test]
fn labels_are_those_given_and_a_slices_are_its_rows() {
    let (x, _) = blobs(ROWS, 33);
    // Labels with no period, so that a slice's differ from its source's first rows.
    let y: Vec<i32> = (0..ROWS).map(|r| ((r * r + r / 7) % C) as i32).collect();
    let ctx = context();
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    assert_eq!(data.labels().unwrap(), y);
    let slice = data.slice(41, 9).unwrap();
    assert_eq!(slice.labels().unwrap(), &y[41..50], "a slice's labels");
    let inner = slice.slice(3, 5).unwrap();
    assert_eq!(inner.labels().unwrap(), &y[44..49], "a slice of a slice");
    let last = data.slice(ROWS as i64 - 1, 1).unwrap();
    assert_eq!(last.labels().unwrap(), &y[ROWS - 1..], "the last row");
    let weighted = slice.weighted(&[0.5; 9]).unwrap();
    assert_eq!(weighted.labels().unwrap(), &y[41..50], "a weighted slice");
    drop((data, slice));
    assert_eq!(
        inner.labels().unwrap(),
        &y[44..49],
        "after its sources are dropped"
    );

    // Float targets have no labels: the library's refusal, for a slice too.
    let targets =
        Dataset::from_f32_targets(&ctx, &x, FEATURES, &one_hot(&y), CLASSES as i64, true).unwrap();
    for dataset in [&targets, &targets.slice(10, 5).unwrap()] {
        let error = dataset.labels().unwrap_err();
        assert_eq!(error.status, Status::InvalidArgument, "{error}");
        assert!(error.message.contains("targets"), "{error}");
    }
}

#[test]
fn labels_and_predictions_give_a_confusion_matrix_whose_diagonal_is_evaluates_accuracy() {
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    let data = blob_data(&ctx, ROWS, 34);
    let validation = data.slice(36, 24).unwrap();
    let mut accuracies = Vec::new();
    // Untrained (some rows wrong, so the diagonal is not just the rows), then trained.
    for epochs in [0, 1, 5] {
        if epochs > 0 {
            trainer.fit(&data, epochs, 12, true).unwrap();
        }
        for (name, dataset) in [("whole", &data), ("slice", &validation)] {
            let labels = dataset.labels().unwrap();
            let rows = dataset.rows().unwrap() as usize;
            assert_eq!(labels.len(), rows);
            let predicted = predicted_classes(&trainer.predict_dataset(dataset, 0).unwrap());
            let mut confusion = [[0usize; C]; C]; // [label][predicted class]
            for (&label, &class) in labels.iter().zip(&predicted) {
                confusion[label as usize][class] += 1;
            }
            for (class, row) in confusion.iter().enumerate() {
                let given = labels.iter().filter(|&&l| l == class as i32).count();
                assert_eq!(row.iter().sum::<usize>(), given, "row {class}");
            }
            let correct: usize = (0..C).map(|c| confusion[c][c]).sum();
            let accuracy = trainer.evaluate(dataset, 0).unwrap().accuracy;
            assert!(
                (correct as f64 / rows as f64 - accuracy as f64).abs() < 1e-6,
                "{name} after {epochs} epochs: {correct} of {rows} on the diagonal of {confusion:?}, \
                 evaluate's accuracy {accuracy}"
            );
            accuracies.push(accuracy);
        }
    }
    assert!(
        accuracies[0] < 0.9,
        "untrained: some rows are wrong ({accuracies:?})"
    );
    assert!(
        accuracies[4] > accuracies[0],
        "training helps ({accuracies:?})"
    );
}

#[test]
fn the_epoch_end_closure_may_predict_a_dataset_as_between_one_epoch_fits() {
    let (x, y) = blobs(ROWS, 35);
    let (held_x, held_y) = blobs(30, 36);
    // Two contexts of one seed: the same initial weights and shuffles.
    let open = || {
        let ctx = context();
        let model = mlp(&ctx);
        let trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
        let training = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let validation =
            Dataset::from_f32(&ctx, &held_x, FEATURES, &held_y, CLASSES, true).unwrap();
        let wide = Dataset::from_f32(
            &ctx,
            &vec![0.5; 30 * (F + 1)],
            FEATURES + 1,
            &held_y,
            CLASSES,
            true,
        )
        .unwrap();
        (ctx, model, trainer, training, validation, wide)
    };

    let (_ctx, mut model, mut during, training, validation, wide) = open();
    let validation = Arc::new(Mutex::new(validation));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let from_progress = Arc::new(Mutex::new(None));
    {
        let (at_epoch_end, seen, refusals) = (validation.clone(), seen.clone(), refusals.clone());
        let stranger = {
            let other = context();
            Dataset::from_f32(&other, &held_x, FEATURES, &held_y, CLASSES, true).unwrap()
        };
        during
            .on_epoch_end_with(move |end, control| {
                let outputs = control
                    .predict_dataset(&at_epoch_end.lock().unwrap(), 0)
                    .unwrap();
                seen.lock().unwrap().push((end.epoch, outputs));
                if end.epoch == 0 {
                    let validation = at_epoch_end.lock().unwrap();
                    let mut refusals = refusals.lock().unwrap();
                    for result in [
                        control.predict_dataset(&stranger, 0),
                        control.predict_dataset(&wide, 0),
                        control.predict_dataset(&validation, -1),
                    ] {
                        let error = result.unwrap_err();
                        refusals.push((error.status, error.message));
                    }
                }
                ControlFlow::Continue(())
            })
            .unwrap();
        let (validation, from_progress) = (validation.clone(), from_progress.clone());
        during
            .on_progress_with(move |progress, control| {
                if progress.step == 1 {
                    from_progress.lock().unwrap().get_or_insert_with(|| {
                        control.predict_dataset(&validation.lock().unwrap(), 0)
                    });
                }
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    during.fit(&training, 2, 12, true).unwrap();
    assert_eq!(
        during.progress().unwrap(),
        TrainingProgress {
            steps: 10,
            epochs: 2
        }
    );
    // Mid-epoch steps are in flight: the library's refusal.
    let error = from_progress.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidState, "{error}");
    let refusals = refusals.lock().unwrap();
    assert_eq!(
        refusals
            .iter()
            .map(|(status, _)| *status)
            .collect::<Vec<_>>(),
        vec![
            Status::InvalidArgument,
            Status::ShapeMismatch,
            Status::InvalidArgument
        ],
        "another context's dataset, another feature count, a negative batch: {refusals:?}"
    );
    // Another context's dataset is refused by the crate, before C is called without that context's
    // lock (the library's own refusal would name the model).
    assert_eq!(
        refusals[0].1,
        "the dataset was created on another context than the trainer"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|(epoch, _)| *epoch).collect::<Vec<_>>(),
        vec![0, 1]
    );

    let (_ctx2, mut between_model, mut between, training, validation, _) = open();
    for (epoch, (_, during_fit)) in seen.iter().enumerate() {
        between.fit(&training, 1, 12, true).unwrap();
        let outputs = between.predict_dataset(&validation, 0).unwrap();
        assert_eq!(outputs.len(), 30 * C);
        // Bit for bit on the CPU.
        assert!(
            bits(&outputs) == bits(during_fit),
            "epoch {epoch}: predictions during fit and between fits"
        );
    }
    assert!(
        bits(&seen[0].1) != bits(&seen[1].1),
        "the epochs' predictions differ"
    );
    // Predicting left the run as it was.
    assert_eq!(weight_bits(&mut model), weight_bits(&mut between_model));
}

#[test]
fn refusals_another_context_another_feature_count_a_negative_batch() {
    let (x, y) = blobs(ROWS, 37);
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam().precision(Precision::Fp32)).unwrap();
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let other = context();
    let foreign = Dataset::from_f32(&other, &x, FEATURES, &y, CLASSES, true).unwrap();
    let error = trainer.predict_dataset(&foreign, 0).unwrap_err();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    assert!(error.message.contains("context"), "{error}");
    for features in [FEATURES + 1, FEATURES - 1] {
        let samples = vec![0.5f32; ROWS * features as usize];
        let other_width = Dataset::from_f32(&ctx, &samples, features, &y, CLASSES, true).unwrap();
        let error = trainer.predict_dataset(&other_width, 0).unwrap_err();
        assert_eq!(
            error.status,
            Status::ShapeMismatch,
            "{features} features: {error}"
        );
    }
    let error = trainer.predict_dataset(&data, -1).unwrap_err();
    assert_eq!(
        error.status,
        Status::InvalidArgument,
        "a negative batch: {error}"
    );
    // The trainer predicts on after the refusals.
    let got = trainer.predict_dataset(&data, ROWS as i64).unwrap();
    assert!(bits(&got) == bits(&trainer.predict(&x).unwrap()));
}
