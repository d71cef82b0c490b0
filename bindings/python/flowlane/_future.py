"""Futures of submitted instructions.

A :class:`Future` is a ``concurrent.futures.Future``: it works with
``concurrent.futures.wait`` / ``as_completed`` and ``asyncio`` because it keeps the base
class's state and notifies the waiters those functions install, as ``set_result`` /
``set_exception`` / ``set_running_or_notify_cancel`` do. Done-callbacks never run on an
engine worker: on the engine's helper thread (the "completer", ``_completer.py``), where
they may block or wait freely, or at once in the caller when the future is already done.

Who completes what:

* the instruction's callable starts: the future becomes running (a future cancelled
  before that makes the callable return ``FL_ERR_CANCELLED`` without running ``fn``);
* its cleanup runs (after ``fn``, or instead of it when skipped or cancelled): a success
  with no done-callback is completed there and then, on the worker (its waiters are
  woken; nothing there blocks), as the engine completes the instruction right after; the
  rest (failures, skips, cancellations, futures with done-callbacks) is queued to the
  completer, which waits until the engine has published the outcome and sets the result,
  the exception, or the cancellation;
* ``result()`` without a timeout of a submission without operands or lane that no worker
  has started claims it and runs ``fn`` on the calling thread (``Future._help``), then
  completes the future; the engine's own run of the instruction then finds it claimed and
  does nothing.

An exception is first stored as a provisional one built from what Python knows (the
callable's exception, or a skip); its first retrieval (``result()``, ``exception()``)
asks the engine for the failure's text with ``fl_instr_wait_for(id, 0)``, which also
counts the failure as returned, as every wait that observes a failure does.
"""

from __future__ import annotations

import asyncio
import ctypes
import concurrent.futures
import enum
import threading
import time
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Generator, Generic, List, Optional, Tuple, TypeVar

from . import _capi
from ._context import current_instruction
from ._failures import _user_traceback, _without_traceback, exception_text
from ._ffi import lib
from ._managed import callback_depth
from ._waits import WAIT_SLICE_S, _check_timeout, wait_sliced
from .errors import ClosedError, DependencyFailed, FlowlaneError, InstructionFailed, InvalidArgument, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._stream import Stream

T = TypeVar("T")

_DONE_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)


class InstrState(enum.IntEnum):
    """What became of a submitted instruction (``fl_instr_query``)."""

    #: Not completed yet (queued, waiting for its inputs, or running).
    PENDING = _capi.FL_INSTR_PENDING
    #: Completed successfully.
    DONE = _capi.FL_INSTR_DONE
    #: Its callable raised (or its device work failed).
    FAILED = _capi.FL_INSTR_FAILED
    #: Not run: an input was poisoned by a failure.
    SKIPPED = _capi.FL_INSTR_SKIPPED
    #: Not run: cancelled before it started.
    CANCELLED = _capi.FL_INSTR_CANCELLED
    #: Completed too long ago for its outcome to be remembered.
    COMPLETED = _capi.FL_INSTR_COMPLETED


if TYPE_CHECKING:
    _FutureBase = concurrent.futures.Future
else:
    class _FutureBase(concurrent.futures.Future, Generic[T]):
        """concurrent.futures.Future made subscriptable before Python 3.9."""


