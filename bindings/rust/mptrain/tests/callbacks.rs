//! Fit's closures: progress and epoch-end closures see every step, stop fit, panic, use the model
//! and evaluate a validation set; the log closure gets messages and cannot call into its context.
mod common;
use common::*;
use mptrain::*;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

#[test]
fn callbacks_see_every_step_and_break_stops_training() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(300, 5);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let epochs = Arc::new(Mutex::new(Vec::new()));
    {
        let steps = steps.clone();
        trainer
            .on_progress(move |p| {
                steps
                    .lock()
                    .unwrap()
                    .push((p.epoch, p.step, p.steps_per_epoch));
                ControlFlow::Continue(())
            })
            .unwrap();
        let epochs = epochs.clone();
        trainer
            .on_epoch_end(move |e| {
                epochs.lock().unwrap().push(e.epoch);
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    trainer.fit(&data, 2, 100, true).unwrap();
    assert_eq!(
        *steps.lock().unwrap(),
        vec![
            (0, 1, 3),
            (0, 2, 3),
            (0, 3, 3),
            (1, 1, 3),
            (1, 2, 3),
            (1, 3, 3)
        ]
    );
    assert_eq!(*epochs.lock().unwrap(), vec![0, 1]);

    trainer
        .on_progress(|p| {
            if p.step == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch::default()
    );
    let error = trainer.fit(&data, 3, 100, true).unwrap_err();
    assert_eq!(error.status, Status::Cancelled);
    assert!(!error.message.is_empty());
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch {
            steps: 2,
            rows: 300,
            batch_size: 100
        }
    );
    trainer.clear_callbacks().unwrap();
    trainer.fit(&data, 1, 100, true).unwrap(); // finishes that epoch
    assert_eq!(trainer.progress().unwrap().steps, 9);
    assert_eq!(
        trainer.unfinished_epoch().unwrap(),
        UnfinishedEpoch::default()
    );
}

#[test]
fn a_panic_in_a_callback_stops_fit_and_resumes_after_it() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(90, 6);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    trainer
        .on_progress(move |_| {
            *counter.lock().unwrap() += 1;
            panic!("from the callback");
        })
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        trainer.fit(&data, 2, 30, true)
    }));
    let payload = result.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"from the callback"));
    assert_eq!(*calls.lock().unwrap(), 1);
    trainer.clear_callbacks().unwrap();
    trainer.fit(&data, 1, 30, true).unwrap(); // still usable
}

#[test]
fn callbacks_may_use_the_model_during_fit() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(90, 7);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::with_defaults(&model).unwrap();
    let biases = Arc::new(Mutex::new(Vec::new()));
    let seen = biases.clone();
    let mut model = model; // moved into the callback: the same context, the same (reentrant) lock
    trainer
        .on_epoch_end(move |_| {
            seen.lock().unwrap().push(model.weights(1).unwrap().1);
            ControlFlow::Continue(())
        })
        .unwrap();
    trainer.fit(&data, 2, 30, true).unwrap();
    let biases = biases.lock().unwrap();
    assert_eq!(biases.len(), 2);
    assert_ne!(biases[0], biases[1]);
}

#[test]
fn log_callback_gets_messages_and_a_panicking_logger_is_contained() {
    let (x, y) = blobs(60, 8);
    let messages = Arc::new(Mutex::new(Vec::<(LogLevel, String)>::new()));
    let sink = messages.clone();
    for panicking in [false, true] {
        let sink = sink.clone();
        let ctx = Context::builder()
            .backend(Backend::Cpu)
            .threads(1)
            .log_level(LogLevel::Debug)
            .log(move |level, text| {
                if panicking {
                    panic!("logger");
                }
                sink.lock().unwrap().push((level, text.to_string()));
            })
            .build()
            .unwrap();
        let model = mlp(&ctx);
        let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        drop(ctx); // the model keeps the C context, and so the logger, alive
        let mut trainer = Trainer::with_defaults(&model).unwrap();
        trainer.fit(&data, 1, 20, true).unwrap();
    }
    assert!(messages
        .lock()
        .unwrap()
        .iter()
        .all(|(_, text)| !text.contains('\0')));
}

