#!/usr/bin/env bash
# GPU checks, meant for the GPU test host (what they prove: gpu/README.md).
# From the project root of a checkout that carries .deps/ (Debian packages the GPU host
# cannot download, staged there beforehand):
#   OUT=/some/dir scripts/dev/gpu-check.sh
# It cannot pass without having run what it reports. Each of these fails the run:
#   * no device seen (nvidia-smi, cudaGetDeviceCount); the GPU suite runs with
#     FLOWLANE_REQUIRE_GPU=1, so its no-device skips are failures;
#   * a skipped GPU test, except the child-process ones (GpuChild.*, which run only as
#     children of their parent test); fewer tests run than the suite lists;
#   * a negative control that does not fail the way it must. With
#     CUDA_DEVICE_MAX_CONNECTIONS=1 every CUDA stream shares one hardware queue, so:
#     Gpu.CrossStreamChainNeverWaitsOnTheHost (its producer spins until a later kernel on
#     another stream releases it) must fail with its producer timed out ("Which is: -1");
#     Gpu.WaitingForTheLossDoesNotWaitForBackward (print(loss)) must fail saying the wait
#     for the loss waited for backward; GpuModel.AValueEdgeConsumerIsIssuedBeforeItsProducer
#     must fail saying value edges fell back to events. A control that passes cannot tell;
#   * the value-edge run of the suite (FLOWLANE_GPU_VALUE_EDGES=1) failing;
#   * compute-sanitizer memcheck reporting a device memory error (CUDA API calls that
#     return an error are not counted: the suite makes some on purpose, and NCCL probes
#     kernel images at init);
#   * a benchmark that reports an error (SkipWithError) or none at all, and a row of the
#     ratios report missing (scripts/dev/gpu_report.py --require);
#   * the PyTorch baselines or the pool-scaling run (examples/parallel_compile) not run or
#     failing, unless FLOWLANE_GPU_OPTIONAL names them (torch, scaling);
#   * a step left out because the time budget was spent.
# CUDA_MODULE_LOADING=EAGER for every step: a lazily loaded module could make a first launch
# wait while another kernel spins, and blame the engine. Every step runs under `timeout`,
# the whole within FLOWLANE_GPU_BUDGET_S (default 1320 s, 22 minutes); every step runs even
# if an earlier one failed (except after a failed configure or build); the exit status is
# non-zero if any failed. Files in $OUT:
#   summary.txt  build.log  gpu-tests.log  negative-control.log  memcheck.log
#   bench-and-cpu.log  gpu_bench_gpu.json  gpu_bench_gpu_controls.json  torch.json  gpu-report.md
# summary.txt starts with the host: kernel, GPU and driver, the NCCL versions (the one
# flowlane loads, PyTorch's), compute-sanitizer, and the benchmark library's build type.
# Variables: FLOWLANE_GPU_BUILD (build directory, default build-gpu-host), FLOWLANE_GPU_JOBS
# (default 16), FLOWLANE_GPU_BENCH_ARGS (extra Google Benchmark arguments; a
# --benchmark_filter is refused: it would drop rows), FLOWLANE_GPU_BENCH_REPS (default 5),
# FLOWLANE_GPU_PREBUILT (a tarball made by scripts/dev/gpu-prebuild.sh on a build machine:
# used instead of building here when it was built from these sources and its binaries
# start; else the build runs as usual), FLOWLANE_GPU_OPTIONAL (steps allowed not to run:
# torch, scaling), FLOWLANE_GPU_CPU_SUITE=1 (also run the CPU and fake-runtime suites,
# which CI runs anyway).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/out-gpu}
mkdir -p "$OUT"
B=${FLOWLANE_GPU_BUILD:-build-gpu-host}
JOBS=${FLOWLANE_GPU_JOBS:-16}
BUDGET=${FLOWLANE_GPU_BUDGET_S:-1320}
REPS=${FLOWLANE_GPU_BENCH_REPS:-5}
OPTIONAL=",${FLOWLANE_GPU_OPTIONAL:-},"
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()
export CUDA_MODULE_LOADING=EAGER
unset FLOWLANE_CUDA_STREAMS CUDA_DEVICE_MAX_CONNECTIONS FLOWLANE_CUDART_PATH FLOWLANE_NCCL_PATH \
  FLOWLANE_GPU_COMPLETE FLOWLANE_LANE_HANDOFF FLOWLANE_GPU_VALUE_EDGES FLOWLANE_GPU_HOPS

