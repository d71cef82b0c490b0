#!/usr/bin/env bash
# Everything one short lease of the GPU test host should run, in order of value, within
# FLOWLANE_GPU_SESSION_S seconds (default 480):
#   1. scripts/dev/gpu-check.sh (tests, negative control, benchmarks, ratios, scaling, memcheck);
#   2. scripts/dev/gpu-knobs.sh (the GPU benchmarks under each setting of the latency knobs);
#   3. a profile of the same-stream chain, raw CUDA and flowlane, with nsys (CUDA API time
#      per call on each thread), when the host has nsys.
# From the project root, with .deps and .gpuprebuilt (scripts/dev/gpu-prebuild.sh) carried:
#   OUT=/some/dir scripts/dev/gpu-session.sh
# $OUT receives summary.txt, gpu-report.md, knobs.txt, profile.txt (each readable alone)
# and session.tar.gz with every file of every step (the device tool returns 8 files at most).
# The exit status is gpu-check's.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/out-gpu}
mkdir -p "$OUT"
SESSION=${FLOWLANE_GPU_SESSION_S:-480}
start=$(date +%s)
left() { echo $((SESSION - ($(date +%s) - start))); }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/check"

# 1. the check, with half the session.
export FLOWLANE_GPU_PREBUILT=${FLOWLANE_GPU_PREBUILT:-$root/.gpuprebuilt/flgpu-build.tar.gz}
export FLOWLANE_GPU_BENCH_ARGS=${FLOWLANE_GPU_BENCH_ARGS:---benchmark_min_time=0.2}
OUT="$work/check" FLOWLANE_GPU_BUDGET_S=$((SESSION / 2)) bash scripts/dev/gpu-check.sh > "$work/check/console.log" 2>&1
rc=$?
cp "$work/check/summary.txt" "$OUT/summary.txt" 2>/dev/null
cp "$work/check/gpu-report.md" "$OUT/gpu-report.md" 2>/dev/null
B=$(sed -n 's/^== prebuilt tree \([^ ]*\) .*/\1/p' "$work/check/summary.txt" | head -1)
if [[ -z "$B" ]]; then
  B=${FLOWLANE_GPU_BUILD:-build-gpu-host}
  [[ "$B" == /* ]] || B=$root/$B
fi
export LD_LIBRARY_PATH=$B/carried-lib:/tmp/deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_MODULE_LOADING=EAGER

# 2. the knobs, with what is left but a minute for the profile.
if (($(left) > 90)); then
  # Its own deadline: it stops between runs (an outer timeout would leave a benchmark running).
  FLOWLANE_KNOB_ROUNDS=2 FLOWLANE_KNOB_DEADLINE=$(($(date +%s) + $(left) - 60)) bash scripts/dev/gpu-knobs.sh "$B" \
    "$OUT/knobs.txt" --benchmark_min_time=0.2 > "$work/knobs-console.log" 2>&1 || echo "# gpu-knobs: exit $?" >> "$OUT/knobs.txt"
else
  echo "# not run: $(left) s left of the session" > "$OUT/knobs.txt"
fi

# 3. the profile.
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
{
  if [[ -z "$nsys" ]]; then
    echo "no nsys on this host"
  elif (($(left) < 20)); then
    echo "not run: $(left) s left of the session"
  else
    for b in RawSingleStreamChain FlowlaneSingleStreamChain; do
      echo "=== $b: CUDA API calls (nsys stats cuda_api_sum), all threads"
      timeout $(($(left) / 2)) "$nsys" profile -o "$work/$b" --force-overwrite true --trace cuda,osrt \
        --sample none --cpuctxsw none "$B/bench/gpu_bench_gpu" --benchmark_filter="^BM_$b" \
        --benchmark_min_time=0.2 > "$work/$b.console" 2>&1 || echo "nsys profile: exit $?"
      timeout 60 "$nsys" stats --report cuda_api_sum --format table "$work/$b.nsys-rep" 2>&1 | head -40
    done
  fi
} > "$OUT/profile.txt" 2>&1

tar -C "$work" --exclude="*.nsys-rep" --exclude="*.sqlite" -czf "$OUT/session.tar.gz" . 2>/dev/null
echo "gpu-session: $(($(date +%s) - start)) s; gpu-check exit $rc" | tee -a "$OUT/summary.txt"
exit "$rc"
