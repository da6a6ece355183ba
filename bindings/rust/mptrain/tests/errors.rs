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
    let empty = expect(model.predict(&[]), Status::ShapeMismatch);
    assert_eq!(empty.message, "inputs has no rows: at least one is needed");
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
        Ok(_) => Trainer::with_defaults(&model).expect_err("softmax in a hidden layer must fail"),
    };
    assert!(
        matches!(
            error.status,
            Status::InvalidArgument | Status::InvalidState | Status::Unsupported
        ),
        "{error}"
    );
}

#[test]
fn predictions_beyond_the_library_limit_are_refused_before_their_output_is_allocated() {
    // 2^26 rows of 2^20 outputs are 2^46 floats: more than the library's 2^40, and more than any
    // address space (allocating them aborted the process). The inputs are never read: untouched
    // zeroed pages.
    let ctx = context();
    let mut model = Model::new(&ctx, 1).unwrap();
    model.add_dense(1 << 20, Activation::Linear).unwrap();
    let inputs = vec![0.0f32; 1 << 26];
    // The library's own verdict on these rows: it checks them before the output count.
    let library = expect(
        model.predict_into(&inputs, &mut [0.0; 1]),
        Status::InvalidArgument,
    );
    assert_eq!(model.predict(&inputs).unwrap_err(), library);
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    assert_eq!(trainer.predict(&inputs).unwrap_err(), library);
}

#[test]
fn weights_too_large_for_memory_are_out_of_memory_rather_than_an_abort() {
    // One 2^24 x 2^24 layer: 2^48 floats, more than any address space.
    let ctx = context();
    let mut model = Model::new(&ctx, 1 << 24).unwrap();
    model.add_dense(1 << 24, Activation::Linear).unwrap();
    expect(model.weights(0), Status::OutOfMemory);
    // The library says the same when it builds the model.
    expect(Trainer::with_defaults(&model), Status::OutOfMemory);
}

/// What the library itself answers to `rows` rows of `features` f32 samples (it checks the shape
/// before it reads the buffers, so one float stands in for all of them).
fn library_verdict_on_shape(rows: i64, features: i64) -> (Status, String) {
    use mptrain_sys as sys;
    use std::ffi::CStr;
    unsafe {
        let mut options = std::ptr::null_mut();
        assert_eq!(sys::mpt_context_options_create(&mut options), 0);
        assert_eq!(
            sys::mpt_context_options_set_backend(options, sys::MPT_BACKEND_CPU),
            0
        );
        let mut raw_context = std::ptr::null_mut();
        assert_eq!(sys::mpt_context_create(options, &mut raw_context), 0);
        sys::mpt_context_options_destroy(options);
        let mut dataset = std::ptr::null_mut();
        let labels = vec![0i32; rows as usize];
        let status = sys::mpt_dataset_create_f32(
            raw_context,
            [0.0f32].as_ptr(),
            rows,
            features,
            labels.as_ptr(),
            2,
            0,
            &mut dataset,
        );
        let message = CStr::from_ptr(sys::mpt_last_error())
            .to_string_lossy()
            .into_owned();
        sys::mpt_context_destroy(raw_context);
        assert!(dataset.is_null());
        (
            Status::from_code(status).expect("the library accepted it"),
            message,
        )
    }
}

#[test]
fn sample_counts_beyond_the_library_limit_are_invalid_arguments_not_overflows() {
    let ctx = context();
    // 4 rows of 2^62 + 1 overflow i64 (a debug build panicked); 2 rows of 2^40 do not, but exceed the
    // library's 2^40 elements all the same.
    for (rows, features) in [(4usize, (1i64 << 62) + 1), (2, 1 << 40)] {
        let (status, message) = library_verdict_on_shape(rows as i64, features);
        assert_eq!(status, Status::InvalidArgument, "{message}");
        let labels = vec![0; rows];
        let refusals = [
            Dataset::from_f32(&ctx, &[0.0; 4], features, &labels, 2, true).unwrap_err(),
            Dataset::from_u8(&ctx, &[0; 4], features, &labels, 2, 1.0, 0.0).unwrap_err(),
            Dataset::from_f32_targets(&ctx, &[0.0; 4], features, &vec![0.0; rows], 1, true)
                .unwrap_err(),
        ];
        for error in refusals {
            assert_eq!((error.status, error.message), (status, message.clone()));
        }
    }
    // One row of 2^40 is within the limit: there only the slice's length is wrong.
    expect(
        Dataset::from_f32(&ctx, &[0.0; 4], 1 << 40, &[0], 2, true),
        Status::ShapeMismatch,
    );
}
