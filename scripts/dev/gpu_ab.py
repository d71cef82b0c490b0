#!/usr/bin/env python3
"""The A/B rounds of scripts/dev/gpu-ab.sh turned into ratios and goal verdicts (gpu/README.md,
"Measured on a GPU").

  scripts/dev/gpu_ab.py DIR [--torch TORCH_JSON] [--out REPORT_MD] [--tsv AB_TSV]

DIR holds one Google Benchmark JSON per round, setting and binary, named
r<round>__<setting>__<binary>.json (gpu-ab.sh writes them; the settings alternate within
each round). Every ratio compares two figures of the same process run (flowlane against its
raw-CUDA floor in gpu_bench_gpu; each control against the raw chain in gpu_bench_gpu_controls),
so each round gives one ratio per setting; the report gives, per setting, the median of the
rounds with the min and max, and says which goal the median meets.

Exit status: 0, or 1 when a ratio could not be computed for a setting in some round (a
benchmark did not run, or ended with an error): a verdict may never rest on a missing row.
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbench  # noqa: E402

FILE = re.compile(r"^r(\d+)__([A-Za-z0-9_.-]+)__([A-Za-z0-9_]+)\.json$")

# (label, numerator, denominator, goal text, goal test on the ratio). A ratio is
# numerator / denominator of microseconds per item, except "throughput" rows (denominator /
# numerator: the share of the raw rate).
RATIOS = [
    ("same-stream chain / raw launches", "BM_FlowlaneSingleStreamChain", "BM_RawSingleStreamChain", "<= 1.05",
     lambda r: r <= 1.05, False),
    ("two-stream chain, two lanes / raw record+wait", "BM_FlowlaneTwoStreamChain", "BM_RawTwoStreamEventChain",
     "<= 1.1", lambda r: r <= 1.1, False),
    ("two-stream chain, one lane / raw record+wait", "BM_FlowlaneTwoStreamChainOneLane", "BM_RawTwoStreamEventChain",
     "<= 1.1", lambda r: r <= 1.1, False),
    ("8 lanes of tiny kernels, share of raw 8 threads", "BM_FlowlaneSubmit8Lanes", "BM_RawLaunch8Streams", ">= 0.95",
     lambda r: r >= 0.95, True),
    ("host consumer, fl_object_wait / launch+sync", "BM_FlowlaneKernelThenObjectWait", "BM_RawLaunchSync", "<= 1.15",
     lambda r: r <= 1.15, False),
    ("host consumer, host instruction / launch+sync", "BM_FlowlaneKernelThenHostInstr", "BM_RawLaunchSync", "<= 1.25",
     lambda r: r <= 1.25, False),
]
CONTROLS = [
    ("raw chain + polling thread, no pause", "BM_ControlPollingThread/0/0"),
    ("raw chain + polling thread, 1 us after not-ready queries", "BM_ControlPollingThread/1000/0"),
    ("raw chain + polling thread, 1 us after every query", "BM_ControlPollingThread/1000/1"),
    ("raw chain + polling thread, 4 us after every query", "BM_ControlPollingThread/4000/1"),
    ("raw chain + spinning thread (no CUDA calls)", "BM_ControlSpinningThread"),
    ("raw chain + the old per-launch calls", "BM_ControlOldPerLaunchCalls"),
    ("raw chain + the lane's record and query per 8", "BM_ControlLaneQueries"),
]


def per_item_us(path):
    benchmarks, _ = gbench.load(path)
    return gbench.per_item(benchmarks, 1e6), benchmarks


def norm(run_name):
    """A run's name without what Google Benchmark appends for its options."""
    return re.sub(r"/(real_time|manual_time|threads:\d+|iterations:\d+)", "", run_name)


def counter(benchmarks, bench, key):
    for b in benchmarks:
        if norm(gbench.name(b)) == bench and key in b and not b.get("error_occurred"):
            return float(b[key])
    return None


