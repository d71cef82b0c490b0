"""FLOWLANE_CHECK_ACCESS=1: a callable that reads or writes obj.value of an object its
instruction did not declare raises UndeclaredAccess, naming the object and the
instruction; without the variable nothing is checked (and nothing costs)."""

import os
import subprocess
import sys
import textwrap
import unittest

from _support import _PKG_ROOT, flowlane, raises_failure
from flowlane import _object


class CheckedAccess(unittest.TestCase):
    def setUp(self):
        self.was = _object.CHECK_ACCESS
        _object.CHECK_ACCESS = True

    def tearDown(self):
        _object.CHECK_ACCESS = self.was

    def test_an_undeclared_read_raises_naming_both(self):
        with flowlane.Engine(workers=2) as e:
            o1, o2 = e.object(1), e.object()
            e.submit(lambda: o1.value + 1, writes=[o2], name="reads o1 unannounced")
            with raises_failure(flowlane.UndeclaredAccess) as f:
                o2.wait()
            text = str(f.original)
            self.assertIn(repr(o1), text)
            self.assertIn("instruction 'reads o1 unannounced'", text)
            self.assertIn("reads=", text)
            self.assertIsInstance(f.original, flowlane.InvalidArgument)

    def test_an_undeclared_write_raises_and_reading_is_not_writing(self):
        with flowlane.Engine(workers=2) as e:
            o = e.object(0)

            def write_it(_value):
                o.value = 5

            f = e.submit(write_it, reads=[o], name="writes what it only reads")
            with self.assertRaises(flowlane.UndeclaredAccess) as cm:
                f.result()
            self.assertIn("written by instruction 'writes what it only reads'", str(cm.exception))
            self.assertIn("writes=", str(cm.exception))
            self.assertEqual(o.value, 0)

    def test_declared_access_and_accesses_outside_instructions_pass(self):
        with flowlane.Engine(workers=2) as e:
            a, b, c = e.object(1), e.object(2), e.object()

            def fine(_a):
                c.value = a.value + b.value  # a read, b and c written
                return flowlane.KEEP, flowlane.KEEP

            e.submit(fine, reads=[a], writes=[b, c], name="declares all").result()
            self.assertEqual(c.value, 3)
            with e.task_group() as g:  # tasks have no operands to check against
                g.spawn(lambda: a.value)
            self.assertEqual(e.submit(lambda: 7).result(), 7)

    def test_off_by_default_in_a_fresh_process(self):
        prog = textwrap.dedent("""
            import flowlane
            with flowlane.Engine(workers=1) as e:
                o1 = e.object(41)
                print(e.submit(lambda: o1.value + 1).result())
        """)
        env = dict(os.environ, PYTHONPATH=_PKG_ROOT)
        env.pop("FLOWLANE_CHECK_ACCESS", None)
        r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, "42\n"), r.stderr)
        env["FLOWLANE_CHECK_ACCESS"] = "1"
        r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("UndeclaredAccess", r.stderr)
        self.assertIn("which does not declare it", r.stderr)


if __name__ == "__main__":
    unittest.main()