say() { echo "== $*" | tee -a "$OUT/summary.txt"; }
fail() { failed+=("$1"); say "FAILED: $1${2:+ ($2)}"; }
# optional NAME WHY: a step that did not run: a failure unless FLOWLANE_GPU_OPTIONAL names it.
optional() {
  if [[ "$OPTIONAL" == *",$1,"* ]]; then say "not run ($1, allowed by FLOWLANE_GPU_OPTIONAL): $2"; else fail "$1" "$2"; fi
}
# t SECONDS cmd...: runs cmd under timeout, capped by what is left of the budget; 124
# without running it when the budget is spent (its caller fails the step).
t() {
  local want=$1 left
  shift
  left=$((BUDGET - ($(date +%s) - start)))
  if ((left < 10)); then
    echo "gpu-check: time budget spent, not run: $*" | tee -a "$OUT/summary.txt" >&2
    return 124
  fi
  timeout -k 10 $((want < left ? want : left)) "$@"
}

: > "$OUT/summary.txt"
say "host: $(uname -n) $(date -u +%FT%TZ), kernel $(uname -r), budget ${BUDGET}s"
say "settings: FLOWLANE_GPU_PREBUILT=${FLOWLANE_GPU_PREBUILT:-} FLOWLANE_GPU_BENCH_ARGS=${FLOWLANE_GPU_BENCH_ARGS:-} FLOWLANE_GPU_OPTIONAL=${FLOWLANE_GPU_OPTIONAL:-} FLOWLANE_GPU_CPU_SUITE=${FLOWLANE_GPU_CPU_SUITE:-0} FLOWLANE_WAIT_SPIN_NS=${FLOWLANE_WAIT_SPIN_NS:-} FLOWLANE_POLL_PACE_NS=${FLOWLANE_POLL_PACE_NS:-}"
read -r -a bench_args <<<"${FLOWLANE_GPU_BENCH_ARGS:-}"
for a in "${bench_args[@]}"; do
  if [[ "$a" == --benchmark_filter* ]]; then
    fail bench-args "FLOWLANE_GPU_BENCH_ARGS may not filter benchmarks ($a): rows would go missing"
    exit 1
  fi
done

# --- the host, first: a device must be seen; the NCCL versions (flowlane's and PyTorch's may differ) ---
gpus=$(t 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
t 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$OUT/summary.txt" 2>&1 || true
if [[ "${gpus:-0}" -lt 1 ]]; then
  fail no-device "nvidia-smi lists no GPU"
fi
{
  echo "== NCCL versions"
  python3 - <<'EOF' 2>&1
import ctypes, ctypes.util
try:
    lib = ctypes.CDLL("libnccl.so.2")
    v = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(v))
    path = next((l.split()[-1] for l in open("/proc/self/maps") if "libnccl.so" in l), "?")
    print(f"   libnccl.so.2 (what flowlane loads by default): {v.value} from {path}")
except OSError as e:
    print(f"   libnccl.so.2: not loadable ({e})")
try:
    import torch
    print(f"   PyTorch {torch.__version__}: NCCL {torch.cuda.nccl.version()}")
except Exception as e:  # noqa: BLE001
    print(f"   PyTorch: {e}")
EOF
  pip show nvidia-nccl-cu13 2>/dev/null | sed -n 's/^\(Name\|Version\|Location\): /   pip nvidia-nccl-cu13 \1: /p'
  echo "== CUDA_DEVICE_MAX_CONNECTIONS (unset by this script): ${CUDA_DEVICE_MAX_CONNECTIONS:-unset}"
} >> "$OUT/summary.txt"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | head -1)
say "compute-sanitizer: ${san:-not found}"

