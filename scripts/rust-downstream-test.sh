#!/usr/bin/env bash
# A crate outside this repository that depends only on `flowlane` (by path, on a copy of
# bindings/rust) and finds the library through pkg-config alone: the build is installed
# into a scratch prefix, PKG_CONFIG_PATH points there, FLOWLANE_LIB_DIR and LD_LIBRARY_PATH
# are unset. Built and run directly (not through cargo, which would set LD_LIBRARY_PATH):
# the plain crate (nothing but Cargo.toml and main.rs: flowlane-sys makes its binary
# record the library's absolute path), and the two ways of giving a program its rpath
# (its build.rs reading DEP_FLOWLANE_RS_RPATH; `.cargo/config.toml` rustflags). Then, inside
# this checkout (which has a build tree), PKG_CONFIG_PATH must win over that build tree.
#   scripts/rust-downstream-test.sh [BUILD_DIR]     (default: $FLOWLANE_BUILD_DIR or build)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build="${1:-$BUILD_DIR}"
[[ -f "$build/capi/libflowlane.so.0" ]] || { echo "rust-downstream-test: build $build first" >&2; exit 2; }
command -v cargo >/dev/null || { echo "rust-downstream-test: cargo not found" >&2; exit 2; }
command -v pkg-config >/dev/null || { echo "rust-downstream-test: pkg-config not found" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir -p "$tmp/crates"
for c in flowlane flowlane-sys; do
  mkdir -p "$tmp/crates/$c"
  (cd "$FLOWLANE_ROOT/bindings/rust/$c" && tar --exclude=./target -cf - .) | tar -xf - -C "$tmp/crates/$c"
done

make_app() {  # make_app DIR WITH_BUILD_RS
  mkdir -p "$1/src"
  cat >"$1/Cargo.toml" <<TOML
[package]
name = "downstream"
version = "0.1.0"
edition = "2021"

[dependencies]
flowlane = { path = "$tmp/crates/flowlane" }
TOML
  cat >"$1/src/main.rs" <<'RS'
use std::time::Duration;

use flowlane::{Engine, Error, InstrState, Object};

struct App {
    total: Object<u64>,
    engine: Engine,
}

fn main() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let app = App { total: engine.object(0u64)?, engine };
    let stream = app.engine.stream(0)?;
    let mut last = None;
    for i in 1..=10u64 {
        let t = app.total.handle();
        last = Some(stream.instr().read_write(&app.total).submit(move || {
            *t.write() += i;
            Ok::<(), Error>(())
        })?);
    }
    let last = last.expect("submitted");
    last.wait_for(Duration::from_secs(60))?;
    assert_eq!(last.state()?, InstrState::Done);
    let mut halves = [0u64; 2];
    let (lo, hi) = halves.split_at_mut(1);
    app.engine.scope(|s| -> Result<(), Error> {
        s.spawn(|_| { lo[0] = (1..=50).sum(); Ok::<(), Error>(()) })?;
        s.spawn(|_| { hi[0] = (51..=100).sum(); Ok::<(), Error>(()) })
    })??;
    assert_eq!(halves[0] + halves[1], 5050);
    let mut v = vec![0u8; 100];
    app.engine.par_chunks_mut(&mut v, 7, |i, c| {
        c.fill(i as u8);
        Ok::<(), Error>(())
    })?;
    assert_eq!(v[99], 14);
    println!("downstream: total {} with flowlane {:?}", app.total.get()?, flowlane::library_version());
    Ok(())
}
RS
  if [[ "$2" == yes ]]; then
    cat >"$1/build.rs" <<'RS'
// The rpath of libflowlane, as the `flowlane` crate found it (empty when the loader finds
// the library by itself): cargo applies link arguments to this package's own binaries only.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FLOWLANE_RS_RPATH");
    for flag in std::env::var("DEP_FLOWLANE_RS_RPATH").unwrap_or_default().split_whitespace() {
        println!("cargo:rustc-link-arg={}", flag);
    }
}
RS
  fi
}

run_case() {  # run_case NAME DIR
  local name=$1 dir=$2 exe
  say "downstream crate ($name): cargo build with PKG_CONFIG_PATH=$prefix/lib/pkgconfig only"
  (cd "$dir" && env -u FLOWLANE_LIB_DIR -u LD_LIBRARY_PATH PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
     CARGO_TARGET_DIR="$tmp/target-$name" cargo build --offline -q)
  exe="$tmp/target-$name/debug/downstream"
  if ! readelf -d "$exe" | grep -E "R(UN)?PATH|NEEDED" | grep -q "$prefix/lib"; then
    echo "rust-downstream-test ($name): $exe names neither an rpath to $prefix/lib nor the library there:" >&2
    readelf -d "$exe" | grep -E "R(UN)?PATH|NEEDED" >&2 || true
    return 1
  fi
  env -u LD_LIBRARY_PATH "$exe" | tee "$tmp/out-$name"
  grep -q "downstream: total 55" "$tmp/out-$name"
}

make_app "$tmp/app-plain" no
run_case plain "$tmp/app-plain"
readelf -d "$tmp/target-plain/debug/downstream" | grep -q "NEEDED.*\[$prefix/lib/libflowlane.so.0\]" ||
  { echo "rust-downstream-test (plain): the binary does not record $prefix/lib/libflowlane.so.0" >&2; exit 1; }

make_app "$tmp/app-buildrs" yes
run_case build-rs "$tmp/app-buildrs"

make_app "$tmp/app-config" no
mkdir -p "$tmp/app-config/.cargo"
printf '[build]\nrustflags = ["-C", "link-arg=-Wl,-rpath,%s"]\n' "$prefix/lib" >"$tmp/app-config/.cargo/config.toml"
run_case cargo-config "$tmp/app-config"
# Inside the checkout, next to its build tree: an explicit PKG_CONFIG_PATH wins.
say "in the checkout: cargo build --example quickstart with PKG_CONFIG_PATH=$prefix/lib/pkgconfig"
(cd "$FLOWLANE_ROOT/bindings/rust" && env -u FLOWLANE_LIB_DIR -u LD_LIBRARY_PATH \
   PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CARGO_TARGET_DIR="$tmp/target-checkout" \
   cargo build --offline -q --example quickstart)
readelf -d "$tmp/target-checkout/debug/examples/quickstart" | grep -q "NEEDED.*\[$prefix/lib/libflowlane.so.0\]" ||
  { echo "rust-downstream-test: in the checkout, PKG_CONFIG_PATH did not win over the build tree:" >&2
    readelf -d "$tmp/target-checkout/debug/examples/quickstart" | grep -E "R(UN)?PATH|NEEDED" >&2; exit 1; }
env -u LD_LIBRARY_PATH "$tmp/target-checkout/debug/examples/quickstart" >/dev/null
say "rust-downstream-test: the three downstream programs found libflowlane through pkg-config and started"
