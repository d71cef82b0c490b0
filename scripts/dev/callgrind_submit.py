#!/usr/bin/env python3
"""Instructions executed (callgrind Ir) per submitted instruction, per workload shape.

    callgrind_submit.py --bin-dir build/bench [--shapes Independent,Chain,FanOutIn]
                        [--counts 2000,12000] [--threads 2] [--runtimes Flowlane,Gomp,Libomp]
                        [--repeat 3] [--top 12] [--out-dir build/callgrind] [--json FILE]

Runs `bench_openmp --once=SHAPE:COUNT:THREADS` (and bench_openmp_libomp for Libomp) under
`valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes --instr-atstart=no` at
two counts; the difference divided by the difference in instructions cancels every fixed
cost. In --once mode the binary runs a warm-up round, then the measured round, the only
one instrumented (callgrind client requests): every thread but the submitter is held,
blocked, in a gate while the COUNT instructions are submitted, then the gate opens and
they run. So submission runs alone (with every predecessor still pending, the case where
it records every dependency edge) and execution runs after it, and neither depends on how
the threads happen to interleave. Reported per shape and runtime, in Ir per instruction:

  all threads   everything
  submitting    the thread that submits (the one running flowlane_shape / openmp_shape),
                whole thread: submission, then its wait
  submit calls  inclusive cost of the submission loop alone (flowlane: the
                fl_submit_host calls; OpenMP: task creation, which includes running tasks
                inline once too many are queued: libgomp beyond 64 per thread, libomp
                when its 256-slot deque is full)
  other threads flowlane's workers, the rest of the OpenMP team

and the functions with the largest inclusive cost per instruction (callgrind_annotate),
summed over threads. With THREADS = 2 (flowlane: one worker) flowlane's figures repeat
from run to run, whatever the load on the machine (the odd run differs by < 1 % on the
worker side: --repeat runs per count, the median one kept). OpenMP's vary by up to ~1 %
(the split between threads by more): for orientation. OpenMP runs get
OMP_WAIT_POLICY=passive, without which an idle thread spins for a number of iterations that
depends on timing. All of these count work done; they do not predict timings.
"""
import argparse
import json
import os
import re
import subprocess
import sys

BINARY = {"Flowlane": "bench_openmp", "FlowlaneInline": "bench_openmp", "FlowlaneReplay": "bench_openmp",
          "FlowlaneCapture": "bench_openmp", "Gomp": "bench_openmp", "Libomp": "bench_openmp_libomp"}
# The submitting thread's frame: the shape's submission loop, or a program's launch (replay).
SUBMIT_FRAME = re.compile(r"^(?:\(anonymous namespace\)::)?(?:flowlane|openmp|replay)_shape$")
# Frames that wrap the whole program or the benchmark's own scaffolding; besides these, a
# frame that holds (nearly) all of its thread's cost is a thread entry and is not listed.
WRAPPERS = re.compile(r"^(\(below main\)|main|__libc_start_main.*|_start|.*(flowlane|openmp)_once|.*run_once|"
                      r".*in_team.*|GOMP_parallel|__kmpc_fork_call|__kmp_fork_call|__kmp_invoke_microtask|"
                      r"\.omp_outlined\..*)$")
LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$")


def short_name(entry):
    """'file:function(args) [clone .x] [object]' -> 'function [clone .x]'; an unnamed
    function ('0x...') gets its object's file name: '0x1cc40@libgomp.so.1.0.0'."""
    entry = entry.strip()
    obj = re.search(r"\s+\[((?!clone )[^\]]*)\]$", entry)
    if obj:
        entry = entry[:obj.start()]
    clone = re.search(r"\s+(\[clone [^\]]*\])$", entry)
    if clone:
        entry = entry[:clone.start()]
    # The function follows the first ':' that is not part of '::' (file names have none).
    m = re.match(r"^([^:]*?(?<!:)):(?!:)(.*)$", entry)
    name = m.group(2) if m else entry
    # Drop a trailing argument list (balanced parentheses), keep '(below main)' and the like.
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i] if i > 0 else name
                break
    name = name.strip() or entry
    if re.fullmatch(r"0x[0-9a-f]+", name):
        name = "0x" + name[2:].lstrip("0") + "@" + (os.path.basename(obj.group(1)) if obj else "?")
    if clone:
        name += " " + clone.group(1)
    return name


