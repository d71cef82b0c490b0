"""Engine: lifetime, lanes and streams, objects, submission, synchronize, failures and
diagnostics. Lanes and streams live in _stream.py, objects in _object.py; every name of
the three is importable from here."""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import os
import re
import threading
import traceback
import weakref
from ctypes import byref, c_uint32, c_uint64
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, NoReturn, Optional, Tuple, Union, overload

from . import _capi, _ffi
from ._base import (
    CPU,
    KEEP,
    _U32_MAX,
    _U64_MAX,
    Access,
    Device,
    DeviceType,
    EngineStats,
    InstrContext,
    StreamKind,
    T,
    _int,
    _unpin_thread_states,
    _user_traceback,
    current_instruction,
    logger,
    raise_failure,
)
from ._ffi import lib
from ._future import WAIT_SLICE_S, Completer, Future, run_blocking_async, wait_sliced
from ._managed import Managed, callback_depth
from .errors import ClosedError, InstructionFailed, InvalidArgument, Shutdown, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from .gpu import Comm, CommBackend, CommUniqueId
    from .graph import TaskGraph, TaskGroup

# --------------------------------------------------------------------------------------
# Engine

_live_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()
_FAILURES_KEPT = 64
_ID_RE = re.compile(r"\(#(\d+),")


@atexit.register
def _close_all_engines() -> None:
    # Drain and destroy engines still open at exit, while the interpreter can still run
    # the callbacks and release functions that destroy calls.
    for e in list(_live_engines):
        try:
            e.close()
        except Exception:
            pass


_Failure = Tuple[BaseException, Optional[TracebackType]]
_UNRETRIEVED_KEPT = 1000


def _report_unretrieved(unretrieved: "collections.OrderedDict[int, Tuple[str, BaseException, Optional[TracebackType]]]",
                        overflow: int, where: str) -> None:
    """After fl_engine_destroy: logs one ERROR record on the "flowlane" logger, with the
    exception and its traceback, per Python callable that failed and whose failure no
    wait, synchronize() or value observed, as asyncio logs "Task exception was never
    retrieved" (by default Python prints it to stderr)."""
    for _id, (what, exc, tb) in unretrieved.items():
        logger.error("%s: a failure was never retrieved (no wait, synchronize() or value observed it): %s raised "
                     "%s: %s", where, what, type(exc).__qualname__, exc, exc_info=(type(exc), exc, tb))
    if overflow:
        logger.error("%s: %d more failures were never retrieved", where, overflow)
    unretrieved.clear()


