"""asyncio (await a future, an object, a synchronize) and task groups."""

import asyncio
import concurrent.futures as cf
import threading
import unittest

import _support
from _support import Gate, flowlane, raises_failure


class Asyncio(unittest.TestCase):
    def test_await_futures_objects_and_synchronize(self):
        async def main(engine):
            x = engine.object(2)
            f = engine.submit(lambda v: v * 21, reads=[x], writes=[x])
            value = await f
            again = await x.wait_async()
            results = await asyncio.gather(*[engine.submit(lambda i=i: i + 1) for i in range(10)])
            await engine.synchronize_async()
            await engine.stream().synchronize_async(timeout=30)
            return value, again, results

        with flowlane.Engine(workers=2) as e:
            value, again, results = asyncio.run(main(e))
        self.assertEqual((value, again, results), (42, 42, list(range(1, 11))))

    def test_the_event_loop_keeps_running_while_an_object_is_pending(self):
        async def main(engine, gate):
            o = engine.object()
            engine.submit(lambda: (gate.wait(), "ready")[1], writes=[o])
            ticks = 0
            waiter = asyncio.ensure_future(o.wait_async())
            while not waiter.done():
                ticks += 1
                if ticks == 5:
                    gate.open()  # only possible because the loop runs while the wait is pending
                await asyncio.sleep(0.01)
            return await waiter, ticks

        with flowlane.Engine(workers=2) as e:
            value, ticks = asyncio.run(main(e, Gate()))
        self.assertEqual(value, "ready")
        self.assertGreaterEqual(ticks, 5)

    def test_exceptions_and_timeouts_through_await(self):
        async def main(engine, gate):
            o = engine.object()

            def fail():
                raise PermissionError("denied")

            with raises_failure(PermissionError):
                await engine.submit(fail, writes=[o])
            blocked = engine.object()
            engine.submit(gate.wait, writes=[blocked])
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(blocked.wait_async(), 0.05)  # cancels the helper's wait
            with self.assertRaises(flowlane.Timeout):
                await blocked.wait_async(timeout=0.01)
            gate.open()
            return await blocked.wait_async()

        with flowlane.Engine(workers=2) as e:
            self.assertIsNone(asyncio.run(main(e, Gate())))

    def test_cancelling_the_awaiting_task_cancels_a_queued_instruction(self):
        async def main(engine, lane, ran):
            f = lane.submit(lambda: ran.append(1))
            task = asyncio.ensure_future(self._await(f))
            await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            return f

        with flowlane.Engine(workers=2, lanes=4) as e:
            lane = e.lane()
            gate, started = Gate(), threading.Event()
            lane.submit(lambda: (started.set(), gate.wait()))
            self.assertTrue(started.wait(_support.GATE_TIMEOUT))
            ran = []
            f = asyncio.run(main(e, lane, ran))
            gate.open()
            cf.wait([f], timeout=30)
            self.assertTrue(f.cancelled())
            self.assertEqual(ran, [])
            with self.assertRaises(flowlane.Cancelled):
                e.synchronize()
            lane.close()

    @staticmethod
    async def _await(f):
        return await f


class TaskGroups(unittest.TestCase):
    def test_tasks_run_and_the_block_waits_for_them(self):
        with flowlane.Engine(workers=3) as e:
            out = []
            lock = threading.Lock()

            def put(i):
                with lock:
                    out.append(i)

            with e.task_group() as g:
                for i in range(100):
                    g.spawn(put, i)
            self.assertEqual(sorted(out), list(range(100)))

    def test_recursive_spawn_and_nested_groups_inside_tasks(self):
        with flowlane.Engine(workers=2) as e:
            def fib(n, out, index):
                if n < 2:
                    out[index] = n
                    return
                parts = [0, 0]
                with e.task_group() as g:  # waited for inside a task: the worker helps
                    g.spawn(fib, n - 1, parts, 0)
                    g.spawn(fib, n - 2, parts, 1)
                out[index] = parts[0] + parts[1]

            result = [0]
            with e.task_group() as g:
                g.spawn(fib, 12, result, 0)
            self.assertEqual(result[0], 144)

    def test_a_task_group_inside_an_instruction(self):
        with flowlane.Engine(workers=1) as e:
            def instruction():
                parts = [0] * 4
                with e.task_group() as g:  # on the only worker: the wait runs the tasks
                    for i in range(4):
                        g.spawn(parts.__setitem__, i, (i + 1) * 10)
                return sum(parts)

            self.assertEqual(e.submit(instruction).result(timeout=60), 100)

    def test_a_failing_task_raises_its_own_exception_and_the_group_is_reusable(self):
        with flowlane.Engine(workers=2) as e:
            g = e.task_group()

            def bad():
                raise OSError("disk")

            g.spawn(bad)
            with raises_failure(OSError):
                g.wait(timeout=30)
            ran = []
            g.spawn(ran.append, 1)
            g.wait()
            self.assertEqual(ran, [1])
            g.close()
            with self.assertRaises(flowlane.ClosedError):
                g.spawn(ran.append, 2)

    def test_wait_times_out_while_a_task_runs(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            with e.task_group() as g:
                g.spawn(gate.wait)
                with self.assertRaises(flowlane.Timeout):
                    g.wait(timeout=0.05)
                gate.open()

    def test_wait_times_out_inside_an_instruction_and_a_later_wait_raises(self):
        with flowlane.Engine(workers=2) as e:
            gate = Gate()
            g = e.task_group()  # made outside: its task runs on the other worker

            def held():
                gate.wait()
                raise KeyError("late")

            g.spawn(held)

            def instruction():
                try:
                    g.wait(timeout=0.02)  # helps, finds nothing of its own, gives up
                except flowlane.Timeout as t:
                    return str(t)
                return "returned"

            text = e.submit(instruction).result(timeout=60)
            self.assertIn("1 task(s) of the group had not finished", text)
            gate.open()
            with raises_failure(KeyError):
                g.wait(timeout=float("inf"))
            g.wait(timeout=0)  # the failure was raised once; the group is idle
            g.close()


if __name__ == "__main__":
    unittest.main()
