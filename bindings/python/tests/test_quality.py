"""API quality: errors name the Python call, a callable's exception comes back as its own
type (chained from the flowlane error with the instruction's context), failures nobody
retrieved are logged at close, every public name is documented and typed, and the value
type of Object[T] flows through for a type checker."""

import inspect
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import traceback
import unittest

from _support import _PKG_ROOT, flowlane, raises_failure


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def close_and_collect_logs(engine):
    """Closes engine and returns the records the "flowlane" logger emitted meanwhile."""
    handler = _Records()
    log = logging.getLogger("flowlane")
    log.addHandler(handler)
    try:
        engine.close()
    finally:
        log.removeHandler(handler)
    return handler.records


class ErrorsNameThePythonCall(unittest.TestCase):
    def test_messages_name_the_method_not_the_c_function(self):
        with flowlane.Engine(workers=1, lanes=2) as e:
            with self.assertRaises(flowlane.OutOfRange) as cm:
                e.stream(9)
            self.assertTrue(str(cm.exception).startswith("Engine.stream: lane 9 is out of range"), str(cm.exception))
            self.assertEqual(cm.exception.function, "Engine.stream")
            self.assertEqual(cm.exception.c_function, "fl_stream_get")
            self.assertNotIn("fl_stream_get", str(cm.exception))
            with self.assertRaises(flowlane.InvalidArgument) as cm2:
                e.object().wait(4)
            self.assertTrue(str(cm2.exception).startswith("Object.wait: "), str(cm2.exception))
            with self.assertRaises(flowlane.OutOfRange) as cm3:
                e.lane(5)
            self.assertTrue(str(cm3.exception).startswith("Engine.lane: "), str(cm3.exception))
            held = e.lane()
            with self.assertRaises(flowlane.Exhausted) as cm4:
                e.lane()
            self.assertTrue(str(cm4.exception).startswith("Engine.lane: "), str(cm4.exception))
            held.close()
            with self.assertRaises(TypeError) as cm5:
                e.submit(lambda: None, reads=[1])
            self.assertIn("Engine.submit", str(cm5.exception))
            with self.assertRaises(TypeError) as cm6:
                e.stream().submit(lambda: None, writes=5)
            self.assertIn("Stream.submit", str(cm6.exception))

    def test_errors_pickle_with_their_context(self):
        import pickle

        err = flowlane.OutOfRange("fl_stream_get: lane 9", 3, "Engine.stream")
        back = pickle.loads(pickle.dumps(err))
        self.assertEqual((type(back), back.message, back.function, back.c_function),
                         (flowlane.OutOfRange, "lane 9", "Engine.stream", "fl_stream_get"))


