//! [`Context`] and its builder: the backend, threads, seed and log callback shared by the models,
//! datasets and trainers made from it.

use crate::enums::{Backend, LogLevel, Precision};
use crate::error::{check, Result};
use crate::family::{log_trampoline, Family, LogCallback, Logger, RawHandle};
use crate::owned_options::OwnedOptions;
use crate::reentrant_lock::ReentrantLock;
use mptrain_sys as sys;
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

// Named only in doc links.
#[cfg(doc)]
use crate::Status;

/// Options of a [`Context`]; unset values keep the library's defaults (backend Auto, all cores,
/// seed 42, device 0, log level Info, no memory budget).
#[derive(Default)]
pub struct ContextBuilder {
    backend: Option<Backend>,
    threads: Option<i32>,
    seed: Option<u64>,
    device: Option<i32>,
    log_level: Option<LogLevel>,
    memory_budget: Option<usize>,
    dataset_device_budget: Option<usize>,
    log: Option<LogCallback>,
}

impl ContextBuilder {
    /// The backend to run on.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }
    /// CPU compute threads; 0 = number of cores.
    pub fn threads(mut self, threads: i32) -> Self {
        self.threads = Some(threads);
        self
    }
    /// Seed of initialisation and shuffling.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// CUDA device index.
    pub fn device(mut self, device: i32) -> Self {
        self.device = Some(device);
        self
    }
    /// Minimum level passed to the log callback.
    pub fn log_level(mut self, level: LogLevel) -> Self {
        self.log_level = Some(level);
        self
    }
    /// Upper bound on the arena bytes of the context; 0 = unlimited.
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }
    /// Device bytes one data set may occupy on a GPU; larger ones are streamed from host memory.
    pub fn dataset_device_budget(mut self, bytes: usize) -> Self {
        self.dataset_device_budget = Some(bytes);
        self
    }
    /// Receives the library's log messages, on the thread making the call. Calls on objects of this
    /// context fail there with [`Status::InvalidState`] (see the crate's documentation).
    pub fn log(mut self, callback: impl FnMut(LogLevel, &str) + Send + 'static) -> Self {
        self.log = Some(Box::new(callback));
        self
    }

    /// Creates the context.
    pub fn build(self) -> Result<Context> {
        let mut raw_options = ptr::null_mut();
        check(unsafe { sys::mpt_context_options_create(&mut raw_options) })?;
        let options = OwnedOptions(raw_options, sys::mpt_context_options_destroy);
        unsafe {
            if let Some(backend) = self.backend {
                check(sys::mpt_context_options_set_backend(
                    options.0,
                    backend.code(),
                ))?;
            }
            if let Some(threads) = self.threads {
                check(sys::mpt_context_options_set_threads(options.0, threads))?;
            }
            if let Some(seed) = self.seed {
                check(sys::mpt_context_options_set_seed(options.0, seed))?;
            }
            if let Some(device) = self.device {
                check(sys::mpt_context_options_set_device(options.0, device))?;
            }
            if let Some(level) = self.log_level {
                check(sys::mpt_context_options_set_log_level(
                    options.0,
                    level.code(),
                ))?;
            }
            if let Some(bytes) = self.memory_budget {
                check(sys::mpt_context_options_set_memory_budget(options.0, bytes))?;
            }
            if let Some(bytes) = self.dataset_device_budget {
                check(sys::mpt_context_options_set_dataset_device_budget(
                    options.0, bytes,
                ))?;
            }
        }
        let log = self.log.map(|callback| {
            Box::new(Logger {
                callback: Mutex::new(callback),
                running: AtomicBool::new(false),
            })
        });
        if let Some(logger) = &log {
            let user_data = &**logger as *const Logger as *mut c_void;
            check(unsafe {
                sys::mpt_context_options_set_log_callback(
                    options.0,
                    Some(log_trampoline),
                    user_data,
                )
            })?;
        }
        let family = Arc::new(Family {
            lock: ReentrantLock::default(),
            log,
            deferred: Mutex::default(),
        });
        let mut raw = ptr::null_mut();
        check(unsafe { sys::mpt_context_create(options.0, &mut raw) })?;
        Ok(Context {
            raw: NonNull::new(raw).expect("mpt_context_create returned NULL"),
            family,
        })
    }
}

/// Backend, threads, seed and log callback; parent of models and datasets.
pub struct Context {
    pub(crate) raw: NonNull<sys::mpt_context_t>,
    pub(crate) family: Arc<Family>,
}

// SAFETY: the C handle may be used from any thread, one at a time; &self methods take the context's
// lock. Not Sync (the raw pointer makes that automatic).
unsafe impl Send for Context {}

/// Arena bytes of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// Held now.
    pub used: usize,
    /// The most ever held.
    pub peak: usize,
}

impl Context {
    /// A context with the library's defaults.
    pub fn new() -> Result<Context> {
        ContextBuilder::default().build()
    }
    /// Options for a new context.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }
    /// The backend this context runs on (never Auto).
    pub fn backend(&self) -> Result<Backend> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe { sys::mpt_context_get_backend(self.raw.as_ptr(), &mut out) })?;
        Backend::returned(out)
    }
    /// What a requested precision resolves to here (Auto on the CPU: bf16 with AMX, else fp32).
    pub fn resolve_precision(&self, requested: Precision) -> Result<Precision> {
        let _lock = self.family.enter()?;
        let mut out = 0;
        check(unsafe {
            sys::mpt_context_resolve_precision(self.raw.as_ptr(), requested.code(), &mut out)
        })?;
        Precision::returned(out)
    }
    /// Arena bytes held now and at most.
    pub fn memory(&self) -> Result<Memory> {
        let _lock = self.family.enter()?;
        let (mut used, mut peak) = (0, 0);
        check(unsafe { sys::mpt_context_get_memory(self.raw.as_ptr(), &mut used, &mut peak) })?;
        Ok(Memory { used, peak })
    }
    /// What this context runs on and how, as one JSON object (`mpt_context_describe`): "version",
    /// "backend" ("cpu" or "cuda"), "device", "auto_fallback", the memory counters, then the
    /// backend's own members ("threads", ... on the CPU; "device_index", "switches", ... on CUDA).
    pub fn describe(&self) -> Result<String> {
        // One lock around both calls: no call on this context's objects can change the text between.
        let _lock = self.family.enter()?;
        let mut length = 0;
        check(unsafe {
            sys::mpt_context_describe(self.raw.as_ptr(), ptr::null_mut(), 0, &mut length)
        })?;
        let mut text = vec![0u8; length + 1]; // and C's NUL
        check(unsafe {
            sys::mpt_context_describe(
                self.raw.as_ptr(),
                text.as_mut_ptr().cast(),
                text.len(),
                &mut length,
            )
        })?;
        text.truncate(length);
        // The C API's strings are UTF-8; a stray byte is not worth failing a description for.
        Ok(String::from_utf8(text)
            .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        self.family.destroy(RawHandle::Context(self.raw));
    }
}
