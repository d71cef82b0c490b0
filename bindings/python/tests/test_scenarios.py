"""The scenarios of docs/design.md, through the Python binding. None relies on timing for
its verdict: where "X does not wait for Y" is the property, Y is held behind a gate that
only opens after X has been observed, so a wrong engine (or a GIL deadlock in the
binding) times out and fails instead of passing by luck."""

import gc
import threading
import time
import unittest

from _support import Gate, flowlane, resident_kib


class Scenarios(unittest.TestCase):
    def test_print_loss_does_not_wait_for_backward(self):
        with flowlane.Engine(workers=2, lanes=4) as engine:
            gate = Gate()
            loss = engine.object()
            grads = engine.object(0)
            printed = engine.object()
            with engine.lane(0):
                engine.submit(lambda: 2.5, writes=[loss], name="forward")

                def backward_gate(_loss, g):
                    gate.wait()
                    return g

                engine.submit(backward_gate, reads=[loss, grads], writes=[grads], name="backward.gate")
                for _ in range(100):
                    engine.submit(lambda g: g + 1, reads=[grads], writes=[grads], name="backward")
            with engine.lane() as lane1:
                self.assertGreaterEqual(lane1.id, 1)
                engine.submit(lambda v: "loss=%s" % v, reads=[loss], writes=[printed], name="print(loss)")
            # Returns although lane 0's chain is still held at its gate.
            self.assertEqual(printed.wait(), "loss=2.5")
            # At most forward and print(loss) (the counter may trail the wait by a moment).
            self.assertLessEqual(engine.stats().completed, 2)
            gate.open()
            engine.synchronize()
            self.assertEqual(grads.value, 100)

    def test_if_nan_check_on_another_lane_never_stalls_lane0(self):
        with flowlane.Engine(workers=2) as engine:
            gate = Gate()
            x = engine.object()
            copy = engine.object()
            y = engine.object(0)
            engine.submit(lambda: 1.0, writes=[x], name="produce")

            def copy_for_check(v):
                gate.wait()
                return v

            check_lane = engine.lane()
            check_lane.submit(copy_for_check, reads=[x], writes=[copy], name="copy-for-check")
            lane0 = engine.stream(0)
            for _ in range(200):
                lane0.submit(lambda xv, yv: yv + xv, reads=[x, y], writes=[y], name="step")
            lane0.synchronize()  # returns although the check is held
            self.assertEqual(y.value, 200.0)
            gate.open()
            v = copy.wait()
            self.assertEqual(v, 1.0)
            self.assertFalse(v != v, "nan")
            check_lane.close()

    def test_for_loop_of_fresh_lanes_keeps_memory_flat(self):
        iters = 100_000
        warmup = iters // 10
        with flowlane.Engine(workers=2) as engine:
            counter = engine.object(0)
            seen = set()
            rss_warm = None
            for k in range(iters):
                with engine.lane() as lane:
                    s = engine.stream()
                    seen.add(s)
                    o = engine.object(k)
                    s.submit(lambda v: v, reads=[o], writes=[o], name="work")
                    o.close()
                self.assertEqual(engine.current_lane, 0)
                if k == warmup:
                    engine.synchronize()
                    gc.collect()
                    rss_warm = resident_kib()
            engine.synchronize()
            gc.collect()
            rss_end = resident_kib()
            # A fresh lane is an idle one, so iterations move over a few lanes (not always the
            # one just released), but streams are interned per lane: their number is bounded.
            self.assertLessEqual(len(seen), engine.lanes - 1)
            self.assertEqual(engine.stats().completed, iters)
            self.assertLess(rss_end - rss_warm, 16 * 1024,
                            "RSS grew from %d KiB to %d KiB over %d iterations" % (rss_warm, rss_end, iters))
            self.assertEqual(counter.value, 0)
        from flowlane import _base
        self.assertEqual(len(_base._keep), 0, "payloads leaked: %d" % len(_base._keep))

    def test_decoder_compute_loss_stages_are_ordered_per_batch(self):
        with flowlane.Engine(workers=3, lanes=4) as engine:
            log = []
            lock = threading.Lock()

            def stage(name, i):
                def fn(*_):
                    with lock:
                        log.append((name, i))
                    return i
                return fn

            outs = []
            for i in range(12):
                inp, out, loss = engine.object(), engine.object(), engine.object()
                engine.stream(1).submit(stage("h2d", i), writes=[inp], name="h2d")
                engine.stream(0).submit(stage("compute", i), reads=[inp], writes=[out], name="compute")
                engine.stream(2).submit(stage("loss", i), reads=[out], writes=[loss], name="loss")
                outs.append(loss)
            engine.synchronize()
            for i in range(12):
                self.assertLess(log.index(("h2d", i)), log.index(("compute", i)))
                self.assertLess(log.index(("compute", i)), log.index(("loss", i)))
                self.assertEqual(outs[i].value, i)

    def test_fork_join_through_phony_objects_orders_across_lanes(self):
        with flowlane.Engine(workers=2, lanes=4) as engine:
            gate = Gate()
            order = []
            a, b, phony = engine.object(), engine.object(), engine.phony()

            def do_a():
                gate.wait()
                order.append("a")

            engine.stream(1).submit(do_a, writes=[a], name="a")
            engine.stream(1).submit(lambda *_: order.append("fork"), reads=[a], writes=[phony], name="fork")
            engine.stream(2).submit(lambda *_: order.append("join"), reads=[phony], writes=[b], name="join")
            engine.stream(2).submit(lambda *_: order.append("b"), reads=[b], writes=[b], name="b")
            time.sleep(0.02)
            self.assertEqual(order, [])
            gate.open()
            engine.synchronize()
            self.assertEqual(order, ["a", "fork", "join", "b"])

    def test_blocking_waits_let_other_python_threads_run(self):
        # The instruction only finishes once a *Python* thread has run while the main
        # thread is blocked in wait(): if a blocking call held the GIL, it would deadlock
        # (and the gate's timeout would fail the test).
        with flowlane.Engine(workers=2) as engine:
            gate = Gate()
            ticks = []
            out = engine.object()

            def gated():
                gate.wait()
                return len(ticks)

            engine.submit(gated, writes=[out], name="gated")

            def helper():
                for _ in range(50):
                    ticks.append(1)
                    time.sleep(0.001)
                gate.open()

            t = threading.Thread(target=helper)
            t.start()
            self.assertEqual(out.wait(), 50)
            t.join()
            for blocking in (engine.synchronize, engine.stream().synchronize):
                gate2 = Gate()
                engine.submit(lambda: gate2.wait(), name="gated2")
                t = threading.Thread(target=gate2.open)
                t.start()
                blocking()
                t.join()

    def test_many_python_threads_submit_concurrently(self):
        with flowlane.Engine(workers=2, lanes=8) as engine:
            counter = engine.object(0)

            def producer():
                with engine.lane():
                    for _ in range(500):
                        engine.submit(lambda c: c + 1, reads=[counter], writes=[counter], name="inc")

            threads = [threading.Thread(target=producer) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(counter.wait(), 2000)


if __name__ == "__main__":
    unittest.main()