class Engine(Managed):
    """An execution engine: worker threads, lanes, streams and the in-flight window.

    ``Engine(workers=None, lanes=None, inflight_limit=None, watchdog_ms=None)``: None (or
    0) means the library default (one worker per logical core, 8 lanes, a 4096-instruction
    window, no watchdog). Use as a context manager; close() drains all submitted work, runs
    every pending cleanup and release, and joins the workers. Failures of Python callables
    that no wait observed are logged then (logger "flowlane", level ERROR).

    Thread-safety: every method may be called from any thread, concurrently, close()
    included (it cannot be called from inside a flowlane callback). While close() drains,
    waits, futures, queries and stats keep working; once the drain is over, calls into the
    engine and its streams, objects, lanes, graphs, groups and communicators from the
    program's threads raise :class:`ClosedError`, and close() waits for those already in
    the library before it frees the engine.
    """

    __slots__ = ("_tls", "_failures", "_failures_lock", "_watchdogs", "_close_lock", "_pinned", "__dict__")
    _kind = "engine"

    def __init__(self, workers: Optional[int] = None, lanes: Optional[int] = None,
                 inflight_limit: Optional[int] = None, watchdog_ms: Optional[int] = None):
        super().__init__()
        desc = _ffi.init(_capi.fl_engine_desc)
        desc.num_workers = 0 if workers is None else _int("workers", workers, 0, _U64_MAX)
        desc.max_lanes = 0 if lanes is None else _int("lanes", lanes, 0, _U64_MAX)
        desc.inflight_limit = 0 if inflight_limit is None else _int("inflight_limit", inflight_limit, 0, _U64_MAX)
        desc.watchdog_ms = 0 if watchdog_ms is None else _int("watchdog_ms", watchdog_ms, 0, _U64_MAX)
        out = _ffi.engine_p()
        check(lib.fl_engine_create(byref(desc), byref(out)), "Engine")
        self._tls = threading.local()
        self._failures: "collections.OrderedDict[int, _Failure]" = collections.OrderedDict()
        self._unretrieved: "collections.OrderedDict[int, Tuple[str, BaseException, Optional[TracebackType]]]" = \
            collections.OrderedDict()
        self._unretrieved_overflow = 0
        self._failures_lock = threading.Lock()
        self._watchdogs: List[Any] = []
        self._close_lock = threading.Lock()
        self._pinned: List[int] = []
        self._completer = Completer()
        # Admission of Python submissions: close() stops it, then waits for those under
        # way, so the drain that follows covers every instruction with a future.
        self._admit = threading.Condition()
        self._submitting = 0
        self._closing = False
        # Calls into the library from the program's threads (_call): close() refuses new
        # ones once drained, then waits for those in progress before destroying.
        # (A plain lock and an event: cheaper per call than the condition above.)
        self._calls_lock = threading.Lock()
        self._calls = 0
        self._calls_closed = False
        self._calls_idle = threading.Event()
        self._handle = out
        _live_engines.add(self)

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Drains every submitted instruction, completes their futures, runs pending
        cleanups and releases, joins the workers. Failures of Python callables that no wait,
        synchronize(), value or future observed are logged then (logger "flowlane", level
        ERROR, with the exception and traceback). Every stream, object, lane and graph of the
        engine is unusable afterwards. Idempotent.

        The drain can be interrupted with Ctrl-C (KeyboardInterrupt): the engine then stays
        open but refuses new submissions from the program's threads (:class:`Shutdown`);
        call close() again to finish."""
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
            wait_sliced(lambda ns: lib.fl_engine_drain(h, ns), None, "Engine.close")
            self._completer.flush()
            # Drained: from here on the program's calls are refused (ClosedError), and those
            # in progress return (a wait's work is done) before the destroy frees the engine.
            try:
                self._stop_calls()
                st = lib.fl_engine_destroy(h)
                if st != _capi.FL_OK:
                    check(st, "Engine.close")
            except BaseException:
                with self._calls_lock:  # interrupted or refused: the engine stays usable
                    self._calls_closed = False
                    self._calls_idle.clear()
                raise
            _live_engines.discard(self)
            self._handle = None
            self._completer.stop()
            self._watchdogs.clear()
            _unpin_thread_states(self._pinned)
            with self._failures_lock:
                _report_unretrieved(self._unretrieved, self._unretrieved_overflow, "Engine.close")

    def _settle(self, status: int) -> None:
        """After a synchronize or drain that did not time out: the futures of the
        instructions it waited for are done (and their done-callbacks have run) when it
        returns. (Their completion is queued by the cleanup, before the instruction
        completes, so waiting for the completer's queue is enough.)"""
        if status != _capi.FL_ERR_TIMEOUT and callback_depth() == 0:
            self._completer.flush()

    def _enter_submit(self, where: str) -> None:
        """Before a Python submission: refused once close() has begun."""
        with self._admit:
            if self._closing:
                raise Shutdown("the engine is being closed (Engine.close drains and destroys it): it admits no new "
                               "instructions", function=where)
            self._submitting += 1

    def _leave_submit(self) -> None:
        with self._admit:
            self._submitting -= 1
            if not self._submitting:
                self._admit.notify_all()

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
        with self._admit:
            self._closing = True
            while self._submitting:
                self._admit.wait(WAIT_SLICE_S)

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
        return self._handle is None or self._calls_closed

    def _stop_calls(self) -> None:
        """Refuses further calls from the program's threads and waits (in slices: Ctrl-C)
        for those inside the library. After the drain each of them returns: a wait's work
        has completed, and the others do not block."""
        with self._calls_lock:
            self._calls_closed = True
            if not self._calls:
                self._calls_idle.set()
        while not self._calls_idle.wait(WAIT_SLICE_S):
            pass

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

            self._closing = True  # waiting for submissions under way is the helper's job

            def destroy() -> None:
                self._stop_admitting()
                lib.fl_engine_drain(h, _capi.FL_WAIT_FOREVER)
                completer.flush()
                self._handle = None
                if lib.fl_engine_destroy(h) == _capi.FL_OK:
                    _unpin_thread_states(pinned)
                completer.stop()
                _report_unretrieved(unretrieved, overflow, "Engine (garbage-collected)")

            threading.Thread(target=destroy, name="flowlane-engine-destroy").start()
            return
        self.close()

    def __repr__(self) -> str:
        try:
            return "<flowlane.Engine workers=%d lanes=%d>" % (self.workers, self.lanes)
        except ClosedError:
            return "<flowlane.Engine closed>"

    # -- properties -------------------------------------------------------------------

    @property
    def lanes(self) -> int:
        """Number of lanes (ids 0 .. lanes-1)."""
        with self._call("Engine.lanes") as h:
            return int(lib.fl_engine_lane_count(h))

    @property
    def workers(self) -> int:
        """Number of host worker threads."""
        with self._call("Engine.workers") as h:
            return int(lib.fl_engine_worker_count(h))

    # -- lanes and streams -----------------------------------------------------------

    def lane(self, id: Optional[int] = None) -> "Lane":
        """``engine.lane()`` acquires a fresh lane (the smallest free id >= 1), released
        when the ``with`` block ends or on close(); ``engine.lane(k)`` names lane k
        without acquiring it. Inside ``with engine.lane() as lane:`` the lane is this
        thread's current lane: ``engine.stream()`` and ``engine.submit()`` use it."""
        lane_id = None if id is None else _int("lane", id, 0, _U32_MAX)
        with self._admitted("Engine.lane") as h:
            if lane_id is None:
                out = c_uint32()
                check(lib.fl_lane_acquire(h, byref(out)), "Engine.lane")
                return Lane(self, int(out.value), owned=True)
            if lane_id >= int(lib.fl_engine_lane_count(h)):
                # Ask C for the exact error text.
                check(lib.fl_stream_get(h, lane_id, CPU._c(), _capi.FL_STREAM_HOST, byref(_ffi.stream_p())),
                      "Engine.lane")
            return Lane(self, lane_id, owned=False)

    @property
    def current_lane(self) -> int:
        """This thread's current lane: the innermost ``with engine.lane()`` block, else
        the running instruction's lane (inside a callback of this engine), else 0."""
        stack = getattr(self._tls, "lanes", None)
        if stack:
            return int(stack[-1])
        info = current_instruction()
        if info is not None and info.engine is self:
            return info.lane
        return 0

    def _push_lane(self, lane: int) -> None:
        stack = getattr(self._tls, "lanes", None)
        if stack is None:
            stack = self._tls.lanes = []
        stack.append(lane)

    def _pop_lane(self, lane: int) -> None:
        stack = getattr(self._tls, "lanes", None)
        if stack and stack[-1] == lane:
            stack.pop()
        elif stack and lane in stack:
            stack.remove(lane)

    def stream(self, lane: Union[int, "Lane", None] = None, *, device: Optional[Device] = None,
               kind: Union[StreamKind, int, str, None] = None) -> "Stream":
        """The stream (lane, device, kind); lane defaults to the current lane, device to
        the CPU, kind to HOST (or COMPUTE for a CUDA device). Streams are interned: the
        same triple is the same stream."""
        self._ptr()
        if lane is None:
            lane = self.current_lane
        elif isinstance(lane, Lane):
            lane = lane.id
        lane_id = _int("lane", lane, 0, _U32_MAX)
        if device is None:
            device = CPU
        elif not isinstance(device, Device):
            raise TypeError("device must be a flowlane.Device, not %s" % type(device).__name__)
        if kind is None:
            kind = StreamKind.HOST if device.type == DeviceType.CPU else StreamKind.COMPUTE
        elif isinstance(kind, str):
            try:
                kind = StreamKind[kind.upper()]
            except KeyError:
                raise ValueError("unknown stream kind %r" % kind) from None
        kind_v = _int("kind", kind, 0, _U32_MAX)
        out = _ffi.stream_p()
        with self._admitted("Engine.stream") as h:
            check(lib.fl_stream_get(h, lane_id, device._c(), kind_v, byref(out)), "Engine.stream")
        return Stream(self, out, lane_id, device, kind_v)

    # -- objects ---------------------------------------------------------------------

    @overload
    def object(self) -> "Object[Any]": ...

    @overload
    def object(self, value: T) -> "Object[T]": ...

    def object(self, value: Any = None) -> "Object[Any]":
        """A dependence object holding ``value`` (None for a phony used only for
        ordering). The engine keeps the value alive until it releases the object. The
        value's type is the object's type parameter: ``engine.object(1.0)`` is an
        ``Object[float]``, whose ``wait()`` returns a float."""
        return Object(self, value)

    def phony(self) -> "Object[None]":
        """An object with no value, used only to order instructions (fork/join)."""
        return Object(self, None)

    # -- submission ------------------------------------------------------------------

    def submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *,
               lane: Optional[int] = None, block: bool = True, inline: bool = False) -> "Future[T]":
        """Submits ``fn`` on the host stream of ``lane`` (default: the current lane) and
        returns its :class:`Future`; see :meth:`Stream.submit`."""
        return self.stream(lane)._submit(fn, reads, writes, name, block, "Engine.submit", inline)

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for every instruction submitted before the call; raises the first failure
        among them not yet reported by another wait (each failure is reported once): the
        callable's own exception, chained from the flowlane error. ``timeout`` (seconds,
        None: forever) raises :class:`Timeout` (a TimeoutError) and consumes nothing: the
        call can be repeated. Blocking releases the GIL; Ctrl-C interrupts it. Not allowed
        inside a callback (InvalidArgument). When it returns, the futures of the
        instructions it waited for are done and their done-callbacks have run."""
        st = wait_sliced(self._sliced(lib.fl_engine_synchronize_for, "Engine.synchronize"), timeout,
                         "Engine.synchronize")
        self._settle(st)
        if st != _capi.FL_OK:
            self._raise(st, "Engine.synchronize")

    async def synchronize_async(self, timeout: Optional[float] = None) -> None:
        """``await engine.synchronize_async()``: synchronize() on a helper thread, so the
        event loop keeps running (it neither blocks nor polls)."""
        self._ptr()

        def wait(stop: threading.Event) -> None:
            st = wait_sliced(self._sliced(lib.fl_engine_synchronize_for, "Engine.synchronize_async"), timeout,
                             "Engine.synchronize_async", stop)
            self._settle(st)
            if st != _capi.FL_OK:
                self._raise(st, "Engine.synchronize_async")

        await run_blocking_async(wait)

    def drain(self, timeout: Optional[float] = None) -> None:
        """Drains the engine without closing it: from now on submissions from the
        program's threads raise :class:`Shutdown` (callbacks may still submit: their work
        belongs to the drain), and the call waits up to ``timeout`` seconds (None: forever;
        Ctrl-C interrupts it) for every instruction to complete. Raises what synchronize()
        would, or :class:`Timeout` (the engine stays draining: call again). Waits, futures,
        stats and dumps keep working; close() frees the engine."""
        st = wait_sliced(self._sliced(lib.fl_engine_drain, "Engine.drain"), timeout, "Engine.drain")
        self._settle(st)
        if st != _capi.FL_OK:
            self._raise(st, "Engine.drain")

    def cancel(self) -> None:
        """Cancels every instruction submitted before the call that has not started
        (``fl_engine_cancel``): they do not run, their futures are cancelled, and what reads
        their outputs is skipped. synchronize() then raises :class:`Cancelled` once."""
        with self._call("Engine.cancel") as h:
            check(lib.fl_engine_cancel(h), "Engine.cancel")

    def task_group(self) -> "TaskGroup":
        """A new :class:`TaskGroup`: ``with engine.task_group() as g: g.spawn(fn, ...)``
        runs the tasks on the workers and waits for them at the end of the block."""
        from .graph import TaskGroup

        return TaskGroup(self)

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        s = _ffi.init(_capi.fl_engine_stats)
        with self._call("Engine.stats") as h:
            check(lib.fl_engine_stats(h, byref(s)), "Engine.stats")
        return EngineStats(s.submitted, s.completed, s.failed, s.in_flight, s.window_stalls, s.steals, s.parks,
                           s.cancelled, s.tasks)

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

    def dump(self) -> str:
        """The engine's state dump (streams, oldest pending instructions, window)."""
        need = c_uint64()
        buf = ctypes.create_string_buffer(1)
        with self._call("Engine.dump") as h:
            check(lib.fl_engine_dump(h, None, 0, byref(need)), "Engine.dump")
            for _ in range(4):  # the state may grow between the calls
                size = max(int(need.value), 1)
                buf = ctypes.create_string_buffer(size)
                check(lib.fl_engine_dump(h, buf, size, byref(need)), "Engine.dump")
                if int(need.value) <= size:
                    break
        return buf.value.decode("utf-8", "replace")

    def trace_start(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Starts writing a trace (Chrome trace JSON) to ``path``."""
        name = _ffi.encode_name(os.fspath(path))
        with self._call("Engine.trace_start") as h:
            check(lib.fl_trace_start(h, name), "Engine.trace_start")

    def trace_stop(self) -> None:
        """Stops the trace and finishes its file."""
        with self._call("Engine.trace_stop") as h:
            check(lib.fl_trace_stop(h), "Engine.trace_stop")

    def tracing(self, path: Union[str, "os.PathLike[str]"]) -> "_Tracing":
        """``with engine.tracing("trace.json"): ...`` traces the block."""
        return _Tracing(self, path)

    def set_watchdog(self, timeout_ms: int, callback: Optional[Callable[[str], None]] = None,
                     path: Union[str, "os.PathLike[str]", None] = None) -> None:
        """Turns the hang watchdog on (timeout_ms > 0) or off (0). With ``callback``, the
        dump is handed to ``callback(text)`` on a library thread; else it goes to ``path``
        (or stderr)."""
        d = _ffi.init(_capi.fl_watchdog_desc)
        d.timeout_ms = _int("timeout_ms", timeout_ms, 0, _U64_MAX)
        keep = None
        if callback is not None:
            if not callable(callback):
                raise TypeError("Engine.set_watchdog: callback must be callable")
            user_cb = callback

            def _cb(text: Optional[bytes], _ud: Any) -> None:
                try:
                    user_cb(text.decode("utf-8", "replace") if text else "")
                except BaseException:
                    traceback.print_exc()

            keep = _capi.fl_dump_fn(_cb)
            d.callback = keep
        if path is not None:
            d.path = _ffi.encode_name(os.fspath(path))
        with self._call("Engine.set_watchdog") as h:
            check(lib.fl_engine_set_watchdog(h, byref(d)), "Engine.set_watchdog")
        if keep is not None:
            # The library may call an earlier callback until the engine is destroyed.
            self._watchdogs.append(keep)

    # -- parallel work (defined in graph.py, bound here for discoverability) ---------

    def parallel_for(self, begin: Union[int, range], end: Union[int, Callable[[int, int], Any], None] = None,
                     body: Optional[Callable[[int, int], Any]] = None, *, grain: int = 0) -> None:
        """Calls ``body(lo, hi)`` on disjoint chunks of ``[begin, end)`` in parallel; see
        :func:`flowlane.parallel_for`."""
        from .graph import parallel_for

        parallel_for(self, begin, end, body, grain=grain)

    def taskgraph(self) -> "TaskGraph":
        """A new, empty :class:`TaskGraph` on this engine."""
        from .graph import TaskGraph

        return TaskGraph(self)

    def comm(self, nranks: int, rank: int, unique_id: "CommUniqueId", *, lane: int = 0, device: int = 0,
             backend: Union["CommBackend", int, None] = None, unordered: bool = False) -> "Comm":
        """A communicator rank on this engine; see :class:`flowlane.Comm`."""
        from .gpu import Comm

        return Comm(self, nranks, rank, unique_id, lane=lane, device=device, backend=backend,
                    unordered=unordered)


class _InCall:
    """Engine._call's context manager (a class: cheaper than a generator)."""

    __slots__ = ("engine", "where", "counted")

    def __init__(self, engine: Engine, where: str):
        self.engine = engine
        self.where = where
        self.counted = False

    def __enter__(self) -> Any:
        e = self.engine
        if callback_depth() > 0:
            return e._ptr()
        with e._calls_lock:
            h = e._handle
            if h is None:
                raise ClosedError("this engine is closed", function=self.where)
            if e._calls_closed:
                raise ClosedError("the engine is being closed (Engine.close has drained it and is freeing it)",
                                  function=self.where)
            e._calls += 1
            self.counted = True
        tls = e._tls
        tls.calls = getattr(tls, "calls", 0) + 1
        return h

    def __exit__(self, *exc: object) -> None:
        if not self.counted:
            return
        e = self.engine
        e._tls.calls -= 1
        with e._calls_lock:
            e._calls -= 1
            if not e._calls and e._calls_closed:
                e._calls_idle.set()


class _Tracing:
    def __init__(self, engine: Engine, path: Union[str, "os.PathLike[str]"]):
        self.engine = engine
        self.path = path

    def __enter__(self) -> Engine:
        self.engine.trace_start(self.path)
        return self.engine

    def __exit__(self, *exc: object) -> None:
        self.engine.trace_stop()



# Defined after Engine, which they use (and which uses them at call time).
from ._object import Object  # noqa: E402
from ._stream import Lane, Stream  # noqa: E402

__all__ = [
    "Access", "CPU", "Device", "DeviceType", "Engine", "EngineStats", "InstrContext", "KEEP", "Lane", "Object",
    "Stream", "StreamKind", "current_instruction", "logger",
]
