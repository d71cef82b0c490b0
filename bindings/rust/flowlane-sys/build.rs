//! Finds libflowlane and tells rustc how to link it.
//!
//! Search order:
//! 1. `FLOWLANE_LIB_DIR`: a directory holding libflowlane.so (never second-guessed);
//! 2. the CMake build trees of the flowlane checkout this crate sits in (when it does):
//!    `<repo>/build/capi`, then the other `<repo>/build*/capi` (newest first);
//! 3. pkg-config: `pkg-config --libs --cflags flowlane` (`PKG_CONFIG` names the program,
//!    `PKG_CONFIG_PATH` where an installed `flowlane.pc` is found).
//!
//! Emits the link search path and `-lflowlane`, an rpath for this package's own tests,
//! and metadata for direct dependents (`DEP_FLOWLANE_LIB_DIR`, `DEP_FLOWLANE_RPATH`: the
//! rpath flags to use, empty when the loader finds the library by itself). Cargo lets a
//! build script add link arguments to its own package's targets only, so a binary that
//! depends on `flowlane` gets its rpath from its own build script or from
//! `.cargo/config.toml`; see the bindings README ("Linking a program").
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn has_lib(dir: &Path) -> bool {
    dir.join("libflowlane.so").exists() || dir.join("libflowlane.so.0").exists()
}

/// The flowlane checkout around this crate (bindings/rust/flowlane-sys), if any.
fn checkout_root() -> Option<PathBuf> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").ok()?);
    let root = manifest.join("../../..");
    if root.join("capi/include/flowlane/flowlane.h").exists() {
        Some(root)
    } else {
        None
    }
}

fn from_build_tree(root: &Path) -> Option<PathBuf> {
    let preferred = root.join("build/capi");
    if has_lib(&preferred) {
        return Some(preferred);
    }
    let mut others: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(root).ok()?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("build") {
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
    others.sort();
    others.pop().map(|(_, d)| d)
}

/// What pkg-config says: (library directory, rpath directories from -Wl,-rpath flags).
fn from_pkg_config() -> Result<(PathBuf, Vec<String>), String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program)
        .args(["--libs", "--cflags", "flowlane"])
        .output()
        .map_err(|e| format!("could not run `{} --libs --cflags flowlane`: {}", program, e))?;
    if !out.status.success() {
        return Err(format!(
            "`{} --libs --cflags flowlane` failed: {}",
            program,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lib_dirs = Vec::new();
    let mut rpaths = Vec::new();
    let mut links_flowlane = false;
    for flag in text.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            lib_dirs.push(PathBuf::from(dir));
        } else if flag == "-lflowlane" {
            links_flowlane = true;
        } else if let Some(rest) = flag.strip_prefix("-Wl,") {
            // -Wl,-rpath,DIR or -Wl,-rpath=DIR (several comma-separated arguments allowed)
            let args: Vec<&str> = rest.split(',').collect();
            let mut i = 0;
            while i < args.len() {
                if args[i] == "-rpath" && i + 1 < args.len() {
                    rpaths.push(args[i + 1].to_string());
                    i += 2;
                } else {
                    if let Some(dir) = args[i].strip_prefix("-rpath=") {
                        rpaths.push(dir.to_string());
                    }
                    i += 1;
                }
            }
        }
    }
    if !links_flowlane {
        return Err(format!("`{} --libs flowlane` does not name -lflowlane: {}", program, text.trim()));
    }
    let dir = lib_dirs
        .into_iter()
        .find(|d| has_lib(d))
        .or_else(|| ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib"].iter().map(PathBuf::from).find(|d| has_lib(d)))
        .ok_or_else(|| format!("pkg-config's flags name no directory holding libflowlane.so: {}", text.trim()))?;
    Ok((dir, rpaths))
}

fn main() {
    println!("cargo:rerun-if-env-changed=FLOWLANE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");
    let (dir, rpaths, how) = if let Some(dir) = env::var_os("FLOWLANE_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !has_lib(&dir) {
            panic!(
                "flowlane-sys: FLOWLANE_LIB_DIR={} holds no libflowlane.so: build the library \
                 (cmake --build build --target flowlane) or point it at an installed lib directory",
                dir.display()
            );
        }
        (dir.clone(), vec![dir.display().to_string()], "FLOWLANE_LIB_DIR")
    } else if let Some(dir) = checkout_root().and_then(|r| from_build_tree(&r)) {
        (dir.clone(), vec![dir.display().to_string()], "the checkout's build tree")
    } else {
        match from_pkg_config() {
            Ok((dir, rpaths)) => (dir, rpaths, "pkg-config"),
            Err(why) => panic!(
                "flowlane-sys: cannot find libflowlane.so. {}\n\
                 Install flowlane (cmake --install <build> --prefix <dir>) and set \
                 PKG_CONFIG_PATH=<dir>/lib/pkgconfig, or set FLOWLANE_LIB_DIR to the directory \
                 holding libflowlane.so, or, in a checkout, build it with \
                 `cmake -S . -B build && cmake --build build --target flowlane`.",
                why
            ),
        }
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=flowlane");
    let rpath_flags: Vec<String> = rpaths.iter().map(|d| format!("-Wl,-rpath,{}", d)).collect();
    // This package's own test binaries; dependents read the metadata below.
    for f in &rpath_flags {
        println!("cargo:rustc-link-arg={}", f);
    }
    println!("cargo:lib_dir={}", dir.display());
    println!("cargo:rpath={}", rpath_flags.join(" "));
    println!("cargo:found_by={}", how);
    println!("cargo:rerun-if-changed={}", dir.join("libflowlane.so.0").display());
}
