#!/usr/bin/env bash
# Regenerates the binding declarations from capi/include/flowlane/flowlane.h:
#   bindings/python/flowlane/_capi.py            (scripts/dev/gen_bindings.py, pycparser)
#   bindings/rust/flowlane-sys/src/bindgen.rs    (bindgen + rustfmt, layout tests included)
#   bindings/rust/flowlane-sys/src/header.rs     (status table, init(), macros bindgen skips)
#
#   scripts/dev/gen-bindings.sh           rewrite the checked-in files
#   scripts/dev/gen-bindings.sh --check   regenerate into a temporary directory and fail (exit 1,
#                                         with a diff) if the checked-in files differ
# Needs: cc, python3 with pycparser, bindgen, rustfmt (Debian: python3-pycparser bindgen
# rustfmt; scripts/setup.sh installs them). Exit status 2 when one is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
files=(bindings/python/flowlane/_capi.py bindings/rust/flowlane-sys/src/bindgen.rs
       bindings/rust/flowlane-sys/src/header.rs)

# Debian's python3-pycparser belongs to /usr/bin/python3; `python3` may be another one.
py=""
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import pycparser' >/dev/null 2>&1; then
    py="$cand"; break
  fi
done
if [[ -z "$py" ]]; then
  echo "gen-bindings.sh: no python3 with pycparser (Debian: apt-get install python3-pycparser)" >&2
  exit 2
fi
for tool in bindgen rustfmt; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "gen-bindings.sh: $tool is missing (Debian: apt-get install bindgen rustfmt)" >&2
    exit 2
  fi
done

case "${1:-}" in
  "")
    "$py" "$root/scripts/dev/gen_bindings.py" --out-root "$root"
    echo "gen-bindings.sh: regenerated ${files[*]}"
    ;;
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$py" "$root/scripts/dev/gen_bindings.py" --out-root "$tmp"
    stale=0
    for f in "${files[@]}"; do
      if ! diff -u "$root/$f" "$tmp/$f" --label "$f (checked in)" --label "$f (from the header)"; then
        stale=1
      fi
    done
    if [[ $stale -ne 0 ]]; then
      echo "gen-bindings.sh --check: the checked-in declarations differ from the header;" \
           "run scripts/dev/gen-bindings.sh and commit the result" >&2
      exit 1
    fi
    echo "gen-bindings.sh --check: the binding declarations match the header"
    ;;
  *)
    echo "usage: scripts/dev/gen-bindings.sh [--check]" >&2
    exit 2
    ;;
esac
