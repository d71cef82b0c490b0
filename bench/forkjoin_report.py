#!/usr/bin/env python3
"""The "Fork-join from any thread" section of BENCHMARKS.md, from bench/run_forkjoin.sh's
results: per workload, flowlane's and oneTBB's median real time over rounds (each round's
figure is the median of its repetitions), with min and max over rounds; the median, min and
max over rounds of flowlane / oneTBB; and the goal it is held to (issue 36). A notes.md
beside the results (hand-written: the profiles behind a run) is copied under the table.

The section lies between FORKJOIN_BEGIN and FORKJOIN_END in --out; the rest of the file is
kept as it is (the section is appended if the file has none).

Usage: forkjoin_report.py --results bench/results/forkjoin --out BENCHMARKS.md
       forkjoin_report.py --self-test
"""
import argparse
import glob
import json
import os
import platform
import re
import statistics
import sys

FORKJOIN_BEGIN = "<!-- forkjoin-section: bench/run_forkjoin.sh writes from here to the end marker -->"
FORKJOIN_END = "<!-- end of forkjoin-section -->"

# Workload, its words, the goal on flowlane / oneTBB (None: no ratio goal), per-item counter.
WORKLOADS = [
    ("FibMain", "fib(30), one group per call, from the main thread", 0.5, False),
    ("FibCallback", "fib(30) started inside a worker (an instruction's callback; oneTBB: `task_group::run`)", 0.5, False),
    ("QsortMain", "quicksort 5 M ints (cutoff 2048) from the main thread", 0.5, False),
    ("QsortCallback", "quicksort 5 M ints started inside a worker", 0.5, False),
    ("ForGrain1", "`parallel_for` 10^7 items, grain 1 (oneTBB `simple_partitioner`)", 1.0, True),
    ("ForDefault", "`parallel_for` 10^7 items, default grain (oneTBB `auto_partitioner`)", 1.0, True),
    ("Wavefront", "wavefront task graph 256 x 256 (oneTBB `flow::graph`)", 0.5, False),
]


def load_round_medians(results):
    """{runtime: {workload: [per-round median real time in ns]}} and items per iteration."""
    per = {}
    items = {}
    for path in sorted(glob.glob(os.path.join(results, "round*_*.json"))):
        m = re.search(r"round(\d+)_(\w+)\.json$", path)
        runtime = m.group(2)
        with open(path) as f:
            data = json.load(f)
        benches = data.get("benchmarks", [])
        # The median of the repetitions; a single repetition has no aggregates: its own run.
        if any(b.get("aggregate_name") == "median" for b in benches):
            benches = [b for b in benches if b.get("aggregate_name") == "median"]
        else:
            benches = [b for b in benches if b.get("run_type", "iteration") == "iteration"]
        for b in benches:
            name = b.get("run_name") or b["name"]  # BM_<Workload><Runtime>/real_time
            w = re.match(r"BM_(\w+?)%s/" % runtime, name)
            if not w:
                continue
            scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
            per.setdefault(runtime, {}).setdefault(w.group(1), []).append(b["real_time"] * scale)
            if "items_per_second" in b:
                items[w.group(1)] = b["items_per_second"] * b["real_time"] * scale / 1e9
    return per, items


def fmt_time(ns):
    if ns >= 1e6:
        return "%.3g ms" % (ns / 1e6)
    if ns >= 1e3:
        return "%.3g µs" % (ns / 1e3)
    return "%.3g ns" % ns


def span(values, fmt):
    return "%s (%s–%s)" % (fmt(statistics.median(values)), fmt(min(values)), fmt(max(values)))


def table(per, items):
    fl, tbb, seq = per.get("Flowlane", {}), per.get("Tbb", {}), per.get("Sequential", {})
    rows = ["| workload | flowlane | oneTBB | flowlane / oneTBB | goal | one thread, no scheduler |",
            "| --- | ---: | ---: | ---: | :---: | ---: |"]
    for key, words, goal, per_item in WORKLOADS:
        if key not in fl:
            continue
        n = items.get(key) if per_item else None
        fmt = (lambda ns, n=n: "%.3g ns/item" % (ns / n)) if n else fmt_time
        f = fl[key]
        t = tbb.get(key)
        ratios = [a / b for a, b in zip(f, t)] if t else []
        ratio = span(ratios, lambda x: "%.2f" % x) if ratios else "–"
        met = ""
        if ratios and goal is not None:
            met = "≤ %.1f %s" % (goal, "met" if statistics.median(ratios) <= goal else "**not met**")
        floor = span(seq[key], fmt) if key in seq else ""
        rows.append("| %s | %s | %s | %s | %s | %s |" % (words, span(f, fmt), span(t, fmt) if t else "–", ratio, met,
                                                          floor))
    return "\n".join(rows)


