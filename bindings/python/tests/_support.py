"""Shared helpers of the binding tests: makes the package importable from a checkout and
provides gates (events with a deadline, so a broken engine fails instead of hanging)."""

import contextlib
import os
import sys
import threading
import types

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


@contextlib.contextmanager
def raises_failure(original_type, context_type=None):
    """Expects the exception a Python callable raised (its own type), chained from the
    flowlane error that names the instruction (``context_type``, default
    InstructionFailed) whose ``original`` is that exception. Yields a namespace that gets
    ``original`` and ``context``."""
    context_type = context_type or flowlane.InstructionFailed
    info = types.SimpleNamespace(original=None, context=None)
    try:
        yield info
    except original_type as e:
        ctx = e.__cause__
        if type(ctx) is not context_type:
            raise AssertionError("%r is chained from %r, expected a %s" % (e, ctx, context_type.__name__)) from e
        if ctx.original is not e:
            raise AssertionError("the context's .original is %r, not the raised exception" % (ctx.original,))
        info.original, info.context = e, ctx
    else:
        raise AssertionError("no %s was raised" % original_type.__name__)


def resident_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


__all__ = ["flowlane", "Gate", "raises_failure", "resident_kib", "GATE_TIMEOUT"]
