#!/usr/bin/env python3
"""The "Capture and replay" section of BENCHMARKS.md, from scripts/bench-capture.sh's
results (standard library only).

    bench_capture_report.py --results bench/results/capture --out BENCHMARKS.md --rounds 5 \\
                            [--repetitions 3] [--commit SHA] [--load "0.1 0.2 0.3"]... \\
                            [--note TEXT] [--command "..."]...

Reads round<k>_<Runtime>_t<N>.json (Google Benchmark JSON of bench_openmp and
bench_openmp_libomp) and callgrind.json (callgrind_submit.py). Per workload and thread
count N: ns per instruction of eager flowlane, replayed flowlane (one launch of the captured
batch), captured flowlane (recording the batch) and the OpenMP runtimes, each the median
over rounds of the round's median; then the ratios the issue sets goals for, each taken
within one round and reported as the median over rounds with its min and max: replay /
eager (goal ≤ 0.25), replay / better OpenMP (goal < 1 at N = 1 and 2), capture / eager
(goal ≤ 1.2). The section lies between its markers and replaces the previous one (or is
appended).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402  (machine(), fmt_time(), splice_section())
import callgrind_submit  # noqa: E402  (NAMES)
import gbench  # noqa: E402  (reading Google Benchmark JSON)

BEGIN, END = bench_report.CAPTURE_BEGIN, bench_report.CAPTURE_END
SHAPES = [("Independent", "independent instructions (no operands; 8 lanes round robin)"),
          ("Chain", "read-write chain on one object, lanes alternating 0, 1"),
          ("FanOutIn", "1 writer of X, 64 × (read X, write Y_i), 1 reader of all Y_i; 151 rounds")]
ROW = re.compile(r"^BM_(\w+?)(FlowlaneReplay|FlowlaneCapture|Flowlane|Gomp|Libomp)/threads:(\d+)/real_time$")
FILE = re.compile(r"^round(\d+)_(\w+?)_t(\d+)\.json$")
PEERS = ("Gomp", "Libomp")
# (numerator, denominator, label, goal as (op, bound) or None)
RATIOS = [("FlowlaneReplay", "Flowlane", "replay / eager", ("≤", 0.25)),
          ("FlowlaneReplay", "peer", "replay / better OpenMP", ("<", 1.0)),
          ("FlowlaneCapture", "Flowlane", "capture / eager", ("≤", 1.2))]


def load(results):
    """{(shape, N): {runtime: {round: ns per instruction}}} and the files' contexts."""
    shapes, contexts = {}, []
    for path in sorted(glob.glob(os.path.join(results, "round*.json"))):
        m = FILE.match(os.path.basename(path))
        if not m:
            continue
        benchmarks, ctx = gbench.load(path)
        bad = gbench.failed(benchmarks)
        if bad:
            raise ValueError(f"{path}: {bad[0].get('run_name')}: {bad[0].get('error_message')}")
        contexts.append(ctx)
        for name, ns in gbench.per_item(benchmarks, 1e9).items():
            r = ROW.match(name)
            if r:
                shapes.setdefault((r.group(1), int(r.group(3))), {}).setdefault(r.group(2), {})[int(m.group(1))] = ns
    return shapes, contexts


