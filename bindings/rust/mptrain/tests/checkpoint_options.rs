//! TrainerOptions::from_checkpoint: a run resumed from its checkpoint alone (the model and the
//! options read from the file, in a context of another seed) ends bit for bit as the run that went
//! on; the options read are the trainer's, its precision and loss scaling resolved and no
//! micro-batch size; a model file, a missing and a damaged file fail with their status.
mod common;
use common::*;
use mptrain::*;
use std::path::Path;

const BATCH: i64 = 15;

/// One run: its options, its model's head and hidden dropout, and whether it fits one-hot float
/// targets (Huber) rather than labels.
struct Recipe {
    name: &'static str,
    options: TrainerOptions,
    head: Activation,
    hidden_dropout: f32,
    targets: bool,
}

fn recipes() -> Vec<Recipe> {
    let labels = |name, options| Recipe {
        name,
        options,
        head: Activation::Softmax,
        hidden_dropout: 0.0,
        targets: false,
    };
    vec![
        Recipe {
            // fp16 with the default (dynamic) scaling from 2^24, so that steps overflow and the
            // scale moves; a schedule, label smoothing, class weights, clipping, averages, dropout.
            hidden_dropout: 0.25,
            ..labels(
                "fp16 Adam, everything",
                TrainerOptions::new()
                    .precision(Precision::MixedFp16)
                    .optimizer(Optimizer::Adam)
                    .learning_rate(0.02)
                    .adam(0.85, 0.99, 1e-6)
                    .loss_scaling(LossScaling::Default, 16777216.0)
                    .lr_schedule(LrSchedule::Cosine, 3, 40, 0.1)
                    .label_smoothing(0.1)
                    .class_weights(&[0.5, 2.0, 1.25])
                    .global_clipnorm(0.5)
                    .ema_momentum(0.9),
            )
        },
        // Micro-batches, which no checkpoint records: the resumed run sets them again.
        labels(
            "fp32 Nesterov SGD, decay, step schedule, micro-batches",
            TrainerOptions::new()
                .precision(Precision::Fp32)
                .optimizer(Optimizer::Sgd)
                .learning_rate(0.05)
                .momentum(0.8, true)
                .weight_decay(0.01)
                .lr_schedule(LrSchedule::Step, 2, 5, 0.5)
                .micro_batch_size(4),
        ),
        labels(
            "bf16 centered RMSprop with momentum, static scaling",
            TrainerOptions::new()
                .precision(Precision::MixedBf16)
                .optimizer(Optimizer::RmsProp)
                .learning_rate(0.005)
                .rmsprop(0.8, 1e-6)
                .rmsprop_centered(true)
                .momentum(0.5, false)
                .loss_scaling(LossScaling::Static, 128.0)
                .loss_scaler_dynamics(LossScalerDynamics {
                    growth_factor: 4.0,
                    backoff_factor: 0.25,
                    growth_interval: 7,
                    min_scale: 2.0,
                    max_scale: 4096.0,
                }),
        ),
        // Lion's own beta2 (0.99), never set.
        labels(
            "fp32 Lion, dynamic scaling",
            TrainerOptions::new()
                .precision(Precision::Fp32)
                .optimizer(Optimizer::Lion)
                .learning_rate(0.003)
                .loss_scaling(LossScaling::Dynamic, 1024.0),
        ),
        // AdamW's own decay; the precision Auto resolves to.
        Recipe {
            name: "Huber loss, AdamW, precision Auto",
            options: TrainerOptions::new()
                .loss(Loss::Huber)
                .huber_delta(0.3)
                .optimizer(Optimizer::AdamW),
            head: Activation::Linear,
            hidden_dropout: 0.0,
            targets: true,
        },
    ]
}

fn recipe_model(ctx: &Context, recipe: &Recipe) -> Model {
    let mut model = Model::new(ctx, FEATURES).unwrap();
    model
        .add_dense(16, Activation::Relu)
        .unwrap()
        .add_dense(CLASSES as i64, recipe.head)
        .unwrap();
    model.set_layer_dropout(0, recipe.hidden_dropout).unwrap();
    model
}

fn recipe_data(ctx: &Context, recipe: &Recipe) -> Dataset {
    let (x, y) = blobs(90, 6);
    if recipe.targets {
        Dataset::from_f32_targets(ctx, &x, FEATURES, &one_hot(&y), CLASSES as i64, true).unwrap()
    } else {
        Dataset::from_f32(ctx, &x, FEATURES, &y, CLASSES, true).unwrap()
    }
}

