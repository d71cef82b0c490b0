"""Shared helpers of the binding tests: makes the package importable from a checkout and
provides gates (events with a deadline, so a broken engine fails instead of hanging)."""

import os
import sys
import threading

_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _PKG_ROOT not in sys.path:
    sys.path.insert(0, _PKG_ROOT)

import flowlane  # noqa: E402

GATE_TIMEOUT = 60.0


class Gate:
    """Something an instruction waits on; opening it releases the instruction. A gate
    that times out raises, so the instruction fails and the test reports it."""

    def __init__(self):
        self._event = threading.Event()

    def open(self):
        self._event.set()

    def wait(self):
        if not self._event.wait(GATE_TIMEOUT):
            raise TimeoutError("gate never opened")


def resident_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


__all__ = ["flowlane", "Gate", "resident_kib", "GATE_TIMEOUT"]
