//! Adds an rpath to libflowlane's directory (found by flowlane-sys, handed over as
//! DEP_FLOWLANE_LIB_DIR) to this package's tests and examples, so they run without
//! LD_LIBRARY_PATH. Programs depending on `flowlane` set LD_LIBRARY_PATH, install the
//! library, or add the same rpath in their own build script.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FLOWLANE_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_FLOWLANE_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
