//! Model files and training checkpoints: a loaded model predicts bit-identically, a run resumed from
//! a checkpoint ends with bit-identical weights, and bad files fail with their status.
mod common;
use common::*;
use mptrain::*;
use std::path::Path;

/// Its own model, a tanh layer deeper than the common mlp.
fn mlp(ctx: &Context) -> Model {
    let mut model = Model::new(ctx, FEATURES).unwrap();
    model
        .add_dense(16, Activation::Relu)
        .unwrap()
        .add_dense(8, Activation::Tanh)
        .unwrap()
        .add_dense(CLASSES as i64, Activation::Softmax)
        .unwrap();
    model
}

/// Every layer's weights and biases, as bit patterns (so -0.0 != 0.0 and NaN == NaN).
/// One entry per tensor (the common weight_bits flattens them), so tensors compare one by one.
fn weight_bits(model: &mut Model) -> Vec<Vec<u32>> {
    (0..model.layer_count().unwrap() as usize)
        .flat_map(|layer| {
            let (weights, bias) = model.weights(layer).unwrap();
            [weights, bias]
        })
        .map(|values| values.iter().map(|v| v.to_bits()).collect())
        .collect()
}

fn truncated_copy(from: &Path, to: &Path) {
    let bytes = std::fs::read(from).unwrap();
    std::fs::write(to, &bytes[..bytes.len() * 2 / 3]).unwrap();
}

#[test]
fn every_hidden_activation_trains_and_reloads() {
    let dir = TempDir::new("activations");
    let ctx = context();
    let mut model = Model::new(&ctx, FEATURES).unwrap();
    for activation in [
        Activation::Linear,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::LeakyRelu,
        Activation::Elu,
        Activation::Selu,
        Activation::Softplus,
        Activation::Softsign,
    ] {
        model.add_dense(6, activation).unwrap();
    }
    model
        .add_dense(CLASSES as i64, Activation::Softmax)
        .unwrap();
    model.set_layer_dtype(1, DType::Bf16).unwrap();
    let data = blob_data(&ctx, 120, 14);
    Trainer::new(&model, &adam())
        .unwrap()
        .fit(&data, 1, 16, true)
        .unwrap();
    let path = dir.join("activations.safetensors");
    model.save(&path).unwrap();
    let mut loaded = Model::load(&ctx, &path).unwrap();
    for layer in 0..9 {
        assert_eq!(loaded.layer_units(layer).unwrap(), 6);
    }
    assert_eq!(loaded.layer_units(9).unwrap(), CLASSES as i64);
    assert_eq!(loaded.layer_activation(4).unwrap(), Activation::LeakyRelu);
    assert_eq!(loaded.layer_activation(8).unwrap(), Activation::Softsign);
    assert_eq!(loaded.layer_activation(9).unwrap(), Activation::Softmax);
    assert_eq!(loaded.layer_dtype(0).unwrap(), DType::Default);
    assert_eq!(loaded.layer_dtype(1).unwrap(), DType::Bf16);
    expect(loaded.layer_units(10), Status::InvalidArgument);
    expect(loaded.layer_units(usize::MAX), Status::InvalidArgument);
    expect(loaded.layer_activation(usize::MAX), Status::InvalidArgument);
    expect(
        loaded.layer_dtype(i64::MAX as usize + 1),
        Status::InvalidArgument,
    );
    expect(loaded.weights(usize::MAX), Status::InvalidArgument);
    let (x, _) = blobs(30, 15);
    assert_eq!(
        bits(&loaded.predict(&x).unwrap()),
        bits(&model.predict(&x).unwrap())
    );
}

