//! Dataset::standardized and Dataset::feature_statistics (Keras's Normalization layer, for the data):
//! the statistics against an f64 reference; a dataset standardized by its own statistics has features
//! of mean 0 and standard deviation 1 and trains; a mean or stddev of another count is refused with
//! Status::ShapeMismatch, a negative stddev with Status::InvalidArgument.
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
    for (means, stddevs) in [
        (features - 1, features - 1),
        (features + 1, features + 1),
        (features + 1, features),
        (features, features - 1),
        (0, 0),
    ] {
        let error = data
            .standardized(&vec![0.0; means], &vec![1.0; stddevs])
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
    let mut negative = ones.clone();
    negative[2] = -1.0;
    let error = data.standardized(&zeros, &negative).err().unwrap();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");
    let standardized = data.standardized(&zeros, &ones).unwrap();
    drop(data); // the standardized dataset keeps the rows
    assert_eq!(standardized.slice(10, 5).unwrap().rows().unwrap(), 5);
}
