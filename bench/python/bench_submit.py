#!/usr/bin/env python3
"""Python submission against concurrent.futures.ThreadPoolExecutor, in the same process and
in alternating rounds (standard library only: timeit, statistics).

    PYTHONPATH=bindings/python python3 bench/python/bench_submit.py [--rounds 9] \\
        [--write BENCHMARKS.md] [--json bench/results/python/bench_submit.json]

Measured, per round, flowlane first and then the pool (the order alternates every round):

* latency: ``submit(noop).result()``, microseconds per call (the median of 15 timeit
  repeats of 200 calls each);
* throughput: 20,000 ``submit(noop)`` from one thread, then wait for the last (flowlane:
  ``engine.synchronize()``, the pool: ``concurrent.futures.wait``): submissions per second
  of the submitting loop, and instructions per second end to end;
* parallel by default: four callables that each sleep 50 ms, submitted without operands or
  lane and collected with ``result()``: the wall time, next to the pool's and to the same
  four on one explicit lane (``lane=1``: the order the default used to impose).

The engine and the pool get the same number of threads: ``--workers`` (default: the
logical CPUs, the engine's own default) for latency and throughput, four for the parallel
case (so that four can run at once). Reported: the median over rounds of each round's
figure, with min and max, and the ratios flowlane / pool taken within each round. Goals (issue 37): latency ratio <= 0.5, >= 100,000 submissions per second.
``--write`` replaces the Python section of BENCHMARKS.md (between its markers);
``--before JSON`` adds the figures of an earlier run (its ``--json``), e.g. of the package
before a change, measured by this same script.
"""

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import timeit

import flowlane

BEGIN = "<!-- python-section: bench/python/bench_submit.py --write writes from here to the end marker -->"
END = "<!-- end of python-section -->"
THROUGHPUT_N = 20_000
SLEEP_S = 0.05


def noop():
    return None


def sleeper():
    time.sleep(SLEEP_S)


def latency_us(submit):
    t = timeit.Timer(lambda: submit(noop).result())
    return statistics.median(t.repeat(repeat=15, number=200)) / 200 * 1e6


def throughput(submit, wait_all):
    t0 = time.perf_counter()
    fs = [submit(noop) for _ in range(THROUGHPUT_N)]
    t1 = time.perf_counter()
    wait_all(fs)
    t2 = time.perf_counter()
    return THROUGHPUT_N / (t1 - t0), THROUGHPUT_N / (t2 - t0)


def four_sleepers_s(submit):
    t0 = time.perf_counter()
    for f in [submit(sleeper) for _ in range(4)]:
        f.result()
    return time.perf_counter() - t0


def one_round(engine, pool, engine4, pool4, flowlane_first):
    row = {}

    def fl():
        row["fl_latency_us"] = latency_us(engine.submit)
        row["fl_submit_per_s"], row["fl_end_to_end_per_s"] = throughput(engine.submit,
                                                                         lambda fs: engine.synchronize())
        row["fl_four_sleepers_s"] = four_sleepers_s(engine4.submit)
        row["fl_one_lane_s"] = four_sleepers_s(lambda fn: engine4.submit(fn, lane=1))

    def tpe():
        row["tpe_latency_us"] = latency_us(pool.submit)
        row["tpe_submit_per_s"], row["tpe_end_to_end_per_s"] = throughput(pool.submit, concurrent.futures.wait)
        row["tpe_four_sleepers_s"] = four_sleepers_s(pool4.submit)

    for part in ((fl, tpe) if flowlane_first else (tpe, fl)):
        part()
    row["latency_ratio"] = row["fl_latency_us"] / row["tpe_latency_us"]
    row["throughput_ratio"] = row["fl_end_to_end_per_s"] / row["tpe_end_to_end_per_s"]
    row["parallel_vs_pool"] = row["fl_four_sleepers_s"] / row["tpe_four_sleepers_s"]
    row["parallel_vs_one_lane"] = row["fl_four_sleepers_s"] / row["fl_one_lane_s"]
    return row


