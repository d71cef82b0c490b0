"""Engine, lanes, streams, objects and host instructions."""

from __future__ import annotations

import atexit
import collections
import ctypes
import enum
import itertools
import os
import re
import threading
import traceback
import weakref
from ctypes import byref, c_int32, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from . import _capi, _ffi
from ._ffi import lib
from ._managed import Managed, _tls, callback_depth
from .errors import (
    ClosedError,
    DependencyFailed,
    FlowlaneError,
    InstructionFailed,
    InvalidArgument,
    check,
    error_for,
)

# --------------------------------------------------------------------------------------
# Small public types


class Access(enum.IntFlag):
    """How an instruction (or a wait) accesses an object."""

    READ = _capi.FL_READ
    WRITE = _capi.FL_WRITE
    READ_WRITE = _capi.FL_READ_WRITE


class StreamKind(enum.IntEnum):
    HOST = _capi.FL_STREAM_HOST
    COMPUTE = _capi.FL_STREAM_COMPUTE
    H2D = _capi.FL_STREAM_H2D
    D2H = _capi.FL_STREAM_D2H
    COLLECTIVE = _capi.FL_STREAM_COLLECTIVE


class DeviceType(enum.IntEnum):
    CPU = _capi.FL_DEVICE_CPU
    CUDA = _capi.FL_DEVICE_CUDA


@dataclass(frozen=True)
class Device:
    """A device: ``Device.cpu()`` (the default) or ``Device.cuda(i)``."""

    type: DeviceType = DeviceType.CPU
    index: int = 0

    @staticmethod
    def cpu() -> "Device":
        return CPU

    @staticmethod
    def cuda(index: int = 0) -> "Device":
        return Device(DeviceType.CUDA, _int("index", index, -(2**31), 2**31 - 1))

    def _c(self) -> _capi.fl_device:
        return _capi.fl_device(int(self.type), int(self.index))

    def __str__(self) -> str:
        return "cpu" if self.type == DeviceType.CPU else "cuda:%d" % self.index


CPU = Device()


@dataclass(frozen=True)
class EngineStats:
    """Counters of fl_engine_stats (a snapshot)."""

    submitted: int
    completed: int
    failed: int
    in_flight: int
    window_stalls: int
    steals: int
    parks: int


class _Keep:
    """A marker a callable returns (alone, or in its tuple) to leave a written object's
    value unchanged, e.g. after mutating it in place."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "flowlane.KEEP"

    def __reduce__(self):
        return "KEEP"


KEEP = _Keep()

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


def _int(what: str, value, lo: int, hi: int) -> int:
    """An integer argument, refusing bools, floats and strings with a clear TypeError and
    out-of-range values with a ValueError (ctypes would silently wrap them)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    v = value.__index__()
    if v < lo or v > hi:
        raise ValueError("%s must be in [%d, %d], got %d" % (what, lo, hi, v))
    return v


def _access(value) -> int:
    if isinstance(value, str):
        m = {"r": 1, "read": 1, "w": 2, "write": 2, "rw": 3, "read_write": 3, "readwrite": 3}
        try:
            return m[value.lower()]
        except KeyError:
            raise ValueError("access must be 'read', 'write' or 'read_write', got %r" % value) from None
    return _int("access", value, 0, _U32_MAX)


# --------------------------------------------------------------------------------------
# Ownership of Python values by C: a key (the C user_data) maps to what the engine owns.
# A callback looks its payload up by key; the cleanup/release callback pops it, exactly
# once. Keys are never reused, so a stray duplicate callback would find nothing.

_keep: dict = {}
_next_key = itertools.count(1).__next__


def _register(payload) -> int:
    key = _next_key()
    _keep[key] = payload
    return key


