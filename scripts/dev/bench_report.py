#!/usr/bin/env python3
"""Turns Google Benchmark JSON results into BENCHMARKS.md (standard library only).

    bench_report.py --results bench/results --out BENCHMARKS.md \
                    [--command "..."]... [--peers Tbb,Starpu]

One markdown table per results file (bench/results/<executable>.json): for every
benchmark its median real time, median CPU time, coefficient of variation of the real
time and repetition count (the `median`/`cv` aggregates of --benchmark_repetitions; a
single run is reported as is). Then one ratio row per pair BM_<X>Flowlane<args> /
BM_<X><Peer><args> (same <args>, Peer in --peers): flowlane's median real time divided by
the peer's, so < 1 means flowlane is faster. The header records the date, the machine
(lscpu), the commit and the commands used. The OpenMP section (between OPENMP_BEGIN and
OPENMP_END, written by bench_openmp_report.py), the GPU section (between GPU_BEGIN and
GPU_END, written by gpu_report.py --section), the fork-join section (FORKJOIN_BEGIN ..
FORKJOIN_END, written by bench/run_forkjoin.sh) and the Python section (PYTHON_BEGIN ..
PYTHON_END, written by bench/python/bench_submit.py --write) and the MPI section (MPI_BEGIN ..
MPI_END, written by bench/run_comm_mpi.sh) of an existing --out file are kept as they are.
"""
import argparse
import datetime
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbench  # noqa: E402  (reading Google Benchmark JSON)

# The OpenMP section (scripts/bench-openmp.sh, bench_openmp_report.py) and the GPU section
# (scripts/dev/gpu_report.py --section, from a GPU host run kept in bench/results/gpu) live
# between these markers; each report keeps the others' parts of BENCHMARKS.md.
OPENMP_BEGIN = "<!-- openmp-section: scripts/bench-openmp.sh writes from here to the end marker -->"
OPENMP_END = "<!-- end of openmp-section -->"
GPU_BEGIN = "<!-- gpu-section: scripts/dev/gpu_report.py --section writes from here to the end marker -->"
GPU_END = "<!-- end of gpu-section -->"
FORKJOIN_BEGIN = "<!-- forkjoin-section: bench/run_forkjoin.sh writes from here to the end marker -->"
FORKJOIN_END = "<!-- end of forkjoin-section -->"
PYTHON_BEGIN = "<!-- python-section: bench/python/bench_submit.py --write writes from here to the end marker -->"
PYTHON_END = "<!-- end of python-section -->"
CAPTURE_BEGIN = "<!-- capture-section: scripts/bench-capture.sh writes from here to the end marker -->"
CAPTURE_END = "<!-- end of capture-section -->"
MPI_BEGIN = "<!-- mpi-section: bench/run_comm_mpi.sh writes from here to the end marker -->"
MPI_END = "<!-- end of mpi-section -->"


def read_section(path, begin=OPENMP_BEGIN, end=OPENMP_END):
    """The section of `path` between `begin` and `end` (markers included), or "" if it has none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    start, stop = text.find(begin), text.find(end)
    return text[start:stop + len(end)] if 0 <= start < stop else ""


def splice_section(path, block, begin=OPENMP_BEGIN, end=OPENMP_END):
    """Replaces the section of `path` between `begin` and `end` with `block`, or appends it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        text = ""
    old = read_section(path, begin, end)
    text = text.replace(old, block) if old else text.rstrip() + ("\n\n" if text.strip() else "") + block
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip() + "\n")


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine():
    info = {}
    for line in run(["lscpu"]).splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    model = info.get("Model name", "unknown CPU")
    cpus = info.get("CPU(s)", str(os.cpu_count() or "?"))
    cores = info.get("Core(s) per socket", "?")
    sockets = info.get("Socket(s)", "?")
    tpc = info.get("Thread(s) per core", "?")
    mem = ""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{model}; {cpus} logical CPUs ({sockets} socket(s) x {cores} core(s) x {tpc} thread(s)/core){mem}; "
            f"{run(['uname', '-sr']) or 'unknown kernel'}")


def commit():
    sha = run(["git", "rev-parse", "--short=12", "HEAD"])
    if not sha:
        return "unknown (not a git checkout)"
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"])
    return sha + (" (with uncommitted changes)" if dirty else "")


def fmt_time(ns):
    if ns is None:
        return "–"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def collect(benchmarks):
    """{run_name: {"real": ns, "cpu": ns, "cv": float|None, "reps": int}} in file order."""
    rows = {}
    singles = {}
    for b in benchmarks:
        name = gbench.name(b)
        row = rows.setdefault(name, {})
        if b.get("error_occurred"):
            row["error"] = b.get("error_message", "error")
            continue
        agg = gbench.aggregate(b)
        if agg == "median":
            row["real"] = gbench.ns(b, "real_time")
            row["cpu"] = gbench.ns(b, "cpu_time")
            row["reps"] = b.get("repetitions")
        elif agg == "cv":
            row["cv"] = b["real_time"]  # cv aggregates are reported as fractions
        elif not gbench.is_aggregate(b):
            singles.setdefault(name, []).append((gbench.ns(b, "real_time"), gbench.ns(b, "cpu_time")))
    for name, runs in singles.items():
        row = rows[name]
        if "real" not in row:  # no aggregates (one repetition): median of what we have
            row["real"], row["cpu"] = gbench.middle(runs)
            row["reps"] = len(runs)
    return rows


