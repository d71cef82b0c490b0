"""The Python surface: engines, lanes, streams, objects, instructions, errors, wrong
types, closed handles, task graphs and parallel_for."""

import gc
import threading
import time
import traceback
import unittest
import weakref

from _support import Gate, flowlane, raises_failure

from flowlane import _base, _capi, _ffi


def payloads():
    return len(_base._keep)


class LibraryLoading(unittest.TestCase):
    def test_version_and_path(self):
        self.assertEqual(flowlane.library_version[0], _ffi.EXPECTED_MAJOR)
        self.assertTrue(flowlane.library_path)
        self.assertEqual(_ffi.lib.fl_version_string().decode(), "%d.%d.%d" % flowlane.library_version)

    def test_every_header_function_is_declared(self):
        self.assertEqual(_ffi.missing_symbols, [])
        for name, (restype, argtypes) in _ffi.FUNCTIONS.items():
            f = getattr(_ffi.lib, name)
            self.assertEqual(f.argtypes, argtypes, name)
            self.assertIs(f.restype, restype, name)

    def test_opaque_handles_are_typed(self):
        with flowlane.Engine(workers=1) as e:
            # ctypes itself refuses a stream where an engine is expected.
            import ctypes

            with self.assertRaises(ctypes.ArgumentError):
                _ffi.lib.fl_engine_synchronize(e.stream()._handle)


