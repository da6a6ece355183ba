//! Bad input becomes Err(Error { status, message }), never a crash.
mod common;
use common::*;
use mptrain::*;

fn expect<T: std::fmt::Debug>(result: Result<T>, status: Status) -> Error {
    let error = result.expect_err("expected an error");
    assert_eq!(error.status, status, "{error}");
    assert!(!error.message.is_empty());
    error
}

#[test]
fn out_of_range_labels_are_refused_with_the_library_message() {
    let ctx = context();
    let error = expect(
        Dataset::from_f32(&ctx, &[0.0; 8], 4, &[0, 5], 3, true),
        Status::InvalidArgument,
    );
    assert!(error.message.contains("label 5"), "{}", error.message);
    assert!(error
        .to_string()
        .starts_with("MPT_STATUS_INVALID_ARGUMENT: "));
    expect(
        Dataset::from_f32(&ctx, &[0.0; 8], 4, &[0, -1], 3, true),
        Status::InvalidArgument,
    );
    expect(
        Dataset::from_u8(&ctx, &[0; 8], 4, &[0, 1], 0, 1.0, 0.0),
        Status::InvalidArgument,
    );
}

#[test]
fn wrong_lengths_are_shape_mismatches() {
    let ctx = context();
    expect(
        Dataset::from_f32(&ctx, &[0.0; 7], 4, &[0, 1], 3, true),
        Status::ShapeMismatch,
    );
    expect(
        Dataset::from_f32(&ctx, &[], 4, &[], 3, true),
        Status::ShapeMismatch,
    );
    expect(
        Dataset::from_f32(&ctx, &[0.0; 8], 0, &[0, 1], 3, true),
        Status::ShapeMismatch,
    );
    expect(
        Dataset::from_f32_targets(&ctx, &[0.0; 8], 4, &[0.0; 5], 2, true),
        Status::ShapeMismatch,
    );
    let mut model = Model::new(&ctx, FEATURES).unwrap();
    model.add_dense(3, Activation::Softmax).unwrap();
    expect(model.predict(&[0.0; 5]), Status::ShapeMismatch);
    expect(model.predict(&[]), Status::ShapeMismatch);
    let mut out = [0.0f32; 2];
    expect(
        model.predict_into(&[0.0; 4], &mut out),
        Status::ShapeMismatch,
    ); // C checks out_count
    expect(
        model.set_weights(0, &[0.0; 3], &[0.0; 3]),
        Status::ShapeMismatch,
    );
    expect(model.weights(3), Status::InvalidArgument);
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    expect(trainer.predict(&[0.0; 3]), Status::ShapeMismatch);
    let other_width = Dataset::from_f32(&ctx, &[0.0; 10], 5, &[0, 1], 3, true).unwrap();
    expect(trainer.fit(&other_width, 1, 2, true), Status::ShapeMismatch);
    let other_context = context();
    let foreign = Dataset::from_f32(&other_context, &[0.0; 8], 4, &[0, 1], 3, true).unwrap();
    expect(trainer.fit(&foreign, 1, 2, true), Status::InvalidArgument);
}

#[test]
fn invalid_values_and_states_come_back_from_the_library() {
    let ctx = context();
    expect(
        Context::builder().threads(-1).build(),
        Status::InvalidArgument,
    );
    expect(
        Dataset::from_f32(&ctx, &[f32::NAN, 0.0, 0.0, 0.0], 4, &[0], 3, true),
        Status::NonFinite,
    );
    Dataset::from_f32(&ctx, &[f32::NAN, 0.0, 0.0, 0.0], 4, &[0], 3, false).unwrap();
    let mut empty = Model::new(&ctx, 3).unwrap();
    expect(Trainer::with_defaults(&empty), Status::InvalidState);
    expect(empty.output_features(), Status::InvalidState);
    empty.add_dense(2, Activation::Relu).unwrap();
    expect(
        Trainer::new(&empty, &TrainerOptions::new().learning_rate(-1.0)),
        Status::InvalidArgument,
    );
    expect(
        Trainer::new(&empty, &TrainerOptions::new().momentum(1.5, false)),
        Status::InvalidArgument,
    );
    let mut trainer = Trainer::with_defaults(&empty).unwrap();
    expect(empty.add_dense(2, Activation::Linear), Status::InvalidState); // built by the trainer
    let (x, y) = blobs(30, 1);
    let y: Vec<i32> = y.iter().map(|label| label % 2).collect();
    let data = Dataset::from_f32(&ctx, &x[..30 * 3], 3, &y, 2, true).unwrap();
    expect(trainer.fit(&data, 1, 0, true), Status::InvalidArgument);
    expect(trainer.step(&data, 25, 10), Status::InvalidArgument);
    expect(trainer.evaluate(&data, -1), Status::InvalidArgument);
    expect(
        Dataset::load_cifar10(&ctx, "/nonexistent/cifar-10-batches-bin", true, 0),
        Status::IoError,
    );
    expect(
        Dataset::load_cifar10(&ctx, "bad\0path", true, 0),
        Status::InvalidArgument,
    );
    // ...and everything still works afterwards.
    trainer.fit(&data, 1, 10, true).unwrap();
}

#[test]
fn softmax_is_refused_before_the_last_layer() {
    let ctx = context();
    let mut model = Model::new(&ctx, 4).unwrap();
    let error = match model
        .add_dense(8, Activation::Softmax)
        .and_then(|m| m.add_dense(2, Activation::Linear))
    {
        Err(error) => error,
        Ok(_) => Trainer::with_defaults(&model)
            .err()
            .expect("softmax in a hidden layer must fail"),
    };
    assert!(
        matches!(
            error.status,
            Status::InvalidArgument | Status::InvalidState | Status::Unsupported
        ),
        "{error}"
    );
}