def ratio_rows(rows, peers):
    out = []
    pat = re.compile(r"^(BM_\w+?)Flowlane((?:/.*)?)$")
    for name, row in rows.items():
        m = pat.match(name)
        if not m or "real" not in row:
            continue
        base, args = m.group(1), m.group(2)
        for peer in peers:
            other = rows.get(f"{base}{peer}{args}")
            if other and other.get("real"):
                out.append((f"{base}Flowlane{args}", f"{base}{peer}{args}", row["real"] / other["real"]))
    return out


def table(path, peers):
    benchmarks, ctx = gbench.load(path)
    rows = collect(benchmarks)
    lines = [f"## {os.path.splitext(os.path.basename(path))[0]}", ""]
    notes = []
    if ctx.get("library_build_type") == "debug":
        notes.append("The Google Benchmark library reports a debug build (as Debian ships it); that concerns "
                     "the harness only: flowlane and the peers are built Release.")
    if ctx.get("cpu_scaling_enabled"):
        notes.append("CPU frequency scaling was enabled; expect noise.")
    if ctx.get("date"):
        notes.append(f"Run at {ctx['date']} on {ctx.get('num_cpus', '?')} CPUs"
                     f" ({ctx.get('mhz_per_cpu', '?')} MHz per CPU as reported).")
    for n in notes:
        lines.append(f"_{n}_  ")
    if notes:
        lines.append("")
    if not rows:
        lines += ["No benchmarks in this file.", ""]
        return lines
    lines += ["| benchmark | median real time | median CPU time | CV (real) | repetitions |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| `{name}` | error: {r['error']} | | | |")
            continue
        cv = f"{100 * r['cv']:.1f} %" if r.get("cv") is not None else "–"
        lines.append(f"| `{name}` | {fmt_time(r.get('real'))} | {fmt_time(r.get('cpu'))} | {cv} | {r.get('reps', '–')} |")
    ratios = ratio_rows(rows, peers)
    if ratios:
        lines += ["", "| ratio (median real time) | flowlane / peer |", "| --- | ---: |"]
        for a, b, q in ratios:
            lines.append(f"| `{a}` / `{b}` | {q:.2f} |")
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="bench/results")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--command", action="append", default=[], help="a command to record (repeatable)")
    ap.add_argument("--peers", default="Tbb,Starpu,Sequential", help="peer suffixes paired with ...Flowlane")
    ap.add_argument("--repetitions", default="", help="repetitions used (for the header)")
    ap.add_argument("--commit", default="", help="the commit measured (default: the checkout's HEAD now)")
    ap.add_argument("--note", default="", help="a remark about this run (load, machine state)")
    args = ap.parse_args()

    files = sorted(glob.glob(os.path.join(args.results, "*.json")))
    peers = [p for p in args.peers.split(",") if p]
    # The date of the run is the results' own (Google Benchmark's context.date), not now.
    dates = []
    for path in files:
        try:
            dates.append(gbench.load(path)[1].get("date", ""))
        except (OSError, ValueError):
            pass
    dates = sorted(d for d in dates if d)
    now = dates[0] if dates else datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["# flowlane benchmarks", "",
           "Generated by `scripts/run-benchmarks.sh` (table: `scripts/dev/bench_report.py`); do not edit by hand.",
           "Numbers are from one machine and one run; compare ratios measured in the same run, not absolute",
           "times across machines.", "",
           f"- **Date:** {now}",
           f"- **Machine:** {machine()}",
           f"- **Commit:** {args.commit or commit()}",
           f"- **Compiler:** {run(['c++', '--version']).splitlines()[0] if run(['c++', '--version']) else 'unknown'}"]
    if args.repetitions:
        out.append(f"- **Repetitions:** {args.repetitions} per benchmark; the tables show medians")
    if args.note:
        out.append(f"- **Note:** {args.note}")
    out.append(f"- **Raw results:** `{args.results}/*.json` (Google Benchmark JSON)")
    if args.command:
        out += ["- **Commands:**", "", "```sh"] + args.command + ["```"]
    out.append("")
    if peers:
        out += [f"Ratio rows pair `BM_<X>Flowlane` with `BM_<X><Peer>` (Peer: {', '.join(peers)}) run in the same "
                "binary: flowlane's median real time divided by the peer's, so **below 1 means flowlane is "
                "faster**.", ""]
    if not files:
        out += ["No results yet: no `bench_*` executable was found or none produced output.", ""]
    for path in files:
        try:
            out += table(path, peers)
        except (OSError, ValueError, KeyError) as e:
            out += [f"## {os.path.basename(path)}", "", f"Could not read this file: {e}", ""]
    for begin, end in ((OPENMP_BEGIN, OPENMP_END), (GPU_BEGIN, GPU_END), (FORKJOIN_BEGIN, FORKJOIN_END),
                       (PYTHON_BEGIN, PYTHON_END), (CAPTURE_BEGIN, CAPTURE_END),
                       (MPI_BEGIN, MPI_END)):
        kept = read_section(args.out, begin, end)
        if kept:
            out += ["", kept]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out).rstrip() + "\n")
    print(f"bench_report.py: wrote {args.out} from {len(files)} result file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
