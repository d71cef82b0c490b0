"""Waits that Ctrl-C can interrupt and that asyncio can await: every blocking wait of the
bindings calls a ``*_for`` C wait (which releases the GIL) in slices, so the interpreter
runs signal handlers in between."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from . import _capi

T = TypeVar("T")

#: How long one slice of a blocking wait lasts on the main thread: between slices the
#: interpreter runs signal handlers, so Ctrl-C interrupts a wait within about this long.
WAIT_SLICE_S = 0.05

def _check_timeout(timeout: Optional[float], where: str) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError("%s: timeout must be a number of seconds or None, not %s" % (where, type(timeout).__name__))
    if timeout != timeout:
        raise ValueError("%s: timeout is NaN" % where)
    if timeout == float("inf"):
        return None  # forever (int(inf * 1e9) would overflow)
    return max(float(timeout), 0.0)


def wait_sliced(call: Callable[[int], Any], timeout: Optional[float], where: str,
                stop: Optional[threading.Event] = None) -> int:
    """Calls ``call(timeout_ns)`` (a ``*_for`` C wait, which releases the GIL) until it
    answers something other than FL_ERR_TIMEOUT or ``timeout`` seconds (None: forever) have
    passed; returns the last status. On the main thread (and when ``stop`` is given) it
    waits in slices of :data:`WAIT_SLICE_S`, so signal handlers (KeyboardInterrupt) run in
    between and ``stop`` is noticed."""
    timeout = _check_timeout(timeout, where)
    sliced = stop is not None or threading.current_thread() is threading.main_thread()
    slice_ns = int(WAIT_SLICE_S * 1e9)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if deadline is None:
            ns = slice_ns if sliced else _capi.FL_WAIT_FOREVER
        else:
            left = deadline - time.monotonic()
            ns = 0 if left <= 0 else int(min(left, WAIT_SLICE_S) * 1e9) if sliced else int(left * 1e9)
        st = int(call(ns))
        if st != _capi.FL_ERR_TIMEOUT or (deadline is not None and time.monotonic() >= deadline):
            return st
        if stop is not None and stop.is_set():
            return st
        # Back to the interpreter loop: a pending KeyboardInterrupt is raised here.


async def run_blocking_async(wait: Callable[[threading.Event], T]) -> T:
    """Runs ``wait(stop)`` (a sliced blocking wait) on the event loop's default executor,
    so the event loop thread never blocks or polls; if the awaiting task is cancelled,
    ``stop`` is set and the helper thread gives up at its next slice."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    try:
        return await loop.run_in_executor(None, wait, stop)
    finally:
        stop.set()