# Worker threads are foreign to Python: each ctypes callback on such a thread would create
# and destroy a Python thread state (tens of microseconds, most of a short callback's
# cost). The first callback on a worker "pins" its thread state with one extra
# PyGILState_Ensure that is never released, so later callbacks only take the GIL. The
# engine remembers the pinned states and deletes them once fl_engine_destroy has joined
# its workers (they can never run Python again then), so nothing leaks per engine.
_pyapi = ctypes.pythonapi
try:
    _pyapi.PyGILState_Ensure.restype = ctypes.c_int
    _pyapi.PyGILState_Ensure.argtypes = []
    _pyapi.PyThreadState_Get.restype = c_void_p
    _pyapi.PyThreadState_Get.argtypes = []
    _pyapi.PyThreadState_Clear.restype = None
    _pyapi.PyThreadState_Clear.argtypes = [c_void_p]
    _pyapi.PyThreadState_Delete.restype = None
    _pyapi.PyThreadState_Delete.argtypes = [c_void_p]
    _python_threads = threading._active  # ident -> Thread, for threads Python started
    _CAN_PIN = True
except (AttributeError, TypeError):  # another implementation: stay correct, just slower
    _CAN_PIN = False


def _pin_thread_state(engine) -> None:
    """Called inside a callback (GIL held): pins this worker's thread state, once."""
    if not _CAN_PIN or getattr(_tls, "pinned", False) or engine is None:
        return
    _tls.pinned = True
    if threading.get_ident() in _python_threads:
        return  # a thread Python owns (main, threading.Thread): its state persists anyway
    _pyapi.PyGILState_Ensure()
    engine._pinned.append(_pyapi.PyThreadState_Get())


def _unpin_thread_states(pinned: list) -> None:
    """After fl_engine_destroy joined the workers: frees their pinned thread states."""
    while pinned:
        ts = pinned.pop()
        _pyapi.PyThreadState_Clear(ts)
        _pyapi.PyThreadState_Delete(ts)


@_capi.fl_release_fn
def _release_trampoline(key):
    # Runs on any thread, exactly once per registration; drops the engine's reference.
    try:
        payload = _keep.pop(key, None)
        if payload is not None:
            _pin_thread_state(getattr(payload, "engine", None))
        # Dropping the payload may drop the last reference to an engine (or to anything
        # whose __del__ calls flowlane): count as "inside a callback" while it happens,
        # so an engine collected here is destroyed by a helper thread, not by a worker.
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            del payload
        finally:
            _tls.depth -= 1
    except BaseException:  # never let anything cross into C
        pass


_PACKAGE_DIR = os.path.dirname(__file__)


