#!/usr/bin/env bash
# Instructions (callgrind Ir, every thread of the process: the caller's submit and wait, the
# rounds it drives, the progress thread's) per float32 all-reduce submitted with
# FL_SUBMIT_INLINE and waited for with fl_instr_wait_for over MPI, one rank (an MPI
# singleton: no mpirun), MPI's own work included (CHECK `raw`: MPI_Iallreduce + MPI_Wait
# alone, for scale). Runs `bench_comm_mpi --loop` at two counts
# under valgrind and divides the difference in the programs' totals by the difference in
# collectives (start-up and shut-down cancel out).
#   scripts/dev/callgrind-comm-mpi.sh                   # strict, 1 element, 2000 and 6000
#   scripts/dev/callgrind-comm-mpi.sh alongside 16384   # FLOWLANE_COMM_CHECK, elements
#   scripts/dev/callgrind-comm-mpi.sh raw               # raw MPI, the same loop
#   FL_CG_LIBS=/tmp/old scripts/dev/callgrind-comm-mpi.sh   # another build's libflowlane*.so
# Needs valgrind and a build with bench_comm_mpi (MPI found).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$FLOWLANE_ROOT"

check="${1:-strict}"
elements="${2:-1}"
n1="${FL_CG_N1:-2000}"
n2="${FL_CG_N2:-6000}"
exe="$BUILD_DIR/bench/mpi/bench_comm_mpi"
[[ -x "$exe" ]] || cmake --build "$BUILD_DIR" --target bench_comm_mpi -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ir() {
  local env=()
  [[ -n "${FL_CG_LIBS:-}" ]] && env=(env "LD_LIBRARY_PATH=$FL_CG_LIBS")
  "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" "$exe" --loop "$check" "$elements" "$1" \
    > "$work/out.$1" 2>&1 || { cat "$work/out.$1" >&2; exit 1; }
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/out.$1"
}
a=$(ir "$n1")
b=$(ir "$n2")
echo "check=$check elements=$elements: $a Ir for $n1 collectives, $b for $n2: $(( (b - a) / (n2 - n1) )) Ir per collective"