def find(meds, bench):
    """The figure of benchmark `bench` (its name with its arguments, without its options)."""
    for k, v in meds.items():
        if norm(k) == bench:
            return v
    return None


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--torch", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tsv", default=None)
    args = ap.parse_args()

    runs = collections.defaultdict(dict)  # (round, setting) -> {binary: (meds, benchmarks)}
    problems = []
    for f in sorted(os.listdir(args.dir)):
        m = FILE.match(f)
        if not m:
            continue
        r, setting, binary = int(m.group(1)), m.group(2), m.group(3)
        try:
            runs[(r, setting)][binary] = per_item_us(os.path.join(args.dir, f))
        except (OSError, ValueError) as e:
            problems.append(f"{f}: unreadable ({e})")
    if not runs:
        print(f"gpu_ab.py: no r<round>__<setting>__<binary>.json in {args.dir}", file=sys.stderr)
        return 1
    order = lambda s: (s != "old", s != "new", s)  # noqa: E731
    settings = sorted({s for (_, s), bins in runs.items() if "gpu_bench_gpu" in bins}, key=order)
    control_settings = sorted({s for (_, s), bins in runs.items() if "gpu_bench_gpu_controls" in bins}, key=order)
    rounds = sorted({r for r, _ in runs})

    ratios = collections.defaultdict(list)  # (setting, label) -> [ratio per round]
    tsv = ["round\tsetting\tmeasure\tvalue"]
    for (r, setting), bins in sorted(runs.items()):
        cmeds, _ = bins.get("gpu_bench_gpu_controls", ({}, []))
        if cmeds:
            floor = find(cmeds, "BM_ControlRawChain")
            for label, bench in CONTROLS:
                v = find(cmeds, bench)
                if v is None or floor is None:
                    problems.append(f"round {r}, {setting}: control {label}: missing")
                    continue
                ratios[(setting, "control: " + label)].append(v / floor)
                tsv.append(f"{r}\t{setting}\tcontrol: {label}\t{v / floor:.4f}")
        if "gpu_bench_gpu" not in bins:
            continue
        meds, benches = bins["gpu_bench_gpu"]
        for label, num, den, _, _, throughput in RATIOS:
            a, b = find(meds, num), find(meds, den)
            if a is None or b is None:
                problems.append(f"round {r}, {setting}: {label}: {'missing ' + (num if a is None else den)}")
                continue
            ratio = b / a if throughput else a / b
            ratios[(setting, label)].append(ratio)
            tsv.append(f"{r}\t{setting}\t{label}\t{ratio:.4f}")
        idle = counter(benches, "BM_FlowlaneIdleEngineCpu", "idle_cpu_percent")
        if idle is None:
            problems.append(f"round {r}, {setting}: idle engine CPU: missing BM_FlowlaneIdleEngineCpu")
        else:
            ratios[(setting, "idle engine CPU, % of one core")].append(idle)
            tsv.append(f"{r}\t{setting}\tidle engine CPU, % of one core\t{idle:.3f}")
        for label in ("BM_FlowlaneKernelThenObjectWait", "BM_RawLaunchSync"):
            v = find(meds, label)
            if v is not None:
                ratios[(setting, label + " us")].append(v)

    torch = None
    if args.torch and os.path.exists(args.torch):
        with open(args.torch) as fh:
            torch = json.load(fh)

    out = [f"# GPU A/B rounds: {len(rounds)} rounds x settings {', '.join(settings)} (alternating)", "",
           "Each figure: the median over the rounds of a ratio of two figures from the same process run, "
           "[min, max] over the rounds. `met`: the median meets the goal.", ""]
    head = "| measure | goal | " + " | ".join(settings) + " |"
    out += [head, "|" + "---|" * (2 + len(settings))]
    for label, _, _, goal, test, _ in RATIOS + [("idle engine CPU, % of one core", None, None, "<= 1",
                                                  lambda v: v <= 1.0, False)]:
        cells = []
        for s in settings:
            v = ratios.get((s, label))
            if not v:
                cells.append("missing")
                continue
            med, lo, hi = summary(v)
            cells.append(f"{med:.3f} [{lo:.3f}, {hi:.3f}] {'met' if test(med) else 'NOT met'}")
        out.append(f"| {label} | {goal} | " + " | ".join(cells) + " |")
    if torch is not None and "us_per_op" in torch:
        item = torch["us_per_op"].get("torch_item_round_trip")
        cells = []
        for s in settings:
            v = ratios.get((s, "BM_FlowlaneKernelThenObjectWait us"))
            if not v or item is None:
                cells.append("missing")
                continue
            med, lo, hi = summary(v)
            cells.append(f"{med:.2f} us vs {item:.2f} [{lo:.2f}, {hi:.2f}] {'met' if med < item else 'NOT met'}")
        out.append("| host consumer vs PyTorch `.item()` | faster | " + " | ".join(cells) + " |")
    else:
        out.append("| host consumer vs PyTorch `.item()` | faster | " + " | ".join("no torch figure" for _ in settings) + " |")
        problems.append("the PyTorch figure (torch.json) is missing: the .item() goal has no verdict")
    if control_settings:
        out += ["", "Controls (raw CUDA only, each / the raw chain of the same run; median [min, max]):", ""]
        for label, _ in CONTROLS:
            cells = []
            for s in control_settings:
                v = ratios.get((s, "control: " + label))
                cells.append("missing" if not v else "%.3f [%.3f, %.3f]" % summary(v))
            out.append(f"- {label}: " + "; ".join(f"{s} {c}" for s, c in zip(control_settings, cells)))
    if problems:
        out += ["", "Problems (each makes the run fail):", ""] + [f"- {p}" for p in problems]
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if args.tsv:
        with open(args.tsv, "w") as fh:
            fh.write("\n".join(tsv) + "\n")
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