def machine():
    model, cpus = platform.processor() or "unknown CPU", os.cpu_count()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s; %d logical CPUs; %s %s" % (model, cpus, platform.system(), platform.release())


def section(results):
    per, items = load_round_medians(results)
    meta = {}
    if os.path.exists(os.path.join(results, "meta.json")):
        with open(os.path.join(results, "meta.json")) as f:
            meta = json.load(f)
    lines = [FORKJOIN_BEGIN, "## Fork–join from any thread: flowlane vs oneTBB", "",
             "Generated by `bench/run_forkjoin.sh` (table: `bench/forkjoin_report.py`); do not edit by hand. "
             "Source: `bench/bench_capi_forkjoin.cpp`, everything through the C API.", "",
             "- **Date:** %s to %s" % (meta.get("started", "?"), meta.get("finished", "?")),
             "- **Machine:** %s" % machine(),
             "- **Commit:** %s" % meta.get("commit", "?"),
             "- **Threads:** %s per side, the main thread included: oneTBB `global_control` N; flowlane N - 1 "
             "workers plus the main thread, which takes part in what it waits for (the *inside a worker* rows: N "
             "workers, the main thread asleep in `fl_stream_synchronize`)" % meta.get("threads", "?"),
             "- **Rounds:** %s, one runtime per process in rotated order, %s repetitions per process; a figure is "
             "the median over rounds of the round's median (min–max over rounds); the ratio is the median over "
             "rounds of flowlane / oneTBB of the same round" % (meta.get("rounds", "?"), meta.get("reps", "?")),
             "- **Load average (1, 5, 15 min):** %s at the start, %s at the end" % (meta.get("load_start", "?"),
                                                                                meta.get("load_end", "?"))]
    if meta.get("note"):
        lines.append("- **Note:** %s" % meta["note"])
    lines += ["- **Raw results:** `%s/round*.json`" % results.rstrip("/"), "- **Commands** (round 1):", "", "```sh",
              "bench/run_forkjoin.sh %s   # FJ_THREADS=%s FJ_REPS=%s" % (meta.get("rounds", "?"), meta.get("threads", "?"),
                                                                       meta.get("reps", "?"))]
    lines += meta.get("commands", [])
    lines += ["```", "", table(per, items), ""]
    # Hand-written notes on the run (the profiles behind the figures), kept beside the results.
    notes = os.path.join(results, "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            lines += [f.read().strip("\n"), ""]
    lines += [FORKJOIN_END]
    return "\n".join(lines) + "\n"


def splice(path, block):
    text = open(path).read() if os.path.exists(path) else ""
    if FORKJOIN_BEGIN in text and FORKJOIN_END in text:
        a = text.index(FORKJOIN_BEGIN)
        b = text.index(FORKJOIN_END) + len(FORKJOIN_END)
        text = text[:a] + block.rstrip("\n") + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    with open(path, "w") as f:
        f.write(text)


def self_test():
    import tempfile
    d = tempfile.mkdtemp()
    for r in (1, 2, 3):
        for rt, t in (("Flowlane", 40.0 + r), ("Tbb", 100.0), ("Sequential", 30.0)):
            bench = [{"run_name": "BM_FibMain%s/real_time" % rt, "aggregate_name": "median", "real_time": t,
                      "time_unit": "ms"},
                     {"run_name": "BM_ForGrain1%s/real_time" % rt, "aggregate_name": "median", "real_time": t,
                      "time_unit": "ms", "items_per_second": 1e7 / (t / 1e3)}]
            json.dump({"benchmarks": bench}, open(os.path.join(d, "round%d_%s.json" % (r, rt)), "w"))
    block = section(d)
    assert "| 42 ms (41 ms–43 ms) | 100 ms (100 ms–100 ms) | 0.42 (0.41–0.43) | ≤ 0.5 met |" in block, block
    assert "4.2 ns/item" in block, block
    out = os.path.join(d, "B.md")
    open(out, "w").write("# x\n\nkept\n")
    splice(out, block)
    splice(out, block)
    text = open(out).read()
    assert text.count(FORKJOIN_BEGIN) == 1 and "kept" in text, text
    print("forkjoin_report self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="bench/results/forkjoin")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    splice(a.out, section(a.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
