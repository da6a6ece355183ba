//! Dataset::standardized and Dataset::feature_statistics (Keras's Normalization layer, for the data):
//! the statistics against an f64 reference; a dataset standardized by its own statistics has features
//! of mean 0 and standard deviation 1 and trains; a mean or stddev of another count is refused with
//! Status::ShapeMismatch, a negative stddev with Status::InvalidArgument.
//! Model::set_input_standardization, clear_input_standardization and input_standardization (the same
//! layer inside the model): trained on the raw rows, the model predicts from raw inputs bit for bit as
//! a plain copy of it does from inputs standardized here in f32; saved and loaded it keeps the
//! statistics, cleared it has none; the refusals, a standardized dataset in fit among them.
mod common;
use common::*;
use mptrain::*;

const ROWS: usize = 90;

/// Blobs with feature f scaled by 3 (f + 1) and moved by 5 f - 4: far from mean 0, stddev 1.
fn scaled_blobs(seed: u64) -> (Vec<f32>, Vec<i32>) {
    let (mut x, y) = blobs(ROWS, seed);
    for (i, value) in x.iter_mut().enumerate() {
        let f = (i % FEATURES as usize) as f32;
        *value = *value * 3.0 * (f + 1.0) + 5.0 * f - 4.0;
    }
    (x, y)
}

/// `attempt` with means and standard deviations of each wrong count (either, or both, one short or
/// one over, or none) is refused with Status::ShapeMismatch and a message.
fn check_wrong_counts_refused<T>(mut attempt: impl FnMut(&[f32], &[f32]) -> Result<T>) {
    let features = FEATURES as usize;
    for (means, stddevs) in [
        (features - 1, features - 1),
        (features + 1, features + 1),
        (features + 1, features),
        (features, features - 1),
        (0, 0),
    ] {
        let error = attempt(&vec![0.0; means], &vec![1.0; stddevs])
            .err()
            .expect("a wrong count is refused");
        assert_eq!(
            error.status,
            Status::ShapeMismatch,
            "{means} means, {stddevs} stddevs: {error}"
        );
        assert!(!error.message.is_empty());
        assert!(error.to_string().starts_with("MPT_STATUS_SHAPE_MISMATCH: "));
    }
}

#[test]
fn a_dataset_standardized_by_its_own_statistics_has_mean_0_and_stddev_1_and_trains() {
    let ctx = context();
    let (x, y) = scaled_blobs(41);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let (mean, stddev) = data.feature_statistics().unwrap();
    assert_eq!(mean.len(), FEATURES as usize);
    assert_eq!(stddev.len(), FEATURES as usize);
    let features = FEATURES as usize;
    for f in 0..features {
        // The population's, in f64.
        let column: Vec<f64> = (0..ROWS).map(|r| x[r * features + f] as f64).collect();
        let expected_mean = column.iter().sum::<f64>() / ROWS as f64;
        let variance = column
            .iter()
            .map(|v| (v - expected_mean).powi(2))
            .sum::<f64>()
            / ROWS as f64;
        assert!(
            (mean[f] as f64 - expected_mean).abs() <= 1e-6 * expected_mean.abs(),
            "mean of feature {f}: {} against {expected_mean}",
            mean[f]
        );
        assert_close(
            stddev[f],
            variance.sqrt(),
            &format!("stddev of feature {f}"),
        );
        assert!(
            (stddev[f] - 1.0).abs() > 0.5,
            "feature {f} is not standardized to begin with"
        );
    }

    let standardized = data.standardized(&mean, &stddev).unwrap();
    assert_eq!(standardized.rows().unwrap(), ROWS as i64);
    assert_eq!(standardized.labels().unwrap(), y);
    let (after_mean, after_stddev) = standardized.feature_statistics().unwrap();
    for f in 0..features {
        assert!(
            after_mean[f].abs() < 1e-5,
            "standardized mean of feature {f}: {}",
            after_mean[f]
        );
        assert!(
            (after_stddev[f] - 1.0).abs() < 1e-5,
            "standardized stddev of feature {f}: {}",
            after_stddev[f]
        );
    }

    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer.fit(&standardized, 3, 16, true).unwrap();
    assert_eq!(trainer.progress().unwrap().epochs, 3);
    assert!(trainer.evaluate(&standardized, 0).unwrap().loss.is_finite());
}

#[test]
fn a_mean_or_stddev_of_the_wrong_count_is_refused_with_shape_mismatch() {
    let ctx = context();
    let data = blob_data(&ctx, 30, 42);
    let features = FEATURES as usize;
    let (zeros, ones) = (vec![0.0f32; features], vec![1.0f32; features]);
    check_wrong_counts_refused(|mean, stddev| data.standardized(mean, stddev));
    let mut negative = ones.clone();
    negative[2] = -1.0;
    let error = data.standardized(&zeros, &negative).err().unwrap();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    let standardized = data.standardized(&zeros, &ones).unwrap();
    drop(data); // the standardized dataset keeps the rows
    assert_eq!(standardized.slice(10, 5).unwrap().rows().unwrap(), 5);
}

