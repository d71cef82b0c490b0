#!/usr/bin/env bash
# Instructions (callgrind Ir) per submitted instruction, per workload shape, for flowlane
# and the OpenMP peers: builds bench_openmp (and bench_openmp_libomp where clang and libomp
# are present), then runs scripts/dev/callgrind_submit.py, which runs
# `bench_openmp --once=SHAPE:COUNT:THREADS` under valgrind --tool=callgrind at two counts
# and prints Ir per instruction (total, submitting thread, submit call, other threads) and
# the top functions by inclusive cost per instruction. Options go to callgrind_submit.py:
#   scripts/dev/callgrind-submit.sh                      # all shapes, runtimes, 2000 and 12000
#   scripts/dev/callgrind-submit.sh --runtimes Flowlane --shapes Chain --counts 4000,24000
#   scripts/dev/callgrind-submit.sh --json bench/results/callgrind/summary.json
# Needs valgrind (scripts/setup.sh openmp installs it with clang and libomp-dev).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$FLOWLANE_ROOT"

run_setup openmp
if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_annotate >/dev/null 2>&1; then
  echo "callgrind-submit.sh: valgrind is not installed (apt-get install valgrind)" >&2
  exit 1
fi
say "configure ($BUILD_DIR, Release, benchmarks on)"
configure_release -DFLOWLANE_BUILD_BENCH=ON >/dev/null
say "build bench_openmp"
build_openmp_benches
say "callgrind"
python3 scripts/dev/callgrind_submit.py --bin-dir "$BUILD_DIR/bench" --out-dir "$BUILD_DIR/callgrind" "$@"
