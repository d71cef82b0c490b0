#!/usr/bin/env python3
"""Ratios of the GPU benchmarks against their floors (gpu/README.md, "Benchmarks"), from one gpu-check run.

  scripts/gpu_report.py OUT_DIR   reads OUT_DIR/gpu_bench_gpu.json (Google Benchmark, with
                                  repetitions: medians are used) and, when present,
                                  OUT_DIR/torch.json (bench/gpu/torch_compare.py); writes
                                  OUT_DIR/gpu-report.md and prints it.

Every ratio compares two numbers of the same run. A missing benchmark is reported as such.
"""
import json
import os
import sys


def load_medians(path):
    """name -> microseconds per item (median over repetitions)."""
    with open(path) as fh:
        data = json.load(fh)
    out = {}
    plain = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        ips = b.get("items_per_second")
        if not ips:
            continue
        us = 1e6 / ips
        if b.get("aggregate_name") == "median":
            out[name] = us
        elif b.get("run_type") == "iteration":
            plain.setdefault(name, []).append(us)
    for name, xs in plain.items():  # no aggregates in the file: take the median ourselves
        if name not in out:
            xs = sorted(xs)
            out[name] = xs[len(xs) // 2]
    return out, data.get("context", {})


def find(meds, prefix):
    for k, v in meds.items():
        if k.split("/")[0] == prefix:
            return v
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    meds, ctx = load_medians(os.path.join(d, "gpu_bench_gpu.json"))
    torch = None
    tp = os.path.join(d, "torch.json")
    if os.path.exists(tp):
        with open(tp) as fh:
            torch = json.load(fh)

    rows = []

    def row(what, value, floor_desc, ratio, goal, ok):
        rows.append((what, value, floor_desc, ratio, goal, ok))

    def ratio_row(what, mine, floor, floor_name, goal_txt, goal_fn):
        a, b = find(meds, mine), find(meds, floor)
        if a is None or b is None:
            row(what, "missing", floor_name, "-", goal_txt, "n/a")
            return
        r = a / b
        row(what, f"{a:.3f} us", f"{floor_name} {b:.3f} us", f"{r:.3f}", goal_txt, "yes" if goal_fn(r) else "NO")

    sub = find(meds, "BM_FlowlaneSubmitKernel")
    raw = find(meds, "BM_RawLaunch")
    if sub is not None and raw is not None:
        row("caller-side submit of a kernel", f"{sub:.3f} us", f"raw launch {raw:.3f} us",
            f"{sub / raw:.3f}", "<= 0.3 us", "yes" if sub <= 0.3 else "NO")
    else:
        row("caller-side submit of a kernel", "missing", "raw launch", "-", "<= 0.3 us", "n/a")
    ratio_row("single-stream chain, per kernel", "BM_FlowlaneSingleStreamChain", "BM_RawSingleStreamChain",
              "raw launches", "<= 1.05x", lambda r: r <= 1.05)
    ratio_row("two-stream chain (two lanes), per step", "BM_FlowlaneTwoStreamChain", "BM_RawTwoStreamEventChain",
              "raw record+wait", "<= 1.1x", lambda r: r <= 1.1)
    ratio_row("two-stream chain (one lane), per step", "BM_FlowlaneTwoStreamChainOneLane",
              "BM_RawTwoStreamEventChain", "raw record+wait", "<= 1.1x", lambda r: r <= 1.1)
    f8, r8 = find(meds, "BM_FlowlaneSubmit8Lanes"), find(meds, "BM_RawLaunch8Streams")
    if f8 is not None and r8 is not None:
        row("8 lanes of tiny kernels, aggregate", f"{1 / f8:.3f} M/s", f"raw 8 threads {1 / r8:.3f} M/s",
            f"{r8 / f8:.3f} (of raw)", ">= 0.7 M/s", "yes" if 1 / f8 >= 0.7 else "NO")
    else:
        row("8 lanes of tiny kernels, aggregate", "missing", "raw 8 threads", "-", ">= 0.7 M/s", "n/a")
    ratio_row("host consumer: fl_object_wait", "BM_FlowlaneKernelThenObjectWait", "BM_RawLaunchSync",
              "launch+sync", "<= 1.15x", lambda r: r <= 1.15)
    ratio_row("host consumer: host instruction", "BM_FlowlaneKernelThenHostInstr", "BM_RawLaunchSync",
              "launch+sync", "<= 1.15x", lambda r: r <= 1.15)
    if torch is not None:
        t = torch["us_per_op"]
        for mine, label in (("BM_FlowlaneTwoStreamChain", "two lanes"), ("BM_FlowlaneTwoStreamChainOneLane", "one lane")):
            a = find(meds, mine)
            w = t.get("torch_wait_stream_chain")
            if a is not None and w is not None:
                row(f"two-stream chain vs PyTorch wait_stream ({label})", f"{a:.3f} us", f"torch {w:.3f} us",
                    f"{w / a:.2f}x faster", ">= 5x faster", "yes" if w / a >= 5 else "NO")
        a, w = find(meds, "BM_FlowlaneSingleStreamChain"), t.get("torch_add_")
        if a is not None and w is not None:
            row("single-stream chain vs PyTorch add_", f"{a:.3f} us", f"torch {w:.3f} us", f"{w / a:.2f}x faster",
                "(for comparison)", "-")
        a, w = find(meds, "BM_FlowlaneKernelThenObjectWait"), t.get("torch_item_round_trip")
        if a is not None and w is not None:
            row("host consumer vs PyTorch .item()", f"{a:.3f} us", f"torch {w:.3f} us", f"{w / a:.2f}x faster",
                "(for comparison)", "-")

    lines = ["# GPU benchmark ratios (medians; floors measured in the same run)", ""]
    host = ctx.get("host_name", "?")
    lines.append(f"host {host}, {ctx.get('num_cpus', '?')} CPUs, run {ctx.get('date', '?')}"
                 + (f"; PyTorch {torch['torch_version']} on {torch['device']}" if torch else "; PyTorch: not run"))
    lines.append("")
    lines.append("| measurement | flowlane | floor | ratio | goal | met |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")
    lines.append("All medians (us per item):")
    lines.append("")
    for k in sorted(meds):
        lines.append(f"- {k}: {meds[k]:.3f}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(d, "gpu-report.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
