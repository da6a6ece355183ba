//! Shared by the integration tests: a CPU context, generated, separable data, the usual model and
//! options, and bit-pattern readers for comparing runs bit for bit.
#![allow(dead_code)]
use mptrain::{
    Activation, Backend, Context, Dataset, Evaluation, Model, Optimizer, TrainerOptions,
};

pub const FEATURES: i64 = 4;
pub const CLASSES: i32 = 3;

pub fn context() -> Context {
    seeded_context(7)
}

/// A one-thread CPU context of this seed: contexts of one seed start from the same initial weights
/// and shuffles.
pub fn seeded_context(seed: u64) -> Context {
    Context::builder()
        .backend(Backend::Cpu)
        .threads(1)
        .seed(seed)
        .build()
        .expect("context")
}

/// FEATURES inputs, 16 ReLU units, a softmax over CLASSES.
pub fn mlp(ctx: &Context) -> Model {
    let mut model = Model::new(ctx, FEATURES).unwrap();
    model
        .add_dense(16, Activation::Relu)
        .unwrap()
        .add_dense(CLASSES as i64, Activation::Softmax)
        .unwrap();
    model
}

/// Adam at 0.01, every other option the library's default.
pub fn adam() -> TrainerOptions {
    TrainerOptions::new()
        .optimizer(Optimizer::Adam)
        .learning_rate(0.01)
}

/// Each label as a row of CLASSES float targets, 1 at the label.
pub fn one_hot(labels: &[i32]) -> Vec<f32> {
    let classes = CLASSES as usize;
    let mut targets = vec![0.0f32; labels.len() * classes];
    for (row, &label) in labels.iter().enumerate() {
        targets[row * classes + label as usize] = 1.0;
    }
    targets
}

pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// An evaluation's loss and accuracy as bit patterns.
pub fn evaluation_bits(evaluation: Evaluation) -> (u32, u32) {
    (evaluation.loss.to_bits(), evaluation.accuracy.to_bits())
}

/// Every layer's fp32 weights and biases as bit patterns: equal only when bit-identical.
pub fn weight_bits(model: &mut Model) -> Vec<u32> {
    (0..model.layer_count().unwrap() as usize)
        .flat_map(|layer| {
            let (weights, bias) = model.weights(layer).unwrap();
            weights
                .into_iter()
                .chain(bias)
                .map(f32::to_bits)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A loss within 1e-5 of the one recomputed in f64, relatively.
pub fn assert_close(actual: f32, expected: f64, what: &str) {
    assert!(
        (actual as f64 - expected).abs() <= 1e-5 * expected.abs(),
        "{what}: {actual} against {expected}"
    );
}

/// `rows` samples of FEATURES floats around one of three centres, labels 0..3.
pub fn blobs(rows: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut noise = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        ((state.wrapping_mul(2685821657736338717) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1.2
    };
    let mut samples = Vec::new();
    let mut labels = Vec::new();
    for row in 0..rows {
        let label = (row % CLASSES as usize) as i32;
        for feature in 0..FEATURES {
            samples.push(
                if feature % CLASSES as i64 == label as i64 {
                    2.5
                } else {
                    0.0
                } + noise(),
            );
        }
        labels.push(label);
    }
    (samples, labels)
}

/// `blobs(rows, seed)` as a dataset of labels (checked for non-finite values).
pub fn blob_data(ctx: &Context, rows: usize, seed: u64) -> Dataset {
    let (x, y) = blobs(rows, seed);
    Dataset::from_f32(ctx, &x, FEATURES, &y, CLASSES, true).unwrap()
}

/// A fresh directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "mptrain-rust-{name}-{}-{unique}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir(path)
    }

    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
