#!/usr/bin/env python3
"""PyTorch eager baselines for the GPU benchmarks (gpu/README.md), run on the GPU test host.

Measures, on the same machine and run as bench/gpu's binary:
  torch_add_                one stream, x.add_(1) per op (the eager launch path)
  torch_wait_stream_chain   two streams, each step s.wait_stream(other) then x.add_(1)
  torch_item_round_trip     x.add_(1); x.item()  (a host consumer of a GPU result)
  torch_8_threads_add_      8 Python threads, one stream each, aggregate ops/s

Each figure is the median of --reps repetitions of --ops operations, in microseconds per
operation (per step). Writes JSON to --out (and prints it). Without torch or a GPU it
exits 2 with a message, so scripts/dev/gpu-check.sh can record the skip.
"""
import argparse
import json
import statistics
import sys
import threading
import time


def timed(fn, reps):
    samples = []
    for _ in range(reps):
        samples.append(fn())
    return statistics.median(samples), samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_compare: PyTorch is not importable ({e})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_compare: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    n = args.ops
    x = torch.zeros(1, dtype=torch.int32, device=dev)
    streams = [torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)]

    def add_chain():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    def wait_stream_chain():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(n):
            s, other = streams[k & 1], streams[(k + 1) & 1]
            s.wait_stream(other)
            with torch.cuda.stream(s):
                x.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    def item_round_trip():
        torch.cuda.synchronize()
        m = max(1, n // 4)
        t0 = time.perf_counter()
        for _ in range(m):
            x.add_(1)
            x.item()
        return (time.perf_counter() - t0) / m * 1e6

    def eight_threads():
        xs = [torch.zeros(1, dtype=torch.int32, device=dev) for _ in range(8)]
        ss = [torch.cuda.Stream(device=dev) for _ in range(8)]
        barrier = threading.Barrier(9)

        def work(i):
            with torch.cuda.stream(ss[i]):
                barrier.wait()
                for _ in range(n):
                    xs[i].add_(1)
                ss[i].synchronize()

        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        torch.cuda.synchronize()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        return dt / (8 * n) * 1e6  # microseconds per op, aggregate

    for f in (add_chain, wait_stream_chain, item_round_trip):  # warm-up (allocator, kernels)
        f()
    results = {"torch_version": torch.__version__, "device": torch.cuda.get_device_name(dev), "ops": n,
               "reps": args.reps, "us_per_op": {}, "samples": {}}
    for name, fn in (("torch_add_", add_chain), ("torch_wait_stream_chain", wait_stream_chain),
                     ("torch_item_round_trip", item_round_trip), ("torch_8_threads_add_", eight_threads)):
        med, samples = timed(fn, args.reps)
        results["us_per_op"][name] = med
        results["samples"][name] = samples
    torch.cuda.synchronize()
    results["x_final"] = int(x.item())
    text = json.dumps(results, indent=2)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