def summary(rows, key):
    values = [r[key] for r in rows]
    return statistics.median(values), min(values), max(values)


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def section(rows, args, load_before, load_after, before=None):
    def cell(key, fmt):
        med, lo, hi = summary(rows, key)
        return "%s (%s .. %s)" % (fmt % med, fmt % lo, fmt % hi)

    lat = summary(rows, "latency_ratio")[0]
    thr = summary(rows, "fl_submit_per_s")[0]
    out = [BEGIN, "## Python submission against ThreadPoolExecutor", "",
           "Measured by `bench/python/bench_submit.py` (its docstring says what each row is): %d rounds, "
           "flowlane and `concurrent.futures.ThreadPoolExecutor` alternating which goes first, in one "
           "process; median over rounds (min .. max). Engine workers = pool threads = %d (4 in the two "
           "parallel rows)." % (len(rows), args.workers), "",
           "- **Date:** %s" % time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "- **Machine:** %s; %d logical CPUs; Python %s; load average %s before, %s after"
           % (platform.machine(), os.cpu_count() or 0, platform.python_version(), load_before, load_after),
           "- **Commit:** %s" % git_commit(),
           "- **Command:** `PYTHONPATH=bindings/python python3 bench/python/bench_submit.py --rounds %d "
           "--workers %d%s --write BENCHMARKS.md`" % (len(rows), args.workers,
                                                   " --before %s" % args.before if args.before else ""), "",
           "| measure | flowlane | ThreadPoolExecutor | flowlane / pool |",
           "| --- | --- | --- | --- |",
           "| submit + result of a no-op, us | %s | %s | %s |"
           % (cell("fl_latency_us", "%.1f"), cell("tpe_latency_us", "%.1f"), cell("latency_ratio", "%.2f")),
           "| submissions per second from one thread (the loop) | %s | %s | |"
           % (cell("fl_submit_per_s", "%.0f"), cell("tpe_submit_per_s", "%.0f")),
           "| no-ops per second, submit to last done | %s | %s | %s |"
           % (cell("fl_end_to_end_per_s", "%.0f"), cell("tpe_end_to_end_per_s", "%.0f"),
              cell("throughput_ratio", "%.2f")),
           "| four 50 ms sleeps, submitted without operands or lane, s | %s | %s | %s |"
           % (cell("fl_four_sleepers_s", "%.3f"), cell("tpe_four_sleepers_s", "%.3f"),
              cell("parallel_vs_pool", "%.2f")),
           "| the same four on one explicit lane (`lane=1`), s | %s | | %s (vs. the spread run) |"
           % (cell("fl_one_lane_s", "%.3f"), cell("parallel_vs_one_lane", "%.2f")), ""]
    if before:
        b = before["rounds"]
        out += ["Before (%s), the same script (`--json %s` of that package's run), %d rounds, same machine, "
                "just before this run:" % (before.get("label") or "an earlier run", args.before, len(b)),
                "",
                "| measure | flowlane | ThreadPoolExecutor | flowlane / pool |",
                "| --- | --- | --- | --- |"]
        for label, fl_key, tpe_key, ratio_key, fmt in (
                ("submit + result of a no-op, us", "fl_latency_us", "tpe_latency_us", "latency_ratio", "%.1f"),
                ("submissions per second from one thread (the loop)", "fl_submit_per_s", "tpe_submit_per_s", None,
                 "%.0f"),
                ("four 50 ms sleeps, submitted without operands or lane, s", "fl_four_sleepers_s",
                 "tpe_four_sleepers_s", "parallel_vs_pool", "%.3f")):
            cells = []
            for key, f in ((fl_key, fmt), (tpe_key, fmt), (ratio_key, "%.2f")):
                if key is None:
                    cells.append("")
                    continue
                med, lo, hi = summary(b, key)
                cells.append("%s (%s .. %s)" % (f % med, f % lo, f % hi))
            out.append("| %s | %s | %s | %s |" % (label, cells[0], cells[1], cells[2]))
        out.append("")
    out += [
           "Goals of issue 37: latency ratio <= 0.5 (measured %.2f: %s); >= 100,000 submissions per second "
           "from one thread (measured %.0f: %s). The parallel row shows submissions without operands or lane "
           "running side by side (about 1/4 of the one-lane time with four workers)."
           % (lat, "met" if lat <= 0.5 else "NOT met", thr, "met" if thr >= 100_000 else "NOT met"), "",
           "How: `Future.result()` without a timeout runs a submission that no worker has started on the "
           "waiting thread; submissions keep the GIL across the non-blocking C call (`_ffi.nogil`); a "
           "success completes its future on the worker, in the cleanup; futures share their engine's lock "
           "and make a condition only when something waits; a thread reuses one submission descriptor. "
           "See `bindings/python/flowlane/_future.py` and `_stream.py`.", "",
           END]
    return "\n".join(out)


def splice(path, block):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        text = ""
    start, stop = text.find(BEGIN), text.find(END)
    if 0 <= start < stop:
        text = text[:start] + block + text[stop + len(END):]
    else:
        text = text.rstrip() + "\n\n" + block
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip() + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--write", metavar="BENCHMARKS.md")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--before", metavar="JSON")
    ap.add_argument("--label", default="", help="recorded in --json (e.g. 'before issue 37')")
    args = ap.parse_args()
    load_before = " ".join("%.2f" % x for x in os.getloadavg())
    rows = []
    with flowlane.Engine(workers=args.workers) as engine, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool, \
            flowlane.Engine(workers=4) as engine4, concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool4:
        one_round(engine, pool, engine4, pool4, True)  # warm-up: threads started, code paths hot
        for r in range(args.rounds):
            rows.append(one_round(engine, pool, engine4, pool4, r % 2 == 0))
            print("round %d: latency %.1f / %.1f us, %.0f submits/s, parallel %.3f s (one lane %.3f s)"
                  % (r + 1, rows[-1]["fl_latency_us"], rows[-1]["tpe_latency_us"], rows[-1]["fl_submit_per_s"],
                     rows[-1]["fl_four_sleepers_s"], rows[-1]["fl_one_lane_s"]), file=sys.stderr)
    load_after = " ".join("%.2f" % x for x in os.getloadavg())
    before = None
    if args.before:
        with open(args.before, encoding="utf-8") as f:
            before = json.load(f)
    block = section(rows, args, load_before, load_after, before)
    print(block)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rounds": rows, "workers": args.workers, "commit": git_commit(), "label": args.label}, f,
                      indent=1)
    if args.write:
        splice(args.write, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
