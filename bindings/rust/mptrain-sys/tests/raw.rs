//! The raw declarations against the C side: enum values and function names against the header (the
//! specification), C type sizes against the C compiler (bindings/abi_probe.c, via MPTRAIN_ABI_PROBE),
//! and a few calls, NULL arguments included, which must return statuses rather than crash.
use mptrain_sys::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::ptr;

fn header() -> String {
    let path = std::env::var("MPTRAIN_HEADER").unwrap_or_else(|_| {
        format!(
            "{}/../../../include/mptrain/mptrain.h",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// `NAME = value` pairs of the header's enums.
fn header_enums() -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for line in header().lines() {
        let line = line.trim();
        if let Some((name, rest)) = line.split_once('=') {
            let name = name.trim();
            if name.starts_with("MPT_") && !name.contains(' ') {
                let value: String = rest
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '-')
                    .collect();
                out.insert(name.to_string(), value.parse().unwrap());
            }
        }
    }
    out
}

/// Names of the functions the header declares (`MPT_API ... mpt_name(`).
fn header_functions() -> BTreeSet<String> {
    let text = header();
    let mut out = BTreeSet::new();
    for chunk in text.split("MPT_API ").skip(1) {
        let before_paren = chunk.split('(').next().unwrap();
        if let Some(name) = before_paren
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .rfind(|s| !s.is_empty())
        {
            if name.starts_with("mpt_") {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn every_enum_value_matches_the_header() {
    let ours: &[(&str, c_int)] = &[
        ("MPT_STATUS_OK", MPT_STATUS_OK),
        ("MPT_STATUS_INVALID_ARGUMENT", MPT_STATUS_INVALID_ARGUMENT),
        ("MPT_STATUS_SHAPE_MISMATCH", MPT_STATUS_SHAPE_MISMATCH),
        ("MPT_STATUS_OUT_OF_MEMORY", MPT_STATUS_OUT_OF_MEMORY),
        ("MPT_STATUS_IO_ERROR", MPT_STATUS_IO_ERROR),
        ("MPT_STATUS_CORRUPT_DATA", MPT_STATUS_CORRUPT_DATA),
        ("MPT_STATUS_INVALID_STATE", MPT_STATUS_INVALID_STATE),
        ("MPT_STATUS_NON_FINITE", MPT_STATUS_NON_FINITE),
        ("MPT_STATUS_CANCELLED", MPT_STATUS_CANCELLED),
        (
            "MPT_STATUS_BACKEND_UNAVAILABLE",
            MPT_STATUS_BACKEND_UNAVAILABLE,
        ),
        ("MPT_STATUS_BACKEND_ERROR", MPT_STATUS_BACKEND_ERROR),
        ("MPT_STATUS_UNSUPPORTED", MPT_STATUS_UNSUPPORTED),
        ("MPT_STATUS_INTERNAL", MPT_STATUS_INTERNAL),
        ("MPT_BACKEND_AUTO", MPT_BACKEND_AUTO),
        ("MPT_BACKEND_CPU", MPT_BACKEND_CPU),
        ("MPT_BACKEND_CUDA", MPT_BACKEND_CUDA),
        ("MPT_DTYPE_DEFAULT", MPT_DTYPE_DEFAULT),
        ("MPT_DTYPE_FP32", MPT_DTYPE_FP32),
        ("MPT_DTYPE_FP16", MPT_DTYPE_FP16),
        ("MPT_DTYPE_BF16", MPT_DTYPE_BF16),
        ("MPT_PRECISION_FP32", MPT_PRECISION_FP32),
        ("MPT_PRECISION_MIXED_FP16", MPT_PRECISION_MIXED_FP16),
        ("MPT_PRECISION_MIXED_BF16", MPT_PRECISION_MIXED_BF16),
        ("MPT_PRECISION_AUTO", MPT_PRECISION_AUTO),
        ("MPT_ACTIVATION_LINEAR", MPT_ACTIVATION_LINEAR),
        ("MPT_ACTIVATION_RELU", MPT_ACTIVATION_RELU),
        ("MPT_ACTIVATION_SIGMOID", MPT_ACTIVATION_SIGMOID),
        ("MPT_ACTIVATION_TANH", MPT_ACTIVATION_TANH),
        ("MPT_ACTIVATION_SOFTMAX", MPT_ACTIVATION_SOFTMAX),
        ("MPT_ACTIVATION_LEAKY_RELU", MPT_ACTIVATION_LEAKY_RELU),
        ("MPT_ACTIVATION_ELU", MPT_ACTIVATION_ELU),
        ("MPT_ACTIVATION_SELU", MPT_ACTIVATION_SELU),
        ("MPT_ACTIVATION_SOFTPLUS", MPT_ACTIVATION_SOFTPLUS),
        ("MPT_ACTIVATION_SOFTSIGN", MPT_ACTIVATION_SOFTSIGN),
        (
            "MPT_INITIALIZER_GLOROT_UNIFORM",
            MPT_INITIALIZER_GLOROT_UNIFORM,
        ),
        (
            "MPT_INITIALIZER_GLOROT_NORMAL",
            MPT_INITIALIZER_GLOROT_NORMAL,
        ),
        ("MPT_INITIALIZER_HE_UNIFORM", MPT_INITIALIZER_HE_UNIFORM),
        ("MPT_INITIALIZER_HE_NORMAL", MPT_INITIALIZER_HE_NORMAL),
        (
            "MPT_INITIALIZER_LECUN_UNIFORM",
            MPT_INITIALIZER_LECUN_UNIFORM,
        ),
        ("MPT_INITIALIZER_LECUN_NORMAL", MPT_INITIALIZER_LECUN_NORMAL),
        (
            "MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY",
            MPT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        ),
        (
            "MPT_LOSS_CATEGORICAL_CROSSENTROPY",
            MPT_LOSS_CATEGORICAL_CROSSENTROPY,
        ),
        ("MPT_LOSS_BINARY_CROSSENTROPY", MPT_LOSS_BINARY_CROSSENTROPY),
        ("MPT_LOSS_MEAN_SQUARED_ERROR", MPT_LOSS_MEAN_SQUARED_ERROR),
        ("MPT_LOSS_MEAN_ABSOLUTE_ERROR", MPT_LOSS_MEAN_ABSOLUTE_ERROR),
        ("MPT_LOSS_HUBER", MPT_LOSS_HUBER),
        ("MPT_OPTIMIZER_SGD", MPT_OPTIMIZER_SGD),
        ("MPT_OPTIMIZER_ADAM", MPT_OPTIMIZER_ADAM),
        ("MPT_OPTIMIZER_ADAMW", MPT_OPTIMIZER_ADAMW),
        ("MPT_OPTIMIZER_RMSPROP", MPT_OPTIMIZER_RMSPROP),
        ("MPT_OPTIMIZER_LION", MPT_OPTIMIZER_LION),
        ("MPT_LR_SCHEDULE_CONSTANT", MPT_LR_SCHEDULE_CONSTANT),
        ("MPT_LR_SCHEDULE_LINEAR", MPT_LR_SCHEDULE_LINEAR),
        ("MPT_LR_SCHEDULE_COSINE", MPT_LR_SCHEDULE_COSINE),
        ("MPT_LR_SCHEDULE_STEP", MPT_LR_SCHEDULE_STEP),
        ("MPT_LOSS_SCALING_DEFAULT", MPT_LOSS_SCALING_DEFAULT),
        ("MPT_LOSS_SCALING_OFF", MPT_LOSS_SCALING_OFF),
        ("MPT_LOSS_SCALING_STATIC", MPT_LOSS_SCALING_STATIC),
        ("MPT_LOSS_SCALING_DYNAMIC", MPT_LOSS_SCALING_DYNAMIC),
        ("MPT_LOG_LEVEL_DEBUG", MPT_LOG_LEVEL_DEBUG),
        ("MPT_LOG_LEVEL_INFO", MPT_LOG_LEVEL_INFO),
        ("MPT_LOG_LEVEL_WARNING", MPT_LOG_LEVEL_WARNING),
        ("MPT_LOG_LEVEL_ERROR", MPT_LOG_LEVEL_ERROR),
    ];
    let header = header_enums();
    for (name, value) in ours {
        assert_eq!(header.get(*name), Some(&(*value as i64)), "{name}");
    }
    let ours: BTreeSet<&str> = ours.iter().map(|(name, _)| *name).collect();
    let missing: Vec<&String> = header
        .keys()
        .filter(|name| !ours.contains(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "enum values in the header but not in mptrain-sys: {missing:?}"
    );
}

#[test]
fn every_header_function_is_declared() {
    let source = include_str!("../src/lib.rs");
    let missing: Vec<String> = header_functions()
        .into_iter()
        .filter(|name| !source.contains(&format!("pub fn {name}(")))
        .collect();
    assert!(header_functions().len() > 50);
    assert!(
        missing.is_empty(),
        "functions in the header but not in mptrain-sys: {missing:?}"
    );
}

#[test]
fn c_type_sizes_match_the_rust_types() {
    let Ok(probe) = std::env::var("MPTRAIN_ABI_PROBE") else {
        eprintln!("skipped: MPTRAIN_ABI_PROBE is not set (ctest sets it)");
        return;
    };
    let output = std::process::Command::new(&probe)
        .output()
        .expect("run the ABI probe");
    let text = String::from_utf8(output.stdout).unwrap();
    let sizes: BTreeMap<&str, usize> = text
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap())
        .map(|(n, s)| (n, s.parse().unwrap()))
        .collect();
    use std::mem::size_of;
    let expected: &[(&str, usize)] = &[
        ("int", size_of::<c_int>()),
        ("int32_t", size_of::<i32>()),
        ("int64_t", size_of::<i64>()),
        ("uint64_t", size_of::<u64>()),
        ("uint8_t", size_of::<u8>()),
        ("size_t", size_of::<usize>()),
        ("float", size_of::<f32>()),
        ("void*", size_of::<*mut u8>()),
        ("mpt_status", size_of::<mpt_status>()),
        ("mpt_backend", size_of::<mpt_backend>()),
        ("mpt_dtype", size_of::<mpt_dtype>()),
        ("mpt_precision", size_of::<mpt_precision>()),
        ("mpt_activation", size_of::<mpt_activation>()),
        ("mpt_initializer", size_of::<mpt_initializer>()),
        ("mpt_loss", size_of::<mpt_loss>()),
        ("mpt_optimizer", size_of::<mpt_optimizer>()),
        ("mpt_lr_schedule", size_of::<mpt_lr_schedule>()),
        ("mpt_loss_scaling", size_of::<mpt_loss_scaling>()),
        ("mpt_log_level", size_of::<mpt_log_level>()),
        ("mpt_log_fn", size_of::<mpt_log_fn>()),
        ("mpt_progress_fn", size_of::<mpt_progress_fn>()),
        ("mpt_epoch_end_fn", size_of::<mpt_epoch_end_fn>()),
    ];
    for (name, size) in expected {
        assert_eq!(sizes.get(name), Some(size), "sizeof({name})");
    }
    assert_eq!(
        sizes.len(),
        expected.len(),
        "the probe reports types this test does not check"
    );
}

#[test]
fn version_and_status_strings() {
    let version = unsafe { CStr::from_ptr(mpt_version()) }.to_str().unwrap();
    assert_eq!(version.split('.').count(), 3);
    let name = unsafe { CStr::from_ptr(mpt_status_string(MPT_STATUS_NON_FINITE)) };
    assert_eq!(name.to_str().unwrap(), "MPT_STATUS_NON_FINITE");
}

#[test]
fn null_arguments_return_invalid_argument() {
    unsafe {
        assert_eq!(
            mpt_context_create(ptr::null(), ptr::null_mut()),
            MPT_STATUS_INVALID_ARGUMENT
        );
        let mut model = ptr::null_mut();
        assert_eq!(
            mpt_model_create(ptr::null_mut(), 4, &mut model),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert!(
            model.is_null(),
            "out-parameters are written only on success"
        );
        let message = CStr::from_ptr(mpt_last_error()).to_str().unwrap();
        assert!(message.contains("context"), "{message}");
        let mut rows = 7;
        assert_eq!(
            mpt_dataset_get_rows(ptr::null(), &mut rows),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(rows, 7);
        assert_eq!(
            mpt_trainer_fit(ptr::null_mut(), ptr::null(), 1, 1, 0),
            MPT_STATUS_INVALID_ARGUMENT
        );
        let mut options = ptr::null_mut();
        assert_eq!(
            mpt_trainer_get_options(ptr::null(), &mut options),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert!(options.is_null());
        mpt_context_destroy(ptr::null_mut());
        mpt_trainer_destroy(ptr::null_mut());
    }
}

#[test]
fn file_functions_refuse_null_paths_and_handles() {
    unsafe {
        let mut context = ptr::null_mut();
        assert_eq!(mpt_context_create(ptr::null(), &mut context), MPT_STATUS_OK);
        let mut model = ptr::null_mut();
        assert_eq!(
            mpt_model_load(context, ptr::null(), &mut model),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert!(model.is_null());
        assert_eq!(
            mpt_model_load(
                context,
                b"/nonexistent/model.safetensors\0".as_ptr() as *const c_char,
                &mut model
            ),
            MPT_STATUS_IO_ERROR
        );
        assert!(
            model.is_null(),
            "out-parameters are written only on success"
        );
        assert_eq!(mpt_model_create(context, 2, &mut model), MPT_STATUS_OK);
        assert_eq!(
            mpt_model_add_dense(model, 1, MPT_ACTIVATION_LINEAR),
            MPT_STATUS_OK
        );
        assert_eq!(
            mpt_model_save(model, ptr::null()),
            MPT_STATUS_INVALID_ARGUMENT
        );
        let mut trainer = ptr::null_mut();
        assert_eq!(
            mpt_trainer_create(model, ptr::null(), &mut trainer),
            MPT_STATUS_OK
        );
        assert_eq!(
            mpt_trainer_save_checkpoint(trainer, ptr::null()),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(
            mpt_trainer_load_checkpoint(trainer, ptr::null()),
            MPT_STATUS_INVALID_ARGUMENT
        );
        let mut options = ptr::null_mut();
        assert_eq!(
            mpt_trainer_options_create_from_checkpoint(ptr::null(), &mut options),
            MPT_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(
            mpt_trainer_options_create_from_checkpoint(
                b"/nonexistent/checkpoint.safetensors\0".as_ptr() as *const c_char,
                &mut options
            ),
            MPT_STATUS_IO_ERROR
        );
        assert!(options.is_null());
        assert_eq!(
            mpt_trainer_options_create_from_checkpoint(
                b"/nonexistent/checkpoint.safetensors\0".as_ptr() as *const c_char,
                ptr::null_mut()
            ),
            MPT_STATUS_INVALID_ARGUMENT
        );
        // A NULL directory turns checkpointing off, whatever the other arguments.
        assert_eq!(
            mpt_trainer_set_checkpointing(trainer, ptr::null(), 0, 0, 0),
            MPT_STATUS_OK
        );
        assert_eq!(
            mpt_trainer_set_checkpointing(ptr::null_mut(), ptr::null(), 0, 0, 0),
            MPT_STATUS_INVALID_ARGUMENT
        );
        mpt_trainer_destroy(trainer);
        mpt_model_destroy(model);
        mpt_context_destroy(context);
    }
}

#[test]
fn a_raw_model_predicts_through_the_c_api() {
    unsafe {
        let mut context = ptr::null_mut();
        assert_eq!(mpt_context_create(ptr::null(), &mut context), MPT_STATUS_OK);
        let mut model = ptr::null_mut();
        assert_eq!(mpt_model_create(context, 2, &mut model), MPT_STATUS_OK);
        mpt_context_destroy(context); // the model keeps it alive
        assert_eq!(
            mpt_model_add_dense(model, 1, MPT_ACTIVATION_LINEAR),
            MPT_STATUS_OK
        );
        let weights = [2.0f32, -1.0];
        let bias = [0.25f32];
        assert_eq!(
            mpt_model_set_weights(model, 0, weights.as_ptr(), 2, bias.as_ptr(), 1),
            MPT_STATUS_OK
        );
        let inputs = [1.0f32, 1.0, 3.0, 2.0];
        let mut out = [0.0f32; 2];
        assert_eq!(
            mpt_model_predict(model, inputs.as_ptr(), 2, out.as_mut_ptr(), 2),
            MPT_STATUS_OK
        );
        assert_eq!(out, [1.25, 4.25]); // 2*1 - 1 + 0.25, 2*3 - 2 + 0.25
        assert_eq!(
            mpt_model_predict(model, inputs.as_ptr(), 2, out.as_mut_ptr(), 3),
            MPT_STATUS_SHAPE_MISMATCH
        );
        mpt_model_destroy(model);
    }
}

#[test]
fn a_raw_description_takes_its_length_then_a_buffer_with_room_for_the_nul() {
    unsafe {
        let mut context = ptr::null_mut();
        assert_eq!(mpt_context_create(ptr::null(), &mut context), MPT_STATUS_OK);
        let mut length = 0usize;
        assert_eq!(
            mpt_context_describe(context, ptr::null_mut(), 0, &mut length),
            MPT_STATUS_OK
        );
        assert!(length > 2, "{length}");
        // One byte short (no room for the NUL): refused, and neither the buffer nor length written.
        let mut text = vec![0x55u8; length + 1];
        let mut unwritten = 7usize;
        assert_eq!(
            mpt_context_describe(
                context,
                text.as_mut_ptr() as *mut c_char,
                length,
                &mut unwritten
            ),
            MPT_STATUS_SHAPE_MISMATCH
        );
        assert_eq!(unwritten, 7);
        assert!(text.iter().all(|&byte| byte == 0x55));
        let mut written = 0usize;
        assert_eq!(
            mpt_context_describe(
                context,
                text.as_mut_ptr() as *mut c_char,
                text.len(),
                &mut written
            ),
            MPT_STATUS_OK
        );
        assert_eq!(written, length);
        assert_eq!(text[length], 0);
        let json = CStr::from_bytes_with_nul(&text).unwrap().to_str().unwrap();
        assert!(
            json.starts_with('{') && json.ends_with('}') && json.contains("\"backend\":\""),
            "{json}"
        );
        assert_eq!(
            mpt_context_describe(context, ptr::null_mut(), 0, ptr::null_mut()),
            MPT_STATUS_INVALID_ARGUMENT
        );
        mpt_context_destroy(context);
    }
}
