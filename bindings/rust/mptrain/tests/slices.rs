//! Dataset::slice: a validation split made of slices trains and evaluates bit for bit as datasets
//! of copied rows; out-of-range bounds are InvalidArgument errors; a slice outlives its source.
//! Dataset::subset: the rows listed, in order, repeats included; bad lists are InvalidArgument.
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

const ROWS: usize = 120;
/// Keras's validation_split 0.25: the last 30 rows held out.
const TRAIN_ROWS: usize = 90;
const F: usize = FEATURES as usize;

/// Integer labels or one-hot float targets.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Labels,
    OneHot,
}

fn dataset(ctx: &Context, samples: &[f32], labels: &[i32], kind: Kind) -> Dataset {
    match kind {
        Kind::Labels => Dataset::from_f32(ctx, samples, FEATURES, labels, CLASSES, true),
        Kind::OneHot => Dataset::from_f32_targets(
            ctx,
            samples,
            FEATURES,
            &one_hot(labels),
            CLASSES as i64,
            true,
        ),
    }
    .unwrap()
}

/// Rows `[first, first + rows)` of the blobs, copied into a dataset of their own.
fn copied(ctx: &Context, x: &[f32], y: &[i32], first: usize, rows: usize, kind: Kind) -> Dataset {
    dataset(
        ctx,
        &x[first * F..(first + rows) * F],
        &y[first..first + rows],
        kind,
    )
}

fn options(precision: Precision, kind: Kind) -> TrainerOptions {
    adam().precision(precision).loss(match kind {
        Kind::Labels => Loss::SparseCategoricalCrossentropy,
        Kind::OneHot => Loss::CategoricalCrossentropy,
    })
}

/// What a run on one split left, bit patterns throughout.
#[derive(Debug, PartialEq)]
struct Run {
    rows: (i64, i64),
    initial: Vec<u32>,
    weights: Vec<u32>,
    /// Validation from the epoch-end closure, once an epoch.
    each_epoch: Vec<(u32, u32)>,
    training: (u32, u32),
    validation: (u32, u32),
    step_losses: Vec<u32>,
}

