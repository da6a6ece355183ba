//! What the loaded C library says of itself: its version and the CUDA devices it sees.

use mptrain_sys as sys;
use std::ffi::CStr;

/// Version of the loaded library, e.g. `"0.1.0"`.
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::mpt_version()) }
        .to_str()
        .unwrap_or("")
}

/// Number of usable CUDA devices (0 without CUDA).
pub fn cuda_device_count() -> i32 {
    unsafe { sys::mpt_cuda_device_count() }
}
