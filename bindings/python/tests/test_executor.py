"""engine.submit as a user of concurrent.futures expects it: submissions without operands and
without a lane run in parallel (spread over lanes), those with operands or a lane keep their
order, engine.lane() hands out an idle lane each time, and result() runs a submission no
worker has started on the waiting thread. No timings: parallelism is shown with barriers
that only a parallel run can pass."""

import concurrent.futures
import threading
import unittest

from _support import Gate, flowlane, raises_failure

BARRIER_S = 30.0


def opener(gate, after_s):
    """Opens gate after after_s seconds (a test that would hang fails instead)."""
    t = threading.Timer(after_s, gate.open)
    t.daemon = True
    t.start()
    return t


class ParallelByDefault(unittest.TestCase):
    def test_submissions_without_operands_or_lane_run_in_parallel(self):
        # Four callables that each wait until all four are running: serially (one lane)
        # the barrier breaks.
        with flowlane.Engine(workers=4) as e:
            barrier = threading.Barrier(4, timeout=BARRIER_S)
            fs = [e.submit(barrier.wait, name="meet") for _ in range(4)]
            self.assertEqual(sorted(f.result() for f in fs), [0, 1, 2, 3])
            self.assertEqual(len({f.stream.lane for f in fs} - {0}), len({f.stream.lane for f in fs}),
                             "spread submissions never go to lane 0 of an engine with lanes to spare")

    def test_they_do_not_wait_for_lane_0(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            held = e.submit(gate.wait, lane=0, name="hold lane 0")
            with_object = e.submit(lambda: "after", writes=[e.object()], name="on lane 0, behind it")
            try:
                self.assertEqual(e.submit(lambda: 42).result(timeout=BARRIER_S), 42)
                self.assertFalse(with_object.done())  # operands, no lane: lane 0, in order
            finally:
                gate.open()
            held.result(timeout=BARRIER_S)
            self.assertEqual(with_object.result(timeout=BARRIER_S), "after")
            self.assertEqual(with_object.stream.lane, 0)

    def test_operands_or_a_lane_keep_the_order(self):
        with flowlane.Engine(workers=4) as e:
            seen, x = [], e.object()
            for i in range(50):
                e.submit(lambda v, i=i: seen.append(i) or v, reads=[x], writes=[x])
            lane_seen = []
            for i in range(50):
                e.submit(lambda i=i: lane_seen.append(i), lane=1)
            e.synchronize()
            self.assertEqual(seen, list(range(50)))
            self.assertEqual(lane_seen, list(range(50)))

    def test_a_with_lane_block_in_a_loop_gets_an_idle_lane_each_time(self):
        with flowlane.Engine(workers=3) as e:
            barrier = threading.Barrier(3, timeout=BARRIER_S)
            fs, lanes = [], []
            for _ in range(3):
                with e.lane() as lane:
                    lanes.append(lane.id)
                    fs.append(e.submit(barrier.wait))  # the current lane: in order on it
            self.assertEqual(sorted(f.result(timeout=2 * BARRIER_S) for f in fs), [0, 1, 2])
            self.assertEqual(len(set(lanes)), 3, lanes)
            self.assertEqual([f.stream.lane for f in fs], lanes)

    def test_an_engine_with_two_lanes_runs_them_on_lane_0_in_order(self):
        with flowlane.Engine(workers=2, lanes=2) as e:
            seen = []
            fs = [e.submit(lambda i=i: seen.append(i)) for i in range(20)]
            e.synchronize()
            self.assertEqual(seen, list(range(20)))
            self.assertEqual({f.stream.lane for f in fs}, {0})

    def test_lanes_the_program_names_or_holds_are_not_spread_to(self):
        with flowlane.Engine(workers=2, lanes=4) as e:  # spread range: lanes 3 and 2
            e.stream(3)
            self.assertEqual(e.submit(lambda: None).stream.lane, 2)
            e.synchronize()
        with flowlane.Engine(workers=1, lanes=3) as e:  # spread range: lane 2
            with e.lane() as first, e.lane() as second:
                self.assertEqual((first.id, second.id), (1, 2))
                picked = []
                other = threading.Thread(target=lambda: picked.append(e.submit(lambda: None).stream.lane))
                other.start()
                other.join()
                self.assertEqual(picked, [0], "lane 2 is the program's while it holds it")
            self.assertEqual(e.submit(lambda: None).stream.lane, 2)
            e.synchronize()

    def test_lane_counts_return_to_zero(self):
        with flowlane.Engine(workers=2) as e:
            for _ in range(100):
                e.submit(lambda: None)
            with self.assertRaises(TypeError):
                e.submit(lambda: None, name=3)
            with self.assertRaises(TypeError):
                e.submit("not callable")
            with e.lane() as lane:
                lane.submit(lambda: None)
                with self.assertRaises(TypeError):
                    lane.submit(lambda: None, name=3)
            e.synchronize()
            self.assertEqual(e._lanes._inflight, [0] * e.lanes)


class ManyThreads(unittest.TestCase):
    def test_many_submitting_threads_callbacks_that_submit_and_results_everywhere(self):
        # Eight threads submit spread work, each result() either run by the waiting thread
        # or by a worker; callbacks submit spread work of their own and wait for it (a C
        # wait inside a callback: never run inline there); some results are never asked
        # for. Every future completes with its own value, and every count returns to zero.
        with flowlane.Engine(workers=3) as e:
            errors = []

            def inner(i):
                return e.submit(lambda: i * 3, name="inner").result(timeout=60)

            def thread(t):
                try:
                    fs = []
                    for i in range(300):
                        if i % 7 == 0:
                            fs.append((e.submit(lambda i=i: inner(i), name="outer"), i * 3))
                        else:
                            fs.append((e.submit(lambda i=i, t=t: (t, i)), (t, i)))
                        if i % 3 == 0:
                            f, want = fs[-1]
                            if f.result() != want:
                                errors.append((t, i, f.result(), want))
                    for f, want in fs:
                        got = f.result(timeout=60)
                        if got != want:
                            errors.append((t, got, want))
                except BaseException as exc:  # noqa: B902 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=thread, args=(t,)) for t in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(120)
            self.assertFalse(any(th.is_alive() for th in threads), "a submitting thread hung")
            self.assertEqual(errors, [])
            e.synchronize()
            self.assertEqual(e._lanes._inflight, [0] * e.lanes)
        from flowlane import _base
        self.assertEqual([p for p in _base._keep.values() if getattr(p, "engine", None) is e], [])


class ResultRunsWhatNoWorkerStarted(unittest.TestCase):
    def setUp(self):
        # One worker, kept busy by an instruction on lane 1: a spread submission (lane 2)
        # cannot start until the gate opens.
        self.e = flowlane.Engine(workers=1, lanes=3)
        self.gate = Gate()
        self.blocker = self.e.submit(self.gate.wait, lane=1, name="occupies the only worker")
        self.failsafe = opener(self.gate, 20.0)

    def tearDown(self):
        self.gate.open()
        self.failsafe.cancel()
        self.e.close()

    def test_result_runs_it_on_the_calling_thread(self):
        f = self.e.submit(threading.get_ident, name="who runs me")
        self.assertEqual(f.stream.lane, 2)
        self.assertEqual(f.result(), threading.get_ident())
        self.assertTrue(f.done())
        self.assertEqual(f.state(), flowlane.InstrState.DONE)
        self.gate.open()
        self.e.synchronize()
        stats = self.e.stats()
        self.assertEqual((stats.completed, stats.failed), (2, 0))  # the blocker and f (empty)

    def test_a_failure_comes_back_from_result_alone(self):
        def boom():
            raise KeyError("helped")

        f = self.e.submit(boom, name="boom")
        with raises_failure(KeyError) as failure:
            f.result()
        self.assertIn("'boom'", str(failure.context))
        self.assertEqual(f.state(), flowlane.InstrState.FAILED)
        self.gate.open()
        self.e.synchronize()  # reported once, by result()

    def test_with_a_timeout_it_waits_instead(self):
        f = self.e.submit(threading.get_ident)
        with self.assertRaises(concurrent.futures.TimeoutError):
            f.result(timeout=0.2)
        self.gate.open()
        self.assertNotEqual(f.result(timeout=BARRIER_S), threading.get_ident())

    def test_cancel_and_engine_cancel_still_apply(self):
        f = self.e.submit(lambda: "never")
        self.assertTrue(f.cancel())
        g = self.e.submit(lambda: "never either")
        self.e.cancel()
        self.gate.open()
        with self.assertRaises(flowlane.Cancelled):
            self.e.synchronize()
        self.assertTrue(f.cancelled())
        with self.assertRaises(concurrent.futures.CancelledError):
            g.result(timeout=BARRIER_S)


if __name__ == "__main__":
    unittest.main()
