#!/usr/bin/env python3
"""Per-hop latencies of a host round trip through flowlane's GPU backend, from the
timestamps a run with FLOWLANE_GPU_HOPS=FILE left (gpu/hops.hpp): the GPU host has no
profiler, so this is where the microseconds of a round trip go.

  scripts/dev/gpu_hops.py FILE

FILE: one line per completed device instruction, written by the backend:
  engine id lane completer t_submit t_issue t_launched t_covered t_seen t_done
FILE.bench: one line per round trip, written by bench/gpu/bench_gpu.cu's host-consumer
benchmarks:
  benchmark engine id t_call t_return
(steady_clock nanoseconds of one process). Joined on (engine, id), each round trip splits
into: call -> submitted (the caller's submit path), submitted -> issue (until the lane
runner picks it up), issue -> launched, launched -> covered (its event recorded, kIssued),
covered -> seen (GPU time plus how late a completer looked), seen -> done (the completion),
done -> returned (the waiter's wake-up, and for host_instr the host instruction).
Prints, per benchmark, the median, 90th and 99th percentile of each hop in microseconds,
and who completed the kernels. Exit status 1 when nothing could be joined.
"""
import collections
import sys

HOPS = [("call -> submitted", "call", "submit"), ("submitted -> issue", "submit", "issue"),
        ("issue -> launched", "issue", "launched"), ("launched -> covered", "launched", "covered"),
        ("covered -> seen", "covered", "seen"), ("seen -> done", "seen", "done"),
        ("done -> returned", "done", "ret"), ("total", "call", "ret")]


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * (len(values) - 1) + 0.5))]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    backend = {}
    with open(path) as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            f = line.split()
            if len(f) != 10:
                continue
            t = dict(zip(("submit", "issue", "launched", "covered", "seen", "done"), map(int, f[4:])))
            t["who"] = f[3]
            backend[(f[0], f[1])] = t
    rows = collections.defaultdict(list)
    try:
        with open(path + ".bench") as fh:
            for line in fh:
                f = line.split()
                if len(f) != 5 or (f[1], f[2]) not in backend:
                    continue
                t = dict(backend[(f[1], f[2])])
                t["call"], t["ret"] = int(f[3]), int(f[4])
                rows[f[0]].append(t)
    except OSError as e:
        print(f"gpu_hops.py: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"gpu_hops.py: no round trip of {path}.bench matches a record of {path}", file=sys.stderr)
        return 1
    for bench, ts in sorted(rows.items()):
        ts = ts[len(ts) // 10:]  # the first tenth warms up
        who = collections.Counter(t["who"] for t in ts)
        print(f"{bench}: {len(ts)} round trips; kernels completed by " +
              ", ".join(f"{k} {v}" for k, v in who.most_common()))
        print(f"  {'hop':<22} {'median':>8} {'p90':>8} {'p99':>8}  (us)")
        for label, a, b in HOPS:
            d = [(t[b] - t[a]) / 1000.0 for t in ts if t.get(a) and t.get(b)]
            if d:
                print(f"  {label:<22} {pct(d, 0.5):8.2f} {pct(d, 0.9):8.2f} {pct(d, 0.99):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
