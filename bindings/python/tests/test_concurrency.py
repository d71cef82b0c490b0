"""Concurrency as programs bring it: several Python threads sharing objects across lanes,
callbacks that call back into the engine, failures in floods and with odd exceptions, an
engine closed under its submitters, and interpreter exit with work in flight. Verdicts are
counts, orders and outcomes; timeouts only guard against hangs."""

import gc
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import unittest

from _support import GATE_TIMEOUT, Gate, flowlane, raises_failure

_HERE = os.path.dirname(os.path.abspath(__file__))


# For the close-race children (run_child's prelude): starts the threads, lets them go
# together with the calling thread, closes the engine under them; every thread must then
# end (none hangs).
CLOSE_RACING = """
def close_racing(e, threads, start):
    for t in threads:
        t.start()
    start.wait(30)
    e.close()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
"""


def run_child(source, timeout=60, prelude=""):
    """Runs ``prelude`` then ``source`` in a fresh interpreter that imports this checkout's
    flowlane."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(_HERE), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(prelude) + textwrap.dedent(source)], env=env,
                          capture_output=True, text=True, timeout=timeout)


class SharedObjectsAcrossThreads(unittest.TestCase):
    def test_threads_on_several_lanes_see_the_submission_order_of_shared_objects(self):
        # Every thread appends to one shared log (read-write) from its own lane and reads it
        # back into a private object. Accesses to one object run in submission (id) order,
        # whichever thread submitted them: the writers run in id order, and each reader
        # sees exactly the writers submitted before it.
        threads, per_thread = 4, 150
        with flowlane.Engine(workers=2, lanes=8) as engine:
            log = engine.object([])
            seen = [engine.object() for _ in range(threads)]
            reads = {}  # reader id -> length it saw
            reads_lock = threading.Lock()
            start = threading.Barrier(threads)
            errors = []

            def append(entries, tag):
                entries.append((flowlane.current_instruction().id, tag))
                return flowlane.KEEP

            def snapshot(entries):
                with reads_lock:
                    reads[flowlane.current_instruction().id] = len(entries)
                return len(entries)

            def producer(t):
                try:
                    start.wait(GATE_TIMEOUT)
                    with engine.lane():
                        for i in range(per_thread):
                            engine.submit(lambda e, tag=(t, i): append(e, tag), reads=[log], writes=[log],
                                          name="append")
                            if i % 10 == 9:
                                engine.submit(snapshot, reads=[log], writes=[seen[t]], name="snapshot")
                except BaseException as e:  # reported below
                    errors.append(e)

            pool = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
            for th in pool:
                th.start()
            for th in pool:
                th.join(GATE_TIMEOUT)
            self.assertEqual(errors, [])
            entries = log.wait()
            engine.synchronize()
            self.assertEqual(len(entries), threads * per_thread)
            ids = [i for i, _ in entries]
            self.assertEqual(ids, sorted(ids), "writers of one object ran out of submission order")
            self.assertEqual(len(reads), threads * per_thread // 10)
            for reader, length in reads.items():
                self.assertEqual(length, sum(1 for i in ids if i < reader), "reader #%d" % reader)
            # Each thread's entries are in its program order.
            for t in range(threads):
                self.assertEqual([i for th, i in (tag for _, tag in entries) if th == t], list(range(per_thread)))

    def test_concurrent_synchronize_calls_report_each_failure_exactly_once(self):
        class Boom(Exception):
            pass

        def boom():
            raise Boom("boom")

        n = 60  # within the 64 Python exceptions the engine keeps
        with flowlane.Engine(workers=2, lanes=4) as engine:
            ids = {engine.submit(boom, writes=[engine.object()], lane=i % 4, name="boom").id for i in range(n)}
            reported = []
            lock = threading.Lock()
            start = threading.Barrier(4)

            def waiter():
                start.wait(GATE_TIMEOUT)
                while True:
                    try:
                        engine.synchronize(timeout=GATE_TIMEOUT)
                        return
                    except Boom as e:
                        with lock:
                            reported.append(e.__cause__.message)

            pool = [threading.Thread(target=waiter) for _ in range(4)]
            for th in pool:
                th.start()
            for th in pool:
                th.join(GATE_TIMEOUT)
            while True:  # a waiter may get FL_OK while another still holds an entry
                try:
                    engine.synchronize()
                    break
                except Boom as e:
                    reported.append(e.__cause__.message)
            got = [int(re.search(r"\(#(\d+),", m).group(1)) for m in reported]
            self.assertEqual(sorted(got), sorted(ids), "each failure is reported once, to one waiter")
            engine.synchronize()


class CallbacksCallingBackIn(unittest.TestCase):
    def test_callbacks_submit_wait_query_and_are_refused_what_would_wait_for_themselves(self):
        with flowlane.Engine(workers=2, lanes=4) as engine:
            out = engine.object()

            def child(x):
                return x * 2

            def parent():
                me = flowlane.current_instruction()
                results = {}
                # Work submitted on another lane, waited for here (a future and an object).
                o = engine.object(21)
                fut = engine.stream(me.lane + 1).submit(child, reads=[o], writes=[o])
                results["future"] = fut.result(timeout=GATE_TIMEOUT)
                results["object"] = o.wait(timeout=GATE_TIMEOUT)
                # Queries and lanes.
                results["stats"] = engine.stats().submitted >= 2
                results["lanes"] = (engine.lanes, engine.workers, engine.current_lane == me.lane)
                with engine.lane() as lane:
                    results["acquired"] = engine.current_lane == lane.id
                results["dump"] = "lane" in engine.dump()
                gc.collect()
                # Work on another lane that waits for this instruction (it reads what this
                # one writes) cannot complete before it returns.
                dependent = engine.stream(me.lane + 2).submit(lambda _v: None, reads=[out])
                # Waits for itself are refused, and so is closing the engine.
                for name, call in (("close", engine.close), ("synchronize", engine.synchronize),
                                   ("drain", lambda: engine.drain(timeout=GATE_TIMEOUT)),
                                   ("own lane", lambda: engine.stream(me.lane).synchronize()),
                                   ("dependent", lambda: dependent.result(timeout=GATE_TIMEOUT)),
                                   ("dependent's lane", lambda: engine.stream(me.lane + 2).synchronize())):
                    try:
                        call()
                        results[name] = "returned"
                    except flowlane.InvalidArgument:
                        results[name] = "refused"
                return results

            engine.submit(parent, writes=[out], lane=1)
            results = out.wait(timeout=GATE_TIMEOUT)
            self.assertEqual(results, {
                "future": 42, "object": 42, "stats": True, "lanes": (4, 2, True), "acquired": True,
                "dump": True, "close": "refused", "synchronize": "refused", "drain": "refused",
                "own lane": "refused", "dependent": "refused", "dependent's lane": "refused"})
            self.assertFalse(engine.closed)
            engine.synchronize()

    def test_gc_in_callbacks_collects_cycles_holding_engines_objects_and_futures(self):
        with flowlane.Engine(workers=2, lanes=4) as engine:
            acc = engine.object(0)
            collected = []

            class Node:
                def __del__(self):
                    collected.append(1)

            def step(v):
                a, b = Node(), Node()
                a.peer, b.peer = b, a  # a cycle only the collector frees
                a.engine, a.obj, a.me = engine, acc, flowlane.current_instruction()
                gc.collect()
                return v + 1

            futures = [engine.submit(step, reads=[acc], writes=[acc], lane=i % 4) for i in range(60)]
            cycle = {"futures": futures}
            cycle["self"] = cycle
            del futures
            self.assertEqual(acc.wait(timeout=GATE_TIMEOUT), 60)
            del cycle
            gc.collect()
            self.assertGreaterEqual(len(collected), 2 * 59)  # the last step's pair may remain until now
            engine.synchronize()

    def test_close_gives_up_callbacks_that_wait_for_each_other(self):
        # Two callbacks on two lanes, each waiting for the other's future (no dependency
        # between them, so nothing refuses the waits): a deadlock that close() must end,
        # not join. At least one wait raises Cancelled; the other may then succeed.
        engine = flowlane.Engine(workers=2, lanes=4)
        futures = {}
        published = threading.Event()
        outcomes = {}

        def waits_for(other):
            def body():
                published.wait(GATE_TIMEOUT)
                try:
                    futures[other].result()
                    outcomes[other] = "returned"
                except flowlane.Cancelled as e:
                    outcomes[other] = "cancelled" if "cycle of waits" in str(e) else str(e)
            return body

        futures["b"] = engine.submit(waits_for("a"), lane=1)
        futures["a"] = engine.submit(waits_for("b"), lane=2)
        published.set()
        deadline = time.monotonic() + GATE_TIMEOUT
        while "DEADLOCK" not in engine.dump() and time.monotonic() < deadline:  # both are waiting
            time.sleep(0.01)
        self.assertIn("DEADLOCK: cycle of waits", engine.dump())
        closer = threading.Thread(target=engine.close)
        closer.start()
        closer.join(GATE_TIMEOUT)
        self.assertFalse(closer.is_alive(), "close() hung on the cycle")
        self.assertEqual(sorted(outcomes), ["a", "b"])
        self.assertIn("cancelled", outcomes.values(), outcomes)
        self.assertTrue(set(outcomes.values()) <= {"cancelled", "returned"}, outcomes)

    def test_release_callbacks_may_call_back_in_while_close_drains(self):
        log = []
        engine = flowlane.Engine(workers=2, lanes=4)

        class CallsBack:
            def __init__(self, tag):
                self.tag = tag

            def __del__(self):
                try:
                    engine.stats()
                    engine.submit(lambda: None)
                    log.append(("submitted", self.tag))
                except flowlane.Shutdown:
                    log.append(("shutdown", self.tag))
                except BaseException as e:  # noqa: B902 - reported by the assertion
                    log.append((repr(e), self.tag))

        gate = Gate()
        for i in range(8):
            o = engine.object(CallsBack(i))
            engine.submit(lambda _v: gate.wait(), reads=[o], lane=i % 4)
            o.close()  # the engine releases the value after the gated reader completes
        del o
        closer = threading.Thread(target=engine.close)
        closer.start()
        deadline = time.monotonic() + GATE_TIMEOUT
        while not engine._closing and time.monotonic() < deadline:  # close() has begun
            time.sleep(0.001)
        gate.open()
        closer.join(GATE_TIMEOUT)
        self.assertFalse(closer.is_alive())
        # The releases ran on the workers during close()'s drain: queries answered, and
        # submissions were refused with Shutdown.
        self.assertEqual(sorted(log), [("shutdown", i) for i in range(8)])


class OddFailures(unittest.TestCase):
    def test_an_exception_whose_str_raises_still_fails_and_completes_its_future(self):
        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("no text for this one")

        def bad():
            raise Unprintable()

        with flowlane.Engine(workers=2) as engine:
            out = engine.object()
            fut = engine.submit(bad, writes=[out], name="unprintable")
            with raises_failure(Unprintable) as f:
                out.wait(timeout=GATE_TIMEOUT)
            self.assertIn("Unprintable", f.context.message)  # the type still reaches the error text
            exc = fut.exception(timeout=GATE_TIMEOUT)  # hung forever when the completer choked on str()
            self.assertIsInstance(exc, Unprintable)
            with self.assertRaises(Unprintable):
                fut.result(timeout=GATE_TIMEOUT)
            engine.synchronize()

    def test_base_exceptions_fail_the_instruction_and_skip_its_dependents(self):
        class Custom(BaseException):
            pass

        for exc in (SystemExit(3), KeyboardInterrupt(), GeneratorExit(), StopIteration(7), Custom("c")):
            with self.subTest(type(exc).__name__), flowlane.Engine(workers=2, lanes=2) as engine:
                x, y = engine.object(), engine.object()
                ran = []

                def raise_it(exc=exc):
                    raise exc

                fut = engine.submit(raise_it, writes=[x], lane=0)
                dep = engine.submit(lambda v: ran.append(v), reads=[x], writes=[y], lane=1)
                with raises_failure(type(exc), flowlane.DependencyFailed):
                    y.wait(timeout=GATE_TIMEOUT)
                with self.assertRaises(type(exc)):
                    fut.result(timeout=GATE_TIMEOUT)
                self.assertIsInstance(dep.exception(timeout=GATE_TIMEOUT), type(exc))
                self.assertEqual(ran, [])
                engine.synchronize()  # observed by the waits: nothing left to report

    def test_a_flood_of_failures_is_reported_once_each_and_forgotten(self):
        def boom():
            raise ValueError("flood")

        with flowlane.Engine(workers=2, lanes=4) as engine:
            for _ in range(3):
                futures = [engine.submit(boom, writes=[engine.object()], lane=i % 4) for i in range(600)]
                reported = 0
                while True:
                    try:
                        engine.synchronize(timeout=GATE_TIMEOUT)
                        break
                    except (ValueError, flowlane.InstructionFailed):
                        reported += 1
                self.assertEqual(reported, 600)
                self.assertTrue(all(isinstance(f.exception(timeout=GATE_TIMEOUT), ValueError) for f in futures))
                # What the binding keeps per failure stays bounded, and nothing is left to
                # report at close.
                self.assertLessEqual(len(engine._failures), 64)
                self.assertEqual(len(engine._unretrieved), 0)
            self.assertEqual(engine.stats().failed, 1800)


class CloseUnderLoad(unittest.TestCase):
    def test_close_from_another_thread_while_submitters_run(self):
        # Submitting threads race close(): each ends with Shutdown (close has begun) or
        # ClosedError (it has finished), never a crash, a hang or another error. In a child
        # interpreter: a crash there fails this test instead of killing the runner.
        proc = run_child("""
            import collections, threading, flowlane
            outcomes = collections.Counter()
            for r in range(120):
                e = flowlane.Engine(workers=1, lanes=8)
                shared = e.object(0)
                start = threading.Barrier(4)
                def submitter(kind):
                    start.wait(30)
                    n = 0
                    try:
                        while True:
                            n += 1
                            if kind == 0:
                                e.object(n)
                            elif kind == 1:
                                e.stream(1 + n % 7)
                            else:
                                e.submit(lambda v: v + 1, reads=[shared], writes=[shared], lane=n % 8)
                    except flowlane.FlowlaneError as ex:
                        outcomes[type(ex).__name__] += 1
                close_racing(e, [threading.Thread(target=submitter, args=(k,)) for k in range(3)], start)
            print(dict(outcomes))
        """, prelude=CLOSE_RACING)
        self.assert_outcomes(proc, 360, {"Shutdown", "ClosedError"})

    def test_close_from_another_thread_while_queries_and_waits_run(self):
        # Threads query and wait on the engine, its streams, objects, lanes and futures in a
        # loop while the main thread closes it: each call returns (the waits while close
        # drains), or raises ClosedError once the drain is over; none uses the freed engine
        # (a segfault, caught as the child's exit status) and none hangs.
        proc = run_child("""
            import collections, sys, threading, time, flowlane
            # A short switch interval: more interleavings per round, and the spinning callers
            # hand the GIL back to the worker and to close() sooner.
            sys.setswitchinterval(1e-4)
            outcomes = collections.Counter()
            lock = threading.Lock()

            def slow(v):
                time.sleep(0.0002)
                return v + 1

            def boom():
                raise ValueError("boom")

            for r in range(30):
                e = flowlane.Engine(workers=1, lanes=4)
                obj = e.object(0)
                for i in range(8):
                    e.submit(slow, reads=[obj], writes=[obj], lane=i % 4)
                ok = e.submit(lambda: 1, lane=2)
                bad = e.submit(boom, lane=3)
                stream, stream2 = e.stream(1), e.stream(2)
                calls = [
                    e.stats, e.dump, e.synchronize, lambda: e.lanes, stream.info, stream.synchronize,
                    stream2.synchronize, ok.state, lambda: bad.exception(), lambda: obj.wait(),
                    lambda: obj.value,
                ]
                start = threading.Barrier(len(calls) + 1)

                def caller(call):
                    start.wait(30)
                    try:
                        while not e.closed:
                            try:
                                call()
                            except ValueError:  # boom, from a wait that reports it
                                pass
                        outcome = "returned"
                    except flowlane.FlowlaneError as ex:
                        outcome = type(ex).__name__
                    with lock:
                        outcomes[outcome] += 1

                close_racing(e, [threading.Thread(target=caller, args=(c,)) for c in calls], start)
                assert obj.value == 8, obj.value
            print(dict(outcomes))
        """, prelude=CLOSE_RACING)
        self.assert_outcomes(proc, 330, {"returned", "ClosedError"})

    def assert_outcomes(self, proc, count, allowed):
        """A close-race child exited cleanly (no segfault: its exit status) and its threads
        ended `count` times, each in one of `allowed` (its last line: a dict of counts)."""
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        outcomes = eval(proc.stdout.strip().splitlines()[-1])
        self.assertEqual(sum(outcomes.values()), count, outcomes)
        self.assertLessEqual(set(outcomes), allowed, outcomes)

    def test_interpreter_exit_with_work_in_flight(self):
        # Daemon threads still submitting, callbacks resubmitting themselves, a long chain
        # and a done-callback pending: the atexit hook drains and closes; exit is clean.
        proc = run_child("""
            import threading, time, flowlane
            e = flowlane.Engine(workers=2, lanes=4)
            acc = e.object(0)
            def slow(v):
                time.sleep(0.0005)
                return v + 1
            for i in range(200):
                e.submit(slow, reads=[acc], writes=[acc], lane=i % 4)
            def spam():
                n = 0
                while True:
                    n += 1
                    try:
                        e.submit(lambda: None, lane=1 + n % 3)
                        e.object(n)
                    except flowlane.FlowlaneError:
                        pass
            for _ in range(2):
                threading.Thread(target=spam, daemon=True).start()
            def again():
                try:
                    flowlane.current_instruction().stream().submit(again)
                except flowlane.Shutdown:
                    print("resubmission refused", flush=True)
            e.submit(again, lane=3)
            f = e.submit(lambda v: v, reads=[acc])
            # One string per print: a print of several arguments writes them separately, and
            # the other thread's line could land between them.
            f.add_done_callback(lambda fut: print("done-callback %s" % fut.result(), flush=True))
            print("exiting", flush=True)
        """)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        lines = proc.stdout.split()
        self.assertIn("exiting", lines)
        self.assertEqual(proc.stdout.count("done-callback 200"), 1, proc.stdout)
        self.assertEqual(proc.stdout.count("resubmission refused"), 1, proc.stdout)
        self.assertNotIn("Fatal Python error", proc.stderr)


if __name__ == "__main__":
    unittest.main()
