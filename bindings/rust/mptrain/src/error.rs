//! Why a call failed: [`Status`] (the C API's `mpt_status`), [`Error`] (a status and the library's
//! message), and `check`, which every C call's status goes through.

use mptrain_sys as sys;
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;

/// Why a call failed: the C API's `mpt_status` values (other than OK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// NULL handle or pointer, out-of-range value, bad name.
    InvalidArgument,
    /// Data width or label count does not fit the model.
    ShapeMismatch,
    /// Allocation failed or the context's memory budget is exceeded.
    OutOfMemory,
    /// A file could not be opened, read or written.
    IoError,
    /// A file has the wrong size, bad labels or bad structure.
    CorruptData,
    /// The call is not allowed now (e.g. adding a layer after use).
    InvalidState,
    /// NaN/Inf in input data, or a non-finite loss in training.
    NonFinite,
    /// A callback asked to stop.
    Cancelled,
    /// The requested backend is not built in or has no device.
    BackendUnavailable,
    /// The backend (e.g. a CUDA call) failed.
    BackendError,
    /// The combination of options is not supported.
    Unsupported,
    /// A bug in mptrain.
    Internal,
    /// A status newer than these bindings.
    Unknown(i32),
}

impl Status {
    /// The status for a C value; `None` for `MPT_STATUS_OK`.
    pub fn from_code(code: c_int) -> Option<Status> {
        Some(match code {
            sys::MPT_STATUS_OK => return None,
            sys::MPT_STATUS_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::MPT_STATUS_SHAPE_MISMATCH => Status::ShapeMismatch,
            sys::MPT_STATUS_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::MPT_STATUS_IO_ERROR => Status::IoError,
            sys::MPT_STATUS_CORRUPT_DATA => Status::CorruptData,
            sys::MPT_STATUS_INVALID_STATE => Status::InvalidState,
            sys::MPT_STATUS_NON_FINITE => Status::NonFinite,
            sys::MPT_STATUS_CANCELLED => Status::Cancelled,
            sys::MPT_STATUS_BACKEND_UNAVAILABLE => Status::BackendUnavailable,
            sys::MPT_STATUS_BACKEND_ERROR => Status::BackendError,
            sys::MPT_STATUS_UNSUPPORTED => Status::Unsupported,
            sys::MPT_STATUS_INTERNAL => Status::Internal,
            other => Status::Unknown(other),
        })
    }

    /// The C value.
    pub fn code(self) -> c_int {
        match self {
            Status::InvalidArgument => sys::MPT_STATUS_INVALID_ARGUMENT,
            Status::ShapeMismatch => sys::MPT_STATUS_SHAPE_MISMATCH,
            Status::OutOfMemory => sys::MPT_STATUS_OUT_OF_MEMORY,
            Status::IoError => sys::MPT_STATUS_IO_ERROR,
            Status::CorruptData => sys::MPT_STATUS_CORRUPT_DATA,
            Status::InvalidState => sys::MPT_STATUS_INVALID_STATE,
            Status::NonFinite => sys::MPT_STATUS_NON_FINITE,
            Status::Cancelled => sys::MPT_STATUS_CANCELLED,
            Status::BackendUnavailable => sys::MPT_STATUS_BACKEND_UNAVAILABLE,
            Status::BackendError => sys::MPT_STATUS_BACKEND_ERROR,
            Status::Unsupported => sys::MPT_STATUS_UNSUPPORTED,
            Status::Internal => sys::MPT_STATUS_INTERNAL,
            Status::Unknown(code) => code,
        }
    }

    /// The library's name for it, e.g. `"MPT_STATUS_SHAPE_MISMATCH"`.
    pub fn name(self) -> &'static str {
        // Static text owned by the library.
        unsafe { CStr::from_ptr(sys::mpt_status_string(self.code())) }
            .to_str()
            .unwrap_or("MPT_STATUS_UNKNOWN")
    }
}

/// A failed call: the status and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub status: Status,
    /// The library's explanation (from `mpt_last_error()`), or the binding's for checks made here.
    pub message: String,
}

impl Error {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a C status into a Result; the message is read on this thread right after the call.
pub(crate) fn check(code: c_int) -> Result<()> {
    match Status::from_code(code) {
        None => Ok(()),
        Some(status) => {
            let message = unsafe { CStr::from_ptr(sys::mpt_last_error()) }
                .to_string_lossy()
                .into_owned();
            Err(Error { status, message })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_codes() {
        for code in 1..=12 {
            let status = Status::from_code(code).unwrap();
            assert_eq!(status.code(), code);
            assert!(status.name().starts_with("MPT_STATUS_"));
        }
        assert_eq!(Status::from_code(0), None);
        assert_eq!(Status::from_code(99), Some(Status::Unknown(99)));
        assert_eq!(Status::Unknown(99).name(), "MPT_STATUS_UNKNOWN");
    }

    #[test]
    fn errors_display_status_and_message() {
        let error = Error::new(Status::ShapeMismatch, "output count is 5, expected 6");
        assert_eq!(
            error.to_string(),
            "MPT_STATUS_SHAPE_MISMATCH: output count is 5, expected 6"
        );
    }
}