#[test]
fn a_model_standardizing_by_a_datasets_statistics_trains_on_raw_rows_and_predicts_as_a_plain_copy()
{
    let ctx = context();
    let (x, y) = scaled_blobs(43);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let (mean, stddev) = data.feature_statistics().unwrap();
    let mut model = mlp(&ctx);
    assert_eq!(model.input_standardization().unwrap(), None);
    model.set_input_standardization(&mean, &stddev).unwrap();
    let (read_mean, read_stddev) = model
        .input_standardization()
        .unwrap()
        .expect("it standardizes");
    assert_eq!(bits(&read_mean), bits(&mean));
    assert_eq!(bits(&read_stddev), bits(&stddev));
    {
        let mut trainer = Trainer::new(&model, &adam()).unwrap();
        trainer.fit(&data, 5, 16, true).unwrap();
        assert!(trainer.evaluate(&data, 0).unwrap().accuracy > 0.9);
    }

    // The header's (x - mean) / stddev, each operation in f32.
    let features = FEATURES as usize;
    let standardized: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, &value)| {
            let centred = value - mean[i % features];
            centred / stddev[i % features]
        })
        .collect();
    let mut plain = mlp(&ctx);
    for layer in 0..model.layer_count().unwrap() as usize {
        let (weights, bias) = model.weights(layer).unwrap();
        plain.set_weights(layer, &weights, &bias).unwrap();
    }
    let predicted = model.predict(&x).unwrap();
    assert_eq!(
        bits(&predicted),
        bits(&plain.predict(&standardized).unwrap())
    );
    assert_ne!(bits(&predicted), bits(&plain.predict(&x).unwrap()));
}

#[test]
fn a_models_input_standardization_is_saved_with_it_and_cleared_is_none() {
    let ctx = context();
    let mut model = mlp(&ctx);
    let (mean, stddev) = (vec![0.5f32, -1.25, 3.0, 0.0], vec![2.0f32, 0.75, 1.5, 0.0]);
    model.set_input_standardization(&mean, &stddev).unwrap();
    let (inputs, _) = blobs(12, 44);
    let predicted = model.predict(&inputs).unwrap();
    let directory = TempDir::new("input-standardization");
    let path = directory.join("standardizing.safetensors");
    model.save(&path).unwrap();
    let mut loaded = Model::load(&ctx, &path).unwrap();
    let (kept_mean, kept_stddev) = loaded
        .input_standardization()
        .unwrap()
        .expect("it standardizes");
    assert_eq!(bits(&kept_mean), bits(&mean));
    assert_eq!(
        bits(&kept_stddev),
        bits(&stddev),
        "as set: the 0 not floored"
    );
    assert_eq!(bits(&loaded.predict(&inputs).unwrap()), bits(&predicted));

    model.clear_input_standardization().unwrap();
    assert_eq!(model.input_standardization().unwrap(), None);
    assert_ne!(bits(&model.predict(&inputs).unwrap()), bits(&predicted));
    model.clear_input_standardization().unwrap(); // none to remove: still none
    assert_eq!(model.input_standardization().unwrap(), None);
    model.save(&path).unwrap();
    let plain = Model::load(&ctx, &path).unwrap();
    assert_eq!(plain.input_standardization().unwrap(), None);
}

#[test]
fn a_models_input_standardization_of_the_wrong_count_or_value_is_refused_and_leaves_it() {
    let ctx = context();
    let mut model = mlp(&ctx);
    let features = FEATURES as usize;
    let (zeros, ones) = (vec![0.0f32; features], vec![1.0f32; features]);
    model.set_input_standardization(&zeros, &ones).unwrap();
    check_wrong_counts_refused(|mean, stddev| model.set_input_standardization(mean, stddev));
    let mut nan_mean = zeros.clone();
    nan_mean[1] = f32::NAN;
    let mut negative = ones.clone();
    negative[2] = -1.0;
    for (mean, stddev) in [(&nan_mean, &ones), (&zeros, &negative)] {
        let error = model.set_input_standardization(mean, stddev).err().unwrap();
        assert_eq!(error.status, Status::InvalidArgument, "{error}");
        assert!(!error.message.is_empty());
    }
    assert_eq!(
        model.input_standardization().unwrap(),
        Some((zeros.clone(), ones.clone()))
    );
}

#[test]
fn fitting_a_model_that_standardizes_on_a_standardized_dataset_is_refused() {
    let ctx = context();
    let data = blob_data(&ctx, 30, 45);
    let (mean, stddev) = data.feature_statistics().unwrap();
    let mut model = mlp(&ctx);
    model.set_input_standardization(&mean, &stddev).unwrap();
    let standardized = data.standardized(&mean, &stddev).unwrap();
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let error = trainer.fit(&standardized, 1, 16, true).err().unwrap();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    assert_eq!(trainer.progress().unwrap().epochs, 0);
    trainer.fit(&data, 1, 16, true).unwrap(); // the raw rows train
    assert_eq!(trainer.progress().unwrap().epochs, 1);
}
