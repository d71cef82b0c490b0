#!/usr/bin/env bash
# NCCL across processes on the GPU test host (issue 33): real processes, each one rank of
# an NCCL communicator, started as a launcher would (torchrun's variables: RANK, WORLD_SIZE,
# LOCAL_RANK) and meeting through fl_comm_rendezvous_file, by tests/gpu/fake/run_procs.py
# running flowlane_nccl_procs (tests/gpu/fake/fake_nccl_procs.cpp on the real CUDA runtime
# and NCCL, buffers in device memory). From the repository root:
#   OUT=/some/dir scripts/dev/gpu-dist-check.sh
# Steps, each bounded by `timeout`, each PASS, FAIL or NOT RUN in $OUT/dist-summary.txt:
#   host    nvidia-smi lists a GPU; the NCCL version of the library flowlane loads
#           (FLOWLANE_NCCL_PATH, else libnccl.so.2) and PyTorch's, printed
#   build   libflowlane and the programs (FLOWLANE_DIST_BUILD, default build-gpu-dist)
#   one     one process, one rank, file rendezvous: every op and 8 dtypes on real NCCL
#           (send/recv to itself); proves the launcher path and NCCL's init from an id read
#           from a file, not matching between processes
#   two     two processes, one communicator. With two GPUs: one each, every op checked. With
#           one GPU (the test host): NCCL before 2.30 refuses two ranks of a communicator on
#           one device ("Duplicate GPU detected"), so the step is the negative test: every
#           rank's fl_comm_create must fail with FL_ERR_NCCL and NCCL's log must say why;
#           NCCL 2.30 and later allow it behind NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental,
#           NCCL_MAX_CTAS=2), and the step runs every op that way
#   stall   only where `two` ran the ops: the last rank leaves without its collective, the
#           other's fails with FL_ERR_TIMEOUT (fl_comm_set_timeout 1000 ms: the communicator
#           aborted, NCCL's kernel returned) and its process exits
#   fake    the multi-process tests on the fake NCCL (ctest fakegpu.procs.* and, with MPI,
#           mpi.nccl.*): 2 and 4 ranks in as many processes, matched by the fake, not NCCL
# What a one-GPU host cannot show (and this script does not claim): two ranks on two
# devices (NVLink/PCIe transports, one device per process as in production) before NCCL
# 2.30; any MPI run on real NCCL (fl_mpi_nccl_comm_create runs here only on the fake).
# A step that did not run is NOT RUN and fails the script, except `two`'s negative form on
# one GPU before NCCL 2.30, which is the most such a host can run and is reported as such.
# Exit status: 0 every step passed; 1 a step failed or did not run; 2 FLOWLANE_DIST_FAKE=1
# (no GPU: one, two and stall run flowlane_nccl_procs on the fake runtime and NCCL, which
# checks this script and the program, not NCCL; a partial result, never a pass).
# Variables: OUT (default out-gpu-dist), FLOWLANE_DIST_BUILD, FLOWLANE_DIST_JOBS (16),
# FLOWLANE_DIST_FAKE=1 (no GPU steps), FLOWLANE_DIST_OPTIONAL=mpi (no MPI on the host: the
# mpi.nccl.* part of `fake` may be missing).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/out-gpu-dist}
mkdir -p "$OUT"
B=${FLOWLANE_DIST_BUILD:-build-gpu-dist}
[[ "$B" == /* ]] || B=$root/$B
JOBS=${FLOWLANE_DIST_JOBS:-16}
FAKE_ONLY=${FLOWLANE_DIST_FAKE:-0}
OPTIONAL=",${FLOWLANE_DIST_OPTIONAL:-},"
sum="$OUT/dist-summary.txt"
: > "$sum"
failed=()
notrun=()
unset FLOWLANE_CUDART_PATH FAKE_NCCL_SHARED_DIR
export CUDA_MODULE_LOADING=EAGER

say() { echo "== $*" | tee -a "$sum"; }
pass() { say "PASS $1${2:+: $2}"; }
fail() { failed+=("$1"); say "FAIL $1${2:+: $2}"; }
not_run() { notrun+=("$1"); say "NOT RUN $1: $2"; }
runner=()  # FLOWLANE_DIST_FAKE=1: the same program on the fake runtime and NCCL (below)
procs() {  # procs LOG NP MODE [args...]: run_procs.py with the real-NCCL program
  local log=$1 np=$2 mode=$3
  shift 3
  "${runner[@]}" FLOWLANE_NCCL_INIT_TIMEOUT_MS=60000 timeout -k 10 180 python3 tests/gpu/fake/run_procs.py --program "$B/tests/flowlane_nccl_procs" --np "$np" \
    --launcher torchrun --mode "$mode" --seconds 150 "$@" > "$OUT/$log" 2>&1
}

say "host: $(uname -n) $(date -u +%FT%TZ), kernel $(uname -r); build tree $B"

# --- host -------------------------------------------------------------------------------------
gpus=0
nccl_code=0
if [[ "$FAKE_ONLY" == 1 ]]; then
  not_run host "FLOWLANE_DIST_FAKE=1"
else
  gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$sum" 2>&1 || true
  nccl_code=$(python3 - <<'EOF' 2>>"$sum"
import ctypes, os
path = os.environ.get("FLOWLANE_NCCL_PATH") or "libnccl.so.2"
try:
    v = ctypes.c_int()
    ctypes.CDLL(path).ncclGetVersion(ctypes.byref(v))
    print(v.value)
except OSError:
    print(0)
EOF
)
  torch_nccl=$(timeout 60 python3 -c 'import torch; print(torch.__version__, "NCCL", torch.cuda.nccl.version())' 2>&1 | tail -1)
  say "NCCL flowlane loads (${FLOWLANE_NCCL_PATH:-libnccl.so.2}): ${nccl_code:-0}; PyTorch: $torch_nccl"
  if [[ "${gpus:-0}" -lt 1 ]]; then
    fail host "nvidia-smi lists no GPU"
  elif [[ "${nccl_code:-0}" -eq 0 ]]; then
    fail host "no loadable NCCL (set FLOWLANE_NCCL_PATH, e.g. to PyTorch's nvidia/nccl/lib/libnccl.so.2)"
  else
    pass host "$gpus GPU(s), NCCL $nccl_code"
  fi
fi

# --- build ------------------------------------------------------------------------------------
deps=()
if ls .deps/*.deb > /dev/null 2>&1; then  # Debian packages staged for a host that cannot download them
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  deps=(-DCMAKE_PREFIX_PATH=/tmp/deps/usr "-DCMAKE_CXX_FLAGS=-isystem /tmp/deps/usr/include")
fi
built=0
if timeout 300 cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=ON -DFLOWLANE_BUILD_TESTS=ON \
     "${deps[@]}" > "$OUT/dist-build.log" 2>&1; then
  targets=(flowlane flowlane_nccl_procs flowlane_fake_nccl_procs)
  cmake --build "$B" --target help 2>/dev/null | grep -c 'flowlane_mpi_nccl' > /dev/null && targets+=(flowlane_mpi_nccl)
  if timeout 600 cmake --build "$B" -j "$JOBS" --target "${targets[@]}" >> "$OUT/dist-build.log" 2>&1; then
    built=1
    pass build "${targets[*]}"
  else
    fail build "see dist-build.log: $(grep -m3 -E 'error' "$OUT/dist-build.log" | tr '\n' ' ')"
  fi
else
  fail build "configure failed (CUDA toolkit and NCCL's header needed): see dist-build.log"
fi

# --- real NCCL --------------------------------------------------------------------------------
two_ran_ops=0
if [[ "$FAKE_ONLY" == 1 && $built == 1 ]]; then
  # The script's own logic, here: flowlane_nccl_procs on the fake CUDA runtime (preloaded:
  # its cudaMalloc/cudaMemcpy too) and the fake NCCL, as if on two GPUs. Proves nothing
  # about NCCL; the steps still count as not run.
  fake_rt=$B/tests/libflowlane_fake_cudart.so
  runner=(env "LD_PRELOAD=$fake_rt" "FLOWLANE_CUDART_PATH=$fake_rt" "FLOWLANE_NCCL_PATH=$B/tests/libflowlane_fake_nccl.so")
  gpus=2
  nccl_code=1
  say "FLOWLANE_DIST_FAKE=1: the steps one, two and stall run on the fake runtime and NCCL (the script's logic only)"
fi
if [[ "$FAKE_ONLY" == 1 && $built == 0 ]]; then
  for s in one two stall; do not_run "$s" "FLOWLANE_DIST_FAKE=1 and no build"; done
elif ((built == 0)) || [[ "${gpus:-0}" -lt 1 || "${nccl_code:-0}" -eq 0 ]]; then
  for s in one two stall; do not_run "$s" "no build, GPU or NCCL (above)"; done
else
  if procs dist-one.log 1 ops; then pass one; else fail one "see dist-one.log: $(tail -2 "$OUT/dist-one.log" | tr '\n' ' ')"; fi
  if ((gpus >= 2)); then
    if procs dist-two.log 2 ops; then two_ran_ops=1; pass two "two GPUs, every op"; else fail two "see dist-two.log"; fi
  elif ((nccl_code >= 23000)); then
    if NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=2 procs dist-two.log 2 ops; then
      two_ran_ops=1
      pass two "two ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1, experimental), every op"
    else
      fail two "two ranks on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1: see dist-two.log"
    fi
  else
    if NCCL_DEBUG=WARN procs dist-two.log 2 dup && grep -qiE 'duplicate gpu|same gpu' "$OUT/dist-two.log"; then
      pass two "negative only: NCCL $nccl_code refused two ranks on the one GPU on every rank (Duplicate GPU), as it must; no matching between processes was shown on real NCCL"
    else
      fail two "NCCL $nccl_code did not refuse two ranks on one GPU the expected way: see dist-two.log"
    fi
  fi
  if ((two_ran_ops)); then
    stall_rc=0
    if [[ "$gpus" -ge 2 ]]; then
      procs dist-stall.log 2 stall || stall_rc=$?
    else
      NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=2 procs dist-stall.log 2 stall || stall_rc=$?
    fi
    if ((stall_rc == 0)); then pass stall "the survivor's collective failed with FL_ERR_TIMEOUT"; else fail stall "see dist-stall.log"; fi
  elif [[ "$gpus" -lt 2 && "$nccl_code" -lt 23000 ]]; then
    say "NOT RUN stall: needs two ranks of one communicator, which NCCL $nccl_code refuses on one GPU (reported, not failed)"
  else
    not_run stall "\`two\` did not run its ops"
  fi
fi

# --- the fake NCCL, several processes ----------------------------------------------------------
if ((built)); then
  (cd "$B" && timeout -k 10 600 ctest -R '^(fakegpu\.procs|mpi\.nccl)\.' -j "$JOBS" --output-on-failure) > "$OUT/dist-fake.log" 2>&1
  rc=$?
  ran=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$OUT/dist-fake.log" | tail -1)
  mpi_ran=$(grep -c 'mpi\.nccl\..*Passed' "$OUT/dist-fake.log" || true)
  if ((rc != 0)); then
    fail fake "see dist-fake.log"
  elif [[ "${ran:-0}" -lt 8 ]]; then
    fail fake "only ${ran:-0} tests ran (8 fakegpu.procs.* expected)"
  elif ((mpi_ran == 0)) && [[ "$OPTIONAL" != *",mpi,"* ]]; then
    fail fake "no mpi.nccl.* test ran (no MPI found by the build; FLOWLANE_DIST_OPTIONAL=mpi accepts that)"
  else
    pass fake "$ran tests (mpi.nccl: $mpi_ran)"
  fi
else
  not_run fake "no build"
fi

if [[ "$FAKE_ONLY" == 1 && $built == 1 ]]; then
  notrun+=(one two stall)  # they ran on the fakes only
fi
if ((${#failed[@]})) || { ((${#notrun[@]})) && [[ "$FAKE_ONLY" != 1 ]]; }; then
  say "RESULT: FAILED (${failed[*]:-}) NOT RUN (${notrun[*]:-})"
  exit 1
fi
if [[ "$FAKE_ONLY" == 1 ]]; then
  say "RESULT: PARTIAL: every step passed, one/two/stall on the fakes; no real-NCCL step ran (FLOWLANE_DIST_FAKE=1)"
  exit 2
fi
say "RESULT: every step passed"
exit 0