#[test]
fn an_initializer_draws_the_first_weights_and_is_not_saved() {
    let dir = TempDir::new("initializer");
    let first_layer = |initializer: Option<Initializer>| {
        let ctx = seeded_context(4);
        let mut model = Model::new(&ctx, FEATURES).unwrap();
        model
            .add_dense(64, Activation::Selu)
            .unwrap()
            .add_dense(CLASSES as i64, Activation::Softmax)
            .unwrap();
        if let Some(initializer) = initializer {
            model.set_layer_initializer(0, initializer).unwrap();
        }
        model
    };
    let mut default = first_layer(None);
    assert_eq!(
        default.layer_initializer(0).unwrap(),
        Initializer::GlorotUniform
    );
    let mut lecun = first_layer(Some(Initializer::LecunNormal));
    assert_eq!(
        lecun.layer_initializer(0).unwrap(),
        Initializer::LecunNormal
    );
    let drawn = bits(&lecun.weights(0).unwrap().0);
    assert_eq!(
        drawn,
        bits(
            &first_layer(Some(Initializer::LecunNormal))
                .weights(0)
                .unwrap()
                .0
        )
    );
    assert_ne!(drawn, bits(&default.weights(0).unwrap().0));
    let refused = lecun
        .set_layer_initializer(0, Initializer::HeNormal)
        .unwrap_err();
    assert_eq!(refused.status, Status::InvalidState); // built: the weights are drawn
    let refused = first_layer(None)
        .set_layer_initializer(2, Initializer::HeNormal)
        .unwrap_err();
    assert_eq!(refused.status, Status::InvalidArgument);
    let path = dir.join("lecun.safetensors");
    lecun.save(&path).unwrap();
    let ctx = context();
    let mut loaded = Model::load(&ctx, &path).unwrap();
    assert_eq!(
        loaded.layer_initializer(0).unwrap(),
        Initializer::GlorotUniform
    );
    assert_eq!(bits(&loaded.weights(0).unwrap().0), drawn);
}

#[test]
fn a_saved_model_loads_and_predicts_bit_identically() {
    let dir = TempDir::new("model");
    let ctx = context();
    let mut model = mlp(&ctx);
    let data = blob_data(&ctx, 120, 11);
    Trainer::new(&model, &adam())
        .unwrap()
        .fit(&data, 2, 16, true)
        .unwrap();
    let path = dir.join("model.safetensors");
    model.save(&path).unwrap();
    model.save(path.to_str().unwrap()).unwrap(); // &str works too, and overwrites

    let other = Context::builder()
        .backend(Backend::Cpu)
        .seed(99)
        .build()
        .unwrap();
    let mut loaded = Model::load(&other, &path).unwrap();
    assert_eq!(loaded.layer_count().unwrap(), 3);
    assert_eq!(loaded.input_features().unwrap(), FEATURES);
    assert_eq!(loaded.output_features().unwrap(), CLASSES as i64);
    assert_eq!(
        loaded.parameter_count().unwrap(),
        model.parameter_count().unwrap()
    );
    assert_eq!(weight_bits(&mut loaded), weight_bits(&mut model));
    let (x, _) = blobs(30, 12);
    assert_eq!(
        bits(&loaded.predict(&x).unwrap()),
        bits(&model.predict(&x).unwrap())
    );
    // The loaded model trains like any other.
    let mut trainer = Trainer::new(&loaded, &adam()).unwrap();
    trainer
        .fit(&blob_data(&other, 60, 13), 1, 20, true)
        .unwrap();
}

