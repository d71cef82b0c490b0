#!/usr/bin/env bash
# flowlane's collectives over MPI against raw MPI (bench/mpi/bench_comm_mpi.cpp) under
# mpirun, then bench/comm_mpi_report.py writes the "Collectives over MPI" section of
# BENCHMARKS.md (medians of alternating rounds, with min and max; ratios against raw MPI
# measured in the same run).
#
#   bench/run_comm_mpi.sh [ROUNDS]    ROUNDS default 9
#   MPI_BENCH_NP       ranks (default 2)
#   MPI_BENCH_BUILD    build directory with bench/mpi/bench_comm_mpi (default build; built if missing)
#   MPI_BENCH_RESULTS  where the JSON goes (default bench/results/comm_mpi)
#   MPI_BENCH_NOTE     a remark recorded with the table (e.g. "machine shared with builds")
#   MPI_BENCH_NO_REPORT=1  run only, leave BENCHMARKS.md alone
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds="${1:-9}"
np="${MPI_BENCH_NP:-2}"
build="${MPI_BENCH_BUILD:-build}"
results="${MPI_BENCH_RESULTS:-bench/results/comm_mpi}"
exe="$build/bench/mpi/bench_comm_mpi"

if [[ ! -x "$exe" ]]; then
  cmake --build "$build" -j "$(nproc)" --target bench_comm_mpi
fi
mkdir -p "$results"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -n "$(git status --porcelain --untracked-files=no -- . ':!BENCHMARKS.md' ':!bench/results' 2>/dev/null)" ]] &&
  commit+=" (with uncommitted changes)"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)

# As root (CI, containers) Open MPI wants both variables; --bind-to none: a rank's engine
# workers and progress thread must not share one core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmd=(mpirun --oversubscribe --bind-to none --timeout 900 -np "$np" "$exe" --rounds "$rounds"
     --json "$results/result.json")
echo "${cmd[*]}" >&2
timeout 960 "${cmd[@]}" >/dev/null

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
finished=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
python3 - "$results/meta.json" "$commit" "$started" "$finished" "$load_start" "$load_end" "${MPI_BENCH_NOTE:-}" \
  "${cmd[*]}" <<'PY'
import json, sys
keys = ["commit", "started", "finished", "load_start", "load_end", "note", "command"]
json.dump(dict(zip(keys, sys.argv[2:])), open(sys.argv[1], "w"), indent=1)
PY
if [[ "${MPI_BENCH_NO_REPORT:-0}" != 1 ]]; then
  python3 bench/comm_mpi_report.py --results "$results" --out BENCHMARKS.md
fi
