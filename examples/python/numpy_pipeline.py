"""Overlapping loading, compute and logging on three lanes, with NumPy arrays as values.

    PYTHONPATH=bindings/python python3 examples/python/numpy_pipeline.py

Each batch goes through three instructions, one per lane:

    lane "load"     np.load(batch_i.npy)            -> raw[i]
    lane "compute"  tanh(raw[i] @ weights)          -> out[i]     (reads raw[i])
    lane "log"      mean/std of out[i], to the log                (reads out[i])

Nothing but the objects orders them, so while batch i is computed, batch i+1 is loading
and batch i-1 is being logged. NumPy releases the GIL inside np.load's read and inside
matmul, so the lanes really run at the same time. The result is checked against a
sequential computation; the observed overlap is printed (informational: it depends on the
machine). Exit status 0 when the results match.
"""

import os
import sys
import tempfile
import threading
import time

try:
    import numpy as np
except ImportError:  # the example needs NumPy; the bindings themselves do not
    print("numpy_pipeline: NumPy is not installed (Debian: apt-get install python3-numpy)")
    sys.exit(2)

import flowlane

BATCHES, ROWS, DIM = 12, 256, 384


def main() -> int:
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)
    spans = []  # (lane name, start, end) of every instruction
    spans_lock = threading.Lock()

    def timed(lane_name, fn):
        def run(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                with spans_lock:
                    spans.append((lane_name, t0, time.perf_counter()))
        return run

    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i in range(BATCHES):
            paths.append(os.path.join(d, "batch_%d.npy" % i))
            np.save(paths[-1], rng.standard_normal((ROWS, DIM)))

        log_lines = []
        with flowlane.Engine(workers=3, lanes=4) as engine:
            w = engine.object(weights)
            outs = []
            with engine.lane() as load, engine.lane() as compute, engine.lane() as log:
                for i, path in enumerate(paths):
                    raw = engine.object()  # flowlane.Object[np.ndarray] once written
                    out = engine.object()
                    load.submit(timed("load", lambda p=path: np.load(p)), writes=[raw], name="load[%d]" % i)
                    compute.submit(timed("compute", lambda x, wt: np.tanh(x @ wt)), reads=[raw, w], writes=[out],
                                   name="compute[%d]" % i)
                    log.submit(timed("log", lambda y, i=i: log_lines.append(
                        "batch %2d: mean %+.4f std %.4f" % (i, float(y.mean()), float(y.std())))),
                        reads=[out], name="log[%d]" % i)
                    outs.append(out)
            results = [o.wait() for o in outs]
            engine.synchronize()

        expected = [np.tanh(np.load(p) @ weights) for p in paths]
    print("\n".join(log_lines))
    ok = len(log_lines) == BATCHES and all(np.allclose(r, e) for r, e in zip(results, expected))

    # How much of the run had two or more lanes busy at once.
    events = sorted([(s, +1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans])
    busy, last, overlapped = 0, events[0][0], 0.0
    for t, delta in events:
        if busy >= 2:
            overlapped += t - last
        busy, last = busy + delta, t
    total = events[-1][0] - events[0][0]
    print("numpy_pipeline: %d batches, %.0f%% of %.1f ms with two or more lanes busy"
          % (BATCHES, 100.0 * overlapped / total if total else 0.0, total * 1e3))
    print("numpy_pipeline: %s" % ("ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
