//! Shared by the integration tests: a CPU context and generated, separable data.
#![allow(dead_code)]
use mptrain::{Backend, Context};

pub const FEATURES: i64 = 4;
pub const CLASSES: i32 = 3;

pub fn context() -> Context {
    Context::builder()
        .backend(Backend::Cpu)
        .threads(1)
        .seed(7)
        .build()
        .expect("context")
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