if ls .deps/*.deb > /dev/null 2>&1; then
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
else
  say "no .deps/*.deb: relying on system packages for concurrentqueue and the rest"
fi
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# --- build (or a prebuilt tree from scripts/dev/gpu-prebuild.sh) -----------------------------
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
prebuilt=0
if [[ -n "${FLOWLANE_GPU_PREBUILT:-}" && -f "$FLOWLANE_GPU_PREBUILT" ]]; then
  pb_dir=$(tar -tzf "$FLOWLANE_GPU_PREBUILT" | sed -n 's,/prebuilt-commit$,,p')
  here=$(bash scripts/dev/gpu-prebuild.sh --source-hash)
  if tar -C / -xzf "$FLOWLANE_GPU_PREBUILT" && [[ -x "/$pb_dir/tests/flowlane_gpu_tests" ]] &&
     ! grep -qx "source $here" "/$pb_dir/prebuilt-commit"; then
    say "the prebuilt tarball was built from other sources than this checkout's (source $here): building from source"
  elif [[ -x "/$pb_dir/tests/flowlane_gpu_tests" ]]; then
    export LD_LIBRARY_PATH=/$pb_dir/carried-lib:$LD_LIBRARY_PATH
    if t 60 "/$pb_dir/tests/flowlane_gpu_tests" --gtest_list_tests > "$tmp/list" 2>&1 &&
       t 60 "/$pb_dir/bench/gpu_bench_gpu" --benchmark_list_tests > /dev/null 2>>"$tmp/list"; then
      B=/$pb_dir
      prebuilt=1
      say "prebuilt binaries (built at $(tr '\n' ' ' < "/$pb_dir/prebuilt-commit"))"
    else
      say "the prebuilt binaries do not start here ($(tail -2 "$tmp/list" | tr '\n' ' ')): building from source"
    fi
  fi
fi
if ((prebuilt == 0)); then
  say "configure and build ($B, -j$JOBS)"
  if ! t 120 cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_PREFIX_PATH=/tmp/deps/usr -DCMAKE_CXX_FLAGS="-isystem /tmp/deps/usr/include" > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"
    fail configure
    exit 1
  fi
  grep "CUDA backend" "$OUT/build.log" | tee -a "$OUT/summary.txt"
  targets=(flowlane flowlane_gpu_tests gpu_bench_gpu gpu_bench_gpu_controls gpu_memops_probe parallel_compile)
  [[ "${FLOWLANE_GPU_CPU_SUITE:-0}" == 1 ]] && targets=(all)
  if ! t 480 cmake --build "$B" -j "$JOBS" --target "${targets[@]}" >> "$OUT/build.log" 2>&1; then
    grep -E "error|Error" "$OUT/build.log" | head -40
    fail build
    exit 1
  fi
  [[ "$B" == /* ]] || B=$root/$B
fi
# One line that names the tree the later steps (and gpu-session.sh) use.
say "build tree: $B"
gtest_bin="$B/tests/flowlane_gpu_tests"

# --- the GPU suite ---------------------------------------------------------------------------
say "GPU suite (FLOWLANE_REQUIRE_GPU=1)"
log="$OUT/gpu-tests.log"
: > "$log"
listed=$(t 60 "$gtest_bin" --gtest_list_tests 2>>"$log" | grep -c '^  ' || true)
if ! FLOWLANE_REQUIRE_GPU=1 t 200 "$gtest_bin" >> "$log" 2>&1; then
  fail gpu-tests "see gpu-tests.log"
fi
ran=$(sed -n 's/^\[==========\] \([0-9][0-9]*\) tests\? from .* ran\..*/\1/p' "$log" | tail -1)
bad_skips=$(grep -E '^\[  SKIPPED \] ' "$log" | grep -v -E '^\[  SKIPPED \] GpuChild\.' | grep -v ' tests\?, listed below' |
            sort -u || true)
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | grep -v -E ' \([0-9]+ ms\)$' | sort -u | tee -a "$OUT/summary.txt"
say "GPU suite: $listed listed, ${ran:-0} ran"
if [[ -z "${ran:-}" || "${listed:-0}" -eq 0 || "$ran" -lt "$listed" ]]; then
  fail gpu-test-count "listed ${listed:-0}, ran ${ran:-0}"
fi
if [[ -n "$bad_skips" ]]; then
  fail gpu-skips "$(echo "$bad_skips" | tr '\n' ' ')"