def _describe_exception(exc: BaseException) -> str:
    """Type, message and traceback, without the bindings' own trampoline frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return "Python %s: %s\n%s" % (type(exc).__qualname__, exc, text.rstrip())


# --------------------------------------------------------------------------------------
# Instruction context


class InstrContext:
    """What a running instruction knows about itself; see :func:`current_instruction`.

    Valid only while the callable runs (afterwards its attributes still read, but it can
    no longer be used to submit)."""

    __slots__ = ("engine", "lane", "id", "name", "_ctx")

    def __init__(self, engine: "Engine", ctx, name: Optional[str]):
        self.engine = engine
        self._ctx = ctx
        self.lane = int(lib.fl_instr_lane(ctx))
        self.id = int(lib.fl_instr_get_id(ctx))
        self.name = name

    def stream(self, kind=None, device=None) -> "Stream":
        """A stream on this instruction's lane (host by default), to submit follow-up work
        (which never blocks on the window from inside a callback)."""
        return self.engine.stream(self.lane, device=device, kind=kind)

    def __repr__(self) -> str:
        return "<InstrContext %r #%d lane %d>" % (self.name, self.id, self.lane)


def current_instruction() -> Optional[InstrContext]:
    """The instruction whose callable runs on this thread, or None outside callbacks."""
    return getattr(_tls, "instr", None)


class _Instr:
    """One submitted Python instruction: the payload its key maps to until cleanup."""

    __slots__ = ("engine", "fn", "reads", "writes", "name")

    def __init__(self, engine, fn, reads, writes, name):
        self.engine = engine
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.name = name

    def run(self, ctx) -> int:
        info = InstrContext(self.engine, ctx, self.name)
        prev = getattr(_tls, "instr", None)
        _tls.instr = info
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            result = self.fn(*[o._value for o in self.reads])
            writes = self.writes
            n = len(writes)
            if n == 1:
                if result is not KEEP:
                    writes[0]._value = result
            elif n > 1:
                if not isinstance(result, (tuple, list)) or len(result) != n:
                    raise TypeError(
                        "instruction %r writes %d objects, so its callable must return a tuple of "
                        "%d values (or flowlane.KEEP), got %s"
                        % (self.name, n, n, type(result).__name__ if not isinstance(result, (tuple, list))
                           else "%d values" % len(result))
                    )
                for o, v in zip(writes, result):
                    if v is not KEEP:
                        o._value = v
            return _capi.FL_OK
        except BaseException as exc:  # noqa: B902 - a callback must not unwind into C
            self.engine._remember_failure(info.id, exc)
            try:
                lib.fl_instr_set_error(ctx, _describe_exception(exc).encode("utf-8", "replace"))
            except BaseException:
                pass
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            info._ctx = None
            _tls.instr = prev
            _tls.depth -= 1


@_capi.fl_host_fn
def _host_trampoline(ctx, key):
    try:
        payload = _keep.get(key)
        if payload is None:
            lib.fl_instr_set_error(ctx, b"flowlane python binding: instruction payload missing")
            return _capi.FL_ERR_INTERNAL
        _pin_thread_state(payload.engine)
        return payload.run(ctx)
    except BaseException:
        return _capi.FL_ERR_INTERNAL


# --------------------------------------------------------------------------------------
# Engine

_live_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()
_FAILURES_KEPT = 64
_ID_RE = re.compile(r"\(#(\d+),")


@atexit.register
def _close_all_engines():
    # Drain and destroy engines still open at exit, while the interpreter can still run
    # the callbacks and release functions that destroy calls.
    for e in list(_live_engines):
        try:
            e.close()
        except Exception:
            pass


class Engine(Managed):
    """An execution engine: worker threads, lanes, streams and the in-flight window.

    ``Engine(workers=None, lanes=None, inflight_limit=None)``: None (or 0) means the
    library default (one worker per logical core, 8 lanes, a 4096-instruction window).
    Use as a context manager; close() drains all submitted work, runs every pending
    cleanup and release, and joins the workers.

    Thread-safety: every method may be called from any thread, concurrently; close()
    must not race with other calls on the same engine, and cannot be called from inside
    a flowlane callback.
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
        check(lib.fl_engine_create(byref(desc), byref(out)), "fl_engine_create")
        self._tls = threading.local()
        self._failures = collections.OrderedDict()
        self._failures_lock = threading.Lock()
        self._watchdogs = []
        self._close_lock = threading.Lock()
        self._pinned = []
        self._handle = out
        _live_engines.add(self)

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Drains every submitted instruction (errors are dropped: call synchronize()
        first to see them), runs pending cleanups and releases, joins the workers.
        Every stream, object, lane and graph of the engine is unusable afterwards."""
        if self._handle is None:
            return
        if callback_depth() > 0:
            raise InvalidArgument("Engine.close() called from inside a flowlane callback: it would wait "
                                  "for itself; close the engine from the thread that owns it",
                                  function="fl_engine_destroy")
        with self._close_lock:
            h = self._handle
            if h is None:
                return
            _live_engines.discard(self)
            # The handle stays valid while destroy drains, so callbacks that still run can
            # use the engine: submitting then raises Shutdown (from C), not ClosedError.
            st = lib.fl_engine_destroy(h)
            if st != _capi.FL_OK:
                check(st, "fl_engine_destroy")
            self._handle = None
            self._watchdogs.clear()
            _unpin_thread_states(self._pinned)

    def _finalize(self) -> None:
        if self._handle is None:
            return
        if callback_depth() > 0:
            # Garbage-collected on a worker: destroying here would wait for the running
            # callback itself. Hand the drain to a helper thread.
            h, self._handle = self._handle, None
            _live_engines.discard(self)
            pinned = self._pinned

            def destroy():
                if lib.fl_engine_destroy(h) == _capi.FL_OK:
                    _unpin_thread_states(pinned)

            threading.Thread(target=destroy, name="flowlane-engine-destroy").start()
            return
        self.close()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<flowlane.Engine closed>"
        return "<flowlane.Engine workers=%d lanes=%d>" % (self.workers, self.lanes)

    # -- properties -------------------------------------------------------------------

    @property
    def lanes(self) -> int:
        """Number of lanes (ids 0 .. lanes-1)."""
        return int(lib.fl_engine_lane_count(self._ptr()))

    @property
    def workers(self) -> int:
        """Number of host worker threads."""
        return int(lib.fl_engine_worker_count(self._ptr()))

    # -- lanes and streams -----------------------------------------------------------

    def lane(self, id: Optional[int] = None) -> "Lane":
        """``engine.lane()`` acquires a fresh lane (the smallest free id >= 1), released
        when the ``with`` block ends or on close(); ``engine.lane(k)`` names lane k
        without acquiring it. Inside ``with engine.lane() as lane:`` the lane is this
        thread's current lane: ``engine.stream()`` and ``engine.submit()`` use it."""
        h = self._ptr()
        if id is None:
            out = c_uint32()
            check(lib.fl_lane_acquire(h, byref(out)), "fl_lane_acquire")
            return Lane(self, int(out.value), owned=True)
        lane_id = _int("lane", id, 0, _U32_MAX)
        if lane_id >= self.lanes:
            # Ask C for the exact error text.
            check(lib.fl_stream_get(h, lane_id, CPU._c(), _capi.FL_STREAM_HOST, byref(_ffi.stream_p())),
                  "fl_stream_get")
        return Lane(self, lane_id, owned=False)

    @property
    def current_lane(self) -> int:
        """This thread's current lane: the innermost ``with engine.lane()`` block, else
        the running instruction's lane (inside a callback of this engine), else 0."""
        stack = getattr(self._tls, "lanes", None)
        if stack:
            return stack[-1]
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

    def stream(self, lane: Optional[int] = None, *, device: Optional[Device] = None,
               kind=None) -> "Stream":
        """The stream (lane, device, kind); lane defaults to the current lane, device to
        the CPU, kind to HOST (or COMPUTE for a CUDA device). Streams are interned: the
        same triple is the same stream."""
        h = self._ptr()
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
        kind_v = _int("kind", kind, -(2**31), 2**31 - 1)
        out = _ffi.stream_p()
        check(lib.fl_stream_get(h, lane_id, device._c(), kind_v, byref(out)), "fl_stream_get")
        return Stream(self, out, lane_id, device, kind_v)

    # -- objects ---------------------------------------------------------------------

    def object(self, value: Any = None) -> "Object":
        """A dependence object holding ``value`` (None for a phony used only for
        ordering). The engine keeps the value alive until it releases the object."""
        return Object(self, value)

    def phony(self) -> "Object":
        """An object with no value, used only to order instructions (fork/join)."""
        return Object(self, None)

    # -- submission ------------------------------------------------------------------

    def submit(self, fn: Callable, reads: Iterable["Object"] = (), writes: Iterable["Object"] = (),
               name: Optional[str] = None, *, lane: Optional[int] = None, block: bool = True) -> int:
        """Submits ``fn`` on the host stream of ``lane`` (default: the current lane);
        see :meth:`Stream.submit`."""
        return self.stream(lane).submit(fn, reads=reads, writes=writes, name=name, block=block)

    def synchronize(self) -> None:
        """Waits for every instruction submitted before the call; raises the first failure
        among them not yet reported by another wait (each failure is reported once).
        Blocking releases the GIL. Not allowed inside a callback (InvalidArgument)."""
        st = lib.fl_engine_synchronize(self._ptr())
        if st != _capi.FL_OK:
            self._raise(st, "fl_engine_synchronize")

    def stats(self) -> EngineStats:
        s = _ffi.init(_capi.fl_engine_stats)
        check(lib.fl_engine_stats(self._ptr(), byref(s)), "fl_engine_stats")
        return EngineStats(s.submitted, s.completed, s.failed, s.in_flight, s.window_stalls, s.steals, s.parks)

    # -- failures: the Python exception behind a failed instruction ------------------

    def _remember_failure(self, instr_id: int, exc: BaseException) -> None:
        with self._failures_lock:
            self._failures[instr_id] = exc
            while len(self._failures) > _FAILURES_KEPT:
                self._failures.popitem(last=False)

    def _original(self, message: str) -> Optional[BaseException]:
        ids = [int(m) for m in _ID_RE.findall(message)]
        with self._failures_lock:
            for i in reversed(ids):  # the origin is named last in a "skipped: ... by ..." chain
                exc = self._failures.get(i)
                if exc is not None:
                    return exc
        return None

    def _raise(self, status: int, function: str):
        err = error_for(status, None, function)
        if isinstance(err, InstructionFailed):
            orig = self._original(err.message)
            if orig is not None:
                err.original = orig
                raise err from orig
        raise err

    # -- diagnostics -----------------------------------------------------------------

    def dump(self) -> str:
        """The engine's state dump (streams, oldest pending instructions, window)."""
        h = self._ptr()
        need = c_uint64()
        check(lib.fl_engine_dump(h, None, 0, byref(need)), "fl_engine_dump")
        for _ in range(4):  # the state may grow between the calls
            size = max(int(need.value), 1)
            buf = ctypes.create_string_buffer(size)
            check(lib.fl_engine_dump(h, buf, size, byref(need)), "fl_engine_dump")
            if int(need.value) <= size:
                return buf.value.decode("utf-8", "replace")
        return buf.value.decode("utf-8", "replace")

    def trace_start(self, path) -> None:
        """Starts writing a trace (Chrome trace JSON) to ``path``."""
        check(lib.fl_trace_start(self._ptr(), _ffi.encode_name(str(path) if hasattr(path, "__fspath__") else path)),
              "fl_trace_start")

    def trace_stop(self) -> None:
        check(lib.fl_trace_stop(self._ptr()), "fl_trace_stop")

    def tracing(self, path):
        """``with engine.tracing("trace.json"): ...`` traces the block."""
        return _Tracing(self, path)

    def set_watchdog(self, timeout_ms: int, callback: Optional[Callable[[str], None]] = None,
                     path=None) -> None:
        """Turns the hang watchdog on (timeout_ms > 0) or off (0). With ``callback``, the
        dump is handed to ``callback(text)`` on a library thread; else it goes to ``path``
        (or stderr)."""
        d = _ffi.init(_capi.fl_watchdog_desc)
        d.timeout_ms = _int("timeout_ms", timeout_ms, 0, _U64_MAX)
        keep = None
        if callback is not None:
            if not callable(callback):
                raise TypeError("callback must be callable")

            def _cb(text, _ud, _callback=callback):
                try:
                    _callback(text.decode("utf-8", "replace") if text else "")
                except BaseException:
                    traceback.print_exc()

            keep = _capi.fl_dump_fn(_cb)
            d.callback = keep
        if path is not None:
            d.path = _ffi.encode_name(str(path) if hasattr(path, "__fspath__") else path)
        check(lib.fl_engine_set_watchdog(self._ptr(), byref(d)), "fl_engine_set_watchdog")
        if keep is not None:
            # The library may call an earlier callback until the engine is destroyed.
            self._watchdogs.append(keep)

    # -- parallel work (defined in graph.py, bound here for discoverability) ---------

    def parallel_for(self, begin, end=None, body=None, *, grain: int = 0) -> None:
        from .graph import parallel_for

        return parallel_for(self, begin, end, body, grain=grain)

    def taskgraph(self) -> "TaskGraph":  # noqa: F821
        from .graph import TaskGraph

        return TaskGraph(self)

    def comm(self, nranks: int, rank: int, unique_id, *, lane: int = 0, device: int = 0,
             backend=None, unordered: bool = False) -> "Comm":  # noqa: F821
        from .gpu import Comm

        return Comm(self, nranks, rank, unique_id, lane=lane, device=device, backend=backend,
                    unordered=unordered)


