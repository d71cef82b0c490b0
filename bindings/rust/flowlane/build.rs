//! Hands the rpath of libflowlane (found by flowlane-sys, passed as DEP_FLOWLANE_*) to this
//! package's tests and examples, so they run without LD_LIBRARY_PATH, and re-exports it to
//! the crates that depend on `flowlane` (this package's `links = "flowlane_rs"`) as
//! DEP_FLOWLANE_RS_RPATH (the linker flags, empty when the loader finds the library by
//! itself) and DEP_FLOWLANE_RS_LIB_DIR.
//!
//! A library installed outside the loader's path and found through pkg-config needs none of
//! this in a dependent crate: flowlane-sys makes every binary record that library's
//! absolute path (see its build.rs). For a library found otherwise (FLOWLANE_LIB_DIR), cargo
//! applies a build script's link arguments to its own package only, so a binary that
//! depends on `flowlane` adds the rpath in its own build.rs:
//!
//! ```ignore
//! fn main() {
//!     for flag in std::env::var("DEP_FLOWLANE_RS_RPATH").unwrap_or_default().split_whitespace() {
//!         println!("cargo:rustc-link-arg={}", flag);
//!     }
//! }
//! ```
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FLOWLANE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=DEP_FLOWLANE_RPATH");
    let rpath = std::env::var("DEP_FLOWLANE_RPATH").unwrap_or_default();
    for flag in rpath.split_whitespace() {
        println!("cargo:rustc-link-arg={}", flag);
    }
    println!("cargo:rpath={}", rpath);
    if let Ok(dir) = std::env::var("DEP_FLOWLANE_LIB_DIR") {
        println!("cargo:lib_dir={}", dir);
    }
}
