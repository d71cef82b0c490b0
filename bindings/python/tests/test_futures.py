"""Futures of submitted instructions (concurrent.futures-compatible), timed waits and
cancellation."""

import concurrent.futures as cf
import logging
import threading
import unittest

import _support
from _support import Gate, flowlane, raises_failure


def _blocked_lane(engine):
    """A fresh lane whose head instruction waits on a gate (returned), so what is submitted
    behind it stays queued; returns (lane, gate, future of the blocker)."""
    lane = engine.lane()
    gate = Gate()
    started = threading.Event()
    blocker = lane.submit(lambda: (started.set(), gate.wait()), name="blocker")
    if not started.wait(_support.GATE_TIMEOUT):
        raise AssertionError("the blocker never started")
    return lane, gate, blocker


class Results(unittest.TestCase):
    def test_result_is_the_callables_return_value_and_the_future_is_a_concurrent_future(self):
        with flowlane.Engine(workers=2) as e:
            x = e.object(20)
            f = e.submit(lambda v: v + 1, reads=[x], writes=[x], name="inc")
            self.assertIsInstance(f, cf.Future)
            self.assertEqual(f.result(timeout=30), 21)
            self.assertTrue(f.done())
            self.assertFalse(f.running())
            self.assertFalse(f.cancelled())
            self.assertIsNone(f.exception())
            self.assertEqual(f.state(), flowlane.InstrState.DONE)
            self.assertEqual(f.name, "inc")
            self.assertGreater(f.id, 0)
            self.assertEqual(x.wait(), 21)

    def test_result_times_out_while_the_instruction_runs_then_returns(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            started = threading.Event()
            f = e.submit(lambda: (started.set(), gate.wait(), 7)[2])
            self.assertTrue(started.wait(_support.GATE_TIMEOUT))
            with self.assertRaises(cf.TimeoutError):
                f.result(timeout=0.05)
            with self.assertRaises(TimeoutError):  # concurrent.futures.TimeoutError is one from 3.11
                f.exception(timeout=0)
            self.assertTrue(f.running())
            self.assertEqual(f.state(), flowlane.InstrState.PENDING)
            gate.open()
            self.assertEqual(f.result(timeout=30), 7)

    def test_after_synchronize_the_futures_are_done_and_their_callbacks_ran(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            called = []
            for round_ in range(20):
                fs = [e.lane(i % 4).submit(lambda i=i: i) for i in range(50)]
                for f in fs:
                    f.add_done_callback(called.append)
                if round_ % 2:
                    e.synchronize()
                else:  # stream by stream
                    for lane in range(4):
                        e.lane(lane).synchronize(timeout=30)
                self.assertEqual([f for f in fs if not f.done()], [])
            self.assertEqual(len(called), 20 * 50)
            fs = [e.submit(lambda: None) for _ in range(50)]
            e.drain(timeout=30)
            self.assertTrue(all(f.done() for f in fs))

    def test_done_callbacks_run_after_completion_on_a_helper_thread(self):
        with flowlane.Engine(workers=2) as e:
            seen = []
            done = threading.Event()

            def callback(fut):
                seen.append((fut.state(), flowlane.current_instruction(), threading.current_thread().name))
                done.set()

            f = e.submit(lambda: 1)
            f.add_done_callback(callback)
            self.assertTrue(done.wait(30))
            state, instr, thread = seen[0]
            self.assertEqual(state, flowlane.InstrState.DONE)  # the engine has published it
            self.assertIsNone(instr)  # not inside a callback: may wait freely
            self.assertEqual(thread, "flowlane-futures")
            late = []
            f.add_done_callback(late.append)  # already done: called at once
            self.assertEqual(late, [f])


    def test_a_done_callback_may_wait_for_another_future(self):
        # Done-callbacks run on the engine's one completing thread: waiting there for a
        # future that completes later must not wait for itself.
        with flowlane.Engine(workers=2, lanes=4) as e:
            gate, waiting, finished, out = Gate(), threading.Event(), threading.Event(), []
            later = e.lane(1).submit(lambda: (gate.wait(), "later")[1])
            first = e.lane(2).submit(lambda: "first")

            def callback(_):
                waiting.set()
                try:
                    out.append(later.result(timeout=_support.GATE_TIMEOUT))
                finally:
                    finished.set()

            first.add_done_callback(callback)
            self.assertTrue(waiting.wait(_support.GATE_TIMEOUT))
            gate.open()
            self.assertEqual(later.result(timeout=30), "later")
            self.assertTrue(finished.wait(_support.GATE_TIMEOUT))
            self.assertEqual(out, ["later"])

    def test_a_callable_may_wait_for_a_future_of_another_lane(self):
        with flowlane.Engine(workers=1, lanes=4) as e:
            box, ready = {}, threading.Event()

            def first():
                ready.wait()
                return box["other"].result(timeout=30) + 1

            f = e.submit(first)
            box["other"] = e.lane(1).submit(lambda: 41)
            ready.set()
            self.assertEqual(f.result(timeout=60), 42)


class Failures(unittest.TestCase):
    def test_the_callables_exception_comes_back_with_its_own_type(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()

            def load():
                raise FileNotFoundError("batch_7.npy")

            f = e.submit(load, writes=[o])
            with raises_failure(FileNotFoundError) as info:
                f.result(timeout=30)
            self.assertIn("load", str(info.context))
            self.assertIn("#%d" % f.id, str(info.context))
            self.assertIs(f.exception(), info.original)
            self.assertEqual(f.state(), flowlane.InstrState.FAILED)

    def test_completing_the_future_leaves_a_waits_chain_alone(self):
        # One exception object reaches both the wait and the future: each chains it from
        # its own error when it raises it, and completing the future changes nothing.
        with flowlane.Engine(workers=1) as e:
            o = e.object()
            f = e.submit(lambda: 1 / 0, writes=[o], name="divide")
            with raises_failure(ZeroDivisionError) as info:
                o.wait()
            cf.wait([f], timeout=30)
            self.assertEqual(info.context.function, "Object.wait")
            self.assertIs(info.original.__cause__, info.context)
            with raises_failure(ZeroDivisionError) as again:
                f.result()
            self.assertEqual(again.context.function, "Future.result")

    def test_a_skipped_dependent_raises_the_origins_exception_from_dependency_failed(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()
            f = e.submit(lambda: {}["missing"], writes=[o], name="origin")
            g = e.submit(lambda v: v, reads=[o], name="dependent")
            with raises_failure(KeyError, flowlane.DependencyFailed) as info:
                g.result(timeout=30)
            self.assertIn("origin", str(info.context))
            self.assertEqual(g.state(), flowlane.InstrState.SKIPPED)
            self.assertIsInstance(f.exception(), KeyError)

    def test_a_retrieved_failure_is_returned_once_and_not_reported_at_close(self):
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logger = logging.getLogger("flowlane")
        logger.addHandler(handler)
        try:
            with flowlane.Engine(workers=1) as e:
                f = e.submit(lambda: 1 / 0)
                self.assertIsInstance(f.exception(timeout=30), ZeroDivisionError)
                e.synchronize(timeout=30)  # already returned through the future: no raise
        finally:
            logger.removeHandler(handler)
        self.assertEqual(records, [])

    def test_an_unretrieved_future_failure_is_still_raised_by_synchronize(self):
        with flowlane.Engine(workers=1) as e:
            f = e.submit(lambda: 1 / 0)
            cf.wait([f], timeout=30)  # waiting is not retrieving
            with raises_failure(ZeroDivisionError):
                e.synchronize()


class WaitAndAsCompleted(unittest.TestCase):
    def test_wait_first_completed_and_all_completed(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            quick = e.submit(lambda: "quick")
            done, not_done = cf.wait([blocker, quick], timeout=30, return_when=cf.FIRST_COMPLETED)
            self.assertEqual(done, {quick})
            self.assertEqual(not_done, {blocker})
            gate.open()
            done, not_done = cf.wait([blocker, quick], timeout=30)
            self.assertEqual((done, not_done), ({blocker, quick}, set()))
            lane.close()

    def test_wait_first_exception_returns_at_the_failure(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            bad = e.submit(lambda: [][1])
            done, not_done = cf.wait([blocker, bad], timeout=30, return_when=cf.FIRST_EXCEPTION)
            self.assertEqual((done, not_done), ({bad}, {blocker}))
            self.assertIsInstance(bad.exception(), IndexError)
            gate.open()
            lane.close()

    def test_as_completed_yields_each_future_once_in_completion_order(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            others = [e.submit(lambda i=i: i * i) for i in range(20)]
            order = []
            for fut in cf.as_completed([blocker] + others, timeout=30):
                if fut is others[-1]:
                    gate.open()  # the blocker can only complete after the others
                order.append(fut)
            self.assertEqual(order[-1], blocker)
            self.assertEqual(sorted(f.result() for f in others), [i * i for i in range(20)])
            lane.close()

    def test_as_completed_times_out(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            with self.assertRaises(cf.TimeoutError):
                list(cf.as_completed([blocker], timeout=0.05))
            gate.open()
            lane.close()


class Cancel(unittest.TestCase):
    def test_cancel_a_queued_instruction(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            ran = []
            out = e.object("initial")
            queued = lane.submit(lambda: ran.append("queued") or "new", writes=[out], name="queued")
            dependent = e.submit(lambda v: ran.append("dependent"), reads=[out], name="dependent")
            called = []
            queued.add_done_callback(called.append)
            self.assertFalse(blocker.cancel())  # running: cannot be cancelled
            self.assertTrue(queued.cancel())
            self.assertTrue(queued.cancelled())
            self.assertTrue(queued.cancel())  # idempotent
            self.assertEqual(called, [queued])
            gate.open()
            with self.assertRaises(cf.CancelledError):
                queued.result(timeout=30)
            cf.wait([dependent], timeout=30)  # not retrieved: synchronize still reports the cancel
            self.assertEqual(dependent.state(), flowlane.InstrState.SKIPPED)
            self.assertEqual(ran, [])
            self.assertEqual(queued.state(), flowlane.InstrState.CANCELLED)
            self.assertEqual(e.stats().cancelled, 1)
            self.assertFalse(blocker.cancel())  # done
            lane.close()
            with self.assertRaises(flowlane.Cancelled):  # as in C: synchronize reports the cancel
                e.synchronize()

    def test_a_future_cancelled_behind_the_engines_back_never_runs_its_callable(self):
        # Only the future is cancelled (not the instruction): the callable refuses to run.
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            ran = []
            queued = lane.submit(lambda: ran.append(1), name="queued")
            self.assertTrue(cf.Future.cancel(queued))
            gate.open()
            with self.assertRaises(cf.CancelledError):
                queued.result(timeout=30)
            cf.wait([queued], timeout=30)
            self.assertEqual(ran, [])
            with self.assertRaises(flowlane.Cancelled):
                lane.synchronize(timeout=30)
            self.assertEqual(queued.state(), flowlane.InstrState.CANCELLED)
            lane.close()

    def test_engine_and_stream_cancel_cancel_the_futures(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            lane, gate, blocker = _blocked_lane(e)
            queued = [lane.submit(lambda: None) for _ in range(3)]
            lane.stream().cancel()
            gate.open()
            done, _ = cf.wait(queued, timeout=30)
            self.assertEqual(len(done), 3)
            self.assertTrue(all(f.cancelled() for f in queued))
            self.assertEqual(blocker.result(), (None, None))  # it had started: it ran normally
            with self.assertRaises(flowlane.Cancelled):
                e.synchronize()
            lane2, gate2, blocker2 = _blocked_lane(e)
            more = lane2.submit(lambda: None)
            e.cancel()
            gate2.open()
            with self.assertRaises(cf.CancelledError):
                more.result(timeout=30)
            lane.close()
            lane2.close()


class TimedWaits(unittest.TestCase):
    def test_object_stream_and_engine_waits_time_out_and_consume_nothing(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            o = e.object()

            def slow():
                gate.wait()
                raise ValueError("after the gate")

            e.submit(slow, writes=[o], name="slow")
            for wait in (lambda: o.wait(timeout=0.05), lambda: e.stream().synchronize(timeout=0.02),
                         lambda: e.synchronize(timeout=0), lambda: e.lane(0).synchronize(timeout=0.01)):
                with self.assertRaises(flowlane.Timeout) as cm:
                    wait()
                self.assertIsInstance(cm.exception, TimeoutError)
                self.assertIn("timed out", str(cm.exception))
            with self.assertRaises(flowlane.Timeout) as cm:
                o.wait(timeout=0)
            self.assertIn("'slow'", str(cm.exception))  # the C text names what is pending
            gate.open()
            with raises_failure(ValueError):
                o.wait(timeout=30)

    def test_drain_waits_and_then_refuses_the_programs_submissions(self):
        with flowlane.Engine(workers=2) as e:
            gate, seen = Gate(), []
            first = e.submit(lambda: (gate.wait(), e.submit(lambda: seen.append("follow-up")))[1], name="first")
            with self.assertRaises(flowlane.Timeout):
                e.drain(timeout=0.02)
            with self.assertRaises(flowlane.Shutdown):  # draining from the first call on
                e.submit(lambda: None)
            gate.open()
            follow_up = first.result(timeout=30)  # submitted by a callback while draining: accepted
            e.drain(timeout=30)
            self.assertTrue(follow_up.done())
            self.assertEqual(seen, ["follow-up"])

    def test_bad_timeouts_are_refused(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object(1)
            with self.assertRaises(TypeError):
                o.wait(timeout="1")
            with self.assertRaises(ValueError):
                e.synchronize(timeout=float("nan"))
            self.assertEqual(o.wait(timeout=-1), 1)  # negative: poll, as concurrent.futures does

    def test_an_infinite_timeout_waits_forever(self):
        # float("inf") is forever, as threading's waits take it (it used to overflow int()).
        # Off the main thread, where the wait is one C call with the whole timeout.
        with flowlane.Engine(workers=1) as e:
            gate = Gate()
            f = e.submit(lambda: (gate.wait(), 7)[1])
            seen = []

            def waiter():
                try:
                    seen.append(f.result(timeout=float("inf")))
                    e.synchronize(timeout=float("inf"))
                    seen.append(e.object(3).wait(timeout=float("inf")))
                except BaseException as exc:  # noqa: B902 - reported below
                    seen.append(exc)

            t = threading.Thread(target=waiter)
            t.start()
            gate.open()
            t.join(60)
            self.assertEqual(seen, [7, 3])

    def test_waiting_inside_a_callback_for_a_later_instruction_of_its_lane_is_refused(self):
        with flowlane.Engine(workers=2) as e:
            box = {}
            gate = Gate()

            def first():
                gate.wait()
                try:
                    box["later"].result(timeout=30)
                except flowlane.InvalidArgument as exc:
                    return str(exc)
                return "no error"

            f = e.submit(first, lane=0)  # a lane: without one they would not be ordered
            box["later"] = e.submit(lambda: None, lane=0)
            gate.open()
            self.assertIn("queued behind it", f.result(timeout=30))


if __name__ == "__main__":
    unittest.main()