/// Fits 3 shuffled epochs on the training part, validating each epoch from the epoch-end closure,
/// then evaluates both parts and takes two steps. The split is made of slices of one dataset
/// (dropped once sliced), or of two datasets of copied rows.
fn run(precision: Precision, kind: Kind, by_slices: bool) -> Run {
    let (x, y) = blobs(ROWS, 11);
    let ctx = context();
    let mut model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &options(precision, kind)).unwrap();
    assert_eq!(trainer.precision().unwrap(), precision);
    let (training, validation) = if by_slices {
        let whole = dataset(&ctx, &x, &y, kind);
        let training = whole.slice(0, TRAIN_ROWS as i64).unwrap();
        let validation = whole
            .slice(TRAIN_ROWS as i64, (ROWS - TRAIN_ROWS) as i64)
            .unwrap();
        drop(whole); // the slices keep the rows
        (training, validation)
    } else {
        (
            copied(&ctx, &x, &y, 0, TRAIN_ROWS, kind),
            copied(&ctx, &x, &y, TRAIN_ROWS, ROWS - TRAIN_ROWS, kind),
        )
    };
    let initial = weight_bits(&mut model);
    let validation = Arc::new(Mutex::new(validation));
    let each_epoch = Arc::new(Mutex::new(Vec::new()));
    {
        let (validation, each_epoch) = (validation.clone(), each_epoch.clone());
        trainer
            .on_epoch_end_with(move |_, control| {
                let evaluation = control.evaluate(&validation.lock().unwrap(), 0).unwrap();
                each_epoch.lock().unwrap().push(evaluation_bits(evaluation));
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    trainer.fit(&training, 3, 16, true).unwrap();
    trainer.clear_callbacks().unwrap();
    let validation = validation.lock().unwrap();
    let training_evaluation = evaluation_bits(trainer.evaluate(&training, 16).unwrap());
    let validation_evaluation = evaluation_bits(trainer.evaluate(&validation, 16).unwrap());
    let step_losses = [5, 60]
        .iter()
        .map(|&first| trainer.step(&training, first, 16).unwrap().to_bits())
        .collect();
    let each_epoch = each_epoch.lock().unwrap().clone();
    Run {
        rows: (training.rows().unwrap(), validation.rows().unwrap()),
        initial,
        weights: weight_bits(&mut model),
        each_epoch,
        training: training_evaluation,
        validation: validation_evaluation,
        step_losses,
    }
}

#[test]
fn a_validation_split_of_slices_trains_and_evaluates_bit_for_bit_as_copied_rows() {
    for precision in [Precision::Fp32, Precision::MixedBf16] {
        for kind in [Kind::Labels, Kind::OneHot] {
            let slices = run(precision, kind, true);
            let copies = run(precision, kind, false);
            assert_eq!(
                slices.rows,
                (TRAIN_ROWS as i64, (ROWS - TRAIN_ROWS) as i64),
                "{precision:?} {kind:?}"
            );
            assert_eq!(slices.each_epoch.len(), 3, "{precision:?} {kind:?}");
            assert_ne!(
                slices.weights, slices.initial,
                "{precision:?} {kind:?}: fit moved the weights"
            );
            assert_eq!(slices.initial, copies.initial, "{precision:?} {kind:?}");
            assert!(
                slices == copies,
                "{precision:?} {kind:?}: slices and copied rows differ:\n{slices:?}\n{copies:?}"
            );
        }
    }
}

#[test]
fn out_of_range_bounds_are_invalid_arguments() {
    let ctx = context();
    let data = blob_data(&ctx, 10, 3);
    let refused = [
        (-1, 1),
        (10, 1), // first past the last row
        (0, 0),  // no rows
        (3, -1),
        (0, 11), // one row too many
        (9, 2),
        (i64::MIN, 1),
        (i64::MAX, 1),
        (1, i64::MAX),
    ];
    for (first, rows) in refused {
        let error = data
            .slice(first, rows)
            .expect_err(&format!("slice({first}, {rows}) of 10 rows"));
        assert_eq!(
            error.status,
            Status::InvalidArgument,
            "{first} {rows}: {error}"
        );
        assert!(
            error.message.contains("slice"),
            "the library's message: {}",
            error.message
        );
        assert!(error
            .to_string()
            .starts_with("MPT_STATUS_INVALID_ARGUMENT: "));
    }
    // The edges are accepted.
    assert_eq!(data.slice(0, 10).unwrap().rows().unwrap(), 10);
    assert_eq!(data.slice(9, 1).unwrap().rows().unwrap(), 1);
    // A slice's bounds are its own rows, counted from its first.
    let slice = data.slice(2, 5).unwrap();
    for (first, rows) in [(5, 1), (0, 6), (4, 2), (-2, 1)] {
        let error = slice.slice(first, rows).unwrap_err();
        assert_eq!(
            error.status,
            Status::InvalidArgument,
            "{first} {rows}: {error}"
        );
    }
    assert_eq!(slice.slice(4, 1).unwrap().rows().unwrap(), 1);
    assert_eq!((data.rows().unwrap(), slice.rows().unwrap()), (10, 5));
}

#[test]
fn a_slice_keeps_working_after_its_source_and_context_are_dropped() {
    let (x, y) = blobs(60, 5);
    let ctx = context();
    let mut model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &options(Precision::Fp32, Kind::Labels)).unwrap();
    let whole = dataset(&ctx, &x, &y, Kind::Labels);
    let slice = whole.slice(20, 30).unwrap();
    drop(whole);
    let inner = slice.slice(5, 10).unwrap(); // rows 25..35 of the source
    let slice_copy = copied(&ctx, &x, &y, 20, 30, Kind::Labels);
    let inner_copy = copied(&ctx, &x, &y, 25, 10, Kind::Labels);
    drop(ctx);
    assert_eq!(
        (slice.rows().unwrap(), slice.features().unwrap()),
        (30, FEATURES)
    );
    assert_eq!(inner.rows().unwrap(), 10);
    for round in 0..2 {
        assert_eq!(
            evaluation_bits(trainer.evaluate(&slice, 8).unwrap()),
            evaluation_bits(trainer.evaluate(&slice_copy, 8).unwrap()),
            "round {round}"
        );
        assert_eq!(
            evaluation_bits(trainer.evaluate(&inner, 4).unwrap()),
            evaluation_bits(trainer.evaluate(&inner_copy, 4).unwrap()),
            "round {round}"
        );
        let before = weight_bits(&mut model);
        trainer.fit(&slice, 2, 8, true).unwrap();
        trainer.step(&inner, 2, 8).unwrap();
        assert_ne!(
            weight_bits(&mut model),
            before,
            "round {round}: training moved the weights"
        );
    }
    // Moved to another thread, the slice still owns its rows.
    let rows = std::thread::spawn(move || inner.rows().unwrap())
        .join()
        .unwrap();
    assert_eq!(rows, 10);
}

#[test]
fn a_subset_has_the_rows_listed_in_order_repeats_included() {
    let (x, y) = blobs(30, 7);
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let whole = dataset(&ctx, &x, &y, Kind::Labels);
    // Counted from the slice's own first row: rows 15, 10, 15 and 12 of `whole`.
    let subset = whole.slice(10, 12).unwrap().subset(&[5, 0, 5, 2]).unwrap();
    let listed = [15, 10, 15, 12];
    let samples: Vec<f32> = listed
        .iter()
        .flat_map(|&r| x[r * F..(r + 1) * F].iter().copied())
        .collect();
    let labels: Vec<i32> = listed.iter().map(|&r| y[r]).collect();
    let copies = dataset(&ctx, &samples, &labels, Kind::Labels);
    assert_eq!(subset.rows().unwrap(), 4);
    assert_eq!(subset.labels().unwrap(), labels);
    assert_eq!(
        bits(&trainer.predict_dataset(&subset, 0).unwrap()),
        bits(&trainer.predict_dataset(&copies, 0).unwrap())
    );
}

#[test]
fn a_subset_of_rows_out_of_range_or_of_none_is_an_invalid_argument() {
    let ctx = context();
    let data = blob_data(&ctx, 30, 8);
    let slice = data.slice(20, 10).unwrap();
    for (source, rows) in [
        (&data, &[0, 1, 30][..]),
        (&data, &[][..]),
        (&slice, &[-1][..]),
        (&slice, &[3, 4, 10][..]),
        (&data, &[i64::MIN][..]),
    ] {
        let error = source.subset(rows).expect_err(&format!("subset {rows:?}"));
        assert_eq!(error.status, Status::InvalidArgument, "{rows:?}: {error}");
        assert!(!error.message.is_empty());
    }
    let error = data.subset(&[0, 1, 30]).unwrap_err();
    assert!(error.message.contains("row 2 of the list is 30"), "{error}");
    assert_eq!(data.subset(&[29]).unwrap().rows().unwrap(), 1);
}
