#!/usr/bin/env python3
"""Writes the "Collectives over MPI" section of BENCHMARKS.md from bench/run_comm_mpi.sh's
results (standard library only).

    comm_mpi_report.py --results bench/results/comm_mpi --out BENCHMARKS.md

result.json is bench_comm_mpi's output (rank 0's figures: per size and variant the median,
min and max over rounds of the seconds per operation, in us; the hidden fractions; the idle
CPU), meta.json what run_comm_mpi.sh recorded (commit, times, load, command). The section
sits between MPI_BEGIN and MPI_END; scripts/dev/bench_report.py keeps it.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "dev"))
from bench_report import MPI_BEGIN, MPI_END, splice_section  # noqa: E402

# The goals against raw MPI_Iallreduce + MPI_Wait (medians of alternating rounds).
GOALS = {"4 B": ("<= raw + 3 us", lambda fl, raw: fl - raw <= 3.0),
         "64 KiB": ("<= 1.10x raw", lambda fl, raw: fl / raw <= 1.10),
         "4 MiB": ("<= 1.05x raw", lambda fl, raw: fl / raw <= 1.05)}
VARIANTS = [("raw", "MPI_Iallreduce + MPI_Wait (the reference)"),
            ("raw_blocking", "MPI_Allreduce"),
            ("strict", "flowlane, FLOWLANE_COMM_CHECK=strict (default), fl_instr_wait_for"),
            ("alongside", "flowlane, FLOWLANE_COMM_CHECK=alongside, fl_instr_wait_for"),
            ("strict_poll", "flowlane, strict, the caller polling fl_instr_query"),
            ("alongside_poll", "flowlane, alongside, the caller polling fl_instr_query")]


def triple(v, unit=""):
    return f"{v[0]:.1f}{unit} ({v[1]:.1f}–{v[2]:.1f})"


def section(res, meta):
    out = [MPI_BEGIN, "## Collectives over MPI: flowlane against raw MPI", ""]
    out += [f"- **Run:** {meta.get('started', '?')} to {meta.get('finished', '?')}, commit {meta.get('commit', '?')}, "
            f"{res['ranks']} ranks on this machine, {res['rounds']} rounds; load average "
            f"{meta.get('load_start', '?')} before, {meta.get('load_end', '?')} after"]
    if meta.get("note"):
        out += [f"- **Note:** {meta['note']}"]
    out += ["- **Command:** `bench/run_comm_mpi.sh` runs", "", "```sh", meta.get("command", ""), "```", ""]
    out += ["Float32 sum all-reduce, rank 0's time per operation over a batch of back-to-back operations; the "
            "variants alternate within each round (each round starts with another). Cells: median over rounds "
            "(min–max), in µs. flowlane submits with FL_SUBMIT_INLINE on lane 1's COLLECTIVE stream.", ""]
    sizes = list(res["latency_us"])
    out += ["| variant | " + " | ".join(sizes) + " |", "| --- |" + " ---: |" * len(sizes)]
    for key, label in VARIANTS:
        cells = [triple(res["latency_us"][s][key]) if key in res["latency_us"][s] else "–" for s in sizes]
        out += [f"| {label} | " + " | ".join(cells) + " |"]
    out += ["", "| size | goal | flowlane strict / raw | flowlane alongside / raw | met (best variant) |",
            "| --- | --- | ---: | ---: | --- |"]
    for s in sizes:
        raw = res["latency_us"][s]["raw"][0]
        goal, ok = GOALS.get(s, ("", lambda fl, raw: True))
        cells, met = [], False
        for key in ("strict", "alongside"):
            fl = res["latency_us"][s][key][0]
            cells.append(f"{fl / raw:.2f}x ({fl - raw:+.1f} µs)")
            met = met or ok(fl, raw)
        r = res["latency_us"][s]["raw"]
        verdict = "yes" if met else "**no**"
        if r[1] > 0 and r[2] / r[1] > 3:  # this VM's load swings: say when the reference itself did
            verdict += f" (raw's max/min {r[2] / r[1]:.0f}x: inconclusive)"
        out += [f"| {s} | {goal} | {cells[0]} | {cells[1]} | {verdict} |"]
    h = res["hidden"]
    ratio = h["flowlane"][0] / h["raw"][0] if h["raw"][0] > 0 else float("nan")
    out += ["", "Communication hidden behind compute (4 MiB all-reduce, then 1.5x its time of busy compute on the "
            "rank; hidden = (t_comm + t_compute - t_both) / t_comm; median (min–max) over rounds): flowlane "
            f"(the collective on lane 1, the compute a host instruction on lane 0) {h['flowlane'][0]:.2f} "
            f"({h['flowlane'][1]:.2f}–{h['flowlane'][2]:.2f}) against raw Iallreduce + a thread polling "
            f"MPI_Test {h['raw'][0]:.2f} ({h['raw'][1]:.2f}–{h['raw'][2]:.2f}): flowlane/raw "
            + (f"{ratio:.2f}" if h["raw"][0] > 0 else "not defined (raw's median hid nothing: with every core "
               "busy, polling threads compete with the compute)") + " (goal ≥ 0.9).", "",
            f"Idle: an engine with an MPI communicator and nothing in flight costs {res['idle_cpu_percent']:.3f} % "
            "of a core (the most of any rank; goal ≤ 1 %).", "", MPI_END]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="bench/results/comm_mpi")
    ap.add_argument("--out", default="BENCHMARKS.md")
    args = ap.parse_args()
    with open(os.path.join(args.results, "result.json"), encoding="utf-8") as f:
        res = json.load(f)
    try:
        with open(os.path.join(args.results, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except OSError:
        meta = {}
    splice_section(args.out, section(res, meta), MPI_BEGIN, MPI_END)
    print(f"comm_mpi_report.py: wrote the MPI section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
