#!/usr/bin/env bash
# Runs every benchmark executable (build/bench/bench_*, and build/bench/gpu_bench_* when
# a GPU is present) with repetitions, writes Google Benchmark JSON to bench/results/ and
# regenerates BENCHMARKS.md (date, machine, commit, commands, a table per executable and
# flowlane/peer ratios). bench_openmp is left to scripts/bench-openmp.sh, whose section of
# BENCHMARKS.md is kept.
#   BENCH_REPETITIONS  repetitions per benchmark (default 5; the tables show medians)
#   BENCH_FILTER       --benchmark_filter regex (default: all)
#   BENCH_MIN_TIME     --benchmark_min_time (default: Google Benchmark's)
#   BENCH_RESULTS      results directory (default: bench/results)
#   BENCH_NOTE         a remark recorded in BENCHMARKS.md (e.g. "machine shared with builds")
#   BENCH_TARGETS      space-separated executables to run (default: all); the others' results
#                      already in BENCH_RESULTS are kept and reported as they are
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

reps="${BENCH_REPETITIONS:-5}"
results="${BENCH_RESULTS:-bench/results}"

# The commit measured, taken before the (possibly long) run.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# (The outputs, BENCHMARKS.md and bench/results, do not count as changes to what is measured.)
[[ -n "$(git status --porcelain --untracked-files=no -- . ':!BENCHMARKS.md' ':!bench/results' 2>/dev/null)" ]] && commit+=" (with uncommitted changes)"

run_setup
say "configure ($BUILD_DIR, Release, benchmarks on)"
configure_release -DFLOWLANE_BUILD_BENCH=ON
targets=()
for src in bench/bench_*.cpp; do
  # bench_openmp has its own alternating-rounds driver and section (scripts/bench-openmp.sh).
  [[ -e "$src" && "$src" != bench/bench_openmp.cpp ]] && targets+=("$(basename "$src" .cpp)")
done
has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  has_gpu=1
  for src in bench/gpu/bench_*.cpp bench/gpu/bench_*.cu; do
    [[ -e "$src" ]] && targets+=("gpu_$(basename "${src%.*}")")
  done
fi
if [[ -n "${BENCH_TARGETS:-}" ]]; then
  read -r -a targets <<<"$BENCH_TARGETS"
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "no bench/bench_*.cpp: nothing to run"
else
  say "build ${targets[*]}"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
fi

mkdir -p "$results"
# A full run replaces every result, so that a removed benchmark leaves no stale table.
[[ -z "${BENCH_FILTER:-}" && -z "${BENCH_TARGETS:-}" ]] && rm -f "$results"/*.json
commands=("scripts/run-benchmarks.sh   # BENCH_REPETITIONS=$reps${BENCH_TARGETS:+ BENCH_TARGETS=\"$BENCH_TARGETS\"}${BENCH_FILTER:+ BENCH_FILTER=$BENCH_FILTER}${BENCH_MIN_TIME:+ BENCH_MIN_TIME=$BENCH_MIN_TIME}")
status=0
for name in "${targets[@]}"; do
  exe="$BUILD_DIR/bench/$name"
  [[ -x "$exe" ]] || { echo "missing $exe" >&2; status=1; continue; }
  out="$results/$name.json"
  args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true
        --benchmark_out="$out" --benchmark_out_format=json)
  [[ -n "${BENCH_FILTER:-}" ]] && args+=(--benchmark_filter="$BENCH_FILTER")
  [[ -n "${BENCH_MIN_TIME:-}" ]] && args+=(--benchmark_min_time="$BENCH_MIN_TIME")
  rel_exe="${exe#"$FLOWLANE_ROOT"/}"
  commands+=("$rel_exe ${args[*]}")
  say "$rel_exe ${args[*]}"
  if ! "$exe" "${args[@]}"; then
    echo "$name failed" >&2
    rm -f "$out"  # a partial file would make a misleading table
    status=1
  fi
done
[[ $has_gpu == 1 ]] || echo "(no GPU visible: gpu_bench_* not run)"

say "BENCHMARKS.md"
cmd_args=()
for c in "${commands[@]}"; do cmd_args+=(--command "$c"); done
python3 scripts/dev/bench_report.py --results "$results" --out BENCHMARKS.md --repetitions "$reps" \
  --commit "$commit" --note "${BENCH_NOTE:-}" "${cmd_args[@]}"
exit $status