def inclusive(path):
    """{function: inclusive Ir} of one callgrind file (one thread)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    funcs = {}
    in_table = False
    for line in out.splitlines():
        if "file:function" in line:
            in_table = True
            continue
        m = LINE.match(line) if in_table else None
        if m:
            name = short_name(m.group(2))
            funcs[name] = max(funcs.get(name, 0), int(m.group(1).replace(",", "")))
    return funcs


def total_ir(path):
    """The thread's Ir: its `totals:` line (`summary:` is 0 with --instr-atstart=no)."""
    found = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                key, value = line.split()[:2]
                found[key] = int(value)
    if not found:
        raise ValueError(f"{path}: no totals line")
    return found.get("totals:", found.get("summary:"))


def profile(exe, runtime, shape, count, threads, out_dir, repeat):
    """`repeat` callgrind runs, the one with the median total Ir:
    (instructions submitted, [(thread file, total Ir, {fn: incl Ir})])."""
    runs = sorted((profile_once(exe, runtime, shape, count, threads, out_dir, k) for k in range(repeat)),
                  key=lambda r: sum(t[1] for t in r[1]))
    return runs[len(runs) // 2]


def profile_once(exe, runtime, shape, count, threads, out_dir, k):
    prefix = os.path.join(out_dir, f"{runtime}.{shape}.{count}.{k}")
    for old in os.listdir(out_dir):
        if old.startswith(os.path.basename(prefix) + "."):
            os.remove(os.path.join(out_dir, old))
    env = dict(os.environ)
    if not runtime.startswith("Flowlane"):
        env["OMP_WAIT_POLICY"] = "passive"
    cmd = ["valgrind", "--tool=callgrind", "--fair-sched=yes", "--separate-threads=yes", "--instr-atstart=no",
           f"--callgrind-out-file={prefix}.%p", exe, f"--once={shape}:{count}:{threads}", f"--runtime={runtime}"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.stderr.write(run.stdout + run.stderr)
        raise RuntimeError(f"{' '.join(cmd)} failed with status {run.returncode}")
    m = re.search(r": (\d+) instructions, .* callgrind requests (on|off)", run.stdout)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)}: no instruction count in its output: {run.stdout!r}")
    if m.group(2) != "on":
        raise RuntimeError(f"{exe} was built without <valgrind/callgrind.h>: install valgrind, then rebuild it "
                           "(touch bench/bench_openmp.cpp)")
    files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir)
                   if f.startswith(os.path.basename(prefix) + ".") and re.search(r"-\d+$", f))
    threads_out = [(f, total_ir(f), inclusive(f)) for f in files]
    return int(m.group(1)), threads_out


def measure(exe, runtime, shape, counts, threads, out_dir, top, repeat):
    runs = [profile(exe, runtime, shape, c, threads, out_dir, repeat) for c in counts]
    (n0, t0), (n1, t1) = runs[0], runs[-1]
    dn = float(n1 - n0)

    def split(threads_out):
        sub = [t for t in threads_out if any(SUBMIT_FRAME.search(fn) for fn in t[2])]
        if len(sub) != 1:
            raise RuntimeError(f"{runtime} {shape}: expected one submitting thread, found {len(sub)}")
        sub = sub[0]
        others = [t for t in threads_out if t is not sub]
        call = max(v for fn, v in sub[2].items() if SUBMIT_FRAME.search(fn))
        funcs = {}
        for t in threads_out:
            for fn, v in t[2].items():
                if v >= 0.98 * t[1]:  # a thread entry
                    continue
                slot = funcs.setdefault(fn, [0, 0])
                slot[0 if t is sub else 1] += v
        return {"total": sum(t[1] for t in threads_out), "submitter": sub[1], "submit_call": call,
                "others": sum(t[1] for t in others), "threads": len(threads_out), "funcs": funcs}

    a, b = split(t0), split(t1)
    per = {k: (b[k] - a[k]) / dn for k in ("total", "submitter", "submit_call", "others")}
    fn_rows = []
    for fn, (s1, o1) in b["funcs"].items():
        if WRAPPERS.match(fn):
            continue
        s0, o0 = a["funcs"].get(fn, [0, 0])
        fn_rows.append((fn, (s1 - s0) / dn, (o1 - o0) / dn))
    fn_rows.sort(key=lambda r: -(r[1] + r[2]))
    return {"runtime": runtime, "shape": shape, "counts": [n0, n1], "threads": threads,
            "os_threads": b["threads"], "ir_per_instr": per,
            "top": [{"function": f, "submitter": s, "others": o} for f, s, o in fn_rows[:top]]}


