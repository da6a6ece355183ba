//! TrainerOptions::ema_momentum and swap_ema_weights: the weights' moving average, swapped in and
//! out bit for bit (also at epoch end); training is refused meanwhile, as are bad momenta.
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

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
