//! Finds libflowlane and tells rustc how to link it.
//!
//! Search order: `FLOWLANE_LIB_DIR` (a directory holding libflowlane.so), then the CMake
//! build trees of this checkout: `<repo>/build/capi`, then the other `<repo>/build*/capi`
//! (newest first). Emits the link search path, `-lflowlane`, an rpath for this package's
//! own tests, and `DEP_FLOWLANE_LIB_DIR` (metadata `lib_dir`) so that direct dependents
//! can add the rpath to their binaries too (the `flowlane` crate does).
use std::env;
use std::path::{Path, PathBuf};

fn has_lib(dir: &Path) -> bool {
    dir.join("libflowlane.so").exists() || dir.join("libflowlane.so.0").exists()
}

fn find() -> Option<PathBuf> {
    if let Some(dir) = env::var_os("FLOWLANE_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !has_lib(&dir) {
            panic!(
                "FLOWLANE_LIB_DIR={} holds no libflowlane.so: build the library (cmake --build build --target flowlane)",
                dir.display()
            );
        }
        return Some(dir);
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // bindings/rust/flowlane-sys -> the repository root is three levels up.
    let root = manifest.join("../../..");
    let preferred = root.join("build/capi");
    if has_lib(&preferred) {
        return Some(preferred);
    }
    let mut others: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with("build") {
                continue;
            }
            let dir = e.path().join("capi");
            if has_lib(&dir) {
                let t = std::fs::metadata(dir.join("libflowlane.so.0"))
                    .or_else(|_| std::fs::metadata(dir.join("libflowlane.so")))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                others.push((t, dir));
            }
        }
    }
    others.sort();
    others.pop().map(|(_, d)| d)
}

fn main() {
    println!("cargo:rerun-if-env-changed=FLOWLANE_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = match find() {
        Some(d) => d,
        None => panic!(
            "flowlane-sys: cannot find libflowlane.so. Build it with \
             `cmake -S . -B build && cmake --build build --target flowlane` at the repository root, \
             or set FLOWLANE_LIB_DIR to the directory that holds it."
        ),
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=flowlane");
    // rpath for this package's own test binaries; dependents get it via DEP_FLOWLANE_LIB_DIR.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    println!("cargo:lib_dir={}", dir.display());
    println!("cargo:rerun-if-changed={}", dir.join("libflowlane.so.0").display());
}
