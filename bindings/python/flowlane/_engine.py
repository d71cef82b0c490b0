"""Engine: the public API of an engine (lanes and streams, objects, submission,
synchronize, cancel, stats and diagnostics, and the entry points of parallel work and
communicators); its state and lifetime are in ``_engine_base.py``."""

from __future__ import annotations

import ctypes
import os
import threading
import traceback
from ctypes import byref, c_uint32, c_uint64
from typing import Any, Callable, Dict, Iterable, Optional, Union, overload

from . import _capi, _ffi
from ._context import current_instruction
from ._engine_base import EngineBase
from ._ffi import lib
from ._future import Future
from ._managed import _tls
from ._object import Object
from ._program import Capture
from ._stream import Lane, Stream
from ._types import _U32_MAX, _U64_MAX, CPU, Device, DeviceType, EngineStats, StreamKind, T, _int
from ._waits import run_blocking_async, wait_sliced
from .comm import Comm, CommBackend, CommUniqueId
from .errors import ClosedError, check
from .graph import TaskGraph, TaskGroup, parallel_for


class Engine(EngineBase):
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

    __slots__ = ()

    def __init__(self, workers: Optional[int] = None, lanes: Optional[int] = None,
                 inflight_limit: Optional[int] = None, watchdog_ms: Optional[int] = None):
        self._handle = None  # until created (the garbage collector then has nothing to close)
        desc = _ffi.init(_capi.fl_engine_desc)
        desc.num_workers = 0 if workers is None else _int("workers", workers, 0, _U64_MAX)
        desc.max_lanes = 0 if lanes is None else _int("lanes", lanes, 0, _U64_MAX)
        desc.inflight_limit = 0 if inflight_limit is None else _int("inflight_limit", inflight_limit, 0, _U64_MAX)
        desc.watchdog_ms = 0 if watchdog_ms is None else _int("watchdog_ms", watchdog_ms, 0, _U64_MAX)
        out = _ffi.engine_p()
        check(lib.fl_engine_create(byref(desc), byref(out)), "Engine")
        super().__init__(out)
        self._streams: Dict[int, Stream] = {}  # host streams by lane (interned by C anyway)

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

    def lane(self, id: Optional[int] = None) -> Lane:
        """``engine.lane()`` acquires a fresh lane, released when the ``with`` block ends
        or on close(): one with none of this engine's Python instructions in flight when
        there is one (so a loop that takes a new lane per iteration gets an idle lane each
        time, not the one it has just released), else the least loaded of those it tried.
        ``engine.lane(k)`` names lane k without acquiring it. Inside ``with engine.lane()
        as lane:`` the lane is this thread's current lane: ``engine.stream()`` and
        ``engine.submit()`` use it. Raises :class:`Exhausted` when every lane is held."""
        lane_id = None if id is None else _int("lane", id, 0, _U32_MAX)
        with self._admitted("Engine.lane") as h:
            if lane_id is None:
                return Lane(self, self._lanes.fresh(self._acquire_lane, self._release_lane), owned=True)
            if lane_id >= int(lib.fl_engine_lane_count(h)):
                # Ask C for the exact error text.
                check(lib.fl_stream_get(h, lane_id, CPU._c(), _capi.FL_STREAM_HOST, byref(_ffi.stream_p())),
                      "Engine.lane")
            self._lanes.named(lane_id)
            return Lane(self, lane_id, owned=False)

    def _acquire_lane(self) -> int:
        out = c_uint32()
        with self._call("Engine.lane") as h:
            check(lib.fl_lane_acquire(h, byref(out)), "Engine.lane")
        return int(out.value)

    def _release_lane(self, lane: int) -> None:
        with self._call("Engine.lane") as h:
            check(lib.fl_lane_release(h, lane), "Engine.lane")

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

    def stream(self, lane: Union[int, Lane, None] = None, *, device: Optional[Device] = None,
               kind: Union[StreamKind, int, str, None] = None) -> Stream:
        """The stream (lane, device, kind); lane defaults to the current lane, device to
        the CPU, kind to HOST (or COMPUTE for a CUDA device). Streams are interned: the
        same triple is the same stream. A lane named here (an int) is left out of the
        lanes ``engine.submit(fn)`` spreads over (see :meth:`submit`)."""
        if lane is None:
            lane_id = self.current_lane
        elif isinstance(lane, Lane):
            lane_id = lane.id
        else:
            lane_id = _int("lane", lane, 0, _U32_MAX)
            self._lanes.named(lane_id)
        return self._stream(lane_id, device, kind)

    def _stream(self, lane_id: int, device: Optional[Device] = None,
                kind: Union[StreamKind, int, str, None] = None) -> Stream:
        """stream() of a lane id, without naming it."""
        if device is None and kind is None:
            cached = self._streams.get(lane_id)  # host streams, by lane: the common case
            if cached is not None and self._handle is not None:
                return cached
        self._ptr()
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
        s = Stream(self, out, lane_id, device, kind_v)
        if device == CPU and kind_v == StreamKind.HOST:
            self._streams[lane_id] = s
        return s

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
        """Submits ``fn`` and returns its :class:`Future`; see :meth:`Stream.submit`.

        Where it runs, and in which order:

        * with ``lane=`` (or inside a ``with engine.lane()`` block), on that lane's host
          stream: after everything submitted to that stream before it;
        * with operands (``reads``/``writes``) and no lane, on the current lane (lane 0,
          or the lane of the instruction whose callback submits): in that stream's order,
          and after what it depends on through its objects;
        * with neither, as on a thread pool: on a lane the bindings pick (the least loaded
          of the lanes they hold for this, see ``engine.lane()``), so such submissions run
          in parallel, up to one per worker. It is ordered against nothing: it may start
          before work submitted earlier, with or without operands, and run alongside
          anything. synchronize(), drain(), cancel() and close() cover it like any other
          instruction; its future's ``result()`` may run it on the waiting thread (see
          :meth:`Future.result`). An engine with fewer than three lanes has no lane to
          spread over: such submissions go to lane 0, in order.
        """
        if lane is None and not reads and not writes and not getattr(self._tls, "lanes", None):
            if self._handle is None:
                raise ClosedError("this engine is closed", function="Engine.submit")
            running = getattr(_tls, "instr", None)  # inside an instruction's callable: its _Instr
            picked = self._lanes.spread(running.lane if running is not None and running.engine is self else 0)
            return self._stream(picked)._submit(fn, (), (), name, block, "Engine.submit", inline,
                                               spread=picked != 0, counted=True)
        return self.stream(lane)._submit(fn, reads, writes, name, block, "Engine.submit", inline)

    def capture(self, name: Optional[str] = None) -> Capture:
        """``with engine.capture("step") as program:`` records this thread's submissions to
        the engine inside the block instead of running them (EXPERIMENTAL; the header's
        "Capture and replay"); after the block, ``program.launch()`` runs them all as one
        instruction, as many times as wanted, in the order they would have run eagerly.

        Inside the block nothing runs: a submission returns a :class:`CapturedFuture` (no
        result of its own); this engine's waits, synchronize, drain, queries and launches
        from this thread raise :class:`Capturing`. Other threads, and other engines, are not
        affected. Captures do not nest (:class:`Capturing`); a callback cannot capture
        (:class:`InvalidArgument`). An exception leaving the block discards the capture.
        Every captured callable runs at each launch; it is released when the program is
        closed (:meth:`Program.close`) or the engine is."""
        return Capture(self, name)

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

    def task_group(self) -> TaskGroup:
        """A new :class:`TaskGroup`: ``with engine.task_group() as g: g.spawn(fn, ...)``
        runs the tasks on the workers and waits for them at the end of the block."""
        return TaskGroup(self)

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        s = _ffi.init(_capi.fl_engine_stats)
        with self._call("Engine.stats") as h:
            check(lib.fl_engine_stats(h, byref(s)), "Engine.stats")
        return EngineStats(s.submitted, s.completed, s.failed, s.in_flight, s.window_stalls, s.steals, s.parks,
                           s.cancelled, s.tasks)

    # -- failures: the Python exception behind a failed instruction ------------------


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

    def tracing(self, path: Union[str, "os.PathLike[str]"]) -> _Tracing:
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
        parallel_for(self, begin, end, body, grain=grain)

    def taskgraph(self) -> TaskGraph:
        """A new, empty :class:`TaskGraph` on this engine."""
        return TaskGraph(self)

    def comm(self, nranks: int, rank: int, unique_id: CommUniqueId, *, lane: int = 0, device: int = 0,
             backend: Union[CommBackend, int, None] = None, unordered: bool = False) -> Comm:
        """A communicator rank on this engine; see :class:`flowlane.Comm`."""
        return Comm(self, nranks, rank, unique_id, lane=lane, device=device, backend=backend,
                    unordered=unordered)


class _Tracing:
    def __init__(self, engine: Engine, path: Union[str, "os.PathLike[str]"]):
        self.engine = engine
        self.path = path

    def __enter__(self) -> Engine:
        self.engine.trace_start(self.path)
        return self.engine

    def __exit__(self, *exc: object) -> None:
        self.engine.trace_stop()

