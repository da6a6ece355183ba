//! What the safe types pass to C, checked and converted: lengths as counts, whole rows, the library's
//! limit on host elements, zeroed buffers for C to fill, and paths.

use crate::error::{Error, Result, Status};
use std::ffi::CString;
use std::path::Path;

pub(crate) fn count(len: usize) -> i64 {
    len as i64
}

pub(crate) fn rows_of(values: usize, width: i64, what: &str) -> Result<i64> {
    if values == 0 && width > 0 {
        // (The library refuses zero rows too; said here in the caller's terms, not as a count.)
        return Err(Error::new(
            Status::ShapeMismatch,
            format!("{what} has no rows: at least one is needed"),
        ));
    }
    if width <= 0 || values == 0 || values as i64 % width != 0 {
        return Err(Error::new(
            Status::ShapeMismatch,
            format!("{what} holds {values} values, not whole rows of {width}"),
        ));
    }
    Ok(values as i64 / width)
}

/// The most elements the library accepts in one caller's array (a data set's samples, a prediction's
/// inputs or outputs): `MPT_MAX_HOST_ELEMENTS` in mptrain.h. Checked here too, so that what the
/// library would refuse is refused before this crate allocates for it.
const MAX_HOST_ELEMENTS: i64 = 1 << 40;

/// `rows * width` (both positive) as an element count, refused as the library refuses it: the same
/// status and message.
pub(crate) fn host_elements(rows: i64, width: i64, what: &str) -> Result<i64> {
    match rows.checked_mul(width) {
        Some(elements) if elements <= MAX_HOST_ELEMENTS => Ok(elements),
        _ => Err(Error::new(
            Status::InvalidArgument,
            format!("{what} would hold more than 2^40 elements"),
        )),
    }
}

/// `len` zeroed values (floats, labels) for C to fill. A failed allocation is an error, as it is in
/// C, rather than the abort of `vec!`.
pub(crate) fn zeroed<T: Copy + Default>(len: i64) -> Result<Vec<T>> {
    let out_of_memory = || Error::new(Status::OutOfMemory, "out of host memory");
    let len = usize::try_from(len).map_err(|_| out_of_memory())?;
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len).map_err(|_| out_of_memory())?;
    buffer.resize(len, T::default());
    Ok(buffer)
}

pub(crate) fn zeroed_floats(len: i64) -> Result<Vec<f32>> {
    zeroed(len)
}

/// The output buffer of a prediction on `rows` rows, after the library's checks of them (the inputs,
/// then the outputs, within MAX_HOST_ELEMENTS).
pub(crate) fn prediction_output(
    rows: i64,
    input_features: i64,
    output_features: i64,
) -> Result<Vec<f32>> {
    host_elements(rows, input_features, "the inputs (rows * input features)")?;
    zeroed_floats(host_elements(
        rows,
        output_features.max(1),
        "the outputs (rows * output features)",
    )?)
}

/// A path for C: UTF-8 (the C API's strings are) without NUL.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    let text = path
        .to_str()
        .ok_or_else(|| Error::new(Status::InvalidArgument, "path is not UTF-8"))?;
    CString::new(text).map_err(|_| Error::new(Status::InvalidArgument, "path contains NUL"))
}
