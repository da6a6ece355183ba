//! Handles are Send: contexts train in parallel threads, and objects of one context used from two
//! threads are serialised by the context's lock.
mod common;
use common::*;
use mptrain::*;
use std::thread;

fn train(seed: u64) -> f32 {
    let ctx = seeded_context(seed);
    let mut model = Model::new(&ctx, FEATURES).unwrap();
    model
        .add_dense(8, Activation::Relu)
        .unwrap()
        .add_dense(3, Activation::Softmax)
        .unwrap();
    let (x, y) = blobs(120, seed);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(
        &model,
        &TrainerOptions::new()
            .optimizer(Optimizer::Adam)
            .learning_rate(0.02),
    )
    .unwrap();
    trainer.fit(&data, 3, 16, true).unwrap();
    trainer.evaluate(&data, 0).unwrap().accuracy
}

#[test]
fn contexts_train_in_parallel() {
    let handles: Vec<_> = (1..=3)
        .map(|seed| thread::spawn(move || train(seed)))
        .collect();
    for handle in handles {
        assert!(handle.join().unwrap() > 0.8);
    }
}

#[test]
fn one_context_used_from_two_threads_is_serialised() {
    let ctx = context();
    let mut model = Model::new(&ctx, FEATURES).unwrap();
    model
        .add_dense(8, Activation::Relu)
        .unwrap()
        .add_dense(3, Activation::Softmax)
        .unwrap();
    let (x, y) = blobs(120, 3);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    let fitter = thread::spawn(move || {
        for _ in 0..3 {
            trainer.fit(&data, 1, 16, true).unwrap();
        }
        trainer.progress().unwrap().epochs
    });
    let reader = thread::spawn(move || {
        for _ in 0..50 {
            model.predict(&[0.0; FEATURES as usize]).unwrap();
            model.weights(0).unwrap();
        }
    });
    reader.join().unwrap();
    assert_eq!(fitter.join().unwrap(), 3);
    drop(ctx);
}
