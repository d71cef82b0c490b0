//! Finds libflowlane and tells rustc how to link it.
//!
//! Search order:
//! 1. `FLOWLANE_LIB_DIR`: a directory holding libflowlane.so (never second-guessed);
//! 2. pkg-config, when `PKG_CONFIG_PATH` is set and names a `flowlane.pc` (an explicit
//!    choice wins over the checkout's build tree);
//! 3. the CMake build trees of the flowlane checkout this crate sits in (when it does):
//!    `<repo>/build/capi`, then the other `<repo>/build*/capi` (newest first);
//! 4. pkg-config's default search path (`PKG_CONFIG` names the program).
//!
//! Emits the link search path and `-lflowlane`, an rpath for this package's own tests,
//! and metadata for direct dependents (`DEP_FLOWLANE_LIB_DIR`, `DEP_FLOWLANE_RPATH`: the
//! rpath flags to use, empty when the loader finds the library by itself).
//!
//! A library outside the loader's path (pkg-config's `Libs` carry `-Wl,-rpath`, as the
//! installed `flowlane.pc` does for such a prefix): the binaries of every crate that depends
//! on this one must start too, and cargo gives a build script's link arguments to its own
//! package's targets only. What a dependency does control is the name the linker records
//! for the library (DT_NEEDED): this script links against a stand-in (`link_stub`) whose
//! SONAME is the installed library's absolute path, so every binary records that path and
//! the loader opens it directly, with no rpath and no LD_LIBRARY_PATH. When the stand-in
//! cannot be built (no C compiler), the real library is linked and a warning says how to
//! give a binary its rpath.
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

/// The functions the declarations name (src/bindgen.rs, generated from the header): what
/// a stand-in for the library must define.
fn declared_functions() -> Result<Vec<String>, String> {
    let path = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?).join("src/bindgen.rs");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {}", path.display(), e))?;
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub fn "))
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| name.starts_with("fl_") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect();
    if names.is_empty() {
        return Err(format!("{} declares no fl_ function", path.display()));
    }
    Ok(names)
}

/// Builds `<out>/stub/libflowlane.so`: empty functions of the declared names, with SONAME
/// `soname` (the installed library's absolute path, its `libflowlane.so.0`). Only the
/// linker reads it; a binary linked against it records `soname` and, at run time, binds
/// to the real library (whose default symbol versions satisfy the unversioned references).
fn link_stub(soname: &Path, out: &Path) -> Result<PathBuf, String> {
    let dir = out.join("stub");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {}", dir.display(), e))?;
    let src = dir.join("flowlane_stub.c");
    let body: String = declared_functions()?.iter().map(|n| format!("void {}(void) {{}}\n", n)).collect();
    std::fs::write(&src, body).map_err(|e| format!("{}: {}", src.display(), e))?;
    let lib = dir.join("libflowlane.so");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-nostdlib", "-o"])
        .arg(&lib)
        .arg(format!("-Wl,-soname,{}", soname.display()))
        .arg(&src)
        .output()
        .map_err(|e| format!("could not run `{}`: {}", cc, e))?;
    if !out.status.success() {
        return Err(format!("`{}` failed to link the stand-in: {}", cc, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(dir)
}

fn main() {
    println!("cargo:rerun-if-env-changed=FLOWLANE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindgen.rs");
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
    } else if let Some((dir, rpaths)) =
        env::var_os("PKG_CONFIG_PATH").filter(|p| !p.is_empty()).and_then(|_| from_pkg_config().ok())
    {
        (dir, rpaths, "pkg-config (PKG_CONFIG_PATH)")
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
    // Outside the loader's path, found by pkg-config: link the stand-in named by absolute
    // path, so that the dependents' binaries start too (see the top of this file).
    let mut search = dir.clone();
    if how.starts_with("pkg-config") && !rpaths.is_empty() {
        let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        match link_stub(&dir.join("libflowlane.so.0"), &out) {
            Ok(stub) => search = stub,
            Err(why) => println!(
                "cargo:warning=flowlane-sys: {}; linking {} directly: a binary of a crate depending on \
                 flowlane needs its rpath (-C link-arg=-Wl,-rpath,{} in .cargo/config.toml) or LD_LIBRARY_PATH",
                why,
                dir.display(),
                dir.display()
            ),
        }
    }
    println!("cargo:rustc-link-search=native={}", search.display());
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
