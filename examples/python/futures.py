"""Futures, timeouts, cancellation, asyncio and task groups.

    PYTHONPATH=bindings/python python3 examples/python/futures.py

``submit`` returns a ``flowlane.Future``, a ``concurrent.futures.Future``: its result is
the callable's return value, and it works with ``concurrent.futures.as_completed`` and
``await``. Every blocking wait takes a timeout, and Ctrl-C interrupts it.
"""

import asyncio
import concurrent.futures
import sys
import threading
import time

import flowlane


def checksum(block: int) -> int:
    time.sleep(0.01)  # stands for I/O: the GIL is released meanwhile
    return sum(range(block * 1000, (block + 1) * 1000))


def main() -> int:
    ok = True
    with flowlane.Engine(workers=4, lanes=8) as engine:
        # 1. Eight independent checksums on eight lanes, collected as they complete.
        futures = {}
        for block in range(8):
            lane = engine.lane(block % engine.lanes)
            futures[lane.submit(lambda b=block: checksum(b), name="checksum[%d]" % block)] = block
        total = 0
        for fut in concurrent.futures.as_completed(futures, timeout=60):
            total += fut.result()
        ok &= total == sum(range(8000))
        print("futures: 8 checksums via as_completed, total %d" % total)

        # 2. A timeout, then the result once it is ready; a failure keeps its own type.
        release = threading.Event()
        slow = engine.submit(lambda: release.wait(60) and "slow result", name="slow")
        try:
            slow.result(timeout=0.05)
        except concurrent.futures.TimeoutError:
            print("futures: 'slow' not done after 50 ms (as expected)")
        release.set()
        ok &= slow.result(timeout=60) == "slow result"
        broken = engine.submit(lambda: int("not a number"), name="parse")
        try:
            broken.result(timeout=60)
            ok = False
        except ValueError as exc:  # the callable's own exception, chained from the context
            print("futures: %s: %s (from %s)" % (type(exc).__name__, exc, exc.__cause__.function))

        # 3. Cancel what has not started: a lane held by a slow instruction.
        with engine.lane() as lane:
            gate = threading.Event()
            lane.submit(lambda: gate.wait(60), name="hold")
            queued = lane.submit(lambda: print("never printed"), name="queued")
            ok &= queued.cancel()
            gate.set()
            ok &= queued.cancelled()
        try:
            engine.synchronize(timeout=60)
        except flowlane.Cancelled as exc:  # as in C, a cancellation is reported once
            print("futures: synchronize reports %s" % exc.status_name)

        # 4. asyncio: await futures and objects without blocking the event loop.
        async def pipeline() -> float:
            x = engine.object(1.5)
            doubled = await engine.submit(lambda v: v * 2, [x], [x], name="double")
            value = await x.wait_async(timeout=60)
            return doubled + value

        ok &= asyncio.run(pipeline()) == 6.0
        print("futures: asyncio pipeline -> 6.0")

        # 5. A task group: fork-join on the workers.
        squares = [0] * 16
        with engine.task_group() as group:
            for i in range(16):
                group.spawn(squares.__setitem__, i, i * i)
        ok &= squares == [i * i for i in range(16)]
        print("futures: task group filled %d squares" % len(squares))

    print("futures: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
