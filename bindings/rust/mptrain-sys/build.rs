//! Finds libmptrain.so: $MPTRAIN_LIB_DIR first, then `pkg-config --variable=libdir mptrain`, else the
//! linker's default search path. The directory is passed on to dependents as DEP_MPTRAIN_LIB_DIR.
use std::env;
use std::process::Command;

fn pkg_config_libdir() -> Option<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = Command::new(pkg_config)
        .args(["--variable=libdir", "mptrain"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?.trim().to_string();
    if dir.is_empty() {
        None
    } else {
        Some(dir)
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=MPTRAIN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    let dir = env::var("MPTRAIN_LIB_DIR")
        .ok()
        .filter(|dir| !dir.is_empty())
        .or_else(pkg_config_libdir);
    match dir {
        Some(dir) => {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:lib_dir={dir}");
        }
        None => println!(
            "cargo:warning=libmptrain not located: set MPTRAIN_LIB_DIR to the directory of libmptrain.so \
             (or install mptrain.pc for pkg-config); trying the linker's default search path"
        ),
    }
    println!("cargo:rustc-link-lib=dylib=mptrain");
}
