"""What every handle needs from its engine: the C handle and its lifetime (close, the
garbage collector), the admission of submissions, the counted calls that close() waits
for, the exceptions of failed Python callables, and the futures' completer.
:class:`flowlane.Engine` (``_engine.py``) adds the public API on top; the handles
(objects, streams, lanes, futures, graphs, communicators) depend on this class only."""

from __future__ import annotations

import atexit
import collections
import contextlib
import re
import threading
import weakref
from types import TracebackType
from typing import Any, Callable, Iterator, List, NoReturn, Optional, Tuple

from . import _capi
from ._base import _unpin_thread_states
from ._failures import Unretrieved, _user_traceback, raise_failure, report_unretrieved
from ._ffi import lib
from ._completer import Completer
from ._waits import WAIT_SLICE_S, wait_sliced
from ._interrupt import program_was_interrupted, report, say, sigint_exits_at_once
from ._lanes import LanePool
from ._managed import Managed, callback_depth
from .errors import ClosedError, InstructionFailed, InvalidArgument, Shutdown, check, error_for

_live_engines: "weakref.WeakSet[EngineBase]" = weakref.WeakSet()
_FAILURES_KEPT = 64
_UNRETRIEVED_KEPT = 1000
_ID_RE = re.compile(r"\(#(\d+),")

_Failure = Tuple[BaseException, Optional[TracebackType]]


@atexit.register
def _close_all_engines() -> None:
    # Drain and destroy engines still open at exit, while the interpreter can still run
    # the callbacks and release functions that destroy calls. A program ended by Ctrl-C
    # waits only for what is running (_interrupt.py).
    interrupted = program_was_interrupted()
    for e in list(_live_engines):
        try:
            if interrupted:
                e._interrupt()
            e.close()
        except Exception:
            pass


class _Gate:
    """A count of calls in progress that can be closed: once closed, enter() refuses, and
    wait_idle() returns when those in progress have left (waiting in slices: Ctrl-C). A
    plain lock and an event only the closer waits on: cheap per call."""

    __slots__ = ("lock", "count", "closed", "idle")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.closed = False
        self.idle = threading.Event()

    def enter(self) -> bool:
        with self.lock:
            if self.closed:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.count -= 1
            if self.closed and not self.count:
                self.idle.set()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if not self.count:
                self.idle.set()

    def reopen(self) -> None:
        with self.lock:
            self.closed = False
            self.idle.clear()

    def wait_idle(self) -> None:
        while not self.idle.wait(WAIT_SLICE_S):
            pass


