#!/usr/bin/env bash
# GPU checks, meant for the GPU test host (what they prove: gpu/README.md).
# From the project root of a checkout that carries .deps/ (Debian packages the GPU host
# cannot download, staged there beforehand):
#   OUT=/some/dir scripts/dev/gpu-check.sh
# It cannot pass without having exercised a GPU:
#   * no device seen (nvidia-smi, cudaGetDeviceCount) fails the run; the GPU suite runs with
#     FLOWLANE_REQUIRE_GPU=1, so its no-device skips are failures;
#   * any skipped GPU test fails the run, except the child-process ones (GpuChild.*: they
#     run only as children of their parent test); fewer tests run than the suite lists fails;
#   * negative control: with CUDA_DEVICE_MAX_CONNECTIONS=1 every CUDA stream shares one
#     hardware queue, so Gpu.CrossStreamChainNeverWaitsOnTheHost (whose producer spins until
#     a later kernel on another stream releases it) must FAIL; if it passes, the test
#     cannot tell a host wait from none, and the run fails;
#   * compute-sanitizer memcheck over the GPU suite (without the deliberate illegal address
#     and the two tests whose kernels spin on each other): device memory errors only; CUDA
#     API calls that return an error are not counted (the suite makes some on purpose, bad
#     launch configurations and devices, and NCCL probes kernel images at init);
#   * a benchmark that reports an error (SkipWithError) or none at all fails the run.
# CUDA_MODULE_LOADING=EAGER for every step: a lazily loaded module could make a first launch
# wait while another kernel spins, and blame the engine. Every step runs under `timeout`,
# the whole within FLOWLANE_GPU_BUDGET_S (default 1320 s, 22 minutes); every step runs even
# if an earlier one failed (except after a failed configure or build); the exit status is
# non-zero if any failed. At most 8 files go to $OUT:
#   summary.txt  build.log  gpu-tests.log  negative-control.log  memcheck.log
#   bench-and-cpu.log  gpu_bench_gpu.json  gpu-report.md
# Variables: FLOWLANE_GPU_BUILD (build directory, default build-gpu-host), FLOWLANE_GPU_JOBS
# (default 16), FLOWLANE_GPU_BENCH_ARGS (extra Google Benchmark arguments),
# FLOWLANE_GPU_PREBUILT (a tarball made by scripts/dev/gpu-prebuild.sh on a build machine: used
# instead of building here when its binaries start; else the build runs as usual),
# FLOWLANE_GPU_CPU_SUITE=1 (also run the CPU and fake-runtime suites, which CI runs anyway).
# Order: the GPU suite, the negative control, the benchmarks and their ratios, PyTorch,
# scaling, then compute-sanitizer (the slowest) with what is left of the budget.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/out-gpu}
mkdir -p "$OUT"
B=${FLOWLANE_GPU_BUILD:-build-gpu-host}
JOBS=${FLOWLANE_GPU_JOBS:-16}
BUDGET=${FLOWLANE_GPU_BUDGET_S:-1320}
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()
export CUDA_MODULE_LOADING=EAGER
unset FLOWLANE_CUDA_STREAMS CUDA_DEVICE_MAX_CONNECTIONS FLOWLANE_CUDART_PATH FLOWLANE_NCCL_PATH

say() { echo "== $*" | tee -a "$OUT/summary.txt"; }
fail() { failed+=("$1"); say "FAILED: $1${2:+ ($2)}"; }
# t SECONDS cmd...: runs cmd under timeout, capped by what is left of the budget.
t() {
  local want=$1 left
  shift
  left=$((BUDGET - ($(date +%s) - start)))
  if ((left < 10)); then
    echo "gpu-check: time budget spent, not run: $*" >&2
    return 124
  fi
  timeout -k 10 $((want < left ? want : left)) "$@"
}

