//! The lock behind the per-context lock: reentrant, so that a callback running inside `fit` may call
//! back into the same context.

use std::sync::{Condvar, Mutex};
use std::thread::{self, ThreadId};

/// A reentrant lock: the thread holding it may take it again (a callback running inside `fit` may
/// call other functions of the same context).
#[derive(Default)]
pub(crate) struct ReentrantLock {
    state: Mutex<(Option<ThreadId>, usize)>,
    released: Condvar,
}

pub(crate) struct LockGuard<'a>(&'a ReentrantLock);

impl ReentrantLock {
    pub(crate) fn lock(&self) -> LockGuard<'_> {
        let me = thread::current().id();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            match state.0 {
                None => {
                    *state = (Some(me), 1);
                    break;
                }
                Some(owner) if owner == me => {
                    state.1 += 1;
                    break;
                }
                Some(_) => {
                    state = self
                        .released
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                }
            }
        }
        LockGuard(self)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        let mut state = self
            .0
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.1 -= 1;
        if state.1 == 0 {
            state.0 = None;
            self.0.released.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_context_lock_is_reentrant_and_exclusive() {
        let lock = Arc::new(ReentrantLock::default());
        let outer = lock.lock();
        let inner = lock.lock();
        let other = {
            let lock = lock.clone();
            thread::spawn(move || {
                let _held = lock.lock();
                thread::current().id()
            })
        };
        thread::sleep(std::time::Duration::from_millis(20));
        assert!(!other.is_finished(), "another thread took a held lock");
        drop(inner);
        thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !other.is_finished(),
            "released after one of two nested guards"
        );
        drop(outer);
        other.join().unwrap();
    }
}
