//! Trains a small MLP on generated data (three Gaussian blobs in 8 dimensions) and prints accuracy.
//!   MPTRAIN_LIB_DIR=/path/to/build/lib cargo run --offline --example train_mlp
use mptrain::{Activation, Backend, Context, Dataset, Model, Optimizer, Trainer, TrainerOptions};
use std::ops::ControlFlow;

const FEATURES: i64 = 8;
const CLASSES: i32 = 3;

/// A tiny deterministic generator (xorshift64*), so the example needs no crates.
struct Rng(u64);
impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(2685821657736338717) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        ((-2.0 * (self.uniform() + 1e-12).ln()).sqrt()
            * (std::f64::consts::TAU * self.uniform()).cos()) as f32
    }
}

fn blobs(rows: usize, rng: &mut Rng) -> (Vec<f32>, Vec<i32>) {
    let mut samples = Vec::with_capacity(rows * FEATURES as usize);
    let mut labels = Vec::with_capacity(rows);
    for row in 0..rows {
        let label = (row % CLASSES as usize) as i32;
        for feature in 0..FEATURES {
            let centre = if feature % CLASSES as i64 == label as i64 {
                2.0
            } else {
                0.0
            };
            samples.push(centre + 0.7 * rng.normal());
        }
        labels.push(label);
    }
    (samples, labels)
}

fn main() -> mptrain::Result<()> {
    println!("mptrain {}", mptrain::version());
    let mut rng = Rng(2024);
    let (train_x, train_y) = blobs(900, &mut rng);
    let (test_x, test_y) = blobs(300, &mut rng);

    let ctx = Context::builder().backend(Backend::Cpu).seed(7).build()?;
    let mut model = Model::new(&ctx, FEATURES)?;
    model
        .add_dense(32, Activation::Relu)?
        .add_dense(CLASSES as i64, Activation::Softmax)?;
    let train = Dataset::from_f32(&ctx, &train_x, FEATURES, &train_y, CLASSES, true)?;
    let test = Dataset::from_f32(&ctx, &test_x, FEATURES, &test_y, CLASSES, true)?;

    let options = TrainerOptions::new()
        .optimizer(Optimizer::Adam)
        .learning_rate(0.01);
    let mut trainer = Trainer::new(&model, &options)?;
    trainer.on_epoch_end(|end| {
        println!(
            "epoch {}: loss {:.4} accuracy {:.3}",
            end.epoch, end.loss, end.accuracy
        );
        ControlFlow::Continue(())
    })?;
    trainer.fit(&train, 5, 32, true)?;

    let result = trainer.evaluate(&test, 0)?;
    println!(
        "test accuracy {:.3} (loss {:.4}), {} parameters",
        result.accuracy,
        result.loss,
        model.parameter_count()?
    );
    let probabilities = trainer.predict(&test_x[..FEATURES as usize])?;
    println!(
        "first test sample (class {}): p = {:?}",
        test_y[0], probabilities
    );
    Ok(())
}