class CallbackExceptionsKeepTheirType(unittest.TestCase):
    def test_except_catches_the_callables_own_exception(self):
        with flowlane.Engine(workers=2) as e:
            data, parsed = e.object(), e.object()

            def load():
                with open("/nonexistent/flowlane-input"):
                    pass

            e.submit(load, writes=[data], name="load")
            e.submit(lambda d: d, reads=[data], writes=[parsed], name="parse")
            try:
                data.wait()
            except FileNotFoundError as exc:
                caught = exc
            else:
                self.fail("FileNotFoundError not raised")
            self.assertEqual(caught.filename, "/nonexistent/flowlane-input")
            ctx = caught.__cause__
            self.assertIsInstance(ctx, flowlane.InstructionFailed)
            self.assertIs(ctx.original, caught)
            self.assertIn("instruction 'load'", str(ctx))
            self.assertIn("Object.wait", str(ctx))
            self.assertTrue(caught.__suppress_context__)
            # A skipped dependent: the same exception, chained from DependencyFailed.
            with raises_failure(FileNotFoundError, flowlane.DependencyFailed) as f:
                parsed.value
            self.assertIs(f.original, caught)
            self.assertIn("'parse'", str(f.context))
            self.assertIn("'load'", str(f.context))
            self.assertIn("Object.value", str(f.context))

    def test_the_traceback_does_not_grow_with_each_wait(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()

            def boom():
                raise KeyError("k")

            e.submit(boom, writes=[o])
            lengths = []
            for _ in range(3):
                try:
                    o.wait()
                except KeyError as exc:
                    lengths.append(len(traceback.extract_tb(exc.__traceback__)))
                    self.assertEqual(traceback.extract_tb(exc.__traceback__)[-1].name, "boom")
            self.assertEqual(len(set(lengths)), 1, lengths)

    def test_the_printed_chain_shows_context_then_the_callables_frames(self):
        with flowlane.Engine(workers=1) as e:
            o = e.object()

            def divide():
                return 1 / 0

            e.submit(divide, writes=[o], name="divide")
            try:
                o.wait()
            except ZeroDivisionError as exc:
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            first, _, second = text.partition("The above exception was the direct cause of the following exception")
            self.assertIn("flowlane.errors.InstructionFailed: Object.wait: instruction 'divide'", first)
            self.assertIn("in divide", second)
            self.assertIn("ZeroDivisionError: division by zero", second)


class UnretrievedFailuresAreReported(unittest.TestCase):
    def test_close_logs_a_failure_nobody_observed(self):
        e = flowlane.Engine(workers=1)
        e.submit(lambda: {}["missing"], writes=[e.object()], name="forgotten")
        records = close_and_collect_logs(e)
        self.assertEqual(len(records), 1, [r.getMessage() for r in records])
        r = records[0]
        self.assertEqual(r.levelno, logging.ERROR)
        self.assertIn("never retrieved", r.getMessage())
        self.assertIn("'forgotten'", r.getMessage())
        self.assertIs(r.exc_info[0], KeyError)

    def test_observed_failures_are_not_reported_again(self):
        e = flowlane.Engine(workers=1)
        a, b, c = e.object(), e.object(), e.object()
        e.submit(lambda: 1 / 0, writes=[a], name="waited")
        e.submit(lambda v: v, reads=[a], writes=[b], name="skipped")
        e.submit(lambda: 1 / 0, writes=[c], name="synchronized")
        with raises_failure(ZeroDivisionError, flowlane.DependencyFailed):
            b.wait()  # the exception of 'waited', through its skipped dependent
        # That wait observed the failure of 'waited' (a failure and the instructions it
        # poisoned are one): the first failure no wait returned is 'synchronized'.
        with raises_failure(ZeroDivisionError) as f:
            e.synchronize()
        self.assertIn("'synchronized'", str(f.context))
        e.synchronize()  # every failure was returned once
        self.assertEqual(close_and_collect_logs(e), [])

    def test_seeing_a_skipped_dependent_counts_as_seeing_its_origin(self):
        e = flowlane.Engine(workers=1)
        a, b = e.object(), e.object()
        e.submit(lambda: 1 / 0, writes=[a], name="origin")
        e.submit(lambda v: v, reads=[a], writes=[b], name="skipped")
        with raises_failure(ZeroDivisionError, flowlane.DependencyFailed):
            b.wait()
        self.assertEqual(close_and_collect_logs(e), [])

    def test_a_healthy_engine_logs_nothing(self):
        e = flowlane.Engine(workers=1)
        o = e.object(1)
        e.submit(lambda v: v + 1, reads=[o], writes=[o])
        self.assertEqual(o.wait(), 2)
        self.assertEqual(close_and_collect_logs(e), [])

    def test_without_logging_configured_the_report_reaches_stderr(self):
        code = textwrap.dedent("""
            import flowlane
            e = flowlane.Engine(workers=1)
            e.submit(lambda: int("x"), writes=[e.object()], name="parse_int")
            e.close()
        """)
        env = dict(os.environ, PYTHONPATH=_PKG_ROOT)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("never retrieved", r.stderr)
        self.assertIn("'parse_int'", r.stderr)
        self.assertIn("ValueError: invalid literal for int()", r.stderr)


def _public_names():
    """(qualified name, object) of every public name of the package and its members."""
    for name in flowlane.__all__:
        obj = getattr(flowlane, name)
        if isinstance(obj, (int, str, tuple, flowlane.Device)) or obj is flowlane.KEEP:
            continue  # constants: documented where they are defined
        yield name, obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or inspect.isclass(member) or not (
                        callable(member) or isinstance(member, (property, staticmethod, classmethod))):
                    continue
                yield "%s.%s" % (name, attr), member


class DocumentedAndTyped(unittest.TestCase):
    def test_every_public_name_has_a_docstring(self):
        missing = [n for n, obj in _public_names()
                   if not (getattr(obj, "__doc__", None) or "").strip()
                   or (inspect.isclass(obj) and obj.__doc__ is getattr(obj.__mro__[1], "__doc__", None))]
        self.assertEqual(missing, [])

    def test_every_public_function_is_annotated(self):
        unannotated = []
        for n, obj in _public_names():
            fn = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
            if inspect.isclass(fn) or not inspect.isfunction(fn):
                continue
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            if sig.return_annotation is inspect.Signature.empty or any(
                    p.annotation is inspect.Parameter.empty for p in params):
                unannotated.append(n)
        self.assertEqual(unannotated, [])

    @unittest.skipUnless(shutil.which("mypy"), "needs mypy (Debian: apt-get install mypy)")
    def test_object_value_type_flows_through_for_mypy(self):
        prog = textwrap.dedent("""
            import flowlane

            with flowlane.Engine(workers=1) as engine:
                x = engine.object(1.5)
                y: float = x.wait()
                z: float = x.value
                wrong: str = x.wait()  # line 8: the one error
                names: flowlane.Object[list] = engine.object()
        """)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "prog.py")
            with open(path, "w") as f:
                f.write(prog)
            env = dict(os.environ, MYPYPATH=_PKG_ROOT)
            r = subprocess.run(["mypy", "--strict", "--no-incremental", "--cache-dir", os.path.join(d, "cache"),
                                "--python-version", "3.8", "--allow-any-generics", path],
                               env=env, capture_output=True, text=True, timeout=300)
        errors = [line for line in r.stdout.splitlines() if ": error:" in line]
        self.assertEqual(len(errors), 1, r.stdout + r.stderr)
        self.assertIn("prog.py:8:", errors[0])
        self.assertIn('expression has type "float", variable has type "str"', errors[0])


    @unittest.skipUnless(shutil.which("mypy"), "needs mypy (Debian: apt-get install mypy)")
    def test_future_result_type_flows_through_for_mypy(self):
        prog = textwrap.dedent("""
            import flowlane

            def double(v: float) -> float:
                return v * 2

            with flowlane.Engine(workers=1) as engine:
                x = engine.object(1.5)
                f: flowlane.Future[float] = engine.submit(double, reads=[x])
                wrong: str = f.result(timeout=1)  # line 10: the one error
                ok: float = f.result()
        """)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "prog.py")
            with open(path, "w") as f:
                f.write(prog)
            env = dict(os.environ, MYPYPATH=_PKG_ROOT)
            r = subprocess.run(["mypy", "--strict", "--no-incremental", "--cache-dir", os.path.join(d, "cache"),
                                "--python-version", "3.8", path], env=env, capture_output=True, text=True, timeout=300)
        errors = [line for line in r.stdout.splitlines() if ": error:" in line]
        self.assertEqual(len(errors), 1, r.stdout + r.stderr)
        self.assertIn("prog.py:10:", errors[0])

    def test_future_is_subscriptable_at_run_time(self):
        self.assertIs(flowlane.Future[int].__origin__, flowlane.Future)


if __name__ == "__main__":
    unittest.main()
