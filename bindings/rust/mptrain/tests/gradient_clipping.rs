//! TrainerOptions::global_clipnorm and gradient_norm: clipping bounds a step's gradient norm, the
//! norm read is the last step's before clipping, after step or inside fit; bad bounds are refused.
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

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
