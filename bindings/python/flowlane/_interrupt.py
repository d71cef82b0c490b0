"""What Ctrl-C does to an engine that is being closed.

A KeyboardInterrupt that ends a ``with flowlane.Engine(...)`` block, or that interrupts
``close()`` while it drains, or that ends the program while an engine is open, means "stop":
the engine cancels every instruction that has not started (``fl_engine_cancel``), says on
stderr which instructions it cancelled and which are still running, and its close waits
only for the running ones (cancelling, every wait slice, what they submit meanwhile). While
it waits, SIGINT has its default action, so a second Ctrl-C ends the process at once
(when SIGINT had Python's default handler; a program's own handler is left alone)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from concurrent.futures._base import PENDING, RUNNING
from typing import TYPE_CHECKING, Iterator, List

from ._base import _keep
from ._instr import _Instr

if TYPE_CHECKING:  # pragma: no cover
    from ._engine_base import EngineBase

#: Names listed per kind in the report; the rest are counted.
_LISTED = 8


def _listing(what: List[str]) -> str:
    shown = ", ".join(what[:_LISTED])
    return shown + (" and %d more" % (len(what) - _LISTED) if len(what) > _LISTED else "")


def report(engine: "EngineBase") -> str:
    """The engine's Python instructions just after fl_engine_cancel: those that had not
    started (now cancelled) and those running. (Instructions of other kinds are cancelled
    and waited for too; they are not named.)"""
    running: List[str] = []
    cancelled: List[str] = []
    for payload in list(_keep.values()):
        if not isinstance(payload, _Instr) or payload.engine is not engine:
            continue
        future = payload.future
        what = "%r (#%d, lane %d)" % (payload.name, future.id, payload.lane)
        if future._state == RUNNING:
            running.append(what)
        elif future._state == PENDING:
            cancelled.append(what)
    lines = ["flowlane: interrupted (KeyboardInterrupt): closing the engine"]
    if cancelled:
        lines.append("flowlane: cancelled %d instruction%s that had not started: %s"
                     % (len(cancelled), "" if len(cancelled) == 1 else "s", _listing(cancelled)))
    if running:
        lines.append("flowlane: waiting for %d still running to return: %s (Ctrl-C again exits at once)"
                     % (len(running), _listing(running)))
    return "\n".join(lines) + "\n"


def say(text: str) -> None:
    """Writes to stderr, whatever state it is in."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except BaseException:
        pass


def program_was_interrupted() -> bool:
    """At exit: the program ended with an unhandled KeyboardInterrupt."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt)


@contextlib.contextmanager
def sigint_exits_at_once() -> Iterator[None]:
    """While the block runs, Ctrl-C ends the process at once (SIGINT's default action) —
    on the main thread, when SIGINT has Python's default handler."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