class Future(_FutureBase[T]):
    """The future of a submitted host instruction: a ``concurrent.futures.Future`` whose
    result is the callable's return value.

    ``result(timeout)``, ``exception(timeout)``, ``done()``, ``running()`` (the callable
    has started), ``cancelled()``, ``cancel()`` and ``add_done_callback`` behave as
    concurrent.futures documents, and the future works with ``concurrent.futures.wait``,
    ``as_completed`` and ``await`` (asyncio). It is done once the instruction has completed
    in the engine; done-callbacks run on a helper thread of the engine (never on a worker),
    or at once in the caller when the future is already done.

    If the callable raised, ``result()`` raises that exception (its own type) chained from
    an :class:`InstructionFailed` naming the instruction; an instruction skipped because an
    input was poisoned raises the failing callable's exception chained from a
    :class:`DependencyFailed`. Retrieving a failure counts as observing it: a later
    ``synchronize()`` does not raise it again and ``close()`` does not report it.

    ``cancel()`` asks the engine (``fl_instr_cancel``) not to run the instruction and
    returns True unless its callable has already started or finished: then the callable
    never runs, instructions that read what it writes are skipped, and, as in C, a later
    ``synchronize()`` raises :class:`flowlane.Cancelled` for it.

    Waiting on the main thread happens in slices, so Ctrl-C interrupts it.
    """

    # The base class's state, as concurrent.futures.wait, as_completed and asyncio use it
    # (typeshed does not declare it).
    _state: str
    _result: Any
    _exception: Optional[BaseException]
    _waiters: List[Any]
    _done_callbacks: List[Callable[["Future[Any]"], object]]

    def __init__(self, stream: "Stream", name: Optional[str]):
        # concurrent.futures.Future.__init__'s state, without its Condition: the futures of
        # an engine share one lock (the engine's), and a future gets a condition on it only
        # when something waits on it (_condition), so a submission allocates neither.
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []
        self._lock: Any = stream.engine._futures_lock
        self._cond: Optional[threading.Condition] = None
        #: The stream the instruction was submitted to.
        self.stream = stream
        #: The instruction's name.
        self.name = name
        self._id = 0
        self._cleaned = False
        self._outcome: Optional[Tuple[bool, Any]] = None  # (True, value) | (False, exception)
        self._tb: Optional[TracebackType] = None
        # The flowlane error a callable's exception is chained from. Set as its __cause__
        # by the thread that retrieves it (the same exception object may also reach a
        # wait, which chains it from its own error), never by the completer.
        self._cause: Optional[FlowlaneError] = None
        self._materialized = False
        # The instruction's payload (an _Instr) until its cleanup; _helped: result() ran it
        # on the waiting thread (a spread submission no worker had started).
        self._instr: Any = None
        self._helped = False

    @property
    def _condition(self) -> threading.Condition:
        """The base class's condition: on the shared lock, made on first use."""
        cond = self._cond
        if cond is None:
            with self._lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(self._lock)
        return cond

    def _notify(self) -> None:
        """Under the lock, after a state change: wakes the threads waiting on this future."""
        if self._cond is not None:
            self._cond.notify_all()

    # -- what the engine tells -----------------------------------------------------

    @property
    def id(self) -> int:
        """The instruction's id (unique in its engine; shown in error messages as #id)."""
        return self._id

    @property
    def engine(self) -> "Engine":
        """The engine the instruction was submitted to."""
        return self.stream.engine

    def state(self) -> InstrState:
        """The instruction's state as the engine reports it (``fl_instr_query``: never
        waits, never counts as observing a failure). Once the future holds a result, and
        after the engine is closed, derived from the future (a successful instruction's
        future is completed as its cleanup runs, microseconds before the engine says DONE;
        one that result() ran on the waiting thread is DONE or FAILED for the future while
        the engine still has it queued)."""
        if self.stream.engine._handle is not None and self._id and not self._helped \
                and not (self._state == FINISHED and self._exception is None):
            out = ctypes.c_uint32()
            try:
                with self.stream.engine._call("Future.state"):
                    st = lib.fl_instr_query(self.stream._handle, self._id, ctypes.byref(out))
            except ClosedError:
                pass  # closed meanwhile: the future is done
            else:
                if st != _capi.FL_OK:
                    raise error_for(st, None, "Future.state")
                return InstrState(out.value)
        with self._lock:
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                return InstrState.CANCELLED
            if self._state == FINISHED:
                return InstrState.FAILED if self._exception is not None else InstrState.DONE
            return InstrState.PENDING

    def __repr__(self) -> str:
        return "<flowlane.Future #%d %r %s>" % (self._id, self.name, self._state.lower())

    # -- concurrent.futures API ----------------------------------------------------

    def cancel(self) -> bool:
        """Cancels the instruction unless its callable has started or finished: returns
        True if the future is (now) cancelled; the callable then never runs."""
        with self._lock:
            was_pending = self._state == PENDING
        if not super().cancel():
            return False
        if was_pending and self._id and self.stream.engine._handle is not None:
            # The engine then skips it without calling back; if its lane reaches it first,
            # the callable sees the cancelled future and does not run fn.
            try:
                with self.stream.engine._call("Future.cancel"):
                    lib.fl_instr_cancel(self.stream._handle, self._id)  # already completed: nothing to do
            except ClosedError:
                pass  # drained meanwhile: nothing left to cancel
        return True

    def _wait_done(self, timeout: Optional[float], where: str) -> None:
        timeout = _check_timeout(timeout, where)
        me = current_instruction()
        if me is not None and me.engine is self.stream.engine and self._id > me.id and self.stream.lane == me.lane \
                and self._state not in _DONE_STATES:
            raise InvalidArgument("called from inside instruction #%d for instruction #%d, queued behind it on its "
                                  "own lane: it cannot start before the caller returns" % (me.id, self._id),
                                  function=where)
        main = threading.current_thread() is threading.main_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        engine = self.stream.engine
        completer = engine._completer
        if callback_depth() > 0 and self._state not in _DONE_STATES and self._id and engine._handle is not None:
            # On a worker: a C wait, so the engine knows this worker is blocked (it keeps
            # other callbacks' work off it and can run a spare worker meanwhile).
            h = self.stream._handle
            st = wait_sliced(engine._sliced(lambda _e, ns: lib.fl_instr_wait_for(h, self._id, ns), where), timeout,
                             where)
            if st == _capi.FL_ERR_TIMEOUT:
                raise concurrent.futures.TimeoutError(
                    "%s: instruction %r (#%d) has not completed within %g s" % (where, self.name, self._id,
                                                                               timeout or 0.0))
            if st != _capi.FL_OK:
                # Refused while the instruction is still pending (InvalidArgument: it waits for
                # the calling instruction, the message names the chain, and cannot complete
                # before the caller returns), or given up (Cancelled: the engine is being
                # closed and this wait was on a cycle of waits). A completed one's own failure
                # is the future's to report.
                refusal = error_for(st, None, where)  # read first: the query clears the message
                state = ctypes.c_uint32(_capi.FL_INSTR_DONE)
                with engine._call(where):
                    queried = lib.fl_instr_query(h, self._id, ctypes.byref(state))
                if queried == _capi.FL_OK and state.value == _capi.FL_INSTR_PENDING:
                    raise refusal
            deadline = None  # completed: the completer sets the future at once
        while True:
            with self._condition:
                if self._state in _DONE_STATES:
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise concurrent.futures.TimeoutError(
                        "%s: instruction %r (#%d) has not completed within %g s" % (where, self.name, self._id,
                                                                                   timeout or 0.0))
                if main or completer.is_current():
                    left = WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S)
                if not completer.is_current():
                    self._condition.wait(left)
                    continue
            # A done-callback waiting for another future: only this thread completes
            # futures, so it completes the queued ones itself meanwhile.
            completer.help(left)

    def result(self, timeout: Optional[float] = None) -> T:
        """The callable's return value, waiting up to ``timeout`` seconds (None: forever;
        ``concurrent.futures.TimeoutError``, which is ``TimeoutError`` from Python 3.11).
        Raises the callable's exception (see the class), or CancelledError; inside a
        callback, InvalidArgument when the instruction waits for the calling one (queued
        behind it on its lane, or depending on it through objects), and Cancelled when the
        engine is closed while this wait is on a cycle of waits (two callbacks waiting for
        each other).

        Without a timeout, a submission made without operands and without a lane
        (``engine.submit(fn)``) that no worker has started yet is run here, on the calling
        thread, as a thread pool's caller would otherwise sit idle (work-stealing pools join
        this way): its ``fn`` runs once either way, and it is ordered against nothing. Inside
        a callback it is run so even with a timeout: callables that each wait for work queued
        behind the others' could otherwise wait for each other forever. The engine then sees
        that instruction as an empty one that succeeds when its lane reaches it; its failure is
        reported by this call alone (not by synchronize())."""
        if self._state == PENDING and self._instr is not None and (timeout is None or callback_depth() > 0):
            self._help()
        if self._state not in _DONE_STATES:  # (read again under the lock there)
            self._wait_done(timeout, "Future.result")
        with self._lock:
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                raise concurrent.futures.CancelledError()
            self._materialize("Future.result")
            exc = self._exception
            if exc is None:
                return self._result  # type: ignore[no-any-return]
            tb = self._tb if self._tb is not None else exc.__traceback__
            cause = self._cause
        try:
            if cause is None:
                raise exc.with_traceback(tb)
            raise exc.with_traceback(tb) from cause
        finally:
            exc = None  # no reference cycle through this frame

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The exception result() would raise (None after a success), waiting as result()
        does; raises CancelledError for a cancelled future."""
        self._wait_done(timeout, "Future.exception")
        with self._lock:
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                raise concurrent.futures.CancelledError()
            self._materialize("Future.exception")
            if self._cause is not None and self._exception is not None:
                self._exception.__cause__ = self._cause
                self._exception.__suppress_context__ = True
            return self._exception

    def __await__(self) -> Generator[Any, None, T]:
        """``await future`` in a coroutine (asyncio.wrap_future: no thread blocks, no
        polling); cancelling the awaiting task cancels the future."""
        return asyncio.wrap_future(self, loop=asyncio.get_running_loop()).__await__()

    # -- completion (the bindings' side) -------------------------------------------

    def _set_id(self, instr_id: int) -> None:
        """Called by submit once the engine gave the id."""
        with self._lock:
            self._id = instr_id
            ready = self._cleaned and self._state not in _DONE_STATES
        if ready:
            self.stream.engine._completer.put(self)

    def _claim(self) -> Optional[bool]:
        """In the callable, before fn: True if fn is to run here (the future is now
        running), False if it was cancelled (fn must not run), None if result() has run it
        on the waiting thread."""
        with self._lock:
            if self._state == PENDING:
                self._state = RUNNING
                return True
            if self._helped:
                return None
            if self._state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
            return False

    def _help(self) -> None:
        """result() of a spread submission that has not started: claims it and runs fn on
        this thread. Counted as a call on the engine, so close() frees the engine only
        after fn has returned (the engine sees the instruction complete earlier)."""
        payload = self._instr
        if payload is None or not payload.spread:
            return
        try:
            call = self.stream.engine._call("Future.result")
            call.__enter__()
        except ClosedError:
            return  # the engine is closing: the drain completes the future
        try:
            with self._lock:
                if self._state != PENDING:
                    return
                self._state = RUNNING
                self._helped = True
            payload.call(None)
            outcome = self._outcome
            assert outcome is not None
            if outcome[0]:
                self._set_finished(outcome[1])
            else:
                self._finish(exc=self._provisional(outcome[1], None))
        finally:
            call.__exit__()

    def _set_finished(self, result: Any) -> None:
        """set_result() of a running future, without allocating a condition nobody waits on;
        done-callbacks run here, in the calling thread (never a worker: see the callers)."""
        with self._lock:
            self._result = result
            self._state = FINISHED
            for waiter in self._waiters:
                waiter.add_result(self)
            self._notify()
        if self._done_callbacks:
            self._invoke_callbacks()  # type: ignore[attr-defined]

    def _on_cleanup(self) -> None:
        """In the instruction's cleanup (after fn ran, or instead of it). A success with no
        done-callback is completed here and now (the waiters are woken; nothing blocks);
        the rest goes to the completer, once the id is known, which waits until the engine
        has published the outcome."""
        with self._lock:
            self._cleaned = True
            self._instr = None
            state = self._state
            if self._helped or state == FINISHED:
                return  # result() runs it, or ran it, on the waiting thread and completes it
            outcome = self._outcome
            if outcome is not None and outcome[0] and state == RUNNING and not self._done_callbacks:
                self._result = outcome[1]
                self._state = FINISHED
                for waiter in self._waiters:
                    waiter.add_result(self)
                self._notify()
                return
            ready = self._id != 0
        if ready:
            self.stream.engine._completer.put(self)

    def _query_completed(self) -> Optional[int]:
        """On the completer: waits until the engine published the outcome (the cleanup runs
        just before); None when the engine is gone."""
        engine = self.stream.engine
        out = ctypes.c_uint32()
        pause = 1e-5
        while engine._handle is not None:
            try:
                with engine._call("Future"):
                    st = lib.fl_instr_query(self.stream._handle, self._id, ctypes.byref(out))
            except ClosedError:
                return None
            if st != _capi.FL_OK:
                return None
            if out.value != _capi.FL_INSTR_PENDING:
                return int(out.value)
            time.sleep(pause)  # microseconds: only between a cleanup and its completion
            pause = min(pause * 2, 1e-3)
        return None

    def _complete(self) -> None:
        """On the completer: sets the result, the (provisional) exception or the
        cancellation, once the instruction has completed."""
        engine = self.stream.engine
        outcome = self._outcome
        if outcome is not None and outcome[0]:
            if engine._handle is not None:
                # A success: waiting for it consumes nothing; it has all but completed.
                try:
                    with engine._call("Future"):
                        lib.fl_instr_wait_for(self.stream._handle, self._id, _capi.FL_WAIT_FOREVER)
                except ClosedError:
                    pass
            self._finish(result=outcome[1])
            return
        with self._lock:
            if self._state == CANCELLED_AND_NOTIFIED:
                return  # the callable saw the cancellation
        state = self._query_completed()
        if outcome is not None:
            self._finish(exc=self._provisional(outcome[1], None))
        elif state == _capi.FL_INSTR_CANCELLED or self._state == CANCELLED:
            self._finish_cancelled()
        else:
            self._finish(exc=self._provisional(None, state))

    def _provisional(self, exc: Optional[BaseException], state: Optional[int]) -> BaseException:
        what = "instruction %r (#%d, lane %d)" % (self.name, self._id, self.stream.lane)
        if exc is not None:
            err = InstructionFailed("%s failed: Python %s: %s" % (what, type(exc).__qualname__, exception_text(exc)),
                                    _capi.FL_ERR_INSTRUCTION_FAILED, "Future.result")
            err.original = exc
            self._cause = err

            self._tb = _user_traceback(exc)
            return exc
        if state == _capi.FL_INSTR_SKIPPED or state is None or state == _capi.FL_INSTR_COMPLETED:
            return DependencyFailed("%s was skipped: something it read was poisoned by a failed instruction"
                                    % what, _capi.FL_ERR_DEPENDENCY_FAILED, "Future.result")
        return InstructionFailed("%s failed" % what, _capi.FL_ERR_INSTRUCTION_FAILED, "Future.result")

    def _finish(self, result: Any = None, exc: Optional[BaseException] = None) -> None:
        try:
            if exc is None:
                self.set_result(result)
            else:
                self.set_exception(exc)
        except concurrent.futures.InvalidStateError:  # cancelled meanwhile (it never ran)
            self._finish_cancelled()

    def _finish_cancelled(self) -> None:
        # Cancelled in the engine (fl_stream_cancel, fl_engine_cancel) or by cancel():
        # cancelled, then notified, as an executor does with a cancelled work item.
        concurrent.futures.Future.cancel(self)
        with self._lock:
            notify = self._state == CANCELLED
        if notify:
            self.set_running_or_notify_cancel()

    def _materialize(self, where: str) -> None:
        """Under the lock, once: replaces a provisional exception by the engine's own
        account (its text; for a skip, the callable that caused it), which marks the
        failure as returned; the failure is no longer reported at close()."""
        if self._materialized or self._state != FINISHED or self._exception is None:
            return
        if self._helped:
            self._materialized = True  # the engine knows nothing of it: what Python knows
            self.stream.engine._retrieved("(#%d," % self._id)
            return
        self._materialized = True
        engine = self.stream.engine
        provisional = self._exception
        context = provisional if isinstance(provisional, FlowlaneError) else self._cause
        err: Optional[FlowlaneError] = None
        if engine._handle is not None:
            try:
                with engine._call(where):
                    st = lib.fl_instr_wait_for(self.stream._handle, self._id, 0)
            except ClosedError:
                st = _capi.FL_OK  # closed meanwhile: what Python knows
            if st not in (_capi.FL_OK, _capi.FL_ERR_TIMEOUT):
                err = error_for(st, None, where)
        if err is None:
            err = context if isinstance(context, FlowlaneError) else None
        engine._retrieved("(#%d," % self._id + (err.message if err is not None else ""))
        if err is None:
            return
        original: Optional[BaseException] = None
        tb: Optional[TracebackType] = None
        if isinstance(err, InstructionFailed):
            original, tb = engine._original(err.message)
        if original is None and not isinstance(provisional, FlowlaneError):
            original, tb = provisional, self._tb
        if original is not None and isinstance(err, InstructionFailed):
            err.original = original
            err.message = _without_traceback(err.message)
            self._exception, self._tb, self._cause = original, tb, err
        else:
            self._exception, self._tb, self._cause = err, None, None


__all__ = ["Future", "InstrState"]