NAMES = {"Flowlane": "flowlane", "FlowlaneInline": "flowlane FL_SUBMIT_INLINE", "FlowlaneReplay": "flowlane replay",
         "FlowlaneCapture": "flowlane capture", "Gomp": "libgomp", "Libomp": "libomp"}


def markdown(cg, top, top_runtimes=None):
    """The tables of a summary (what --json writes): Ir per instruction per shape and
    runtime, then the top functions of each result (of `top_runtimes` only, if given)."""
    counts, threads = cg["counts"], cg["threads"]
    lines = [f"Ir per instruction = (Ir at {counts[1]} - Ir at {counts[0]}) / (instructions at {counts[1]} - at "
             f"{counts[0]}); threads:{threads} (flowlane: submitter + {max(1, threads - 1)} worker).", "",
             "| workload | runtime | all threads | submitting thread | of which submit calls | other threads |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in cg["results"]:
        p = r["ir_per_instr"]
        lines.append(f"| {r['shape']} | {NAMES.get(r['runtime'], r['runtime'])} | {p['total']:.0f} | "
                     f"{p['submitter']:.0f} | {p['submit_call']:.0f} | {p['others']:.0f} |")
    if cg.get("skipped"):
        lines += ["", "Skipped: " + ", ".join(cg["skipped"]) + "."]
    for r in cg["results"]:
        if top_runtimes and r["runtime"] not in top_runtimes:
            continue
        lines += ["", f"{NAMES.get(r['runtime'], r['runtime'])}, {r['shape']}: top functions by inclusive Ir per "
                  "instruction", "", "| function | submitting thread | other threads |", "| --- | ---: | ---: |"]
        for t in r["top"][:top]:
            lines.append(f"| `{t['function']}` | {t['submitter']:.0f} | {t['others']:.0f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default="build/bench")
    ap.add_argument("--shapes", default="Independent,Chain,FanOutIn")
    ap.add_argument("--counts", default="2000,12000")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runtimes", default="Flowlane,Gomp,Libomp",
                    help="those whose binary is missing are skipped with a note")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3, help="runs per count; the median one is used")
    ap.add_argument("--out-dir", default="build/callgrind")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()

    counts = [int(c) for c in args.counts.split(",")]
    if len(counts) != 2 or counts[0] >= counts[1]:
        ap.error("--counts takes two increasing counts, e.g. 2000,12000")
    os.makedirs(args.out_dir, exist_ok=True)
    results, skipped = [], []
    for runtime in [r for r in args.runtimes.split(",") if r]:
        exe = os.path.join(args.bin_dir, BINARY.get(runtime, "?"))
        if not os.access(exe, os.X_OK):
            skipped.append(f"{runtime} ({exe} not built)")
            continue
        for shape in [s for s in args.shapes.split(",") if s]:
            print(f"callgrind: {runtime} {shape} at {counts[0]} and {counts[1]} instructions, "
                  f"{args.repeat} run(s) each", file=sys.stderr)
            results.append(measure(exe, runtime, shape, counts, args.threads, args.out_dir, args.top, args.repeat))
    results.sort(key=lambda r: (args.shapes.split(",").index(r["shape"]), r["runtime"]))
    summary = {"counts": counts, "threads": args.threads, "repeat": args.repeat, "skipped": skipped,
               "results": results,
               "valgrind": subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()}
    print(markdown(summary, args.top))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
