"""Ctrl-C ends a program that uses an engine as its user expects: what has not started is
cancelled (and never runs), stderr says what was cancelled and what still runs, the program
exits once the running callbacks return, and a second Ctrl-C exits at once.

Each test runs a real program in a subprocess and sends it SIGINT. The bounds are generous
(seconds of slack against jobs of several seconds): they separate "waited for the queued
jobs" from "did not", never small differences."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from _support import _PKG_ROOT

JOB_S = 4.0  # each job's length; three are queued one after the other on one lane

PROGRAM = textwrap.dedent("""
    import os, sys, time
    import flowlane

    marks, how = sys.argv[1], sys.argv[2]

    def job(i):
        open(os.path.join(marks, "started-%d" % i), "w").close()
        time.sleep(JOB_S)  # on a worker: SIGINT goes to the main thread, not here
        open(os.path.join(marks, "finished-%d" % i), "w").close()

    with flowlane.Engine(workers=2) as engine:
        for i in range(3):
            engine.submit(lambda i=i: job(i), lane=1, name="job%d" % i)
        while not os.path.exists(os.path.join(marks, "started-0")):
            time.sleep(0.01)
        print("ready", flush=True)
        if how == "in-block":
            engine.synchronize()  # Ctrl-C arrives here, inside the with block
    # how == "at-close": the block ended; Ctrl-C arrives while its close drains
    print("closed", flush=True)
""").replace("JOB_S", repr(JOB_S))


class CtrlCEndsTheProgram(unittest.TestCase):
    def start(self, how):
        self.marks = tempfile.mkdtemp(prefix="flowlane-ctrlc-")
        script = os.path.join(self.marks, "prog.py")
        with open(script, "w") as f:
            f.write(PROGRAM)
        env = dict(os.environ, PYTHONPATH=_PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        # The program starts with SIGINT at its default action, as a program started from a
        # terminal does. A test run started in the background by a non-interactive shell (CI)
        # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        proc = subprocess.Popen([sys.executable, script, self.marks, how], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()
        self.assertEqual(line.strip(), "ready", proc.stderr.read() if not line else line)
        return proc

    def marked(self, name):
        return os.path.exists(os.path.join(self.marks, name))

    def check_single_ctrl_c(self, how):
        proc = self.start(how)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
        sys.stderr.write("[%s: exited %.2f s after Ctrl-C] " % (how, took))
        # Queued jobs never ran; the running one was waited for.
        self.assertFalse(self.marked("started-1") or self.marked("started-2"), err)
        self.assertTrue(self.marked("finished-0"), err)
        # Job 1 could not have finished before 2 * JOB_S after job 0 started: the program
        # was gone well before (job 0 had at most JOB_S - 0.5 s left).
        self.assertLess(took, 2 * JOB_S - 0.5, err)
        self.assertIn("cancelled 2 instructions that had not started: 'job1' (#2, lane 1), 'job2' (#3, lane 1)",
                      err)
        self.assertIn("waiting for 1 still running to return: 'job0' (#1, lane 1)", err)
        self.assertIn("KeyboardInterrupt", err)
        self.assertNotIn("closed", out)
        self.assertIn(proc.returncode, (-signal.SIGINT, 128 + signal.SIGINT, 1))

    def test_ctrl_c_inside_the_with_block(self):
        self.check_single_ctrl_c("in-block")

    def test_ctrl_c_while_the_with_block_closes(self):
        self.check_single_ctrl_c("at-close")

    def test_a_second_ctrl_c_exits_at_once(self):
        proc = self.start("in-block")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while "waiting for" not in self._stderr_so_far(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        took = time.monotonic() - sent
        sys.stderr.write("[second Ctrl-C: exited %.2f s after it] " % took)
        self.assertEqual(proc.returncode, -signal.SIGINT)
        self.assertFalse(self.marked("finished-0"), "the process waited for the running job")
        self.assertFalse(self.marked("started-1") or self.marked("started-2"))

    def _stderr_so_far(self, proc):
        # stderr is a pipe the child writes a few lines to: read what is there without blocking.
        import select

        text = getattr(proc, "_err_text", "")
        while select.select([proc.stderr], [], [], 0)[0]:
            chunk = os.read(proc.stderr.fileno(), 65536).decode("utf-8", "replace")
            if not chunk:
                break
            text += chunk
        proc._err_text = text
        return text


if __name__ == "__main__":
    unittest.main()