def program_sizes(results):
    """{shape: bytes per instruction} of the captured programs (the replay rows' median
    counter; the same in every round and N)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "round*_Flowlane_t*.json"))):
        for b in gbench.load(path)[0]:
            r = ROW.match(gbench.name(b))
            if r and r.group(2) == "FlowlaneReplay" and gbench.aggregate(b) in (None, "median"):
                if "program_bytes_per_instr" in b:
                    out.setdefault(r.group(1), b["program_bytes_per_instr"])
    return out


def fmt_ns(ns):
    return "–" if ns is None else (f"{ns / 1000:.3g} µs" if ns >= 1000 else f"{ns:.3g} ns")


def round_ratios(per_rt, num, den):
    """The ratio num / den of each round that has both (den "peer": the better OpenMP)."""
    out = []
    for rnd, v in per_rt.get(num, {}).items():
        if den == "peer":
            peers = [per_rt[p][rnd] for p in PEERS if rnd in per_rt.get(p, {})]
            if peers:
                out.append(v / min(peers))
        elif rnd in per_rt.get(den, {}):
            out.append(v / per_rt[den][rnd])
    return out


def tables(shapes):
    present = [rt for rt in ("Flowlane", "FlowlaneReplay", "FlowlaneCapture") + PEERS
               if any(rt in v for v in shapes.values())]
    names = callgrind_submit.NAMES
    head = ["workload", "N"] + [f"{names[rt]} ns/instr" for rt in present]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: |" * len(present)]
    order = {s: i for i, (s, _) in enumerate(SHAPES)}
    keys = sorted(shapes, key=lambda k: (order.get(k[0], 99), k[0], k[1]))
    for key in keys:
        cells = [key[0], str(key[1])]
        for rt in present:
            vals = list(shapes[key].get(rt, {}).values())
            cells.append(fmt_ns(statistics.median(vals) if vals else None))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Ratios, each taken within one round (median over rounds, min–max over rounds):", ""]
    head = ["workload", "N"]
    for _, _, label, goal in RATIOS:
        head += [label, "min–max", f"goal {goal[0]} {goal[1]:g}"]
    lines += ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: | ---: | --- |" * len(RATIOS)]
    for key in keys:
        cells = [key[0], str(key[1])]
        for num, den, _, (op, bound) in RATIOS:
            rs = round_ratios(shapes[key], num, den)
            if not rs:
                cells += ["–", "–", "–"]
                continue
            med = statistics.median(rs)
            met = med <= bound if op == "≤" else med < bound
            cells += [f"**{med:.3g}**", f"{min(rs):.3g}–{max(rs):.3g}", "met" if met else "**not met**"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def callgrind_lines(path):
    with open(path, encoding="utf-8") as f:
        cg = json.load(f)
    names = callgrind_submit.NAMES
    counts = cg["counts"]
    lines = [f"`valgrind --tool=callgrind` ({cg.get('valgrind', 'valgrind')}) runs `bench_openmp --once=SHAPE:COUNT:"
             f"{cg['threads']}` at {counts[0]} and {counts[1]} instructions; Ir per instruction = the difference "
             "over the difference (fixed costs cancel). Replay: the measured round is one fl_program_launch of a "
             "program of COUNT instructions; capture: fl_capture_begin, the COUNT submissions, fl_capture_end and "
             "fl_program_destroy.", "",
             "| workload | runtime | all threads | launching / submitting thread | other threads |",
             "| --- | --- | ---: | ---: | ---: |"]
    for r in cg["results"]:
        p = r["ir_per_instr"]
        lines.append(f"| {r['shape']} | {names.get(r['runtime'], r['runtime'])} | {p['total']:.0f} | "
                     f"{p['submitter']:.0f} | {p['others']:.0f} |")
    by = {(r["shape"], r["runtime"]): r["ir_per_instr"] for r in cg["results"]}
    rows = []
    for shape, _ in SHAPES:
        eager, replay, cap = (by.get((shape, rt)) for rt in ("Flowlane", "FlowlaneReplay", "FlowlaneCapture"))
        if eager and replay and cap:
            rows.append(f"| {shape} | {replay['total'] / eager['total']:.3f} | {cap['total'] / eager['total']:.3f} | "
                        f"{cap['total'] / eager['submitter']:.3f} |")
    if rows:
        lines += ["", "| workload | replay / eager (all threads) | capture / eager (all threads) | "
                  "capture / eager submitting thread (goal ≤ 1.2) |", "| --- | ---: | ---: | ---: |"] + rows
    lines += ["", "A launch is one instruction whatever the program's size, so the launching thread's share "
              "per replayed instruction is 0 up to the measurement's rounding (it may print as -1 or -0); "
              "the replay runs on the worker. Capturing does on the submitting thread what eager submission "
              "does there (the last column compares the two), and none of the execution."]
    if cg.get("skipped"):
        lines += ["", "Skipped: " + ", ".join(cg["skipped"]) + "."]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="bench/results/capture")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--commit", default="")
    ap.add_argument("--load", action="append", default=[])
    ap.add_argument("--note", default="")
    ap.add_argument("--command", action="append", default=[])
    args = ap.parse_args()

    shapes, contexts = load(args.results)
    if not shapes:
        print(f"no results in {args.results}", file=sys.stderr)
        return 1
    dates = sorted(c.get("date", "") for c in contexts if c.get("date"))
    out = [BEGIN, "## Capture and replay: a captured program against eager submission and OpenMP", "",
           "Generated by `scripts/bench-capture.sh` (table: `scripts/dev/bench_capture_report.py`); do not edit by "
           "hand. Source: `bench/bench_openmp.cpp` (`BM_<X>FlowlaneReplay`: the batch captured once with "
           "fl_capture_begin/end, then per iteration one fl_program_launch on lane 0 and a wait for it; "
           "`BM_<X>FlowlaneCapture`: recording the batch, end and destroy included, nothing runs; `BM_<X>Flowlane`: "
           "the same batch submitted eagerly; the OpenMP rows as in the OpenMP section above).", ""]
    if dates:
        out.append(f"- **Date:** {dates[0]} to {dates[-1]}")
    out += [f"- **Machine:** {bench_report.machine()}",
            f"- **Commit:** {args.commit or bench_report.commit()}",
            f"- **Rounds:** {args.rounds}, runtimes alternating (order rotated each round), {args.repetitions} "
            "repetitions per benchmark per round; a figure is the median over rounds of the round's median",
            "- **Threads:** N = threads including the submitting one, every runtime pinned to the same N CPUs "
            "(`taskset`); flowlane: the submitter + N-1 workers (N = 1: one worker time-sharing the CPU)",
            "- **Batches:** 10000 instructions (fan-out/in 9966) per iteration, no-op bodies"]
    if args.load:
        out.append("- **Load average (1, 5, 15 min) before → after:** " + " → ".join(args.load))
    if args.note:
        out.append(f"- **Note:** {args.note}")
    out += [f"- **Raw results:** `{args.results}/round*.json`" +
            (f", `{args.results}/callgrind.json`" if os.path.exists(os.path.join(args.results, "callgrind.json"))
             else "")]
    if args.command:
        out += ["- **Commands** (round 1; the other rounds run the same in rotated order):", "", "```sh"]
        out += args.command + ["```"]
    out += ["", "### ns per instruction", ""]
    out += [f"- **{s}**: {d}" for s, d in SHAPES] + [""]
    out += tables(shapes)
    sizes = program_sizes(args.results)
    if sizes:
        out += ["", "Memory of the captured programs (`fl_program_info`'s `bytes` over the instructions; with at "
                "most one worker, as here, no parallel schedule is built; a launch with more workers adds its "
                "chains and task links):", "", "| workload | bytes per instruction |", "| --- | ---: |"]
        out += [f"| {s} | {sizes[s]:.1f} |" for s, _ in SHAPES if s in sizes]
    cg = os.path.join(args.results, "callgrind.json")
    if os.path.exists(cg):
        out += ["", "### Instructions executed (callgrind Ir) per instruction", ""] + callgrind_lines(cg)
    out += ["", END]
    bench_report.splice_section(args.out, "\n".join(out) + "\n", BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