fi
# libflowlane.so.0 of this build must load without CUDA (no NEEDED entry for it).
needed=$(readelf -d "$B/capi/libflowlane.so.0" 2>&1 | grep NEEDED || true)
echo "$needed" >> "$log"
if [[ -z "$needed" ]] || grep -qE 'cudart|nccl' <<<"$needed"; then
  fail no-cuda-needed "$(echo "$needed" | grep -oE 'lib(cudart|nccl)[^]]*' | tr '\n' ' ')"
fi

# The suite's device tests once more with value edges (FLOWLANE_GPU_VALUE_EDGES=1), with the
# engines' completion counters (FLOWLANE_GPU_STATS=1: value edges used, fallbacks).
say "GPU suite with value edges (FLOWLANE_GPU_VALUE_EDGES=1)"
echo "=== with FLOWLANE_GPU_VALUE_EDGES=1" >> "$log"
if ! FLOWLANE_GPU_VALUE_EDGES=1 FLOWLANE_GPU_STATS=1 FLOWLANE_REQUIRE_GPU=1 t 200 "$gtest_bin" \
    '--gtest_filter=Gpu.*:GpuModel.*:-Gpu.IllegalAddressInAChild' >> "$log" 2>&1; then
  fail gpu-tests-value-edges "see gpu-tests.log"
fi
vstats=$(sed -n '/=== with FLOWLANE_GPU_VALUE_EDGES=1/,$p' "$log" | grep -c '^flowlane-gpu-stats:.*value edges [1-9]' || true)
say "engines that used value edges in that run: ${vstats:-0}"
((${vstats:-0} > 0)) || fail gpu-tests-value-edges "no engine used a value edge"

# --- negative controls -----------------------------------------------------------------------
# negative NAME TEST TEXT: with CUDA_DEVICE_MAX_CONNECTIONS=1, TEST must fail with TEXT in its log.
nlog="$OUT/negative-control.log"
: > "$nlog"
negative() {
  local name=$1 test=$2 text=$3 rc
  echo "=== $name: $test" >> "$nlog"
  CUDA_DEVICE_MAX_CONNECTIONS=1 FLOWLANE_GPU_STATS=1 FLOWLANE_REQUIRE_GPU=1 t 60 "$gtest_bin" \
    --gtest_filter="$test" > "$tmp/neg.log" 2>&1
  rc=$?
  cat "$tmp/neg.log" >> "$nlog"
  if grep -q "^\[  FAILED  \] $test" "$tmp/neg.log" && grep -qF "$text" "$tmp/neg.log"; then
    say "negative control $name: $test failed as it must (exit $rc)"
  elif grep -q "^\[       OK \] $test" "$tmp/neg.log"; then
    fail "negative-control-$name" "$test passed with one hardware queue: it cannot tell"
  else
    fail "negative-control-$name" "$test did not fail with \"$text\" (exit $rc, see negative-control.log)"
  fi
}
say "negative controls: CUDA_DEVICE_MAX_CONNECTIONS=1 must make these fail"
negative cross-stream Gpu.CrossStreamChainNeverWaitsOnTheHost "Which is: -1"
negative print-loss Gpu.WaitingForTheLossDoesNotWaitForBackward "the wait for the loss waited for backward"
negative value-edge-fallback GpuModel.AValueEdgeConsumerIsIssuedBeforeItsProducer "fell back to events"

# --- benchmarks ------------------------------------------------------------------------------
say "GPU benchmarks ($REPS repetitions)"
blog="$OUT/bench-and-cpu.log"
: > "$blog"
nbench=0
for b in "$B"/bench/gpu_bench_*; do
  [[ -x "$b" ]] || continue
  nbench=$((nbench + 1))
  name=$(basename "$b")
  json="$OUT/$name.json"
  echo "--- $name" >> "$blog"
  if ! t 240 "$b" --benchmark_out="$json" --benchmark_out_format=json --benchmark_repetitions="$REPS" \
      --benchmark_report_aggregates_only=true "${bench_args[@]}" >> "$blog" 2>&1; then
    fail "$name" "exit status"
  fi
  # A benchmark that skipped with an error (no device, a failed call) still exits 0.
  errs=$(python3 scripts/dev/gbench.py --errors "$json" 2>&1)
  if [[ -n "$errs" ]]; then
    echo "$errs" >> "$blog"
    fail "$name" "$(echo "$errs" | head -3 | tr '\n' ' ')"
  fi
