"""Capture and replay from Python: ``with engine.capture() as program:`` and
``program.launch()`` (flowlane._program), their refusals and their concurrency."""

import gc
import threading
import unittest
import weakref

from _support import Gate, flowlane, raises_failure


class _Callable:
    """A callable that a weak reference can watch: the tests check when a program (or a
    discarded capture) releases what it captured."""

    def __call__(self):
        pass


def _captured_callable(engine):
    """A program of one instruction whose callable only the program holds, and a weak
    reference to that callable."""
    fn = _Callable()
    ref = weakref.ref(fn)
    with engine.capture() as program:
        engine.submit(fn, lane=0)
    return program, ref


class CaptureAndLaunch(unittest.TestCase):
    def test_nothing_runs_while_capturing_and_each_launch_runs_every_instruction(self):
        with flowlane.Engine(workers=2) as e:
            x = e.object(0)
            ran = []
            with e.capture("step") as program:
                f = e.submit(lambda v: v + 1, reads=[x], writes=[x], name="inc")
                e.submit(lambda v: ran.append(v), reads=[x], name="log")
            self.assertIsInstance(f, flowlane.CapturedFuture)
            self.assertEqual(ran, [])
            self.assertEqual(x.wait(timeout=30), 0)
            for _ in range(3):
                program.launch().wait(timeout=30)
            self.assertEqual(ran, [1, 2, 3])
            self.assertEqual(x.wait(timeout=30), 3)
            info = program.info()
            self.assertEqual(info.instructions, 2)
            self.assertEqual(info.host_instructions, 2)
            self.assertEqual(info.launches, 3)
            self.assertGreater(info.bytes, 0)
            self.assertIn("step", repr(program))

    def test_replay_keeps_the_eager_order_across_lanes(self):
        with flowlane.Engine(workers=4, lanes=4) as e:
            x = e.object([])
            with e.capture() as program:
                for i in range(40):
                    e.submit(lambda v, i=i: v + [i], reads=[x], writes=[x], lane=i % 4)
            program.launch(lane=2).wait(timeout=30)
            self.assertEqual(x.wait(timeout=30), list(range(40)))

    def test_launches_are_ordered_against_eager_work_from_other_threads(self):
        # Every step appends what it did to a log kept with the value: serializable means
        # the final value is what the log's order computes, with every step in it once.
        with flowlane.Engine(workers=3, lanes=4) as e:
            x = e.object((0, ()))
            with e.capture() as program:
                e.submit(lambda v: (v[0] * 2, v[1] + ("*",)), reads=[x], writes=[x], lane=2)
                e.submit(lambda v: (v[0] - 1, v[1] + ("-",)), reads=[x], writes=[x], lane=0)

            def eager():
                for _ in range(50):
                    e.submit(lambda v: (v[0] + 3, v[1] + ("+",)), reads=[x], writes=[x], lane=1)

            t = threading.Thread(target=eager)
            t.start()
            launches = [program.launch(lane=3) for _ in range(50)]
            t.join()
            e.synchronize(timeout=60)
            self.assertTrue(all(launch.done() for launch in launches))
            value, log = x.wait(timeout=30)
            self.assertEqual((log.count("*"), log.count("-"), log.count("+")), (50, 50, 50))
            expect = 0
            for i, step in enumerate(log):
                if step == "*":
                    self.assertEqual(log[i + 1], "-")  # a launch is one step: nothing between
                expect = expect * 2 if step == "*" else expect - 1 if step == "-" else expect + 3
            self.assertEqual(value, expect)
            self.assertEqual(program.info().launches, 50)

    def test_a_failure_in_a_launch_raises_the_callables_exception_and_poisons(self):
        with flowlane.Engine(workers=2) as e:
            x = e.object(1)
            y = e.object(0)
            with e.capture() as program:
                e.submit(lambda v: 1 // 0 if v else 0, reads=[x], writes=[y], name="bad")
                e.submit(lambda v: v + 1, reads=[y], writes=[y], name="after")
            launch = program.launch()
            with raises_failure(ZeroDivisionError):
                launch.wait(timeout=30)
            with raises_failure(ZeroDivisionError) as failure:
                y.wait(timeout=30)  # poisoned by the launch
            self.assertIn("inner instruction 'bad'", str(failure.context))
            # y's poison does not skip the next launch: its first access to y writes it.
            e.submit(lambda: 0, writes=[x]).result(timeout=30)
            program.launch().wait(timeout=30)
            self.assertEqual(y.wait(timeout=30), 1)

    def test_an_exception_in_the_block_discards_the_capture_and_releases_the_callables(self):
        with flowlane.Engine(workers=1) as e:
            fn = _Callable()
            ref = weakref.ref(fn)
            with self.assertRaises(KeyError):
                with e.capture() as program:
                    e.submit(fn, lane=0)
                    del fn
                    raise KeyError("boom")
            gc.collect()
            self.assertIsNone(ref())
            with self.assertRaises(flowlane.ClosedError):
                program.launch()
            e.submit(lambda: None).result(timeout=30)  # the thread submits eagerly again

    def test_close_releases_the_callables_and_is_idempotent(self):
        with flowlane.Engine(workers=1) as e:
            program, ref = _captured_callable(e)
            program.launch().wait(timeout=30)
            gc.collect()
            self.assertIsNotNone(ref())
            program.close()
            program.close()
            gc.collect()
            self.assertIsNone(ref())
            with self.assertRaises(flowlane.ClosedError):
                program.launch()
            with self.assertRaises(flowlane.ClosedError):
                program.info()

    def test_the_engines_close_frees_programs_left(self):
        e = flowlane.Engine(workers=1)
        with e.capture() as program:
            e.submit(lambda: None, lane=0)
        program.launch()
        e.close()
        program.close()  # after the engine's close: nothing left to free
        with self.assertRaises(flowlane.ClosedError):
            program.launch()

    def test_a_running_launch_survives_close_of_its_program(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            ran = []
            with e.capture() as program:
                e.submit(gate.wait, lane=1)
                e.submit(lambda: ran.append(1), lane=1)
            launch = program.launch()
            program.close()
            gate.open()
            launch.wait(timeout=30)
            self.assertEqual(ran, [1])

    def test_current_instruction_inside_a_replay_names_the_launch(self):
        with flowlane.Engine(workers=1, lanes=3) as e:
            seen = []
            with e.capture() as program:
                e.submit(lambda: seen.append((flowlane.current_instruction().lane,
                                              flowlane.current_instruction().id)), lane=2)
            launch = program.launch(lane=0)
            launch.wait(timeout=30)
            self.assertEqual(seen, [(2, launch.id)])


class Refusals(unittest.TestCase):
    def test_waits_and_queries_while_capturing_raise_capturing(self):
        with flowlane.Engine(workers=1) as e:
            x = e.object(0)
            eager = e.submit(lambda: None, lane=0)
            eager.result(timeout=30)
            with e.capture() as program:
                f = e.submit(lambda: 1, lane=0)
                for call in (lambda: e.synchronize(timeout=1), lambda: e.stream(0).synchronize(timeout=1),
                             lambda: x.wait(timeout=1), lambda: e.drain(timeout=1),
                             lambda: f.result(timeout=1), lambda: f.exception(timeout=1)):
                    with self.assertRaises(flowlane.Capturing):
                        call()
                self.assertFalse(f.done())
                self.assertFalse(f.cancel())
            with self.assertRaises(flowlane.Capturing):
                f.result()  # still: a captured instruction never has a result of its own
            program.launch().wait(timeout=30)

    def test_launch_while_capturing_is_refused(self):
        with flowlane.Engine(workers=1) as e:
            with e.capture() as first:
                e.submit(lambda: None, lane=0)
            with e.capture():
                with self.assertRaises(flowlane.Capturing):
                    first.launch()

    def test_a_program_cannot_be_launched_inside_its_own_block(self):
        with flowlane.Engine(workers=1) as e:
            with e.capture() as program:
                with self.assertRaises(flowlane.ClosedError):
                    program.launch()

    def test_captures_do_not_nest(self):
        with flowlane.Engine(workers=1) as e:
            with e.capture():
                with self.assertRaises(flowlane.Capturing):
                    with e.capture():
                        pass

    def test_a_callback_cannot_capture(self):
        with flowlane.Engine(workers=1) as e:
            def inside():
                with e.capture():
                    pass
            with raises_failure(flowlane.InvalidArgument):
                e.submit(inside, lane=0).result(timeout=30)

    def test_launch_on_a_stream_of_another_engine_is_refused(self):
        with flowlane.Engine(workers=1) as a, flowlane.Engine(workers=1) as b:
            with a.capture() as program:
                a.submit(lambda: None, lane=0)
            with self.assertRaises(flowlane.InvalidHandle):
                program.launch(stream=b.stream(0))

    def test_capture_is_per_thread_and_per_engine(self):
        with flowlane.Engine(workers=1) as e, flowlane.Engine(workers=1) as other:
            done = []
            with e.capture() as program:
                e.submit(lambda: done.append("captured"), lane=0)
                t = threading.Thread(target=lambda: e.submit(lambda: done.append("other thread"),
                                                             lane=0).result(timeout=30))
                t.start()
                t.join()
                other.submit(lambda: done.append("other engine")).result(timeout=30)
            self.assertEqual(sorted(done), ["other engine", "other thread"])
            program.launch().wait(timeout=30)
            self.assertIn("captured", done)

    def test_two_threads_capture_at_once_into_two_programs(self):
        with flowlane.Engine(workers=2) as e:
            x, y = e.object(0), e.object(0)
            programs = {}
            barrier = threading.Barrier(2)

            def capture(name, obj):
                with e.capture(name) as p:
                    barrier.wait(timeout=30)
                    for _ in range(10):
                        e.submit(lambda v: v + 1, reads=[obj], writes=[obj])
                    barrier.wait(timeout=30)
                programs[name] = p

            threads = [threading.Thread(target=capture, args=a) for a in (("x", x), ("y", y))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            programs["x"].launch().wait(timeout=30)
            self.assertEqual((x.wait(timeout=30), y.wait(timeout=30)), (10, 0))
            programs["y"].launch().wait(timeout=30)
            self.assertEqual(y.wait(timeout=30), 10)

    def test_close_of_one_program_from_several_threads_frees_it_once(self):
        with flowlane.Engine(workers=2) as e:
            program, ref = _captured_callable(e)
            barrier = threading.Barrier(4)
            errors = []

            def close():
                barrier.wait(timeout=30)
                try:
                    program.close()
                except BaseException as exc:  # noqa: B902
                    errors.append(exc)

            threads = [threading.Thread(target=close) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            gc.collect()
            self.assertIsNone(ref())


if __name__ == "__main__":
    unittest.main()