#[test]
fn a_learning_rate_halved_from_the_epoch_end_callback_is_saved_and_restored() {
    let dir = TempDir::new("schedule");
    let path = dir.join("decayed.safetensors");
    let ctx = context();
    let data = blob_data(&ctx, 200, 41);
    let mut model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    assert_eq!(trainer.learning_rate().unwrap(), 0.01);
    trainer
        .on_epoch_end_with(|_, control| {
            let rate = control.learning_rate().unwrap();
            control.set_learning_rate(rate / 2.0).unwrap();
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    trainer.fit(&data, 2, 32, true).unwrap();
    assert_eq!(trainer.learning_rate().unwrap(), 0.0025);
    trainer.save_checkpoint(&path).unwrap();
    trainer.clear_callbacks().unwrap();
    trainer.fit(&data, 1, 32, true).unwrap();

    let mut resumed_model = mlp(&ctx);
    let mut resumed = Trainer::new(&resumed_model, &adam()).unwrap();
    resumed.set_learning_rate(0.5).unwrap();
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(resumed.learning_rate().unwrap(), 0.0025); // the checkpoint's
    resumed.fit(&data, 1, 32, true).unwrap();
    assert_eq!(weight_bits(&mut resumed_model), weight_bits(&mut model));
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let error = trainer.set_learning_rate(bad).unwrap_err();
        assert_eq!(error.status, Status::InvalidArgument);
    }
    assert_eq!(trainer.learning_rate().unwrap(), 0.0025);
}

#[test]
fn a_run_resumed_from_a_checkpoint_ends_bit_identical() {
    let dir = TempDir::new("resume");
    let path = dir.join("checkpoint.safetensors");
    let ctx = context();
    let data = blob_data(&ctx, 200, 21); // 200 / 32: 6 steps per epoch, the last 8 rows dropped
    let mut model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer.fit(&data, 1, 32, true).unwrap();
    trainer.save_checkpoint(&path).unwrap();
    trainer.fit(&data, 2, 32, true).unwrap();
    let uninterrupted = weight_bits(&mut model);

    let mut resumed_model = mlp(&ctx); // fresh Glorot weights: only the checkpoint can make them equal
    assert_ne!(weight_bits(&mut resumed_model), uninterrupted);
    let mut resumed = Trainer::new(&resumed_model, &adam()).unwrap();
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(
        resumed.progress().unwrap(),
        TrainingProgress {
            steps: 6,
            epochs: 1
        }
    );
    resumed.fit(&data, 2, 32, true).unwrap();
    assert_eq!(weight_bits(&mut resumed_model), uninterrupted);
    assert_eq!(resumed.progress().unwrap(), trainer.progress().unwrap());
    assert_eq!(resumed.loss_scale().unwrap(), trainer.loss_scale().unwrap());

    // A checkpoint holds the model too.
    let mut from_checkpoint = Model::load(&ctx, &path).unwrap();
    assert_eq!(from_checkpoint.layer_count().unwrap(), 3);
    assert_eq!(from_checkpoint.weights(1).unwrap().0.len(), 8 * 16);
}

#[test]
fn automatic_checkpoints_keep_the_newest_and_can_be_turned_off() {
    let dir = TempDir::new("automatic");
    let ctx = context();
    let data = blob_data(&ctx, 200, 31);
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer
        .set_checkpointing(Some(dir.0.as_path()), 5, 0, 2)
        .unwrap();
    trainer.fit(&data, 3, 32, true).unwrap(); // 18 steps: checkpoints at 5, 10, 15
    let steps_saved = |dir: &Path| -> Vec<i64> {
        let mut steps: Vec<i64> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .map(|name| {
                let step = name
                    .strip_prefix("checkpoint-")
                    .and_then(|rest| rest.strip_suffix(".safetensors"))
                    .unwrap_or_else(|| panic!("unexpected file {name}"));
                step.parse().unwrap()
            })
            .collect();
        steps.sort();
        steps
    };
    assert_eq!(steps_saved(&dir.0), vec![10, 15]);

    let newest = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max()
        .unwrap();
    let other_model = mlp(&ctx);
    let mut other = Trainer::new(&other_model, &adam()).unwrap();
    other.load_checkpoint(&newest).unwrap();
    assert_eq!(other.progress().unwrap().steps, 15);

    trainer.set_checkpointing(None, 0, 0, 0).unwrap();
    trainer.fit(&data, 1, 32, true).unwrap();
    assert_eq!(steps_saved(&dir.0), vec![10, 15]);

    // Every epoch, as well.
    trainer
        .set_checkpointing(Some(dir.0.as_path()), 0, 1, 5)
        .unwrap();
    trainer.fit(&data, 1, 32, true).unwrap();
    assert_eq!(steps_saved(&dir.0), vec![10, 15, 30]);
}

fn expect<T: std::fmt::Debug>(result: Result<T>, status: Status) -> Error {
    let error = result.expect_err("expected an error");
    assert_eq!(error.status, status, "{error}");
    assert!(!error.message.is_empty());
    error
}

#[test]
fn a_model_saved_with_dropout_and_a_checkpoints_model_load_with_the_same_rates() {
    let dir = TempDir::new("dropout");
    let ctx = context();
    let mut model = mlp(&ctx);
    model.set_layer_dropout(0, 0.25).unwrap();
    model.set_layer_dropout(1, 0.5).unwrap();
    model.set_input_dropout(0.125).unwrap();
    assert_eq!(model.input_dropout().unwrap(), 0.125);
    expect(mlp(&ctx).set_input_dropout(1.0), Status::InvalidArgument);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer.fit(&blob_data(&ctx, 60, 11), 1, 16, true).unwrap();
    let path = dir.join("dropout.safetensors");
    let checkpoint = dir.join("checkpoint.safetensors");
    model.save(&path).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();
    let other = seeded_context(99);
    for file in [&path, &checkpoint] {
        let mut loaded = Model::load(&other, file).unwrap();
        let rates: Vec<f32> = (0..3)
            .map(|layer| loaded.layer_dropout(layer).unwrap())
            .collect();
        assert_eq!(rates, [0.25, 0.5, 0.0], "{}", file.display());
        assert_eq!(loaded.input_dropout().unwrap(), 0.125, "{}", file.display());
        assert_eq!(weight_bits(&mut loaded), weight_bits(&mut model));
        // A loaded model is built: its rates are fixed.
        expect(loaded.set_layer_dropout(0, 0.0), Status::InvalidState);
        expect(loaded.set_input_dropout(0.0), Status::InvalidState);
    }
    mlp(&ctx).save(&path).unwrap(); // overwritten without dropout: the rates are the file's
    let reloaded = Model::load(&other, &path).unwrap();
    for layer in 0..3 {
        assert_eq!(reloaded.layer_dropout(layer).unwrap(), 0.0, "layer {layer}");
    }
    assert_eq!(reloaded.input_dropout().unwrap(), 0.0);
}

#[test]
fn a_checkpoint_written_with_label_smoothing_is_refused_by_a_trainer_without_it() {
    let dir = TempDir::new("smoothing");
    let ctx = context();
    let data = blob_data(&ctx, 60, 43);
    let model = mlp(&ctx);
    let path = dir.join("smoothed.safetensors");
    let mut smoothed = Trainer::new(&model, &adam().label_smoothing(0.1)).unwrap();
    smoothed.step(&data, 0, 20).unwrap();
    smoothed.save_checkpoint(&path).unwrap();

    let mut plain = Trainer::new(&model, &adam()).unwrap();
    let error = expect(plain.load_checkpoint(&path), Status::InvalidArgument);
    assert!(
        error
            .message
            .contains("label_smoothing 0.1 (this trainer: 0)"),
        "{error}"
    );
    let mut other = Trainer::new(&model, &adam().label_smoothing(0.2)).unwrap();
    expect(other.load_checkpoint(&path), Status::InvalidArgument);
    let mut matching = Trainer::new(&model, &adam().label_smoothing(0.1)).unwrap();
    matching.load_checkpoint(&path).unwrap();
    assert_eq!(matching.progress().unwrap().steps, 1);
}

#[test]
fn a_lion_checkpoint_resumes_with_the_same_betas_and_is_refused_with_others() {
    let dir = TempDir::new("lion");
    let ctx = context();
    let data = blob_data(&ctx, 20, 43);
    let model = mlp(&ctx);
    let path = dir.join("lion.safetensors");
    let lion = |beta1: f32, beta2: f32| {
        TrainerOptions::new()
            .optimizer(Optimizer::Lion)
            .learning_rate(0.001)
            .lion(beta1, beta2)
    };
    let mut saved = Trainer::new(&model, &lion(0.8, 0.95)).unwrap();
    saved.step(&data, 0, 20).unwrap();
    saved.save_checkpoint(&path).unwrap();

    let mut matching = Trainer::new(&model, &lion(0.8, 0.95)).unwrap();
    matching.load_checkpoint(&path).unwrap();
    assert_eq!(matching.progress().unwrap().steps, 1);
    assert!(matching.step(&data, 0, 20).unwrap().is_finite());
    let mut other = Trainer::new(&model, &lion(0.8, 0.98)).unwrap();
    let error = expect(other.load_checkpoint(&path), Status::InvalidArgument);
    assert!(
        error.message.contains("beta2 0.95 (this trainer: 0.98)"),
        "{error}"
    );
}

#[test]
fn a_checkpoint_written_with_class_weights_is_refused_by_a_trainer_without_them() {
    let dir = TempDir::new("class-weights");
    let ctx = context();
    let data = blob_data(&ctx, 60, 44);
    let model = mlp(&ctx);
    let path = dir.join("weighted.safetensors");
    let mut weighted = Trainer::new(&model, &adam().class_weights(&[1.0, 2.0, 3.0])).unwrap();
    weighted.step(&data, 0, 20).unwrap();
    weighted.save_checkpoint(&path).unwrap();

    let mut plain = Trainer::new(&model, &adam()).unwrap();
    let error = expect(plain.load_checkpoint(&path), Status::InvalidArgument);
    assert!(
        error
            .message
            .contains("class_weights [1, 2, 3] (this trainer: none)"),
        "{error}"
    );
    let mut other = Trainer::new(&model, &adam().class_weights(&[1.0, 2.0, 4.0])).unwrap();
    let error = expect(other.load_checkpoint(&path), Status::InvalidArgument);
    assert!(
        error
            .message
            .contains("class_weights [1, 2, 3] (this trainer: [1, 2, 4])"),
        "{error}"
    );
    let mut matching = Trainer::new(&model, &adam().class_weights(&[1.0, 2.0, 3.0])).unwrap();
    matching.load_checkpoint(&path).unwrap();
    assert_eq!(matching.progress().unwrap().steps, 1);
}

#[test]
fn missing_damaged_and_mismatched_files_fail_with_their_status() {
    let dir = TempDir::new("errors");
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let missing = dir.join("missing.safetensors");
    expect(Model::load(&ctx, &missing), Status::IoError);
    expect(trainer.load_checkpoint(&missing), Status::IoError);

    let model_file = dir.join("model.safetensors");
    let checkpoint = dir.join("checkpoint.safetensors");
    model.save(&model_file).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();
    let truncated = dir.join("truncated.safetensors");
    truncated_copy(&model_file, &truncated);
    expect(Model::load(&ctx, &truncated), Status::CorruptData);
    truncated_copy(&checkpoint, &truncated);
    expect(trainer.load_checkpoint(&truncated), Status::CorruptData);
    expect(Model::load(&ctx, &truncated), Status::CorruptData);

    let mut narrow = Model::new(&ctx, FEATURES).unwrap();
    narrow
        .add_dense(CLASSES as i64, Activation::Softmax)
        .unwrap();
    let mut narrow_trainer = Trainer::new(&narrow, &adam()).unwrap();
    expect(
        narrow_trainer.load_checkpoint(&checkpoint),
        Status::ShapeMismatch,
    );
    let mut sgd_trainer = Trainer::new(&model, &TrainerOptions::new()).unwrap();
    expect(
        sgd_trainer.load_checkpoint(&checkpoint),
        Status::InvalidArgument,
    );

    expect(
        model.save(dir.join("no-such-directory/model.safetensors")),
        Status::IoError,
    );
    expect(model.save("bad\0path"), Status::InvalidArgument);
    expect(Model::load(&ctx, "bad\0path"), Status::InvalidArgument);
    expect(
        trainer.set_checkpointing(Some(dir.0.as_path()), 1, 0, 0),
        Status::InvalidArgument,
    );
    expect(
        trainer.set_checkpointing(Some(dir.0.as_path()), 0, 0, 1),
        Status::InvalidArgument,
    );
    let data = blob_data(&ctx, 64, 41);
    // Refused when set, not at the first checkpoint.
    expect(
        trainer.set_checkpointing(Some(&dir.join("no-such-directory")), 1, 0, 1),
        Status::IoError,
    );
    let going = dir.join("going-away");
    std::fs::create_dir(&going).unwrap();
    trainer.set_checkpointing(Some(&going), 1, 0, 1).unwrap();
    std::fs::remove_dir(&going).unwrap();
    expect(trainer.fit(&data, 1, 32, true), Status::IoError);
    // ...and everything still works afterwards.
    trainer.set_checkpointing(None, 0, 0, 0).unwrap();
    trainer.fit(&data, 1, 32, true).unwrap();
    trainer.load_checkpoint(&checkpoint).unwrap();
    Model::load(&ctx, &model_file).unwrap();
}