class _Tracing:
    def __init__(self, engine, path):
        self.engine = engine
        self.path = path

    def __enter__(self):
        self.engine.trace_start(self.path)
        return self.engine

    def __exit__(self, *exc):
        self.engine.trace_stop()


# --------------------------------------------------------------------------------------
# Lane


class Lane:
    """A lane id of an engine. From ``engine.lane()`` it is held (acquired) until the
    ``with`` block ends or close(); from ``engine.lane(k)`` it is only named.

    Thread-safety: a Lane may be used from any thread; entering it (``with``) makes it
    the current lane of the entering thread only."""

    __slots__ = ("engine", "id", "owned", "_released", "__weakref__")

    def __init__(self, engine: Engine, lane_id: int, owned: bool):
        self.engine = engine
        self.id = lane_id
        self.owned = owned
        self._released = False

    def __index__(self) -> int:
        return self.id

    def __int__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return "<flowlane.Lane %d%s>" % (self.id, " (released)" if self._released else "")

    def stream(self, *, device: Optional[Device] = None, kind=None) -> "Stream":
        """This lane's stream (host by default)."""
        if self._released:
            raise ClosedError("lane %d was released" % self.id)
        return self.engine.stream(self.id, device=device, kind=kind)

    def submit(self, fn: Callable, reads=(), writes=(), name: Optional[str] = None, *, block: bool = True) -> int:
        """Submits on this lane's host stream; see :meth:`Stream.submit`."""
        return self.stream().submit(fn, reads=reads, writes=writes, name=name, block=block)

    def synchronize(self) -> None:
        """Waits for this lane's host stream."""
        self.stream().synchronize()

    def close(self) -> None:
        """Releases an acquired lane (work already submitted on it still runs). Named
        lanes (``engine.lane(k)``) are not released. Idempotent."""
        if self._released:
            return
        self._released = True
        if self.owned and self.engine._handle is not None:
            check(lib.fl_lane_release(self.engine._handle, self.id), "fl_lane_release")

    @property
    def closed(self) -> bool:
        return self._released

    def __enter__(self) -> "Lane":
        if self._released:
            raise ClosedError("lane %d was released" % self.id)
        self.engine._push_lane(self.id)
        return self

    def __exit__(self, *exc) -> None:
        self.engine._pop_lane(self.id)
        self.close()

    def __del__(self):
        if self._released or not self.owned or _ffi.is_finalizing():
            return
        try:
            self.close()
        except Exception:
            pass