/// What options read from `trainer`'s checkpoint must be: its own ([`Trainer::options`]), but
/// for the precision and loss scaling it runs (Default: dynamic in fp16, else off, as the header
/// has it) and the micro-batch size no checkpoint records.
fn as_read_from_its_checkpoint(trainer: &Trainer) -> TrainerOptions {
    let options = trainer.options().unwrap();
    let precision = trainer.precision().unwrap();
    let (mode, scale) = options.get_loss_scaling().unwrap();
    let mode = match mode {
        LossScaling::Default if precision == Precision::MixedFp16 => LossScaling::Dynamic,
        LossScaling::Default => LossScaling::Off,
        given => given,
    };
    options
        .precision(precision)
        .loss_scaling(mode, scale)
        .micro_batch_size(0)
}

#[test]
fn a_run_resumed_from_its_checkpoint_alone_ends_bit_for_bit_as_the_run_that_went_on() {
    let dir = TempDir::new("checkpoint-options");
    let path = dir.join("run.safetensors");
    for recipe in recipes() {
        let name = recipe.name;
        let ctx = seeded_context(11);
        let mut model = recipe_model(&ctx, &recipe);
        let mut original = Trainer::new(&model, &recipe.options).unwrap();
        let data = recipe_data(&ctx, &recipe);
        original.fit(&data, 2, BATCH, true).unwrap();
        // The run's base rate changed since its options: the file's is the run's.
        let rate = original.learning_rate().unwrap() * 0.5;
        original.set_learning_rate(rate).unwrap();
        original.save_checkpoint(&path).unwrap();
        let saved = weight_bits(&mut model);

        let read = TrainerOptions::from_checkpoint(&path).unwrap();
        assert_eq!(read.get_learning_rate(), Some(rate), "{name}");
        assert_ne!(
            recipe.options.get_learning_rate(),
            Some(rate),
            "{name}: not the options' rate"
        );
        assert_eq!(read.get_micro_batch_size(), 0, "{name}");
        assert_eq!(read, as_read_from_its_checkpoint(&original), "{name}");

        // Another seed: what the resumed run has, it has from the file.
        let resumed_ctx = seeded_context(99);
        let mut resumed_model = Model::load(&resumed_ctx, &path).unwrap();
        let options = TrainerOptions::from_checkpoint(&path)
            .unwrap()
            .micro_batch_size(recipe.options.get_micro_batch_size());
        let mut resumed = Trainer::new(&resumed_model, &options).unwrap();
        assert_eq!(resumed.batch_size().unwrap(), 0, "{name}: before any batch");
        resumed.load_checkpoint(&path).unwrap();
        assert_eq!(original.batch_size().unwrap(), BATCH, "{name}");
        assert_eq!(
            resumed.batch_size().unwrap(),
            BATCH,
            "{name}: the saved run's, restored"
        );
        assert_eq!(resumed.precision(), original.precision(), "{name}");

        original.fit(&data, 2, BATCH, true).unwrap();
        resumed
            .fit(&recipe_data(&resumed_ctx, &recipe), 2, BATCH, true)
            .unwrap();
        let trained = weight_bits(&mut model);
        assert_ne!(trained, saved, "{name}: the last epochs move the weights");
        assert!(
            weight_bits(&mut resumed_model) == trained,
            "{name}: the resumed run ends bit for bit as the original"
        );
        assert_eq!(resumed.loss_scale(), original.loss_scale(), "{name}");
        if read.get_precision() == Some(Precision::MixedFp16) {
            let skipped = original.loss_scale().unwrap().skipped_steps;
            assert!(skipped > 0, "{name}: steps overflow, the scale moves");
        }
        assert_eq!(resumed.progress(), original.progress(), "{name}");
        assert_eq!(
            resumed.learning_rate().unwrap().to_bits(),
            original.learning_rate().unwrap().to_bits(),
            "{name}"
        );
        if recipe.options.get_ema_momentum().is_some() {
            assert!(original.swap_ema_weights().unwrap());
            assert!(resumed.swap_ema_weights().unwrap());
            assert!(
                weight_bits(&mut resumed_model) == weight_bits(&mut model),
                "{name}: the weights' averages too"
            );
        }
    }
}

