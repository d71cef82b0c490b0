#!/usr/bin/env bash
# Everything one short lease of the GPU test host should run, in order of value, within
# FLOWLANE_GPU_SESSION_S seconds (default 480):
#   1. scripts/dev/gpu-check.sh, with half the session: the NCCL versions, the GPU suite (and
#      again with value edges), the negative controls, one run of the benchmarks and their
#      controls with their ratios, PyTorch, pool scaling, memcheck;
#   2. scripts/dev/gpu-ab.sh: alternating A/B rounds (FLOWLANE_AB_ROUNDS, default 5) of the
#      speed benchmarks under the old completion, the new one, and value edges, plus the
#      raw-CUDA controls, until a minute before the end; scripts/dev/gpu_ab.py turns them
#      into medians with min and max and says which goal each setting meets;
#   3. per-hop timestamps of the host round trips (FLOWLANE_GPU_HOPS; scripts/dev/gpu_hops.py):
#      the profile the host cannot make (it has no nsys);
#   4. the stream memory operations against events (bench/gpu_memops_probe).
# From the project root, with .deps and .gpuprebuilt (scripts/dev/gpu-prebuild.sh) carried:
#   OUT=/some/dir scripts/dev/gpu-session.sh
# $OUT receives, each readable alone: summary.txt (gpu-check's summary, then this script's
# verdict lines), report.md (which goal is met: the A/B verdicts), ab.tsv, hops.txt,
# memops.txt, and session.tar.gz with every file of every step. The exit status is non-zero
# when the check failed or the A/B rounds left a row missing.
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
mkdir -p "$work/check" "$work/ab"

# 1. the check, with half the session.
export FLOWLANE_GPU_PREBUILT=${FLOWLANE_GPU_PREBUILT:-$root/.gpuprebuilt/flgpu-build.tar.gz}
export FLOWLANE_GPU_BENCH_REPS=${FLOWLANE_GPU_BENCH_REPS:-1}  # the A/B rounds give the verdicts
export FLOWLANE_GPU_BENCH_ARGS=${FLOWLANE_GPU_BENCH_ARGS:---benchmark_min_time=0.1}
# (FLOWLANE_GPU_CHECK_SCRIPT stands in for it in the scripts' own test, tests/gpu/scripts_test.sh.)
OUT="$work/check" FLOWLANE_GPU_BUDGET_S=$((SESSION / 2)) bash "${FLOWLANE_GPU_CHECK_SCRIPT:-scripts/dev/gpu-check.sh}" \
  > "$work/check/console.log" 2>&1
rc=$?
cp "$work/check/summary.txt" "$OUT/summary.txt" 2>/dev/null || echo "gpu-check left no summary" > "$OUT/summary.txt"
note() { echo "== session: $*" | tee -a "$OUT/summary.txt"; }
# The tree the check used, from its one line that names it (whatever it said before).
B=$(sed -n 's/^== build tree: \(\/.*\)$/\1/p' "$work/check/summary.txt" | tail -1)
if [[ -z "$B" || ! -x "$B/bench/gpu_bench_gpu" ]]; then
  note "no build tree from gpu-check (exit $rc): nothing more can run"
  tar -C "$work" -czf "$OUT/session.tar.gz" . 2>/dev/null
  exit 1
fi
export LD_LIBRARY_PATH=$B/carried-lib:/tmp/deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_MODULE_LOADING=EAGER

# 2. the A/B rounds, until a minute before the end.
ab_rc=1
if (($(left) > 90)); then
  FLOWLANE_AB_DEADLINE=$(($(date +%s) + $(left) - 60)) bash scripts/dev/gpu-ab.sh "$B" "$work/ab" \
    "${FLOWLANE_AB_ROUNDS:-5}" > "$work/ab/console.log" 2>&1
  torch=()
  [[ -f "$work/check/torch.json" ]] && torch=(--torch "$work/check/torch.json")
  python3 scripts/dev/gpu_ab.py "$work/ab" "${torch[@]}" --out "$OUT/report.md" --tsv "$OUT/ab.tsv" \
    > "$work/ab/report.console" 2>&1
  ab_rc=$?
else
  echo "# A/B rounds not run: $(left) s left of the session" > "$OUT/report.md"
fi
note "A/B rounds: $(tail -n +2 "$OUT/ab.tsv" 2>/dev/null | wc -l) ratios; gpu_ab.py exit $ab_rc (report.md)"
grep -E '^\| ' "$OUT/report.md" | tee -a "$OUT/summary.txt" > /dev/null

# 3. per-hop timestamps of the host round trips.
if (($(left) > 30)); then
  hops="$work/hops"
  FLOWLANE_GPU_HOPS=$hops timeout $(($(left) - 20)) "$B/bench/gpu_bench_gpu" \
    --benchmark_filter='^BM_FlowlaneKernelThen(ObjectWait|HostInstr)' --benchmark_min_time=0.2 \
    > "$work/hops.console" 2>&1
  python3 scripts/dev/gpu_hops.py "$hops" > "$OUT/hops.txt" 2>&1 || echo "(gpu_hops.py: exit $?)" >> "$OUT/hops.txt"
else
  echo "not run: $(left) s left of the session" > "$OUT/hops.txt"
fi

# 4. the stream memory operations.
if (($(left) > 15)); then
  timeout $(($(left) - 10)) "$B/bench/gpu_memops_probe" > "$OUT/memops.txt" 2>&1 || echo "(exit $?)" >> "$OUT/memops.txt"
else
  echo "not run: $(left) s left of the session" > "$OUT/memops.txt"
fi

cp "$OUT/report.md" "$OUT/hops.txt" "$OUT/memops.txt" "$work/" 2>/dev/null
tar -C "$work" -czf "$OUT/session.tar.gz" . 2>/dev/null
note "$(($(date +%s) - start)) s; gpu-check exit $rc; A/B exit $ab_rc"
((rc == 0 && ab_rc == 0))
