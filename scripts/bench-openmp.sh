#!/usr/bin/env bash
# flowlane host instructions vs OpenMP tasks with depend clauses (libgomp, and LLVM's
# libomp where clang and libomp-dev are installed), in alternating rounds, and the OpenMP
# section of BENCHMARKS.md (scripts/dev/bench_openmp_report.py).
#
#   scripts/bench-openmp.sh [ROUNDS]      # default 5 rounds
#
# Round k, for each thread count N: runs flowlane (bench_openmp, BM_*Flowlane), libgomp
# (bench_openmp, BM_*Gomp) and libomp (bench_openmp_libomp) one after the other, the order
# rotated by one each round, each under `taskset -c 0-(N-1)` (the same N CPUs for every
# runtime; flowlane's one extra thread at N = 1 shares the one CPU). The flowlane slot
# also runs bench_engine's hand-off and submit-only benchmarks. Every run writes Google
# Benchmark JSON (median of BENCH_REPETITIONS repetitions = the round's median); the report
# takes the median over rounds of each runtime, and of the per-round ratio
# flowlane / better OpenMP. Then scripts/dev/callgrind-submit.sh (if valgrind is installed).
#   BENCH_OMP_THREADS    thread counts N (default 1,2; e.g. 1,2,8,16 on a bigger host)
#   BENCH_REPETITIONS    repetitions per benchmark and round (default 3)
#   BENCH_MIN_TIME       --benchmark_min_time (default: Google Benchmark's)
#   BENCH_OMP_CALLGRIND  0 to skip the callgrind figures
#   BENCH_RESULTS        results directory (default: bench/results/openmp)
#   BENCH_NOTE           a remark recorded in BENCHMARKS.md (load, machine state)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

rounds="${1:-5}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ROUNDS]" >&2; exit 2; }
threads_list="${BENCH_OMP_THREADS:-1,2}"
reps="${BENCH_REPETITIONS:-3}"
results="${BENCH_RESULTS:-bench/results/openmp}"
IFS=, read -r -a thread_counts <<<"$threads_list"

commit=$(bench_commit)

run_setup openmp
say "configure ($BUILD_DIR, Release, benchmarks on)"
configure_release -DFLOWLANE_BUILD_BENCH=ON
say "build"
build_openmp_benches bench_engine
bin="$BUILD_DIR/bench"
rel_bin="${bin#"$FLOWLANE_ROOT"/}"

# runtime name -> "executable|benchmark filter"
runtimes=(Flowlane Gomp)
declare -A how=([Flowlane]="bench_openmp|Flowlane" [Gomp]="bench_openmp|Gomp")
if [[ -x "$bin/bench_openmp_libomp" ]] && has_libomp_bench; then
  runtimes+=(Libomp)
  how[Libomp]="bench_openmp_libomp|Libomp"
else
  echo "bench_openmp_libomp not built (clang++ or libomp-dev missing): libgomp only"
fi

mkdir -p "$results"
rm -f "$results"/round*.json "$results"/callgrind.json "$results"/run.json
cpus=$(nproc)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
common_args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true --benchmark_out_format=json)
[[ -n "${BENCH_MIN_TIME:-}" ]] && common_args+=(--benchmark_min_time="$BENCH_MIN_TIME")
commands=("scripts/bench-openmp.sh $rounds   # BENCH_OMP_THREADS=$threads_list BENCH_REPETITIONS=$reps${BENCH_MIN_TIME:+ BENCH_MIN_TIME=$BENCH_MIN_TIME}")


for ((round = 1; round <= rounds; round++)); do
  # Rotate the runtimes' order by one each round.
  order=()
  for ((i = 0; i < ${#runtimes[@]}; i++)); do
    order+=("${runtimes[$(((i + round - 1) % ${#runtimes[@]}))]}")
  done
  for n in "${thread_counts[@]}"; do
    pin=""
    if ((n == 1)); then pin=0; elif ((n <= cpus)); then pin="0-$((n - 1))"; fi
    for rt in "${order[@]}"; do
      exe="$bin/${how[$rt]%%|*}"
      bench_run "$round" "${rt}_t$n" "$pin" "$exe" --threads="$n" --benchmark_filter="${how[$rt]#*|}"
      if [[ $rt == Flowlane && $n == "${thread_counts[0]}" ]]; then
        bench_run "$round" "Flowlane_engine" "" "$bin/bench_engine" --benchmark_filter='BM_(CrossLaneHandoff|SubmitOnly)Flowlane'
      fi
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ "${BENCH_OMP_CALLGRIND:-1}" != 0 ]]; then
  if command -v valgrind >/dev/null 2>&1 && command -v callgrind_annotate >/dev/null 2>&1; then
    say "callgrind"
    cg_runtimes=$(IFS=,; echo "${runtimes[*]}")
    cg=(python3 scripts/dev/callgrind_submit.py --bin-dir "$rel_bin" --runtimes "$cg_runtimes"
        --out-dir "${BUILD_DIR#"$FLOWLANE_ROOT"/}/callgrind" --json "$results/callgrind.json")
    "${cg[@]}"
    commands+=("${cg[*]}")
  else
    echo "(valgrind not installed: no callgrind figures; scripts/setup.sh openmp installs it)"
  fi
fi

say "BENCHMARKS.md (OpenMP section)"
cmd_args=()
for c in "${commands[@]}"; do cmd_args+=(--command "$c"); done
python3 scripts/dev/bench_openmp_report.py --results "$results" --out BENCHMARKS.md --rounds "$rounds" \
  --repetitions "$reps" --commit "$commit" --load "$load_before" --load "$load_after" \
  --note "${BENCH_NOTE:-}" "${cmd_args[@]}"
