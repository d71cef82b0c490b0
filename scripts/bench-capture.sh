#!/usr/bin/env bash
# Capture and replay (issue 34) against eager submission and the OpenMP runtimes, in
# alternating rounds, and the "Capture and replay" section of BENCHMARKS.md
# (scripts/dev/bench_capture_report.py).
#
#   scripts/bench-capture.sh [ROUNDS]      # default 5 rounds
#
# Round k, for each thread count N: bench_openmp's flowlane rows (BM_<X>Flowlane: eager,
# BM_<X>FlowlaneReplay: one launch of a captured program of the batch, BM_<X>FlowlaneCapture:
# recording the batch), libgomp (BM_<X>Gomp) and libomp (bench_openmp_libomp), one after the
# other, the order rotated by one each round, each under `taskset -c 0-(N-1)`. Every run
# writes Google Benchmark JSON (the median of BENCH_REPETITIONS repetitions is the round's
# figure); the report takes the median over rounds, and the median, min and max over rounds
# of each ratio taken within one round. Then callgrind Ir per instruction of eager,
# replayed and captured flowlane (scripts/dev/callgrind_submit.py), unless
# BENCH_CAPTURE_CALLGRIND=0.
#   BENCH_OMP_THREADS, BENCH_REPETITIONS, BENCH_MIN_TIME, BENCH_NOTE as scripts/bench-openmp.sh
#   BENCH_RESULTS        results directory (default: bench/results/capture)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FLOWLANE_ROOT"

rounds="${1:-5}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ROUNDS]" >&2; exit 2; }
threads_list="${BENCH_OMP_THREADS:-1,2}"
reps="${BENCH_REPETITIONS:-3}"
results="${BENCH_RESULTS:-bench/results/capture}"
IFS=, read -r -a thread_counts <<<"$threads_list"

commit=$(bench_commit)

run_setup openmp
say "configure ($BUILD_DIR, Release, benchmarks on)"
configure_release -DFLOWLANE_BUILD_BENCH=ON
say "build"
build_openmp_benches
bin="$BUILD_DIR/bench"
rel_bin="${bin#"$FLOWLANE_ROOT"/}"

runtimes=(Flowlane Gomp)
declare -A how=([Flowlane]="bench_openmp|Flowlane/|FlowlaneReplay|FlowlaneCapture" [Gomp]="bench_openmp|Gomp")
if [[ -x "$bin/bench_openmp_libomp" ]] && has_libomp_bench; then
  runtimes+=(Libomp)
  how[Libomp]="bench_openmp_libomp|Libomp"
fi

mkdir -p "$results"
rm -f "$results"/round*.json "$results"/callgrind.json
cpus=$(nproc)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
common_args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true --benchmark_out_format=json)
[[ -n "${BENCH_MIN_TIME:-}" ]] && common_args+=(--benchmark_min_time="$BENCH_MIN_TIME")
commands=("scripts/bench-capture.sh $rounds   # BENCH_OMP_THREADS=$threads_list BENCH_REPETITIONS=$reps${BENCH_MIN_TIME:+ BENCH_MIN_TIME=$BENCH_MIN_TIME}")


for ((round = 1; round <= rounds; round++)); do
  order=()
  for ((i = 0; i < ${#runtimes[@]}; i++)); do
    order+=("${runtimes[$(((i + round - 1) % ${#runtimes[@]}))]}")
  done
  for n in "${thread_counts[@]}"; do
    pin=""
    if ((n == 1)); then pin=0; elif ((n <= cpus)); then pin="0-$((n - 1))"; fi
    for rt in "${order[@]}"; do
      bench_run "$round" "${rt}_t$n" "$pin" "$bin/${how[$rt]%%|*}" --threads="$n" --benchmark_filter="${how[$rt]#*|}"
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ "${BENCH_CAPTURE_CALLGRIND:-1}" != 0 ]] && command -v valgrind >/dev/null 2>&1 &&
  command -v callgrind_annotate >/dev/null 2>&1; then
  say "callgrind"
  # shellcheck disable=SC2054  # the commas are one argument's
  cg=(python3 scripts/dev/callgrind_submit.py --bin-dir "$rel_bin" --runtimes Flowlane,FlowlaneReplay,FlowlaneCapture,Gomp,Libomp
      --out-dir "${BUILD_DIR#"$FLOWLANE_ROOT"/}/callgrind-capture" --json "$results/callgrind.json" --top 0 --repeat 1)
  "${cg[@]}"
  commands+=("${cg[*]}")
fi

say "BENCHMARKS.md (capture section)"
cmd_args=()
for c in "${commands[@]}"; do cmd_args+=(--command "$c"); done
python3 scripts/dev/bench_capture_report.py --results "$results" --out BENCHMARKS.md --rounds "$rounds" \
  --repetitions "$reps" --commit "$commit" --load "$load_before" --load "$load_after" \
  --note "${BENCH_NOTE:-}" "${cmd_args[@]}"
