#!/usr/bin/env python3
"""Google Benchmark JSON (--benchmark_out_format=json), read once for every report writer
(standard library only).

    import gbench                         # the writers put scripts/dev/ on sys.path
    benchmarks, context = gbench.load(path)
    gbench.per_item(benchmarks, 1e9)      # {run name: ns per item}, median over repetitions

    scripts/dev/gbench.py --errors FILE   # one line per problem of a results file: unreadable,
                                          # no results, a benchmark that ended with an error
                                          # (SkipWithError); nothing when it is sound

A file's "benchmarks" are runs: each repetition ("run_type": "iteration") and, with
--benchmark_repetitions, the aggregates over them ("run_type": "aggregate", "aggregate_name":
mean, median, stddev, cv). With --benchmark_report_aggregates_only the repetitions are left
out; with one repetition there are no aggregates. So a figure is the median aggregate's when
the file has one, else the middle one of the repetitions (sorted; the upper of the two middle
ones for an even count). A run is named by "run_name" (the benchmark without the aggregate's
suffix), or "name" in files that have no run names.
"""
import json
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    """(benchmarks, context) of one results file: its list of runs and its context (date,
    host, CPUs, and what the benchmark added). Raises OSError or ValueError (bad JSON)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data.get("benchmarks", []), data.get("context", {})


def name(run):
    """The benchmark a run belongs to: the same for a repetition and its aggregates."""
    return run.get("run_name", run["name"])


def is_aggregate(run):
    return run.get("run_type") == "aggregate"


def aggregate(run):
    """"median", "mean", "stddev", "cv" for an aggregate; None for a repetition."""
    return run.get("aggregate_name") if is_aggregate(run) else None


def ns(run, key):
    """A time of the run ("real_time", "cpu_time") in nanoseconds, whatever its time_unit."""
    return run[key] * UNIT_NS.get(run.get("time_unit", "ns"), 1.0)


def middle(values):
    """The middle one of the values once sorted (the upper middle one for an even count)."""
    values = sorted(values)
    return values[len(values) // 2]


def failed(benchmarks):
    """The runs that ended with an error (error_occurred, with its error_message)."""
    return [b for b in benchmarks if b.get("error_occurred")]


def per_item(benchmarks, scale):
    """{run name: scale / items_per_second} in file order, of the runs that report
    items_per_second: the median aggregate's figure, else the middle one of the repetitions'.
    scale 1e9 gives ns per item, 1e6 us per item. Runs that ended with an error are left out."""
    out, repetitions = {}, {}
    for b in benchmarks:
        ips = b.get("items_per_second")
        if b.get("error_occurred") or not ips:
            continue
        if aggregate(b) == "median":
            out[name(b)] = scale / ips
        elif not is_aggregate(b):
            repetitions.setdefault(name(b), []).append(scale / ips)
    for n, values in repetitions.items():
        out.setdefault(n, middle(values))
    return out


def error_lines(path):
    """What --errors prints: why the file at `path` holds no usable results, if it does not."""
    try:
        benchmarks, _ = load(path)
    except Exception as e:  # noqa: BLE001  (any reason the file cannot be read is reported)
        return [f"unreadable JSON: {e}"]
    lines = [] if benchmarks else ["no benchmark results"]
    return lines + [f"{b.get('name')}: {b.get('error_message', 'error')}" for b in failed(benchmarks)]


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--errors":
        print(__doc__, file=sys.stderr)
        return 2
    for line in error_lines(sys.argv[2]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