#[test]
fn the_log_callback_cannot_call_back_into_its_own_context() {
    // The header forbids it: the library may log halfway through a call, holding its own locks (a
    // data set streamed from host memory on a GPU logs with its upload mutex held).
    let (x, y) = blobs(30, 10);
    let other_context = context(); // other contexts are fair game
    let other_data = Dataset::from_f32(&other_context, &x, FEATURES, &y, CLASSES, true).unwrap();
    let reachable = Arc::new(Mutex::new(None::<Dataset>));
    let doomed = Arc::new(Mutex::new(None::<Dataset>));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let ctx = {
        let (reachable, doomed, answers) = (reachable.clone(), doomed.clone(), answers.clone());
        Context::builder()
            .backend(Backend::Cpu)
            .threads(1)
            .log_level(LogLevel::Debug)
            .log(move |_, _| {
                if let Some(data) = reachable.lock().unwrap().as_ref() {
                    let own = data.rows().map_err(|error| error.status);
                    answers.lock().unwrap().push((own, other_data.rows()));
                }
                // Dropping cannot fail: the C object is destroyed once the logging call returns.
                drop(doomed.lock().unwrap().take());
            })
            .build()
            .unwrap()
    };
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    *reachable.lock().unwrap() = Some(data);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    *doomed.lock().unwrap() = Some(data);
    let model = mlp(&ctx);
    let mut trainer = Trainer::with_defaults(&model).unwrap(); // logs its precision (Debug)
    assert_eq!(
        answers.lock().unwrap().first(),
        Some(&(Err(Status::InvalidState), Ok(30)))
    );
    assert!(doomed.lock().unwrap().is_none());
    // Outside the callback the data set is usable again.
    let data = reachable.lock().unwrap().take().unwrap();
    trainer.fit(&data, 1, 10, true).unwrap();
}

#[test]
fn the_epoch_end_closure_may_evaluate_a_validation_set_as_between_one_epoch_fits() {
    let (x, y) = blobs(160, 31);
    let (held_x, held_y) = blobs(70, 32);
    // Two contexts of one seed: the same initial weights and shuffles.
    let open = || {
        let ctx = context();
        let model = mlp(&ctx);
        let trainer = Trainer::new(&model, &adam()).unwrap();
        let training = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
        let validation =
            Dataset::from_f32(&ctx, &held_x, FEATURES, &held_y, CLASSES, true).unwrap();
        (trainer, training, validation)
    };

    let (mut validated, training, validation) = open();
    let validation = Arc::new(Mutex::new(validation));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let from_progress = Arc::new(Mutex::new(None));
    let foreign = Arc::new(Mutex::new(None));
    {
        let (at_epoch_end, seen) = (validation.clone(), seen.clone());
        let stranger = {
            let other = context();
            Dataset::from_f32(&other, &held_x, FEATURES, &held_y, CLASSES, true).unwrap()
        };
        let foreign = foreign.clone();
        validated
            .on_epoch_end_with(move |end, control| {
                let evaluation = control.evaluate(&at_epoch_end.lock().unwrap(), 0).unwrap();
                seen.lock().unwrap().push((end.epoch, evaluation));
                foreign
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| control.evaluate(&stranger, 0));
                ControlFlow::Continue(())
            })
            .unwrap();
        let (validation, from_progress) = (validation.clone(), from_progress.clone());
        validated
            .on_progress_with(move |progress, control| {
                if progress.step == 2 {
                    from_progress
                        .lock()
                        .unwrap()
                        .get_or_insert_with(|| control.evaluate(&validation.lock().unwrap(), 0));
                }
                ControlFlow::Continue(())
            })
            .unwrap();
    }
    validated.fit(&training, 3, 16, true).unwrap();
    assert_eq!(
        validated.progress().unwrap(),
        TrainingProgress {
            steps: 30,
            epochs: 3
        }
    );
    // Mid-epoch steps are in flight: the library's refusal.
    let error = from_progress.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidState, "{error}");
    let error = foreign.lock().unwrap().take().unwrap().unwrap_err();
    assert_eq!(error.status, Status::InvalidArgument, "{error}");

    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|(epoch, _)| *epoch).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let (mut between, training, validation) = open();
    for (epoch, (_, during_fit)) in seen.iter().enumerate() {
        between.fit(&training, 1, 16, true).unwrap();
        let evaluation = between.evaluate(&validation, 0).unwrap();
        // Bit for bit on the CPU.
        assert_eq!(
            (evaluation.loss.to_bits(), evaluation.accuracy.to_bits()),
            (during_fit.loss.to_bits(), during_fit.accuracy.to_bits()),
            "epoch {epoch}: {evaluation:?} between fits, {during_fit:?} during fit"
        );
    }
    assert!(seen[2].1.loss < seen[0].1.loss, "{seen:?}");
}
