#!/usr/bin/env bash
# GPU checks, meant for the GPU test host (what they prove: gpu/README.md).
# From the project root of a checkout that carries .deps/ (Debian packages the GPU host
# cannot download, staged there beforehand):
#   OUT=/some/dir scripts/gpu-check.sh
# Unpacks .deps/*.deb (concurrentqueue) into /tmp/deps, configures a CUDA build
# for sm_90, builds everything with -j16, then runs the GPU tests (ctest -L gpu), the GPU
# benchmarks (JSON, each flowlane number beside its raw-CUDA floor), the PyTorch baselines
# (bench/gpu/torch_compare.py, when torch imports), the ratio report
# (scripts/gpu_report.py -> $OUT/gpu-report.md), the pool's 1..16-thread scaling
# (examples/parallel_compile: this host is the only 16-core one) and the whole CPU suite.
# Logs and JSON go to $OUT. Every step runs even if an earlier one failed; the exit status
# is non-zero if any failed.
#   FLOWLANE_GPU_BUILD   build directory (default build-gpu-host)
#   FLOWLANE_GPU_JOBS    build jobs (default 16)
#   FLOWLANE_GPU_BENCH_ARGS  extra Google Benchmark arguments (e.g. --benchmark_filter=Chain)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/out-gpu}
mkdir -p "$OUT"
B=${FLOWLANE_GPU_BUILD:-build-gpu-host}
JOBS=${FLOWLANE_GPU_JOBS:-16}
failed=()
say() { echo "== $*" | tee -a "$OUT/summary.txt"; }

say "host: $(uname -n) $(date -u +%FT%TZ)"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed"
if ls .deps/*.deb > /dev/null 2>&1; then
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
else
  say "no .deps/*.deb: relying on system packages for concurrentqueue"
fi
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

say "configure ($B)"
if ! cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DFLOWLANE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH=/tmp/deps/usr -DCMAKE_CXX_FLAGS="-isystem /tmp/deps/usr/include" \
    > "$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"
  say "FAILED: configure"
  exit 1
fi
grep "CUDA backend" "$OUT/configure.log" | tee -a "$OUT/summary.txt"

say "build (-j$JOBS)"
if ! cmake --build "$B" -j "$JOBS" > "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  say "FAILED: build"
  exit 1
fi

say "GPU tests (ctest -L ^gpu$)"
if ! (cd "$B" && ctest -L '^gpu$' --output-on-failure --timeout 300) > "$OUT/ctest-gpu.log" 2>&1; then
  failed+=(gpu-tests)
fi
tail -25 "$OUT/ctest-gpu.log"
# Also the raw gtest output (skips are visible there, not in ctest).
"$B/tests/flowlane_gpu_tests" > "$OUT/gpu-tests-gtest.log" 2>&1 || true
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu-tests-gtest.log" | tee -a "$OUT/summary.txt"

say "GPU benchmarks"
read -r -a bench_args <<<"${FLOWLANE_GPU_BENCH_ARGS:-}"
for b in "$B"/bench/gpu_bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  if ! "$b" --benchmark_out="$OUT/$name.json" --benchmark_out_format=json --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true "${bench_args[@]}" > "$OUT/$name.txt" 2>&1; then
    failed+=("$name")
  fi
  cat "$OUT/$name.txt"
done

say "PyTorch baselines"
if python3 bench/gpu/torch_compare.py --out "$OUT/torch.json" > "$OUT/torch.log" 2>&1; then
  grep -A6 '"us_per_op"' "$OUT/torch.json"
else
  say "PyTorch baselines not run: $(tail -1 "$OUT/torch.log")"
fi

say "ratios (gpu-report.md)"
if [ -f "$OUT/gpu_bench_gpu.json" ]; then
  python3 scripts/gpu_report.py "$OUT" | tee -a "$OUT/summary.txt" | head -30 || failed+=(gpu-report)
fi

say "pool scaling, 1..16 threads (parallel_compile)"
if [ -x "$B/examples/parallel_compile" ]; then
  for len in 300 1000; do
    timeout 150 "$B/examples/parallel_compile" --seq-len $len --threads-max 16 --repeat 3 > "$OUT/scaling-$len.txt" 2>&1 ||
      say "parallel_compile --seq-len $len failed or timed out"
    tee -a "$OUT/summary.txt" < "$OUT/scaling-$len.txt"
  done
fi

say "CPU suite and fake-runtime suites (ctest -LE ^gpu$)"
if ! (cd "$B" && ctest -LE '^gpu$' --output-on-failure -j 8 --timeout 600) > "$OUT/ctest-cpu.log" 2>&1; then
  failed+=(cpu-tests)
fi
tail -15 "$OUT/ctest-cpu.log"

if ((${#failed[@]})); then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all GPU checks passed"
