//! Lets this crate's own tests and examples find libmptrain.so without LD_LIBRARY_PATH: an rpath to
//! the directory mptrain-sys found (DEP_MPTRAIN_LIB_DIR). Crates depending on mptrain are unaffected.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MPTRAIN_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MPTRAIN_LIB_DIR") {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
        println!("cargo:rustc-link-arg-examples=-Wl,-rpath,{dir}");
    }
}
