"""Ctrl-C (SIGINT) interrupts every blocking wait of the main thread, even while the
instruction it waits for is stuck in its callable. The signal is sent from another thread
while the main thread waits; the test asserts that KeyboardInterrupt arrives (and logs how
long it took), never a time bound."""

import os
import signal
import sys
import threading
import time
import unittest

import _support
from _support import Gate, flowlane


class CtrlC(unittest.TestCase):
    def setUp(self):
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signals are delivered to the main thread only")
        self.previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.engine = flowlane.Engine(workers=2, lanes=4)
        self.gate = Gate()
        self.started = threading.Event()
        self.obj = self.engine.object()
        # The stuck callable: it holds the object (and lane 0) until the gate opens.
        self.stuck = self.engine.submit(lambda: (self.started.set(), self.gate.wait()), writes=[self.obj],
                                        name="stuck")
        self.assertTrue(self.started.wait(_support.GATE_TIMEOUT))

    def tearDown(self):
        self.gate.open()
        self.engine.close()
        signal.signal(signal.SIGINT, self.previous)

    def interrupt(self, wait, how):
        """Runs wait() on the main thread; another thread sends SIGINT 0.2 s later."""
        sent = []

        def send():
            time.sleep(0.2)
            sent.append(time.monotonic())
            if how == "pthread_kill":
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)

        t = threading.Thread(target=send)
        t.start()
        try:
            wait()
        except KeyboardInterrupt:
            latency = time.monotonic() - sent[0]
            sys.stderr.write("[ctrl-c %s: KeyboardInterrupt %.1f ms after the signal] " % (how, latency * 1e3))
            t.join()
            return
        try:  # the wait returned: take the signal here, then fail
            t.join()
            time.sleep(1)
        except KeyboardInterrupt:
            pass
        self.fail("the wait returned instead of raising KeyboardInterrupt")

    def test_object_wait(self):
        self.interrupt(lambda: self.obj.wait(), "pthread_kill")

    def test_object_wait_with_a_timeout(self):
        self.interrupt(lambda: self.obj.wait(timeout=_support.GATE_TIMEOUT), "kill")

    def test_object_value(self):
        self.interrupt(lambda: self.obj.value, "kill")

    def test_engine_synchronize(self):
        self.interrupt(self.engine.synchronize, "pthread_kill")

    def test_stream_synchronize(self):
        self.interrupt(self.engine.stream().synchronize, "kill")

    def test_future_result(self):
        self.interrupt(lambda: self.stuck.result(), "pthread_kill")

    def test_future_result_os_kill(self):
        self.interrupt(lambda: self.stuck.exception(timeout=_support.GATE_TIMEOUT), "kill")

    def test_task_group_wait(self):
        group = self.engine.task_group()
        group.spawn(self.gate.wait)
        self.interrupt(group.wait, "kill")
        self.gate.open()
        group.close()

    def test_engine_close(self):
        # The drain is interrupted; the engine stays open (refusing new work) and a second
        # close() finishes it once the callable is released.
        self.interrupt(self.engine.close, "pthread_kill")
        self.assertFalse(self.engine.closed)
        with self.assertRaises(flowlane.Shutdown):
            self.engine.submit(lambda: None)
        self.gate.open()
        self.engine.close()
        self.assertTrue(self.engine.closed)


if __name__ == "__main__":
    unittest.main()