class EngineBase(Managed):
    """The engine's state that its handles use; see :class:`flowlane.Engine`."""

    __slots__ = ("_tls", "_failures", "_failures_lock", "_watchdogs", "_close_lock", "_pinned", "__dict__")
    _kind = "engine"

    def __init__(self, handle: Any):
        super().__init__()
        self._tls = threading.local()
        self._failures: "collections.OrderedDict[int, _Failure]" = collections.OrderedDict()
        self._unretrieved: "collections.OrderedDict[int, Unretrieved]" = collections.OrderedDict()
        self._unretrieved_overflow = 0
        self._failures_lock = threading.Lock()
        self._watchdogs: List[Any] = []
        self._close_lock = threading.Lock()
        self._pinned: List[int] = []
        self._completer = Completer()
        self._futures_lock = threading.RLock()  # every Future of the engine (see _future.py)
        # Admission of Python submissions: close() stops it, then waits for those under
        # way, so the drain that follows covers every instruction with a future.
        self._admission = _Gate()
        # Calls into the library from the program's threads (_call): close() refuses new
        # ones once drained, then waits for those in progress before destroying.
        self._calls = _Gate()
        self._interrupted = False
        self._handle = handle
        self._lanes = LanePool(int(lib.fl_engine_lane_count(handle)), int(lib.fl_engine_worker_count(handle)))
        _live_engines.add(self)

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Drains every submitted instruction, completes their futures, runs pending
        cleanups and releases, joins the workers. Failures of Python callables that no wait,
        synchronize(), value or future observed are logged then (logger "flowlane", level
        ERROR, with the exception and traceback). Every stream, object, lane and graph of the
        engine is unusable afterwards. Idempotent.

        Ctrl-C (KeyboardInterrupt) during the drain cancels every instruction that has not
        started (``fl_engine_cancel``), says on stderr which it cancelled and which still
        run, and raises: the engine then stays open but refuses new submissions from the
        program's threads (:class:`Shutdown`); a later close() (or the exit) waits only for
        what runs, and meanwhile a second Ctrl-C ends the process at once. A ``with`` block
        that ends with KeyboardInterrupt closes the engine that way directly."""
        if self._handle is None:
            return
        if callback_depth() > 0:
            raise InvalidArgument("called from inside a flowlane callback: it would wait for itself; "
                                  "close the engine from the thread that owns it", function="Engine.close")
        if getattr(self._tls, "calls", 0):
            raise InvalidArgument("called while this thread is inside a call on this engine (from a signal "
                                  "handler?): it would wait for itself", function="Engine.close")
        with self._close_lock:
            h = self._handle
            if h is None:
                return
            # Drain first (Ctrl-C can interrupt it), so every future is completed while the
            # engine can still answer queries. Callbacks that still run can use the engine,
            # but submitting (from them or any thread) raises Shutdown, as destroy would.
            self._stop_admitting()
            try:
                if self._interrupted:
                    self._drain_running(h)
                else:
                    wait_sliced(lambda ns: lib.fl_engine_drain(h, ns), None, "Engine.close")
            except KeyboardInterrupt:
                self._interrupt()
                raise
            self._completer.flush()
            # Drained: from here on the program's calls are refused (ClosedError), and those
            # in progress return (a wait's work is done) before the destroy frees the engine.
            try:
                self._stop_calls()
                st = lib.fl_engine_destroy(h)
                if st != _capi.FL_OK:
                    check(st, "Engine.close")
            except BaseException:
                self._calls.reopen()  # interrupted or refused: the engine stays usable
                raise
            _live_engines.discard(self)
            self._handle = None
            self._completer.stop()
            self._watchdogs.clear()
            _unpin_thread_states(self._pinned)
            with self._failures_lock:
                report_unretrieved(self._unretrieved, self._unretrieved_overflow, "Engine.close")

    def __exit__(self, *exc: object) -> None:
        if isinstance(exc[1], KeyboardInterrupt):
            self._interrupt()
        self.close()

    def _interrupt(self) -> None:
        """Ctrl-C: cancels what has not started and says so (once); close() then waits
        only for what runs (_interrupt.py)."""
        h = self._handle
        if h is None or self._interrupted:
            return
        self._interrupted = True
        self._admission.close()  # no new submissions from the program's threads from now on
        lib.fl_engine_cancel(h)
        say(report(self))

    def _drain_running(self, h: Any) -> None:
        """close() after Ctrl-C: waits for the running instructions, cancelling what they
        submit meanwhile; a second Ctrl-C ends the process at once."""
        with sigint_exits_at_once():
            while lib.fl_engine_drain(h, int(WAIT_SLICE_S * 1e9)) == _capi.FL_ERR_TIMEOUT:
                lib.fl_engine_cancel(h)

    def _settle(self, status: int) -> None:
        """After a synchronize or drain that did not time out: the futures of the
        instructions it waited for are done (and their done-callbacks have run) when it
        returns. (Their completion is queued by the cleanup, before the instruction
        completes, so waiting for the completer's queue is enough.)"""
        if status != _capi.FL_ERR_TIMEOUT and callback_depth() == 0:
            self._completer.flush()

    def _enter_submit(self, where: str) -> None:
        """Before a Python submission: refused once close() has begun."""
        if not self._admission.enter():
            raise Shutdown("the engine is being closed (Engine.close drains and destroys it): it admits no new "
                           "instructions", function=where)

    def _leave_submit(self) -> None:
        self._admission.leave()

    @property
    def _closing(self) -> bool:
        """close() (or an interrupt) has stopped the admission of submissions."""
        return self._admission.closed

    @contextlib.contextmanager
    def _admitted(self, where: str) -> Iterator[Any]:
        """The handle, for a call that creates something on the engine (a stream, an
        object, a lane) from a program thread: refused with :class:`Shutdown` once close()
        has begun, and close() waits for it before destroying the engine (which frees what
        the call uses). Callbacks run before the destroy: they call in directly."""
        h = self._ptr()
        if callback_depth() > 0:
            yield h
            return
        self._enter_submit(where)
        try:
            yield self._ptr()
        finally:
            self._leave_submit()

    def _stop_admitting(self) -> None:
        """Refuses further Python submissions and waits (in slices: Ctrl-C) for those under
        way (from callbacks they never block; from a thread, at most until the window has
        room again)."""
        self._admission.close()
        self._admission.wait_idle()

    def _call(self, where: str) -> "_InCall":
        """``with engine._call(where) as h:`` around every call into the library on this
        engine or its streams, objects, lanes, graphs, groups and communicators (other
        than submissions and creations, which _admitted covers): ``h`` is the engine's
        handle. From a program thread the call is counted, and refused with
        :class:`ClosedError` once close() has drained; close() waits for the counted ones
        before destroying. From inside a callback it is not counted: callbacks run before
        the destroy returns. Blocking waits take it per slice (see _sliced), so a wait in
        progress holds it only while it is inside the library."""
        return _InCall(self, where)

    def _sliced(self, call: Callable[[Any, int], Any], where: str) -> Callable[[int], int]:
        """For wait_sliced: ``call(engine_handle, timeout_ns)`` (a C wait), each slice
        inside _call."""
        def guarded(ns: int) -> int:
            with _InCall(self, where) as h:
                return int(call(h, ns))
        return guarded

    def _drained(self) -> bool:
        """True once close() has drained the engine (its values are final)."""
        return self._handle is None or self._calls.closed

    def _stop_calls(self) -> None:
        """Refuses further calls from the program's threads and waits (in slices: Ctrl-C)
        for those inside the library. After the drain each of them returns: a wait's work
        has completed, and the others do not block."""
        self._calls.close()
        self._calls.wait_idle()

    def _finalize(self) -> None:
        if self._handle is None:
            return
        if callback_depth() > 0:
            # Garbage-collected on a worker: destroying here would wait for the running
            # callback itself. Hand the drain to a helper thread.
            h = self._handle
            _live_engines.discard(self)
            pinned, unretrieved, overflow = self._pinned, self._unretrieved, self._unretrieved_overflow
            completer = self._completer

            self._admission.close()  # waiting for submissions under way is the helper's job

            def destroy() -> None:
                self._stop_admitting()
                lib.fl_engine_drain(h, _capi.FL_WAIT_FOREVER)
                completer.flush()
                self._handle = None
                if lib.fl_engine_destroy(h) == _capi.FL_OK:
                    _unpin_thread_states(pinned)
                completer.stop()
                report_unretrieved(unretrieved, overflow, "Engine (garbage-collected)")

            threading.Thread(target=destroy, name="flowlane-engine-destroy").start()
            return
        self.close()

    # -- failures: the Python exception behind a failed instruction ------------------

    def _remember_failure(self, instr_id: int, exc: BaseException, what: str) -> None:
        tb = _user_traceback(exc)
        with self._failures_lock:
            self._failures[instr_id] = (exc, tb)
            while len(self._failures) > _FAILURES_KEPT:
                self._failures.popitem(last=False)
            if len(self._unretrieved) < _UNRETRIEVED_KEPT:
                self._unretrieved[instr_id] = (what, exc, tb)
            else:
                self._unretrieved_overflow += 1

    def _retrieved(self, message: str) -> None:
        """A failure (and the origin it names) reached the program: not reported at close."""
        with self._failures_lock:
            for i in _ID_RE.findall(message):
                self._unretrieved.pop(int(i), None)

    def _original(self, message: str) -> Tuple[Optional[BaseException], Optional[TracebackType]]:
        ids = [int(m) for m in _ID_RE.findall(message)]
        with self._failures_lock:
            for i in reversed(ids):  # the origin is named last in a "skipped: ... by ..." chain
                found = self._failures.get(i)
                if found is not None:
                    return found
        return None, None

    def _raise(self, status: int, function: str) -> NoReturn:
        err = error_for(status, None, function)
        self._retrieved(err.message)
        orig, tb = self._original(err.message) if isinstance(err, InstructionFailed) else (None, None)
        raise_failure(err, orig, tb)

    # -- diagnostics -----------------------------------------------------------------

class _InCall:
    """EngineBase._call's context manager (a class: cheaper than a generator)."""

    __slots__ = ("engine", "where", "counted")

    def __init__(self, engine: EngineBase, where: str):
        self.engine = engine
        self.where = where
        self.counted = False

    def __enter__(self) -> Any:
        e = self.engine
        if callback_depth() > 0:
            return e._ptr()
        if not e._calls.enter():
            if e._handle is None:
                raise ClosedError("this engine is closed", function=self.where)
            raise ClosedError("the engine is being closed (Engine.close has drained it and is freeing it)",
                              function=self.where)
        h = e._handle  # set while the gate is open: close() frees it only after closing the gate
        self.counted = True
        tls = e._tls
        tls.calls = getattr(tls, "calls", 0) + 1
        return h

    def __exit__(self, *exc: object) -> None:
        if not self.counted:
            return
        e = self.engine
        e._tls.calls -= 1
        e._calls.leave()

