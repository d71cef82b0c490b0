#!/usr/bin/env bash
# A/B rounds of the GPU benchmarks on the GPU host (gpu/README.md, "Tuning"): each round
# runs bench/gpu_bench_gpu once under every setting, in an order that rotates from round to
# round (so a drift of the machine spreads over all of them), then the raw-CUDA controls
# (bench/gpu_bench_gpu_controls) once. Every flowlane figure has its raw floor in the same
# process run; scripts/dev/gpu_ab.py turns the files into per-round ratios, medians with min
# and max, and goal verdicts.
#   scripts/dev/gpu-ab.sh BUILD_DIR OUT_DIR [ROUNDS]    (default 5 rounds)
# Settings (FLOWLANE_AB_SETTINGS overrides: "name:VAR=v,VAR=v name2:..."):
#   old    FLOWLANE_GPU_COMPLETE=poller FLOWLANE_LANE_HANDOFF=0   (completion and hand-offs as
#          before this change, for the comparison)
#   new    the defaults
#   value  FLOWLANE_GPU_VALUE_EDGES=1
# OUT_DIR receives r<round>__<setting>__<binary>.json and ab.log. FLOWLANE_AB_DEADLINE
# (seconds since the epoch): no run starts, or lasts, past it; a run cut short leaves its
# rows missing, which gpu_ab.py reports as a failure. Exit status: 1 when a run failed.
set -uo pipefail
B=$1
out=$2
rounds=${3:-5}
bin="$B/bench/gpu_bench_gpu"
controls="$B/bench/gpu_bench_gpu_controls"
[[ -x "$bin" && -x "$controls" ]] || { echo "gpu-ab: no $bin or $controls" >&2; exit 2; }
mkdir -p "$out"
read -r -a settings <<<"${FLOWLANE_AB_SETTINGS:-old:FLOWLANE_GPU_COMPLETE=poller,FLOWLANE_LANE_HANDOFF=0 new: value:FLOWLANE_GPU_VALUE_EDGES=1}"
filter='^BM_(Raw(SingleStreamChain|TwoStreamEventChain|Launch8Streams|LaunchSync)|Flowlane(SingleStreamChain|TwoStreamChain|TwoStreamChainOneLane|Submit8Lanes|KernelThenObjectWait|KernelThenHostInstr|IdleEngineCpu))'
min_time=${FLOWLANE_AB_MIN_TIME:-0.1}  # seconds (the carried Google Benchmark 1.7 takes no unit)
deadline=${FLOWLANE_AB_DEADLINE:-$(($(date +%s) + 3600))}
log="$out/ab.log"
: > "$log"
rc=0
run() {  # run NAME ENVS BINARY FILTER: one benchmark run into r<round>__NAME__<binary>.json
  local name=$1 envs=$2 b=$3 f=$4 left json
  left=$((deadline - $(date +%s)))
  if ((left < 10)); then
    echo "round $r $name $(basename "$b"): not run (deadline)" | tee -a "$log"
    rc=1
    return
  fi
  json="$out/r${r}__${name}__$(basename "$b").json"
  echo "round $r $name $(basename "$b"): ${envs:-defaults}" >> "$log"
  # shellcheck disable=SC2086 # the settings are VAR=value words
  env ${envs//,/ } CUDA_MODULE_LOADING=EAGER timeout $((left < 180 ? left : 180)) "$b" \
    --benchmark_filter="$f" --benchmark_min_time="$min_time" --benchmark_out="$json" \
    --benchmark_out_format=json >> "$log" 2>&1
  local status=$?
  if ((status != 0)); then
    echo "round $r $name $(basename "$b"): exit status $status" | tee -a "$log"
    rc=1
  fi
}
n=${#settings[@]}
for ((r = 1; r <= rounds; ++r)); do
  for ((k = 0; k < n; ++k)); do
    s=${settings[$(((k + r - 1) % n))]}
    run "${s%%:*}" "${s#*:}" "$bin" "$filter"
  done
  run raw "" "$controls" '^BM_Control'
done
exit $rc
