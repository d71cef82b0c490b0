#!/usr/bin/env bash
# Builds flowlane and runs every test, from a fresh Debian machine: installs missing
# packages, builds everything (Release, in build/: library, tests, examples, benchmarks),
# runs ctest (C examples included), then the Python binding tests (when
# bindings/python/tests exists: examples/python, the wheel in a fresh venv), and the Rust
# crate tests, examples/rust and a downstream crate built through pkg-config (when
# bindings/rust/Cargo.toml exists). Every suite runs even if an earlier one failed; the
# exit status is non-zero if any failed.
#   FLOWLANE_TEST_JOBS   parallel ctest jobs (default 2)
#   FLOWLANE_CTEST_ARGS  extra ctest arguments (e.g. "-L abi")
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

run_setup
say "configure ($BUILD_DIR, Release)"
configure_release -DFLOWLANE_BUILD_TESTS=ON
say "build"
cmake --build "$BUILD_DIR" -j "$JOBS"

failed=()
read -r -a ctest_args <<<"${FLOWLANE_CTEST_ARGS:-}"
say "ctest"
if ! (cd "$BUILD_DIR" && ctest --output-on-failure -j "${FLOWLANE_TEST_JOBS:-2}" "${ctest_args[@]}"); then
  failed+=(ctest)
fi
# The README's first command, as written (its build is the one above: nothing to rebuild).
say "the README's demo: ./scripts/demo.sh"
FLOWLANE_SKIP_SETUP=1 ./scripts/demo.sh >/dev/null || failed+=(demo)

# The bindings load the library just built: they are told where it is.
lib="$BUILD_DIR/capi/libflowlane.so.0"
export FLOWLANE_LIBRARY="$lib"
export FLOWLANE_LIB_DIR="$BUILD_DIR/capi"
export LD_LIBRARY_PATH="$BUILD_DIR/capi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [[ -d bindings/python/tests ]]; then
  # `python3` may be a pyenv or venv interpreter without pytest; prefer one that has it
  # (Debian's python3-pytest is for /usr/bin/python3), else run the same tests with unittest.
  py_runner=()
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import pytest' >/dev/null 2>&1; then
      py_runner=("$py" -m pytest -q bindings/python/tests)
      break
    fi
  done
  [[ ${#py_runner[@]} -gt 0 ]] || py_runner=(python3 -m unittest discover -s bindings/python/tests -v)
  say "python binding tests: ${py_runner[*]} (FLOWLANE_LIBRARY=$lib)"
  if ! PYTHONPATH="$FLOWLANE_ROOT/bindings/python${PYTHONPATH:+:$PYTHONPATH}" "${py_runner[@]}"; then
    failed+=(python)
  fi
else
  echo "(no bindings/python/tests: Python binding tests skipped)"
fi

if [[ -f bindings/rust/Cargo.toml ]]; then
  say "rust binding tests (FLOWLANE_LIB_DIR=$FLOWLANE_LIB_DIR)"
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found (scripts/setup.sh installs it where Debian has it)" >&2
    failed+=(rust)
  elif ! (cd bindings/rust && cargo test --offline); then
    failed+=(rust)
  fi
  if command -v cargo >/dev/null 2>&1; then
    # The Rust examples (examples/rust/*.rs, declared in bindings/rust/flowlane/Cargo.toml).
    for ex in examples/rust/*.rs; do
      ex="$(basename "$ex" .rs)"
      say "rust example $ex"
      (cd bindings/rust && cargo run --offline -q --example "$ex") || failed+=("rust-example-$ex")
    done
    # A crate outside the repository that finds the installed library through pkg-config only.
    say "rust downstream crate (scripts/rust-downstream-test.sh)"
    "$FLOWLANE_ROOT/scripts/rust-downstream-test.sh" "$BUILD_DIR" || failed+=(rust-downstream)
  fi
  # CUDA builds: the GPU wrappers once more, against the fake CUDA runtime (tests/gpu/fake),
  # which must be loaded ahead of libcudart. Built first without it.
  fake="$BUILD_DIR/tests/libflowlane_fake_cudart.so"
  if [[ -f "$fake" ]] && command -v cargo >/dev/null 2>&1; then
    say "rust GPU wrappers against the fake CUDA runtime ($fake)"
    if ! (cd bindings/rust && cargo test --offline --test fake_gpu --no-run &&
          FLOWLANE_FAKE_CUDART=1 LD_PRELOAD="$fake" cargo test --offline --test fake_gpu); then
      failed+=(rust-fakegpu)
    fi
  fi
else
  echo "(no bindings/rust/Cargo.toml: Rust binding tests skipped)"
fi

if [[ ${#failed[@]} -gt 0 ]]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all tests passed"
