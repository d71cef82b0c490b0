#!/usr/bin/env bash
# Runs the GPU benchmarks under each setting of the two latency knobs, on the GPU host, so
# their defaults are chosen from one run on one machine (gpu/README.md, "Tuning"):
#   FLOWLANE_POLL_PACE_NS  the poller's pause between event queries that found no progress
#   FLOWLANE_WAIT_SPIN_NS  how long a program thread polls before it blocks in a wait
#   scripts/dev/gpu-knobs.sh BUILD_DIR OUT_FILE [extra Google Benchmark arguments]
# BUILD_DIR holds bench/gpu_bench_gpu (scripts/dev/gpu-check.sh leaves one). Settings alternate
# within each round, so drift of the machine spreads over all of them; each line of OUT_FILE
# is one benchmark under one setting in one round (microseconds per item).
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")  # gbench.py, the JSON reader
B=$1
out=$2
shift 2
bin="$B/bench/gpu_bench_gpu"
[[ -x "$bin" ]] || { echo "gpu-knobs: no $bin" >&2; exit 2; }
rounds=${FLOWLANE_KNOB_ROUNDS:-2}
settings=("0 0" "0 50000" "1000 0" "1000 50000" "4000 50000")
tmpj=$(mktemp)
trap 'rm -f "$tmpj"' EXIT
echo "# round pace_ns spin_ns benchmark us_per_item" > "$out"
# FLOWLANE_KNOB_DEADLINE (seconds since the epoch): no run starts or lasts past it.
deadline=${FLOWLANE_KNOB_DEADLINE:-$(($(date +%s) + 3600))}
for ((r = 1; r <= rounds; ++r)); do
  for setting in "${settings[@]}"; do
    read -r pace spin <<<"$setting"
    budget=$((deadline - $(date +%s)))
    if ((budget < 10)); then
      echo "# round $r pace $pace spin $spin: not run (deadline)" >> "$out"
      continue
    fi
    : > "$tmpj"  # a run that writes nothing must not be credited with the last one's figures
    FLOWLANE_POLL_PACE_NS=$pace FLOWLANE_WAIT_SPIN_NS=$spin timeout $((budget < 120 ? budget : 120)) "$bin" \
      --benchmark_filter='Flowlane|RawChainWithPolling|RawSingleStreamChain|RawLaunchSync' \
      --benchmark_out="$tmpj" --benchmark_out_format=json "$@" > /dev/null 2>&1 ||
      echo "# round $r pace $pace spin $spin: exit $?" >> "$out"
    python3 - "$here" "$tmpj" "$r" "$pace" "$spin" >> "$out" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import gbench
path, r, pace, spin = sys.argv[2:]
try:
    benchmarks, _ = gbench.load(path)
except Exception as e:
    print(f"# round {r} pace {pace} spin {spin}: unreadable JSON ({e})")
    sys.exit(0)
for b in benchmarks:
    if b.get("error_occurred"):
        print(f"# {b['name']}: {b.get('error_message')}")
        continue
    ips = b.get("items_per_second")
    if ips:
        print(f"{r} {pace} {spin} {b['name']} {1e6 / ips:.3f}")
EOF
  done
done
# Medians per benchmark and setting.
python3 - "$out" <<'EOF' | tee -a "$out"
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    r, pace, spin, name, us = line.split()
    rows[(name, int(pace), int(spin))].append(float(us))
names = sorted({k[0] for k in rows})
sets = sorted({(k[1], k[2]) for k in rows})
print("# medians (us per item; threads:8 rows: all threads together, 1/us = M items/s)")
print("# benchmark " + " ".join(f"pace{p}/spin{s}" for p, s in sets))
for n in names:
    print("# " + n + " " + " ".join(f"{statistics.median(rows[(n, p, s)]):.3f}" if rows.get((n, p, s)) else "-" for p, s in sets))
EOF
