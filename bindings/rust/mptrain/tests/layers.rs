//! Per-layer settings: a frozen layer keeps its weights while the others train; dropout rates read
//! back, are refused out of range or on the last layer, and change training but not inference.
mod common;
use common::*;
use mptrain::*;

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