: > "$OUT/summary.txt"
say "host: $(uname -n) $(date -u +%FT%TZ), budget ${BUDGET}s"
say "settings: FLOWLANE_GPU_PREBUILT=${FLOWLANE_GPU_PREBUILT:-} FLOWLANE_GPU_BENCH_ARGS=${FLOWLANE_GPU_BENCH_ARGS:-} FLOWLANE_GPU_CPU_SUITE=${FLOWLANE_GPU_CPU_SUITE:-0} FLOWLANE_WAIT_SPIN_NS=${FLOWLANE_WAIT_SPIN_NS:-} FLOWLANE_POLL_PACE_NS=${FLOWLANE_POLL_PACE_NS:-}"

# --- a device must be seen -----------------------------------------------------------------
gpus=$(t 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
t 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$OUT/summary.txt" 2>&1 || true
if [[ "${gpus:-0}" -lt 1 ]]; then
  fail no-device "nvidia-smi lists no GPU"
fi

if ls .deps/*.deb > /dev/null 2>&1; then
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
else
  say "no .deps/*.deb: relying on system packages for concurrentqueue and the rest"
fi
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# --- build (or a prebuilt tree from scripts/dev/gpu-prebuild.sh) ----------------------------------
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
prebuilt=0
if [[ -n "${FLOWLANE_GPU_PREBUILT:-}" && -f "$FLOWLANE_GPU_PREBUILT" ]]; then
  pb_dir=$(tar -tzf "$FLOWLANE_GPU_PREBUILT" | sed -n 's,/prebuilt-commit$,,p')
  here=$(bash scripts/dev/gpu-prebuild.sh --source-hash)
  if tar -C / -xzf "$FLOWLANE_GPU_PREBUILT" && [[ -x "/$pb_dir/tests/flowlane_gpu_tests" ]] &&
     ! grep -qx "source $here" "/$pb_dir/prebuilt-commit"; then
    say "prebuilt tree was built from other sources than this checkout's (source $here): building from source"
  elif [[ -x "/$pb_dir/tests/flowlane_gpu_tests" ]]; then
    export LD_LIBRARY_PATH=/$pb_dir/carried-lib:$LD_LIBRARY_PATH
    if t 60 "/$pb_dir/tests/flowlane_gpu_tests" --gtest_list_tests > "$tmp/list" 2>&1 &&
       t 60 "/$pb_dir/bench/gpu_bench_gpu" --benchmark_list_tests > /dev/null 2>>"$tmp/list"; then
      B=/$pb_dir
      prebuilt=1
      say "prebuilt tree $B (built at $(tr '\n' ' ' < "$B/prebuilt-commit"))"
    else
      say "prebuilt tree does not start here ($(tail -2 "$tmp/list" | tr '\n' ' ')): building from source"
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
  targets=(flowlane flowlane_gpu_tests gpu_bench_gpu parallel_compile)
  [[ "${FLOWLANE_GPU_CPU_SUITE:-0}" == 1 ]] && targets=(all)
  if ! t 480 cmake --build "$B" -j "$JOBS" --target "${targets[@]}" >> "$OUT/build.log" 2>&1; then
    grep -E "error|Error" "$OUT/build.log" | head -40
    fail build
    exit 1
  fi
fi
gtest_bin="$B/tests/flowlane_gpu_tests"

# --- the GPU suite ---------------------------------------------------------------------------
say "GPU suite (FLOWLANE_REQUIRE_GPU=1)"
log="$OUT/gpu-tests.log"
: > "$log"
listed=$(t 60 "$gtest_bin" --gtest_list_tests 2>>"$log" | grep -c '^  ' || true)
if ! FLOWLANE_REQUIRE_GPU=1 t 150 "$gtest_bin" >> "$log" 2>&1; then
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

# --- negative control ------------------------------------------------------------------------
say "negative control: CUDA_DEVICE_MAX_CONNECTIONS=1 must make the no-host-wait test fail"
nlog="$OUT/negative-control.log"
CUDA_DEVICE_MAX_CONNECTIONS=1 FLOWLANE_REQUIRE_GPU=1 t 60 "$gtest_bin" \
  --gtest_filter=Gpu.CrossStreamChainNeverWaitsOnTheHost > "$nlog" 2>&1
nrc=$?
if grep -q '^\[  FAILED  \] Gpu.CrossStreamChainNeverWaitsOnTheHost' "$nlog" && grep -q 'P timed out' "$nlog"; then
  say "negative control: the test failed as it must (exit $nrc)"
elif grep -q '^\[       OK \] Gpu.CrossStreamChainNeverWaitsOnTheHost' "$nlog"; then
  fail negative-control "the test passed with one hardware queue: it cannot detect a host wait"
else
  fail negative-control "the test neither failed on its check nor passed (exit $nrc, see negative-control.log)"
fi

# --- benchmarks ------------------------------------------------------------------------------
say "GPU benchmarks"
blog="$OUT/bench-and-cpu.log"
: > "$blog"
read -r -a bench_args <<<"${FLOWLANE_GPU_BENCH_ARGS:-}"
nbench=0
for b in "$B"/bench/gpu_bench_*; do
  [[ -x "$b" ]] || continue
  nbench=$((nbench + 1))
  name=$(basename "$b")
  json="$tmp/$name.json"
  [[ "$name" == gpu_bench_gpu ]] && json="$OUT/$name.json"
  echo "--- $name" >> "$blog"
  if ! t 150 "$b" --benchmark_out="$json" --benchmark_out_format=json --benchmark_repetitions=5 \
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
((nbench > 0)) || fail benchmarks "no gpu_bench_* binary was built"

say "PyTorch baselines"
if t 90 python3 bench/gpu/torch_compare.py --out "$tmp/torch.json" >> "$blog" 2>&1; then
  grep -A6 '"us_per_op"' "$tmp/torch.json" >> "$blog" || true
else
  say "PyTorch baselines not run: $(tail -1 "$blog")"
fi

say "ratios (gpu-report.md)"
if [[ -f "$OUT/gpu_bench_gpu.json" ]]; then
  cp "$OUT/gpu_bench_gpu.json" "$tmp/" 2>/dev/null
  if t 60 python3 scripts/dev/gpu_report.py "$tmp" > "$tmp/report.txt" 2>&1; then
    cp "$tmp/gpu-report.md" "$OUT/gpu-report.md" 2>/dev/null
    head -30 "$tmp/report.txt" | tee -a "$OUT/summary.txt"
  else
    cat "$tmp/report.txt" >> "$blog"
    fail gpu-report
  fi
else
  fail gpu-report "no gpu_bench_gpu.json"
fi

say "pool scaling, 1..16 threads (parallel_compile)"
if [[ -x "$B/examples/parallel_compile" ]]; then
  t 60 "$B/examples/parallel_compile" --seq-len 300 --threads-max 16 --repeat 3 >> "$blog" 2>&1 ||
    say "parallel_compile failed or timed out"
fi

# --- compute-sanitizer -----------------------------------------------------------------------
say "compute-sanitizer memcheck"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | head -1)
if [[ -n "$san" && -x "$san" ]]; then
  if ! FLOWLANE_REQUIRE_GPU=1 t 600 "$san" --tool memcheck --report-api-errors no --error-exitcode 99 --leak-check no "$gtest_bin" \
      '--gtest_filter=-GpuChild.*:Gpu.IllegalAddressInAChild:Gpu.CrossStreamChainNeverWaitsOnTheHost:Gpu.WaitingForTheLossDoesNotWaitForBackward' \
      > "$OUT/memcheck.log" 2>&1; then
    fail memcheck "$(grep -E 'ERROR SUMMARY|FAILED' "$OUT/memcheck.log" | head -3 | tr '\n' ' ')"
  fi
  grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tee -a "$OUT/summary.txt"
else
  echo "compute-sanitizer not found" > "$OUT/memcheck.log"
  fail memcheck "compute-sanitizer not found"
fi

if [[ "${FLOWLANE_GPU_CPU_SUITE:-0}" == 1 && $prebuilt == 1 ]]; then
  say "CPU suite not run: the prebuilt tree holds only the GPU binaries (unset FLOWLANE_GPU_PREBUILT to build it)"
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