class EngineBasics(unittest.TestCase):
    def test_engine_parameters_and_repr(self):
        with flowlane.Engine(workers=2, lanes=5, inflight_limit=64) as e:
            self.assertEqual(e.workers, 2)
            self.assertEqual(e.lanes, 5)
            self.assertIn("lanes=5", repr(e))
        self.assertTrue(e.closed)
        self.assertIn("closed", repr(e))
        e.close()  # idempotent

    def test_object_value_round_trip_and_write(self):
        with flowlane.Engine(workers=2) as e:
            a = e.object([1, 2])
            b = e.object()
            e.submit(lambda v: v + [3], reads=[a], writes=[b], name="append")
            self.assertEqual(b.wait(), [1, 2, 3])
            self.assertEqual(b.value, [1, 2, 3])
            b.value = "new"  # waits for earlier readers/writers first
            self.assertEqual(b.wait(flowlane.WRITE), "new")
            self.assertEqual(b.wait("read_write"), "new")

    def test_several_writes_take_a_tuple_and_keep_leaves_values(self):
        with flowlane.Engine(workers=2) as e:
            x, y, z = e.object(1), e.object(2), e.object([])

            def swap(a, b):
                return b, a

            e.submit(swap, reads=[x, y], writes=[x, y])

            def mutate(lst):
                lst.append("in place")
                return flowlane.KEEP

            e.submit(mutate, reads=[z], writes=[z])
            e.submit(lambda a, b: (flowlane.KEEP, a + b), reads=[x, y], writes=[x, y])
            self.assertEqual((x.value, y.value, z.value), (2, 3, ["in place"]))

    def test_instruction_ids_increase_and_names_default_to_qualname(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()

            def named_function():
                raise RuntimeError("x")

            i1 = e.submit(lambda: None).id
            i2 = e.submit(named_function, writes=[o]).id
            self.assertGreater(i2, i1)
            with raises_failure(RuntimeError) as f:
                o.wait()
            self.assertIn("named_function", str(f.context))
            self.assertIn("#%d" % i2, str(f.context))
            e.synchronize()  # the wait observed the failure: it counts as reported

    def test_stats(self):
        with flowlane.Engine(workers=1) as e:
            for _ in range(10):
                e.submit(lambda: None)
            e.synchronize()
            s = e.stats()
            self.assertIsInstance(s, flowlane.EngineStats)
            self.assertEqual(s.submitted, 10)
            self.assertEqual(s.completed, 10)
            self.assertEqual(s.in_flight, 0)

    def test_engine_closes_itself_when_collected(self):
        e = flowlane.Engine(workers=1)
        ref = weakref.ref(e)
        del e
        gc.collect()
        self.assertIsNone(ref())

    def test_an_engine_with_pending_work_lives_until_the_work_is_done(self):
        # The pending instruction holds the engine; its cleanup, on a worker, drops the
        # last reference: the binding hands the destroy to a helper thread (a worker
        # cannot destroy its own engine) and nothing deadlocks.
        done = []
        e = flowlane.Engine(workers=1)
        e.submit(lambda: (time.sleep(0.05), done.append(1)))
        ref = weakref.ref(e)
        del e
        gc.collect()
        deadline = time.monotonic() + 30
        while (ref() is not None or not done) and time.monotonic() < deadline:
            time.sleep(0.01)
            gc.collect()
        self.assertEqual(done, [1])
        self.assertIsNone(ref())
        for t in threading.enumerate():
            if t.name == "flowlane-engine-destroy":
                t.join(30)


class Lanes(unittest.TestCase):
    def test_lane_context_sets_the_current_lane_per_thread(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            self.assertEqual(e.current_lane, 0)
            with e.lane() as a:
                self.assertEqual(a.id, 1)
                self.assertEqual(e.current_lane, 1)
                self.assertEqual(e.stream().lane, 1)
                seen = []
                t = threading.Thread(target=lambda: seen.append(e.current_lane))
                t.start()
                t.join()
                self.assertEqual(seen, [0])  # thread-local
                with e.lane() as b:
                    self.assertEqual(e.current_lane, b.id)
                    out = e.object()
                    e.submit(lambda: flowlane.current_instruction().lane, writes=[out])
                    self.assertEqual(out.wait(), b.id)
                self.assertEqual(e.current_lane, 1)
            self.assertEqual(e.current_lane, 0)
            self.assertTrue(a.closed)
            with e.lane(3):  # named, not acquired
                self.assertEqual(e.current_lane, 3)
            with e.lane() as again:
                self.assertEqual(again.id, 1)  # released ids are handed out again

    def test_inside_a_callback_the_current_lane_is_the_instructions(self):
        with flowlane.Engine(workers=2, lanes=4) as e:
            out = e.object()

            def fn():
                ctx = flowlane.current_instruction()
                self.assertIs(ctx.engine, e)
                inner = e.object()
                # follow-up work from inside a callback: same lane by default, never blocks
                e.submit(lambda: "inner", writes=[inner])
                return (ctx.lane, e.current_lane, ctx.name, inner)

            e.stream(2).submit(fn, writes=[out], name="outer")
            lane, cur, name, inner = out.wait()
            self.assertEqual((lane, cur, name), (2, 2, "outer"))
            self.assertEqual(inner.wait(), "inner")
            self.assertIsNone(flowlane.current_instruction())

    def test_exhausted_and_out_of_range(self):
        with flowlane.Engine(workers=1, lanes=2) as e:
            held = e.lane()
            with self.assertRaises(flowlane.Exhausted) as cm:
                e.lane()
            self.assertIn("held", str(cm.exception))
            self.assertEqual(cm.exception.status, _capi.FL_ERR_EXHAUSTED)
            held.close()
            held.close()  # idempotent
            with self.assertRaises(flowlane.OutOfRange) as cm:
                e.lane(7)
            self.assertIn("2 lanes", cm.exception.message)
            with self.assertRaises(flowlane.OutOfRange):
                e.stream(2)
            self.assertIsInstance(cm.exception, IndexError)

    def test_released_lane_raises_clearly(self):
        with flowlane.Engine(workers=1) as e:
            lane = e.lane()
            lane.close()
            with self.assertRaises(flowlane.ClosedError) as cm:
                lane.stream()
            self.assertIn("released", str(cm.exception))


class Streams(unittest.TestCase):
    def test_streams_are_interned_and_report_their_info(self):
        with flowlane.Engine(workers=1, lanes=3) as e:
            s1, s2 = e.stream(2), e.stream(2)
            self.assertEqual(s1, s2)
            self.assertEqual(len({s1, s2, e.stream(1)}), 2)
            self.assertEqual(s1.info(), (2, flowlane.CPU, flowlane.StreamKind.HOST))
            self.assertIn("lane=2", repr(s1))

    def test_stream_synchronize_waits_for_its_stream_only(self):
        with flowlane.Engine(workers=2, lanes=3) as e:
            gate = Gate()
            e.stream(1).submit(gate.wait, name="held")
            e.stream(2).submit(lambda: None)
            e.stream(2).synchronize()  # returns though lane 1 is held
            gate.open()
            e.synchronize()

    def test_nonblocking_submit_raises_would_block_when_the_window_is_full(self):
        with flowlane.Engine(workers=1, inflight_limit=2) as e:
            gate = Gate()
            e.submit(gate.wait, name="held")
            e.submit(lambda: None)
            before = payloads()
            with self.assertRaises(flowlane.WouldBlock) as cm:
                e.submit(lambda: None, block=False)
            self.assertEqual(payloads(), before, "a refused submit must not keep its closure")
            self.assertIn("window", cm.exception.message)
            gate.open()
            e.synchronize()
            e.submit(lambda: None, block=False)
            e.synchronize()

    def test_inline_submit_runs_on_the_caller_when_ready_and_queues_otherwise(self):
        with flowlane.Engine(workers=1, lanes=3) as e:
            x = e.object(1)
            me = threading.get_ident()
            ran_on = []
            f = e.stream(1).submit(lambda v: (ran_on.append(threading.get_ident()), v + 1)[1], reads=[x],
                                   writes=[x], inline=True)
            # Ran before submit returned, on this thread (the future itself is completed by
            # the binding's completer thread, as always).
            self.assertEqual(ran_on, [me])
            self.assertEqual(f.result(timeout=60), 2)
            # A busy lane: queued behind, run by the worker.
            gate = Gate()
            e.stream(2).submit(gate.wait, name="held")
            g = e.stream(2).submit(lambda: ran_on.append(threading.get_ident()), inline=True)
            self.assertFalse(g.done())
            gate.open()
            g.result(timeout=60)
            self.assertEqual(len(ran_on), 2)
            self.assertNotEqual(ran_on[1], me)
            # Lane.submit and Engine.submit take it too; an exception is reported by the future.
            with e.lane() as lane:
                h = lane.submit(lambda: ran_on.append(threading.get_ident()) or 1 / 0, inline=True)
                self.assertEqual(ran_on[-1], me)
                with self.assertRaises(ZeroDivisionError):
                    h.result(timeout=60)
            self.assertEqual(e.submit(lambda: 7, lane=1, inline=True).result(timeout=60), 7)
            e.synchronize()  # the failure was reported once, by h.result()

    def test_gpu_streams_are_unsupported_in_a_cpu_build(self):
        try:
            n = flowlane.cuda_device_count()
        except flowlane.Unsupported:
            n = None
        if n is not None:
            self.skipTest("CUDA build: the GPU suite covers it")
        with flowlane.Engine(workers=1) as e:
            with self.assertRaises(flowlane.Unsupported) as cm:
                e.stream(device=flowlane.Device.cuda(0))
            self.assertIsInstance(cm.exception, NotImplementedError)
            with self.assertRaises(flowlane.Unsupported):
                flowlane.cuda_priority_range(0)
            with self.assertRaises(flowlane.Unsupported):
                flowlane.PinnedBuffer(64)
            with self.assertRaises(flowlane.Unsupported):
                flowlane.CommUniqueId.new(flowlane.CommBackend.NCCL)
            with self.assertRaises(flowlane.FlowlaneError):  # Unsupported or InvalidArgument
                e.stream().submit_kernel(0x1234)
            with self.assertRaises(flowlane.FlowlaneError):
                e.stream().memset(0x1000, 0, 16)
            before = payloads()
            with self.assertRaises(flowlane.FlowlaneError):
                e.stream().submit_device(lambda s: None)
            self.assertEqual(payloads(), before)


class Errors(unittest.TestCase):
    def test_every_status_has_its_class(self):
        expected = {
            1: flowlane.InvalidArgument, 2: flowlane.InvalidHandle, 3: flowlane.OutOfRange,
            4: flowlane.NoMemory, 5: flowlane.WouldBlock, 6: flowlane.Exhausted, 7: flowlane.Shutdown,
            8: flowlane.InstructionFailed, 9: flowlane.DependencyFailed, 10: flowlane.Cancelled,
            11: flowlane.Timeout, 12: flowlane.Unsupported, 13: flowlane.NoDevice, 14: flowlane.CudaError,
            15: flowlane.NcclError, 16: flowlane.InternalError,
        }
        from flowlane.errors import error_for

        for status, cls in expected.items():
            err = error_for(status, "msg", "fl_x")
            self.assertIs(type(err), cls)
            self.assertIsInstance(err, flowlane.FlowlaneError)
            self.assertEqual(err.status, status)
            self.assertEqual(err.status_name, _ffi.status_name(status))
            self.assertIn(err.status_name, str(err))
        self.assertIs(type(error_for(99, "x")), flowlane.UnknownStatus)
        self.assertTrue(issubclass(flowlane.DependencyFailed, flowlane.InstructionFailed))

    def test_errors_carry_the_last_error_message(self):
        with flowlane.Engine(workers=1, lanes=4) as e:
            with self.assertRaises(flowlane.InvalidArgument) as cm:
                e.lane(0).close() or _ffi.lib.fl_lane_release(e._handle, 0) and flowlane.errors.check(
                    _ffi.lib.fl_lane_release(e._handle, 0), "fl_lane_release")
            self.assertIn("lane 0", cm.exception.message)
        # A raw NULL handle through the checked path.
        with self.assertRaises(flowlane.InvalidHandle) as cm:
            flowlane.errors.check(_ffi.lib.fl_object_wait(None, 1), "fl_object_wait")
        self.assertIn("NULL", cm.exception.message)
        with self.assertRaises(flowlane.OutOfRange):
            flowlane.Engine(lanes=5000)

    def test_wait_inside_a_callback_on_itself_is_invalid_argument(self):
        with flowlane.Engine(workers=2) as e:
            o = e.object(0)
            out = e.object()

            def sync_inside(_):
                for f in (e.synchronize, e.stream().synchronize, lambda: o.wait(flowlane.WRITE)):
                    try:
                        f()
                    except flowlane.InvalidArgument as ex:
                        yield ex.message

            e.submit(lambda v: list(sync_inside(v)), reads=[o], writes=[out])
            msgs = out.wait()
            self.assertEqual(len(msgs), 3)
            self.assertTrue(all("itself" in m or "inside" in m for m in msgs), msgs)

    def test_engine_close_inside_a_callback_raises(self):
        with flowlane.Engine(workers=1) as e:
            out = e.object()

            def close_inside():
                try:
                    e.close()
                except flowlane.InvalidArgument as ex:
                    return str(ex)

            e.submit(close_inside, writes=[out])
            self.assertIn("inside a flowlane callback", out.wait())
            self.assertFalse(e.closed)

    def test_submit_while_the_engine_shuts_down_raises_shutdown(self):
        seen = []
        e = flowlane.Engine(workers=1)
        s = e.stream()

        def late():
            time.sleep(0.2)  # close() has started draining by now
            try:
                s.submit(lambda: None)
                seen.append("admitted")
            except flowlane.Shutdown as ex:
                seen.append(ex)

        e.submit(late)
        time.sleep(0.05)
        e.close()
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(seen[0], flowlane.Shutdown)
        self.assertIn("destroy", str(seen[0]))


class CallbackExceptions(unittest.TestCase):
    def test_exception_fails_the_instruction_skips_dependents_and_reaches_the_waiter(self):
        with flowlane.Engine(workers=2, lanes=3) as e:
            x, y, z, other = e.object(1), e.object(), e.object(), e.object()

            class Boom(Exception):
                pass

            def explode(v):
                raise Boom("exploded with %r" % v)

            ran = []
            e.stream(0).submit(explode, reads=[x], writes=[y], name="explode")
            e.stream(1).submit(lambda v: ran.append(v), reads=[y], writes=[z], name="dependent")
            e.stream(2).submit(lambda: "fine", writes=[other], name="unrelated")
            with raises_failure(Boom, flowlane.DependencyFailed) as f:
                z.wait()
            self.assertIs(type(f.original), Boom)
            text = str(f.context)
            for part in ("Object.wait", "'dependent'", "'explode'", "Boom", "exploded with 1"):
                self.assertIn(part, text)
            # The traceback is the original's own (callable frames only, not the binding's).
            tb_text = "".join(traceback.format_exception(type(f.original), f.original, f.original.__traceback__))
            self.assertIn("in explode", tb_text)
            self.assertNotIn("self.fn(", tb_text, "the binding's trampoline frame is not shown")
            self.assertNotIn("Traceback", text, "the context does not repeat the traceback")
            self.assertEqual(ran, [])
            with raises_failure(Boom, flowlane.InstructionFailed):
                y.wait()
            self.assertEqual(other.wait(), "fine")  # the engine stays usable
            e.synchronize()  # the waits observed the failures: they count as reported
            # A failure nobody waited on is reported once, by synchronize.
            e.submit(explode, reads=[x], writes=[e.object()], name="unobserved")
            with raises_failure(Boom) as f:
                e.synchronize()
            self.assertIn("'unobserved'", str(f.context))
            self.assertIn("Engine.synchronize", str(f.context))
            e.synchronize()
            # Writing the poisoned object again heals it.
            e.submit(lambda: 5, writes=[y])
            self.assertEqual(y.wait(), 5)

    def test_wrong_return_arity_fails_the_instruction_with_a_type_error(self):
        with flowlane.Engine(workers=1) as e:
            a, b = e.object(), e.object()
            e.submit(lambda: 1, writes=[a, b], name="arity")
            with raises_failure(TypeError) as f:
                a.wait()
            self.assertIn("tuple of 2 values", str(f.original))

    def test_base_exceptions_in_callbacks_are_contained(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()
            e.submit(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), writes=[o])
            with raises_failure(KeyboardInterrupt):
                o.wait()


class Lifetimes(unittest.TestCase):
    def test_closures_are_freed_exactly_once(self):
        class Tracked:
            freed = 0

            def __del__(self):
                Tracked.freed += 1

        base = payloads()
        with flowlane.Engine(workers=2) as e:
            o = e.object(0)
            for _ in range(100):
                t = Tracked()
                e.submit(lambda v, t=t: v + 1, reads=[o], writes=[o])
            bad = e.object()
            e.submit(lambda: 1 / 0, writes=[bad])
            t = Tracked()
            e.submit(lambda v, t=t: v, reads=[bad], writes=[e.object()])  # skipped: cleanup still runs
            del t
            with raises_failure(ZeroDivisionError):
                e.synchronize()
            gc.collect()
            self.assertEqual(Tracked.freed, 101)
            self.assertEqual(o.value, 100)
        gc.collect()
        self.assertEqual(payloads(), base)

    def test_object_value_stays_alive_until_the_engine_releases_it(self):
        class Value:
            pass

        with flowlane.Engine(workers=1) as e:
            gate = Gate()
            v = Value()
            ref = weakref.ref(v)
            obj = e.object(v)
            seen = []
            e.submit(lambda x: (gate.wait(), seen.append(x is ref())), reads=[obj])
            obj.close()  # the program's reference is gone; the engine still uses it
            del v, obj
            gc.collect()
            self.assertIsNotNone(ref(), "value freed while an instruction still used it")
            gate.open()
            e.synchronize()
            gc.collect()
            self.assertEqual(seen, [True])
            self.assertIsNone(ref(), "value kept after the engine released the object")

    def test_engine_close_runs_pending_releases(self):
        class Value:
            pass

        base = payloads()
        e = flowlane.Engine(workers=1)
        v = Value()
        ref = weakref.ref(v)
        e.object(v)  # never closed by the program
        del v
        e.close()
        gc.collect()
        self.assertIsNone(ref())
        self.assertEqual(payloads(), base)


class WrongTypesAndClosedHandles(unittest.TestCase):
    def test_wrong_argument_types(self):
        for kw in ({"workers": "2"}, {"lanes": 2.0}, {"workers": True}, {"inflight_limit": None or []}):
            with self.assertRaises(TypeError):
                flowlane.Engine(**kw)
        with self.assertRaises(ValueError):
            flowlane.Engine(workers=-1)
        with flowlane.Engine(workers=1) as e:
            o = e.object()
            with self.assertRaises(TypeError):
                e.submit("not callable")
            with self.assertRaises(TypeError):
                e.submit(lambda: None, reads=[42])
            with self.assertRaises(TypeError):
                e.submit(lambda: None, writes=5)
            with self.assertRaises(TypeError):
                e.submit(lambda: None, name=3)
            with self.assertRaises(TypeError):
                e.stream("0")
            with self.assertRaises(ValueError):
                e.stream(-1)
            with self.assertRaises(TypeError):
                e.stream(0, device="cuda")
            with self.assertRaises(ValueError):
                o.wait("sideways")
            with self.assertRaises(flowlane.InvalidArgument):
                o.wait(4)
            with self.assertRaises(TypeError):
                e.parallel_for(0, 10, "body")
            with self.assertRaises(TypeError):
                flowlane.Object("not an engine")
            with flowlane.Engine(workers=1) as other:
                foreign = other.object()
                with self.assertRaises(ValueError):
                    e.submit(lambda x: None, reads=[foreign])
            self.assertEqual(payloads(), 0 + payloads())

    def test_closed_handles_raise_clear_errors(self):
        e = flowlane.Engine(workers=1)
        o = e.object(1)
        s = e.stream()
        g = e.taskgraph()
        lane = e.lane()
        o2 = e.object(2)
        o2.close()
        with self.assertRaises(flowlane.ClosedError) as cm:
            o2.wait()
        self.assertIn("object is closed", str(cm.exception))
        self.assertIsInstance(cm.exception, flowlane.InvalidHandle)
        with self.assertRaises(flowlane.ClosedError):
            e.submit(lambda x: None, reads=[o2])
        e.close()
        for f in (e.synchronize, e.stats, lambda: e.lane(), lambda: e.stream(), lambda: e.object(),
                  s.synchronize, lambda: s.submit(lambda: None), lambda: o.wait(), lambda: g.add(lambda: None),
                  g.run, lambda: lane.stream()):
            with self.assertRaises(flowlane.ClosedError, msg=str(f)) as cm:
                f()
            self.assertIn("closed", str(cm.exception))
        self.assertEqual(o.value, 1)  # the final value stays readable
        o.close()
        g.close()
        lane.close()  # no-ops after the engine is gone


class ParallelForAndGraphs(unittest.TestCase):
    def test_parallel_for_covers_the_range(self):
        with flowlane.Engine(workers=2) as e:
            hits = bytearray(1000)
            lock = threading.Lock()

            def body(lo, hi):
                with lock:
                    for i in range(lo, hi):
                        hits[i] += 1

            e.parallel_for(0, 1000, body, grain=7)
            self.assertEqual(set(hits), {1})
            hits2 = []
            flowlane.parallel_for(e, range(5, 9), lambda lo, hi: hits2.extend(range(lo, hi)))
            self.assertEqual(sorted(hits2), [5, 6, 7, 8])
            e.parallel_for(3, 3, body)  # empty

    def test_parallel_for_raises_the_first_exception(self):
        with flowlane.Engine(workers=2) as e:
            def body(lo, hi):
                if lo <= 500 < hi:
                    raise ValueError("bad chunk %d" % lo)

            with raises_failure(ValueError) as f:
                e.parallel_for(0, 1000, body, grain=10)
            self.assertIn("bad chunk 500", str(f.original))
            self.assertIn("parallel_for", str(f.context))

    def test_parallel_for_inside_an_instruction(self):
        with flowlane.Engine(workers=2) as e:
            out = e.object()

            def fn():
                acc = []
                e.parallel_for(0, 100, lambda lo, hi: acc.append(hi - lo), grain=10)
                return sum(acc)

            e.submit(fn, writes=[out])
            self.assertEqual(out.wait(), 100)

    def test_task_graph_runs_in_dependency_order_many_times(self):
        with flowlane.Engine(workers=2) as e:
            with e.taskgraph() as g:
                log = []
                lock = threading.Lock()

                def node(name):
                    def fn():
                        with lock:
                            log.append(name)
                    return fn

                a, b, c, d = (g.add(node(n), name=n) for n in "abcd")
                a.precede(b, c)
                d.succeed(b, c)
                self.assertEqual(len(g), 4)
                for threads in (-1, 0, 1, 2):
                    log.clear()
                    g.run(threads=threads)
                    self.assertEqual(sorted(log), list("abcd"))
                    self.assertEqual(log[0], "a")
                    self.assertEqual(log[-1], "d")
                chain = [g.add(node(i)) for i in range(5)]
                chain[0] >> chain[1] >> chain[2]
                g.run()

    def test_task_graph_errors(self):
        with flowlane.Engine(workers=2) as e:
            g = e.taskgraph()
            ran = []
            a = g.add(lambda: 1 / 0, name="divide")
            b = g.add(lambda: ran.append("b"), name="after")
            a >> b
            with raises_failure(ZeroDivisionError) as f:
                g.run()
            self.assertIn("divide", str(f.context))
            self.assertIn("TaskGraph.run", str(f.context))
            self.assertEqual(ran, [])
            g2 = e.taskgraph()
            x, y = g2.add(lambda: None, name="x"), g2.add(lambda: None, name="y")
            x >> y
            y >> x
            with self.assertRaises(flowlane.InvalidArgument) as cm:
                g2.run()
            self.assertIn("cycle", str(cm.exception))
            with self.assertRaises(flowlane.InvalidArgument):
                g2.precede(x, x)
            with self.assertRaises(ValueError):
                g.precede(a, x)  # nodes of another graph
            with self.assertRaises(TypeError):
                g.precede(a, 1)
            with self.assertRaises(TypeError):
                g.add(None)
            g.close()
            g2.close()
            with self.assertRaises(flowlane.ClosedError):
                g.run()


if __name__ == "__main__":
    unittest.main()
