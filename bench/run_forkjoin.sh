#!/usr/bin/env bash
# Fork–join through the C API next to oneTBB (bench/bench_capi_forkjoin.cpp), one runtime
# per process, alternating: each round runs flowlane, oneTBB and the one-thread floor in a
# rotated order, FJ_REPS repetitions each; bench/forkjoin_report.py then writes the
# "Fork–join from any thread" section of BENCHMARKS.md (medians over rounds of each round's
# median, with min and max, and the median of the per-round flowlane/oneTBB ratios).
#
#   bench/run_forkjoin.sh [ROUNDS]     ROUNDS default 5
#   FJ_THREADS  threads per side, the main thread included (default 2)
#   FJ_REPS     repetitions per process and round (default 3)
#   FJ_BUILD    build directory with bench_capi_forkjoin (default build; built if missing)
#   FJ_RESULTS  where the JSON goes (default bench/results/forkjoin; emptied first)
#   FJ_NOTE     a remark recorded with the table (e.g. "machine shared with builds")
#   FJ_NO_REPORT=1  run only, leave BENCHMARKS.md alone
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds="${1:-5}"
threads="${FJ_THREADS:-2}"
reps="${FJ_REPS:-3}"
build="${FJ_BUILD:-build}"
results="${FJ_RESULTS:-bench/results/forkjoin}"
exe="$build/bench/bench_capi_forkjoin"

if [[ ! -x "$exe" ]]; then
  cmake --build "$build" -j "$(nproc)" --target bench_capi_forkjoin
fi
mkdir -p "$results"
rm -f "$results"/round*.json "$results"/meta.json  # (notes.md is kept)

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -n "$(git status --porcelain --untracked-files=no -- . ':!BENCHMARKS.md' ':!bench/results' 2>/dev/null)" ]] &&
  commit+=" (with uncommitted changes)"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)

runtimes=(Flowlane Tbb Sequential)
commands=()
for ((r = 1; r <= rounds; ++r)); do
  # Rotate the order each round so that no runtime always runs first (or after another).
  order=()
  for ((k = 0; k < ${#runtimes[@]}; ++k)); do order+=("${runtimes[$(((r - 1 + k) % ${#runtimes[@]}))]}"); done
  for rt in "${order[@]}"; do
    out="$results/round${r}_${rt}.json"
    args=(--benchmark_filter="^BM_[A-Za-z0-9]+${rt}/" --benchmark_repetitions="$reps"
          --benchmark_report_aggregates_only=true --benchmark_out_format=json --benchmark_out="$out")
    cmd="FL_BENCH_THREADS=$threads $exe ${args[*]}"
    [[ $r -eq 1 ]] && commands+=("$cmd")
    echo "round $r/$rounds: $rt" >&2
    FL_BENCH_THREADS="$threads" "$exe" "${args[@]}" >/dev/null
  done
done

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
finished=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
python3 - "$results/meta.json" <<EOF
import json, sys
json.dump({"commit": "$commit", "started": "$started", "finished": "$finished", "rounds": $rounds,
           "threads": $threads, "reps": $reps, "load_start": "$load_start", "load_end": "$load_end",
           "note": """${FJ_NOTE:-}""", "commands": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${commands[@]}")},
          open(sys.argv[1], "w"), indent=1)
EOF
if [[ "${FJ_NO_REPORT:-0}" != 1 ]]; then
  python3 bench/forkjoin_report.py --results "$results" --out BENCHMARKS.md
fi
