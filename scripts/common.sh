# Sourced by the scripts in this directory: repository root, build settings, logging.
# Environment knobs (all optional):
#   FLOWLANE_BUILD_DIR    build directory (default: build)
#   FLOWLANE_JOBS         parallel build jobs (default: number of CPUs)
#   FLOWLANE_CMAKE_ARGS   extra arguments for the CMake configure step
#   FLOWLANE_SKIP_SETUP=1 do not check/install Debian packages
FLOWLANE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${FLOWLANE_BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$FLOWLANE_ROOT/$BUILD_DIR" ;; esac
JOBS="${FLOWLANE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
read -r -a EXTRA_CMAKE_ARGS <<<"${FLOWLANE_CMAKE_ARGS:-}"

say() { printf '\n==> %s\n' "$*"; }

# run_setup [group...]: scripts/setup.sh, with optional package groups (e.g. openmp).
run_setup() {
  if [[ "${FLOWLANE_SKIP_SETUP:-0}" != 1 ]]; then
    "$FLOWLANE_ROOT/scripts/setup.sh" "$@"
  fi
}

# configure_release [cmake args...]: a Release build in $BUILD_DIR.
configure_release() {
  cmake -S "$FLOWLANE_ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" "${EXTRA_CMAKE_ARGS[@]}"
}

# build_openmp_benches [targets...]: bench_openmp and the given targets, plus
# bench_openmp_libomp when CMake found clang and libomp (its configure message says why not).
has_libomp_bench() {
  local targets
  targets=$(cmake --build "$BUILD_DIR" --target help 2>/dev/null) || return 1
  grep -Eq '(^|[ .])bench_openmp_libomp(:| |$)' <<<"$targets"
}
build_openmp_benches() {
  local targets=(bench_openmp "$@")
  if has_libomp_bench; then targets+=(bench_openmp_libomp); fi
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
}

# ---- alternating benchmark rounds (scripts/bench-openmp.sh, scripts/bench-capture.sh) ----

# bench_commit: the commit measured, with a note when the tree has changes that matter
# (the outputs, BENCHMARKS.md and bench/results, do not count).
bench_commit() {
  local commit
  commit=$(git -C "$FLOWLANE_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  [[ -n "$(git -C "$FLOWLANE_ROOT" status --porcelain --untracked-files=no -- . ':!BENCHMARKS.md' ':!bench/results' \
    2>/dev/null)" ]] && commit+=" (with uncommitted changes)"
  echo "$commit"
}

# bench_run ROUND NAME TASKSET_CPUS EXE [ARGS...]: one Google Benchmark run writing
# $results/round<ROUND>_<NAME>.json, with ${common_args[@]}, pinned to TASKSET_CPUS (empty:
# not pinned); round 1 appends its command (paths under $bin shown as $rel_bin) to
# ${commands[@]}. Uses the caller's $results, $rounds, $bin, $rel_bin; exits on a failure.
# shellcheck disable=SC2154  # results, rounds, common_args, bin, rel_bin: the caller's
bench_run() {
  local round=$1 name=$2 pin=$3 exe=$4
  shift 4
  local out="$results/round${round}_${name}.json"
  local cmd=("$exe" "$@" "${common_args[@]}" --benchmark_out="$out")
  [[ -n "$pin" ]] && cmd=(taskset -c "$pin" "${cmd[@]}")
  say "round $round/$rounds: ${cmd[*]#"$FLOWLANE_ROOT"/}"
  if ! "${cmd[@]}" >/dev/null; then
    echo "failed: ${cmd[*]}" >&2
    rm -f "$out"
    exit 1
  fi
  if [[ $round == 1 ]]; then
    local shown
    shown=$(printf '%q ' "${cmd[@]}")
    shown="${shown% }"
    commands+=("${shown//"$bin"/$rel_bin}")
  fi
}
