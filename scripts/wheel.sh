#!/usr/bin/env bash
# Builds an installable wheel of the Python bindings that bundles libflowlane.so.0, offline:
# Debian's python3-build, python3-wheel and python3-setuptools, no build isolation, no
# network. The wheel is platform-tagged (py3-none-linux_x86_64 on x86-64: it contains an
# x86-64 shared library, but no Python-ABI-specific code).
#
#   scripts/wheel.sh [DIR]        writes DIR/flowlane-<version>-py3-none-<platform>.whl
#                                 (DIR defaults to dist/ at the repository root)
#
# The library bundled is, in order: $FLOWLANE_LIBRARY; $FLOWLANE_BUILD_DIR/capi (default
# build/, brought up to date with `cmake --build --target flowlane`); else a CPU-only
# Release build made here in build-wheel/. It needs, on the target machine, what the
# library links (libstdc++: `ldd` lists it); the wheel does not vendor it.
# The package is built from a temporary copy of bindings/python, so nothing (egg-info,
# build/) is left in the source tree.
#   PYTHON   the interpreter to build with (default: the first of python3, /usr/bin/python3
#            that has the build, wheel and setuptools modules)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

out="${1:-$FLOWLANE_ROOT/dist}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

py=""
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import build, wheel, setuptools' >/dev/null 2>&1; then
    py="$cand"; break
  fi
done
if [[ -z "$py" ]]; then
  echo "wheel.sh: no python3 with the build, wheel and setuptools modules" \
       "(Debian: apt-get install python3-build python3-wheel python3-setuptools)" >&2
  exit 2
fi

lib="${FLOWLANE_LIBRARY:-}"
if [[ -n "$lib" ]]; then
  [[ -f "$lib" ]] || { echo "wheel.sh: FLOWLANE_LIBRARY=$lib does not exist" >&2; exit 2; }
elif [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  say "bringing $BUILD_DIR/capi/libflowlane.so.0 up to date"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target flowlane
  lib="$BUILD_DIR/capi/libflowlane.so.0"
else
  wb="$FLOWLANE_ROOT/build-wheel"
  say "building the library (CPU-only Release) in $wb"
  cmake -S "$FLOWLANE_ROOT" -B "$wb" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=OFF \
    -DFLOWLANE_BUILD_TESTS=OFF -DFLOWLANE_BUILD_BENCH=OFF -DFLOWLANE_BUILD_EXAMPLES=OFF
  cmake --build "$wb" -j "$JOBS" --target flowlane
  lib="$wb/capi/libflowlane.so.0"
fi
# A CUDA build names libcudart only as a string it opens on first GPU use (gpu/runtime.cpp),
# never as a load-time dependency: the wheel installs and runs without CUDA.
if grep -q 'libcudart\.so' "$lib"; then
  echo "wheel.sh: note: $lib is a CUDA build; its GPU calls need the CUDA runtime where it is installed" \
    "(it is loaded on first use; without it they answer FL_ERR_UNSUPPORTED)" >&2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
src="$tmp/src"
mkdir -p "$src/flowlane"
cp bindings/python/pyproject.toml bindings/python/setup.py bindings/python/README.md "$src/"
cp bindings/python/flowlane/*.py bindings/python/flowlane/py.typed "$src/flowlane/"
cp -L "$lib" "$src/flowlane/libflowlane.so.0"

say "building the wheel with $py (offline, no build isolation)"
(cd "$src" && "$py" -m build --wheel --no-isolation --outdir "$tmp/dist" .)
whl=("$tmp"/dist/flowlane-*.whl)
if [[ ${#whl[@]} -ne 1 || ! -f "${whl[0]}" ]]; then
  echo "wheel.sh: expected one wheel, got: ${whl[*]}" >&2
  exit 1
fi
case "$(basename "${whl[0]}")" in
  *-py3-none-any.whl) echo "wheel.sh: the wheel came out pure (py3-none-any) although it bundles a library" >&2; exit 1 ;;
esac
cp "${whl[0]}" "$out/"
echo "wheel.sh: $out/$(basename "${whl[0]}") (bundles $(readlink -f "$lib"))"
