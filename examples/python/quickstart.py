"""The README's Python example: a long chain on lane 0, a read of the loss on a fresh lane
that does not wait for the chain, an error that reaches its wait as its own type, a
future's result with a timeout, a parallel loop and a task graph.

    PYTHONPATH=bindings/python python3 examples/python/quickstart.py
"""

import sys

import flowlane


def main() -> int:
    with flowlane.Engine(workers=4, lanes=8) as engine:
        loss = engine.object()  # Object[Any]: an instruction writes it
        grads = engine.object(0.0)  # Object[float]

        engine.submit(lambda: 2.5, writes=[loss], name="forward")
        for _ in range(100):  # a long chain on lane 0
            engine.submit(lambda l, g: g + l, reads=[loss, grads], writes=[grads], name="backward")

        with engine.lane():  # a fresh lane, current inside the block
            printed = engine.object()
            engine.submit(lambda l: "loss = %s" % l, reads=[loss], writes=[printed], name="print(loss)")
        print(printed.wait())  # waits for print(loss) only, not for the backward chain

        bad = engine.object()
        engine.submit(lambda: 1 / 0, writes=[bad], name="divide")
        try:
            bad.wait()
        except ZeroDivisionError as e:  # the callable's own exception...
            print("ZeroDivisionError from", e.__cause__)  # ...chained from the instruction's context

        fut = engine.submit(lambda: sum(range(10**6)), name="sum")  # a concurrent.futures.Future
        total = fut.result(timeout=60)  # its return value (TimeoutError if late)

        chunks = []
        engine.parallel_for(0, 1_000_000, lambda lo, hi: chunks.append(hi - lo), grain=100_000)
        with engine.taskgraph() as g:
            order = []
            a = g.add(lambda: order.append("a"), name="a")
            b = g.add(lambda: order.append("b"), name="b")
            a >> b
            g.run(threads=-1)
        engine.synchronize(timeout=60)
        ok = grads.value == 250.0 and sum(chunks) == 1_000_000 and order == ["a", "b"] and total == 499_999_500_000
        print("grads =", grads.value, "| stats:", engine.stats())
    print("quickstart: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
