//! A C options handle destroyed on drop, so that a setter or getter failing halfway (an early `?`)
//! leaks nothing.

use crate::error::{check, Result};
use mptrain_sys as sys;

/// Owns a C options handle while it is filled in or read.
pub(crate) struct OwnedOptions<T>(pub(crate) *mut T, pub(crate) unsafe extern "C" fn(*mut T));
impl<T> Drop for OwnedOptions<T> {
    fn drop(&mut self) {
        unsafe { (self.1)(self.0) }
    }
}

impl OwnedOptions<sys::mpt_trainer_options_t> {
    /// The value a getter of one value reads.
    pub(crate) fn get<V: Default>(
        &self,
        getter: unsafe extern "C" fn(*const sys::mpt_trainer_options_t, *mut V) -> sys::mpt_status,
    ) -> Result<V> {
        let mut out = V::default();
        // SAFETY: the handle lives as long as self; `out` is a local.
        check(unsafe { getter(self.0, &mut out) })?;
        Ok(out)
    }
}