#[test]
fn options_read_from_a_checkpoint_have_the_precision_and_loss_scaling_resolved_and_no_micro_batches(
) {
    let dir = TempDir::new("checkpoint-options");
    let path = dir.join("run.safetensors");
    let ctx = context();
    // Auto's precision: on this CPU bf16 with AMX, else fp32; its Default scaling is off either way.
    let auto = ctx.resolve_precision(Precision::Auto).unwrap();
    assert_ne!(auto, Precision::Auto);
    for (precision, scaling, ran, expected_scaling) in [
        (
            Precision::MixedFp16,
            LossScaling::Default,
            Precision::MixedFp16,
            LossScaling::Dynamic,
        ),
        (
            Precision::MixedBf16,
            LossScaling::Default,
            Precision::MixedBf16,
            LossScaling::Off,
        ),
        (
            Precision::Fp32,
            LossScaling::Default,
            Precision::Fp32,
            LossScaling::Off,
        ),
        (
            Precision::Fp32,
            LossScaling::Static,
            Precision::Fp32,
            LossScaling::Static,
        ),
        (Precision::Auto, LossScaling::Off, auto, LossScaling::Off),
        (
            Precision::Auto,
            LossScaling::Default,
            auto,
            LossScaling::Off,
        ),
    ] {
        let case = format!("{precision:?} {scaling:?}");
        let model = mlp(&ctx);
        let given = TrainerOptions::new()
            .precision(precision)
            .loss_scaling(scaling, 256.0)
            .optimizer(Optimizer::AdamW)
            .micro_batch_size(4);
        let mut trainer = Trainer::new(&model, &given).unwrap();
        trainer
            .fit(&blob_data(&ctx, 30, 3), 1, BATCH, true)
            .unwrap();
        trainer.save_checkpoint(&path).unwrap();

        let read = TrainerOptions::from_checkpoint(&path).unwrap();
        assert_eq!(trainer.precision().unwrap(), ran, "{case}");
        assert_eq!(read.get_precision(), Some(ran), "{case}");
        assert_eq!(
            read.get_loss_scaling(),
            Some((expected_scaling, 256.0)),
            "{case}"
        );
        assert_eq!(read.get_micro_batch_size(), 0, "{case}: never recorded");
        assert_eq!(
            read,
            trainer
                .options()
                .unwrap()
                .precision(ran)
                .loss_scaling(expected_scaling, 256.0)
                .micro_batch_size(0),
            "{case}"
        );

        // They make a trainer taking the file, of the same precision; every value is set, so
        // AdamW's decay stays under another optimizer, as a decay set would.
        let mut from_file = Trainer::new(&Model::load(&ctx, &path).unwrap(), &read).unwrap();
        from_file.load_checkpoint(&path).unwrap();
        assert_eq!(from_file.precision().unwrap(), ran, "{case}");
        let sgd = Trainer::new(&mlp(&ctx), &read.optimizer(Optimizer::Sgd)).unwrap();
        assert_eq!(
            sgd.options().unwrap().get_weight_decay(),
            Some(0.004),
            "{case}"
        );
    }
}

/// Where the first `text` in `bytes` ends.
fn after(bytes: &[u8], text: &[u8]) -> usize {
    let at = bytes.windows(text.len()).position(|window| window == text);
    at.unwrap_or_else(|| panic!("{} not in the file", String::from_utf8_lossy(text))) + text.len()
}

/// The header checksum of an mptrain file recomputed as the format describes it (as
/// tests/support/edited_header.h does): the textbook CRC32C of the 8-byte header length and the
/// header, the checksum's own 8 hex digits read as '0'.
fn rechecksum(file: &mut [u8]) {
    let header_end = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let digits = after(&file[..header_end], b"\"mptrain.crc32c.__metadata__\":\"");
    file[digits..digits + 8].copy_from_slice(b"00000000");
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in &file[..header_end] {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    file[digits..digits + 8].copy_from_slice(format!("{:08x}", !crc).as_bytes());
}

fn refused(path: impl AsRef<Path>, status: Status) {
    let path = path.as_ref();
    let error = TrainerOptions::from_checkpoint(path).expect_err(&format!("{path:?} refused"));
    assert_eq!(error.status, status, "{path:?}: {error}");
    assert!(!error.message.is_empty(), "{path:?}: a message says why");
}

#[test]
fn a_model_file_a_missing_and_a_damaged_file_give_no_options_and_say_why() {
    let dir = TempDir::new("checkpoint-options");
    let ctx = context();
    let model = mlp(&ctx);
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    let model_file = dir.join("model.safetensors");
    let checkpoint = dir.join("run.safetensors");
    model.save(&model_file).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();

    refused(&model_file, Status::InvalidArgument);
    refused(dir.join("missing.safetensors"), Status::IoError);
    let bytes = std::fs::read(&checkpoint).unwrap();
    let truncated = dir.join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    refused(&truncated, Status::CorruptData);
    // Another major version: the version's first digit made 9, the header's checksum made again.
    let mut future = bytes.clone();
    let version = after(&future, b"\"mptrain.version\":\"");
    future[version] = b'9';
    rechecksum(&mut future);
    let future_file = dir.join("future.safetensors");
    std::fs::write(&future_file, &future).unwrap();
    refused(&future_file, Status::Unsupported);
    // The binding's own check: C strings end at a NUL.
    refused("bad\0path", Status::InvalidArgument);

    // The checkpoint itself is fine.
    assert_eq!(
        TrainerOptions::from_checkpoint(&checkpoint).unwrap(),
        as_read_from_its_checkpoint(&trainer)
    );
}
