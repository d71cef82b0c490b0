"""``python -m flowlane``: a self-check of an installation.

Prints where the package and the C library were loaded from and their versions, then runs
a tiny engine: two lanes, an object written on one and read on the other, a failing
instruction whose exception must reach the wait, a parallel_for, futures collected with
concurrent.futures.as_completed. Prints OK and exits 0, or
prints what failed and exits 1. (A library that cannot be loaded at all fails at
``import flowlane`` with LibraryNotFound, whose message says what to do.)
"""

from __future__ import annotations

import os
import sys
from typing import Callable, List, Tuple

import flowlane


def _checks() -> List[Tuple[str, Callable[[], str]]]:
    def lanes_and_objects() -> str:
        with flowlane.Engine(workers=2, lanes=4) as engine:
            x = engine.object(0)
            engine.submit(lambda: 21, writes=[x], name="produce", lane=1)
            doubled = engine.object()
            engine.submit(lambda v: int(v) * 2, reads=[x], writes=[doubled], name="consume", lane=2)
            value = doubled.wait()
            if value != 42:
                raise AssertionError("expected 42 from the two lanes, got %r" % (value,))
            return "2 instructions on 2 lanes, ordered through an object: 42"

    def failures_reach_the_wait() -> str:
        with flowlane.Engine(workers=1) as engine:
            o = engine.object()

            def fail() -> None:
                raise LookupError("expected by the self-check")

            engine.submit(fail, writes=[o], name="fail")
            try:
                o.wait()
            except LookupError as exc:
                if not isinstance(exc.__cause__, flowlane.InstructionFailed):
                    raise AssertionError("the exception is not chained from InstructionFailed") from exc
                return "a callable's exception reached the wait as LookupError"
            raise AssertionError("the failing instruction did not fail the wait")

    def parallel_loop() -> str:
        with flowlane.Engine(workers=2) as engine:
            seen: List[int] = []
            engine.parallel_for(0, 1000, lambda lo, hi: seen.extend(range(lo, hi)), grain=100)
            if sorted(seen) != list(range(1000)):
                raise AssertionError("parallel_for did not cover [0, 1000) exactly once")
            return "parallel_for covered [0, 1000) once"

    def futures() -> str:
        import concurrent.futures

        with flowlane.Engine(workers=2) as engine:
            fs = [engine.submit(lambda i=i: i * i, name="square") for i in range(10)]
            got = sorted(f.result(timeout=60) for f in concurrent.futures.as_completed(fs, timeout=60))
            if got != [i * i for i in range(10)]:
                raise AssertionError("futures returned %r" % (got,))
            return "10 futures completed through as_completed with their results"

    return [("engine", lanes_and_objects), ("errors", failures_reach_the_wait), ("parallel_for", parallel_loop),
            ("futures", futures)]


def main() -> int:
    """Runs the self-check; returns the exit status (0: OK)."""
    print("flowlane self-check")
    print("  package:  %s (flowlane %s, Python %s)" % (os.path.dirname(flowlane.__file__), flowlane.__version__,
                                                       sys.version.split()[0]))
    major, minor, patch = flowlane.library_version
    print("  library:  %s (version %d.%d.%d)" % (flowlane.library_path, major, minor, patch))
    failed = 0
    for name, check in _checks():
        try:
            print("  %-12s ok: %s" % (name, check()))
        except BaseException as exc:  # report every failure, then the verdict
            failed += 1
            print("  %-12s FAILED: %s: %s" % (name, type(exc).__name__, exc))
    print("flowlane self-check: %s" % ("OK" if not failed else "FAILED (%d of %d checks)" % (failed, len(_checks()))))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
