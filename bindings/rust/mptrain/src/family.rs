//! What the objects of one context share (their family): the lock every call takes, the log callback,
//! and the destruction of their C handles, deferred when one is dropped inside that callback.

use crate::enums::LogLevel;
use crate::error::{Error, Result, Status};
use crate::fit_callbacks::Callbacks;
use crate::reentrant_lock::{LockGuard, ReentrantLock};
use mptrain_sys as sys;
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

pub(crate) type LogCallback = Box<dyn FnMut(LogLevel, &str) + Send>;

/// The log callback, given to C as user_data.
pub(crate) struct Logger {
    pub(crate) callback: Mutex<LogCallback>,
    /// Set while the callback runs. C logs only from calls made under the family's lock (and from
    /// mpt_context_create, before anything else can reach the family), so a thread that takes the
    /// lock and finds this set is the logging thread, calling back from its callback; the lock also
    /// orders the accesses, hence Relaxed.
    pub(crate) running: AtomicBool,
}

/// A C handle to destroy, with what must be freed after it.
pub(crate) enum RawHandle {
    Context(NonNull<sys::mpt_context_t>),
    Model(NonNull<sys::mpt_model_t>),
    Dataset(NonNull<sys::mpt_dataset_t>),
    Trainer(NonNull<sys::mpt_trainer_t>, NonNull<Callbacks>),
}

// SAFETY: as for the objects that owned them.
unsafe impl Send for RawHandle {}

impl RawHandle {
    /// Destroys the C handle; returns a trainer's closures, which C can no longer call, to be dropped
    /// by the caller outside the family's lock (they may own objects of other contexts).
    fn destroy(self) -> Option<Box<Callbacks>> {
        unsafe {
            match self {
                RawHandle::Context(raw) => sys::mpt_context_destroy(raw.as_ptr()),
                RawHandle::Model(raw) => sys::mpt_model_destroy(raw.as_ptr()),
                RawHandle::Dataset(raw) => sys::mpt_dataset_destroy(raw.as_ptr()),
                RawHandle::Trainer(raw, callbacks) => {
                    sys::mpt_trainer_destroy(raw.as_ptr());
                    return Some(Box::from_raw(callbacks.as_ptr()));
                }
            }
        }
        None
    }
}

/// Shared by every object created from one context: the lock, and the log callback, which must live
/// as long as any C handle of the context may call it (the C handles are destroyed before this).
pub(crate) struct Family {
    pub(crate) lock: ReentrantLock,
    pub(crate) log: Option<Box<Logger>>,
    /// Handles dropped inside the log callback, destroyed once the call that logged has returned.
    pub(crate) deferred: Mutex<Vec<RawHandle>>,
}

/// The family's lock, held for a C call.
pub(crate) struct Entered<'a> {
    family: &'a Family,
    lock: Option<LockGuard<'a>>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // The C call has returned: destroy what its log callback dropped.
        let deferred = std::mem::take(
            &mut *self
                .family
                .deferred
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let callbacks: Vec<_> = deferred
            .into_iter()
            .filter_map(RawHandle::destroy)
            .collect();
        self.lock = None;
        drop(callbacks);
    }
}

impl Family {
    fn logging(&self) -> bool {
        self.log
            .as_ref()
            .is_some_and(|logger| logger.running.load(Ordering::Relaxed))
    }

    /// Locks the family for a C call. Refused inside its log callback: the C API forbids that
    /// callback to call back into mptrain on the same context, as the library may log halfway
    /// through a call, holding its own locks (a GPU data set logs with its upload mutex held).
    pub(crate) fn enter(&self) -> Result<Entered<'_>> {
        let lock = self.lock.lock();
        if self.logging() {
            return Err(Error::new(
                Status::InvalidState,
                "the log callback called back into mptrain on its own context, which the C API forbids",
            ));
        }
        Ok(Entered {
            family: self,
            lock: Some(lock),
        })
    }

    /// Enters this family and, when different, another one (in address order, so two threads
    /// locking the same pair cannot deadlock).
    pub(crate) fn enter_with<'a>(
        &'a self,
        other: &'a Family,
    ) -> Result<(Entered<'a>, Option<Entered<'a>>)> {
        let (a, b) = (self as *const Family, other as *const Family);
        Ok(if a == b {
            (self.enter()?, None)
        } else if a < b {
            let first = self.enter()?;
            (first, Some(other.enter()?))
        } else {
            let first = other.enter()?;
            (first, Some(self.enter()?))
        })
    }

    /// Destroys a handle (a drop cannot be refused); inside the log callback, once the call that
    /// logged has returned.
    pub(crate) fn destroy(&self, handle: RawHandle) {
        let callbacks = {
            let _lock = self.lock.lock();
            if self.logging() {
                self.deferred
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(handle);
                return;
            }
            handle.destroy()
        };
        drop(callbacks);
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        // Normally empty (emptied as each call returns); a handle dropped by the logger during a
        // destroy, which is no such call, could still wait here.
        let deferred = std::mem::take(
            self.deferred
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for handle in deferred {
            drop(handle.destroy());
        }
    }
}

pub(crate) unsafe extern "C" fn log_trampoline(
    level: sys::mpt_log_level,
    message: *const c_char,
    user_data: *mut c_void,
) {
    let logger = &*(user_data as *const Logger);
    // try_lock: a log call re-entered from the callback itself is dropped rather than aliased.
    if let Ok(mut callback) = logger.callback.try_lock() {
        let text = if message.is_null() {
            "".into()
        } else {
            CStr::from_ptr(message).to_string_lossy()
        };
        let level = LogLevel::from_code(level).unwrap_or(LogLevel::Error);
        logger.running.store(true, Ordering::Relaxed);
        // A panicking logger must not unwind into C; its message is dropped.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| callback(level, &text)));
        logger.running.store(false, Ordering::Relaxed);
    }
}
