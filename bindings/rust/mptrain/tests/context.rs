//! The context through the safe API: its description, one compact JSON object, read member by
//! member here (the crate takes no JSON parser from a registry) against what the context was
//! created with and what its other getters report.
mod common;
use common::*;
use mptrain::*;
use std::collections::BTreeMap;

/// The top-level members of a compact JSON object (no whitespace, as the library writes it), each
/// name with its value's text as written: strings keep their quotes, objects and arrays are whole.
/// Panics on text that is not such an object or names a member twice.
fn members(json: &str) -> BTreeMap<String, String> {
    let bytes = json.as_bytes();
    assert!(
        bytes.first() == Some(&b'{') && bytes.last() == Some(&b'}'),
        "not an object: {json}"
    );
    let mut out = BTreeMap::new();
    let mut at = 1;
    while at < bytes.len() - 1 {
        let name_end = string_end(bytes, at);
        assert_eq!(
            bytes[name_end], b':',
            "no ':' after a name at {name_end}: {json}"
        );
        let value_end = value_end(bytes, name_end + 1);
        let name = json[at + 1..name_end - 1].to_string();
        let value = json[name_end + 1..value_end].to_string();
        assert!(out.insert(name, value).is_none(), "a name twice: {json}");
        at = value_end;
        match bytes[at] {
            b',' => at += 1,
            b'}' => assert_eq!(at, bytes.len() - 1, "text after the object: {json}"),
            other => panic!("{:?} after a value at {at}: {json}", other as char),
        }
    }
    out
}

/// Just past the string that opens at `at`.
fn string_end(bytes: &[u8], at: usize) -> usize {
    assert_eq!(bytes[at], b'"', "a string expected at {at}");
    let mut i = at + 1;
    while bytes[i] != b'"' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    i + 1
}

/// Just past the value that opens at `at`: a string, an object or array (nested), else a number or
/// literal, which ends at the next ',', '}' or ']'.
fn value_end(bytes: &[u8], at: usize) -> usize {
    match bytes[at] {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0;
            let mut i = at;
            loop {
                match bytes[i] {
                    b'"' => {
                        i = string_end(bytes, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let end = (at..bytes.len())
                .find(|&i| matches!(bytes[i], b',' | b'}' | b']'))
                .unwrap();
            assert!(end > at, "an empty value at {at}");
            end
        }
    }
}

#[test]
fn describe_names_the_cpu_backend_its_device_and_threads_in_one_json_object() {
    let ctx = Context::builder()
        .backend(Backend::Cpu)
        .threads(1)
        .memory_budget(1 << 30)
        .build()
        .unwrap();
    let text = ctx.describe().unwrap();
    let description = members(&text);
    let member = |name: &str| {
        description
            .get(name)
            .unwrap_or_else(|| panic!("no \"{name}\" in {text}"))
            .as_str()
    };
    assert_eq!(member("version"), format!("\"{}\"", version()));
    assert_eq!(member("backend"), "\"cpu\"");
    let device = member("device");
    assert!(device.len() > 2 && device.starts_with('"'), "{text}");
    assert_eq!(member("auto_fallback"), "\"\""); // the CPU was asked for, not fallen back to
    assert_eq!(member("memory_budget_bytes"), (1u64 << 30).to_string());
    assert_eq!(member("threads"), "1");
    assert!(member("gemm_library").len() > 2, "{text}");
    let amx = ["\"supported\"", "\"refused by Linux\"", "\"absent\""];
    assert!(amx.contains(&member("amx")), "{text}");
    let small_gemm = ["\"avx512\"", "\"avx512f\"", "\"avx2\"", "\"none\""];
    assert!(small_gemm.contains(&member("small_gemm")), "{text}");
    assert!(
        !description.contains_key("device_index"),
        "a CUDA member: {text}"
    );
    // Nothing changes while the context is unused.
    assert_eq!(ctx.describe().unwrap(), text);
}

#[test]
fn describe_reports_the_memory_counters_that_memory_reads_after_training() {
    let ctx = context();
    let model = mlp(&ctx);
    let (x, y) = blobs(60, 3);
    let data = Dataset::from_f32(&ctx, &x, FEATURES, &y, CLASSES, true).unwrap();
    let mut trainer = Trainer::new(&model, &adam()).unwrap();
    trainer.fit(&data, 1, 20, true).unwrap();
    let text = ctx.describe().unwrap();
    let description = members(&text);
    let memory = ctx.memory().unwrap();
    assert!(memory.peak > 0);
    assert_eq!(description["memory_used_bytes"], memory.used.to_string());
    assert_eq!(description["memory_peak_bytes"], memory.peak.to_string());
    assert_eq!(description["backend"], "\"cpu\"");
}