done
((nbench >= 2)) || fail benchmarks "gpu_bench_gpu and gpu_bench_gpu_controls were not both built ($nbench)"
grep -m1 -o '"library_build_type": "[a-z]*"' "$OUT/gpu_bench_gpu.json" 2>/dev/null |
  sed 's/^/== Google Benchmark /' >> "$OUT/summary.txt"

say "PyTorch baselines"
if t 120 python3 bench/gpu/torch_compare.py --out "$OUT/torch.json" >> "$blog" 2>&1; then
  grep -A6 '"us_per_op"' "$OUT/torch.json" >> "$blog" || true
else
  rm -f "$OUT/torch.json"
  optional torch "PyTorch baselines not run: $(tail -1 "$blog")"
fi

say "ratios (gpu-report.md)"
if [[ -f "$OUT/gpu_bench_gpu.json" ]]; then
  if t 60 python3 scripts/dev/gpu_report.py --require "$OUT" > "$tmp/report.txt" 2>&1; then
    head -30 "$tmp/report.txt" | tee -a "$OUT/summary.txt"
  else
    cat "$tmp/report.txt" | tee -a "$blog" | tail -5 >> "$OUT/summary.txt"
    fail gpu-report "rows missing (see summary.txt)"
  fi
else
  fail gpu-report "no gpu_bench_gpu.json"
fi

say "pool scaling, 1..16 threads (parallel_compile)"
if [[ ! -x "$B/examples/parallel_compile" ]]; then
  optional scaling "no $B/examples/parallel_compile"
elif ! t 90 "$B/examples/parallel_compile" --seq-len 300 --threads-max 16 --repeat 3 >> "$blog" 2>&1; then
  optional scaling "parallel_compile failed or timed out (see bench-and-cpu.log)"
fi

# --- compute-sanitizer -----------------------------------------------------------------------
say "compute-sanitizer memcheck"
if [[ -n "$san" && -x "$san" ]]; then
  if ! FLOWLANE_REQUIRE_GPU=1 t 600 "$san" --tool memcheck --report-api-errors no --error-exitcode 99 --leak-check no "$gtest_bin" \
      '--gtest_filter=-GpuChild.*:Gpu.IllegalAddressInAChild:Gpu.CrossStreamChainNeverWaitsOnTheHost:Gpu.WaitingForTheLossDoesNotWaitForBackward:GpuModel.Random*' \
      > "$OUT/memcheck.log" 2>&1; then
    fail memcheck "$(grep -E 'ERROR SUMMARY|FAILED' "$OUT/memcheck.log" | head -3 | tr '\n' ' ')"
  fi
  grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tee -a "$OUT/summary.txt"
  grep -q 'ERROR SUMMARY' "$OUT/memcheck.log" || fail memcheck "no ERROR SUMMARY: it did not run to the end"
else
  echo "compute-sanitizer not found" > "$OUT/memcheck.log"
  fail memcheck "compute-sanitizer not found"
fi

if [[ "${FLOWLANE_GPU_CPU_SUITE:-0}" == 1 && $prebuilt == 1 ]]; then
  fail cpu-tests "FLOWLANE_GPU_CPU_SUITE=1, but the prebuilt tree holds only the GPU binaries (unset FLOWLANE_GPU_PREBUILT to build it)"
elif [[ "${FLOWLANE_GPU_CPU_SUITE:-0}" == 1 ]]; then
  say "CPU suite and fake-runtime suites (ctest -LE ^gpu$)"
  if ! (cd "$B" && t 240 ctest -LE '^gpu$' --no-tests=error --output-on-failure -j 8 --timeout 200) >> "$blog" 2>&1; then
    fail cpu-tests "see bench-and-cpu.log"
  fi
  tail -5 "$blog" | tee -a "$OUT/summary.txt"
fi

say "elapsed $(($(date +%s) - start))s"
if ((${#failed[@]})); then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all GPU checks passed"