# --------------------------------------------------------------------------------------
# Stream


class Stream:
    """An in-order queue of instructions, interned by (lane, device, kind); valid until
    its engine is closed, with nothing to release. Two Stream wrappers of the same
    stream compare equal.

    Thread-safety: any thread may submit to any stream at any time (submissions from
    different threads are ordered by whichever the engine admits first)."""

    __slots__ = ("engine", "_handle", "lane", "device", "kind")

    def __init__(self, engine: Engine, handle, lane: int, device: Device, kind: int):
        self.engine = engine
        self._handle = handle
        self.lane = lane
        self.device = device
        try:
            self.kind = StreamKind(kind)
        except ValueError:
            self.kind = kind

    def _ptr(self):
        if self.engine._handle is None:
            raise ClosedError("the engine of this stream is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return self.engine._handle is None

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and _ffi.address(self._handle) == _ffi.address(other._handle)

    def __hash__(self) -> int:
        return hash(_ffi.address(self._handle))

    def __repr__(self) -> str:
        kind = self.kind.name if isinstance(self.kind, StreamKind) else self.kind
        return "<flowlane.Stream lane=%d device=%s kind=%s>" % (self.lane, self.device, kind)

    def info(self):
        """(lane, Device, StreamKind) as the library reports them."""
        lane = c_uint32()
        dev = _capi.fl_device()
        kind = _capi.fl_stream_kind_t()
        check(lib.fl_stream_info(self._ptr(), byref(lane), byref(dev), byref(kind)), "fl_stream_info")
        return int(lane.value), Device(DeviceType(dev.type), dev.index), StreamKind(kind.value)

    def submit(self, fn: Callable, reads: Iterable["Object"] = (), writes: Iterable["Object"] = (),
               name: Optional[str] = None, *, block: bool = True) -> int:
        """Submits ``fn`` as a host instruction and returns its id (asynchronous).

        ``fn(*values)`` is called on a worker thread with the values of ``reads``, in
        order, once every earlier writer of those objects (and every earlier reader and
        writer of ``writes``) has completed. Its return value becomes the new value of
        ``writes``: one object takes the value itself, several take a tuple of that
        length; ``flowlane.KEEP`` (alone or in the tuple) leaves a value unchanged (after
        an in-place mutation). An object in both lists is read-write.

        If ``fn`` raises, the instruction fails: its written objects are poisoned, the
        instructions that read them are skipped, and the wait that observes it raises
        :class:`InstructionFailed` / :class:`DependencyFailed` chained to the original
        exception (whose type, message and traceback are also in the error text).

        ``block=False`` raises :class:`WouldBlock` instead of waiting when the engine's
        in-flight window is full. Submissions from inside a callback never block.
        """
        h = self._ptr()
        if not callable(fn):
            raise TypeError("fn must be callable, not %s" % type(fn).__name__)
        reads = _objects("reads", reads, self.engine)
        writes = _objects("writes", writes, self.engine)
        cname = _ffi.encode_name(name if name is not None else getattr(fn, "__qualname__", None))
        n = len(reads) + len(writes)
        ops = None
        if n:
            ops = (_capi.fl_operand * n)()
            i = 0
            for o in reads:
                ops[i].object = o._ptr()
                ops[i].access = _capi.FL_READ
                i += 1
            for o in writes:
                ops[i].object = o._ptr()
                ops[i].access = _capi.FL_WRITE
                i += 1
        payload = _Instr(self.engine, fn, reads, writes, name if name is not None else getattr(fn, "__qualname__", None))
        key = _register(payload)
        instr = _ffi.init(_capi.fl_host_instr)
        instr.fn = _host_trampoline
        instr.user_data = key
        instr.cleanup = _release_trampoline
        if ops is not None:
            instr.operands = ops
            instr.num_operands = n
        instr.name = cname
        instr.flags = 0 if block else _capi.FL_SUBMIT_NONBLOCKING
        out = c_uint64()
        st = lib.fl_submit_host(h, byref(instr), byref(out))
        if st != _capi.FL_OK:
            # Neither fn nor cleanup will ever run: the payload is ours again.
            err = error_for(st, None, "fl_submit_host")
            _keep.pop(key, None)
            raise err
        return int(out.value)

    def synchronize(self) -> None:
        """Waits for everything submitted to this stream before the call; raises the
        first failure among them not yet reported (releases the GIL while waiting)."""
        st = lib.fl_stream_synchronize(self._ptr())
        if st != _capi.FL_OK:
            self.engine._raise(st, "fl_stream_synchronize")

    # GPU entry points live in gpu.py; bound here so streams grow with the API.
    def set_priority(self, priority: int) -> int:
        from .gpu import stream_set_priority

        return stream_set_priority(self, priority)

    def submit_kernel(self, func, *, grid=(1, 1, 1), block=(1, 1, 1), args=(), shared_mem: int = 0,
                      reads=(), writes=(), name=None, nonblocking: bool = False) -> int:
        from .gpu import submit_kernel

        return submit_kernel(self, func, grid=grid, block=block, args=args, shared_mem=shared_mem,
                             reads=reads, writes=writes, name=name, nonblocking=nonblocking)

    def submit_device(self, fn, reads=(), writes=(), name=None, *, block: bool = True) -> int:
        from .gpu import submit_device

        return submit_device(self, fn, reads=reads, writes=writes, name=name, block=block)

    def memcpy(self, dst: int, src: int, nbytes: int, kind, *, reads=(), writes=(), name=None,
               block: bool = True) -> int:
        from .gpu import submit_memcpy

        return submit_memcpy(self, kind, dst, src, nbytes, 0, reads=reads, writes=writes, name=name, block=block)

    def memset(self, dst: int, value: int, nbytes: int, *, reads=(), writes=(), name=None,
               block: bool = True) -> int:
        from .gpu import submit_memcpy

        return submit_memcpy(self, _capi.FL_MEMSET, dst, 0, nbytes, value, reads=reads, writes=writes,
                             name=name, block=block)


def _objects(what: str, items, engine: Engine) -> list:
    if isinstance(items, Object):
        items = (items,)
    try:
        seq = list(items)
    except TypeError:
        raise TypeError("%s must be a list of flowlane.Object, not %s" % (what, type(items).__name__)) from None
    for o in seq:
        if not isinstance(o, Object):
            raise TypeError("%s must contain flowlane.Object instances, got %s" % (what, type(o).__name__))
        if o.engine is not engine:
            raise ValueError("%s: %r belongs to another engine" % (what, o))
    return seq


# --------------------------------------------------------------------------------------
# Object


class _Box:
    """Holds an object's value; owned by the engine (via its key) until release."""

    __slots__ = ("value", "engine")

    def __init__(self, value, engine):
        self.value = value
        self.engine = engine


class Object(Managed):
    """A dependence object carrying a Python value.

    Instructions read and write it (``reads=[obj]``, ``writes=[obj]``); the engine
    orders them (reads after the last write, writes after every earlier access).
    ``obj.wait()`` blocks until the value is ready and returns it; ``obj.value`` does the
    same as a property (and, assigned, waits for every earlier access first). Inside an
    instruction callback ``obj.value`` reads/writes directly, without waiting: declare
    the object as an operand so the engine orders the access.

    close() drops the program's reference; the engine keeps the value alive until the
    last instruction using it has completed, then releases it.

    Thread-safety: wait() and value may be used from any thread; close() must not race
    with other uses of the same object.
    """

    __slots__ = ("engine", "_box", "_key")
    _kind = "object"

    def __init__(self, engine: Engine, value: Any = None):
        super().__init__()
        if not isinstance(engine, Engine):
            raise TypeError("engine must be a flowlane.Engine, not %s" % type(engine).__name__)
        h = engine._ptr()
        self.engine = engine
        self._box = _Box(value, engine)
        key = _register(self._box)
        out = _ffi.object_p()
        st = lib.fl_object_create(h, key, _release_trampoline, byref(out))
        if st != _capi.FL_OK:
            err = error_for(st, None, "fl_object_create")
            _keep.pop(key, None)
            raise err
        self._key = key
        self._handle = out

    @property
    def _value(self):
        return self._box.value

    @_value.setter
    def _value(self, v):
        self._box.value = v

    def _ptr(self):
        if self.engine._handle is None:
            raise ClosedError("the engine of this object is closed")
        return super()._ptr()

    def _close_handle(self, handle) -> None:
        if self.engine._handle is None:
            return  # the engine's destroy already released everything
        check(lib.fl_object_release(handle), "fl_object_release")

    def wait(self, access=Access.READ):
        """Blocks (releasing the GIL) until the object may be accessed: READ waits for
        every earlier write, WRITE/READ_WRITE also for every earlier read. Returns the
        value. Raises InstructionFailed/DependencyFailed if the value is poisoned."""
        st = lib.fl_object_wait(self._ptr(), _access(access))
        if st != _capi.FL_OK:
            self.engine._raise(st, "fl_object_wait")
        return self._box.value

    @property
    def value(self):
        """The value: waits for earlier writers first (not inside a callback). After the
        engine is closed, the final value."""
        if self.engine._handle is None or callback_depth() > 0:
            return self._box.value
        return self.wait(Access.READ)

    @value.setter
    def value(self, v) -> None:
        if self.engine._handle is not None and callback_depth() == 0:
            self.wait(Access.WRITE)
        self._box.value = v

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return "<flowlane.Object %s #%d>" % (state, self._key)
