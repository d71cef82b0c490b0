"""Engine, lanes, streams, objects and host instructions."""

from __future__ import annotations

import atexit
import collections
import ctypes
import enum
import itertools
import logging
import os
import re
import threading
import traceback
import weakref
from ctypes import byref, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    NoReturn,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _capi, _ffi
from ._ffi import lib
from ._future import Completer, Future, run_blocking_async, wait_sliced
from ._managed import Managed, _tls, callback_depth
from .errors import ClosedError, FlowlaneError, InstructionFailed, InvalidArgument, Shutdown, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from .gpu import Comm, CommBackend, CommUniqueId, MemcpyKind
    from .graph import TaskGraph, TaskGroup

T = TypeVar("T")

#: The logger that reports failures nobody retrieved ("flowlane"), as asyncio reports
#: exceptions of tasks that nobody awaited.
logger = logging.getLogger("flowlane")

# --------------------------------------------------------------------------------------
# Small public types


class Access(enum.IntFlag):
    """How an instruction (or a wait) accesses an object: READ, WRITE or READ_WRITE."""

    READ = _capi.FL_READ
    WRITE = _capi.FL_WRITE
    READ_WRITE = _capi.FL_READ_WRITE


class StreamKind(enum.IntEnum):
    """The kind of a stream: HOST (Python callables), or a CUDA stream (COMPUTE, H2D, D2H,
    COLLECTIVE)."""

    HOST = _capi.FL_STREAM_HOST
    COMPUTE = _capi.FL_STREAM_COMPUTE
    H2D = _capi.FL_STREAM_H2D
    D2H = _capi.FL_STREAM_D2H
    COLLECTIVE = _capi.FL_STREAM_COLLECTIVE


class DeviceType(enum.IntEnum):
    """CPU or CUDA."""

    CPU = _capi.FL_DEVICE_CPU
    CUDA = _capi.FL_DEVICE_CUDA


@dataclass(frozen=True)
class Device:
    """A device: ``Device.cpu()`` (the default) or ``Device.cuda(i)``."""

    type: DeviceType = DeviceType.CPU
    index: int = 0

    @staticmethod
    def cpu() -> "Device":
        """The host."""
        return CPU

    @staticmethod
    def cuda(index: int = 0) -> "Device":
        """CUDA device ``index``."""
        return Device(DeviceType.CUDA, _int("index", index, -(2**31), 2**31 - 1))

    def _c(self) -> Any:
        return _capi.fl_device(int(self.type), int(self.index))

    def __str__(self) -> str:
        return "cpu" if self.type == DeviceType.CPU else "cuda:%d" % self.index


#: The host device.
CPU = Device()


@dataclass(frozen=True)
class EngineStats:
    """Counters of fl_engine_stats (a snapshot): instructions submitted, completed and
    failed, in flight now, submissions that waited for the window, work-stealing steals and
    worker parks."""

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

    _instance: Optional["_Keep"] = None

    def __new__(cls) -> "_Keep":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "flowlane.KEEP"

    def __reduce__(self) -> str:
        return "KEEP"


#: Returned by a callable (alone or in its tuple) to leave a written object's value as it
#: is, e.g. after mutating it in place.
KEEP = _Keep()

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1

AccessLike = Union[Access, int, str]


def _int(what: str, value: Any, lo: int, hi: int) -> int:
    """An integer argument, refusing bools, floats and strings with a clear TypeError and
    out-of-range values with a ValueError (ctypes would silently wrap them)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    v = int(value.__index__())
    if v < lo or v > hi:
        raise ValueError("%s must be in [%d, %d], got %d" % (what, lo, hi, v))
    return v


def _access(value: AccessLike) -> int:
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

_keep: Dict[int, Any] = {}
_next_key = itertools.count(1).__next__


def _register(payload: Any) -> int:
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
    _python_threads = threading._active  # type: ignore[attr-defined]  # ident -> Thread
    _CAN_PIN = True
except (AttributeError, TypeError):  # another implementation: stay correct, just slower
    _CAN_PIN = False


def _pin_thread_state(engine: Optional["Engine"]) -> None:
    """Called inside a callback (GIL held): pins this worker's thread state, once."""
    if not _CAN_PIN or getattr(_tls, "pinned", False) or engine is None:
        return
    _tls.pinned = True
    if threading.get_ident() in _python_threads:
        return  # a thread Python owns (main, threading.Thread): its state persists anyway
    _pyapi.PyGILState_Ensure()
    engine._pinned.append(_pyapi.PyThreadState_Get())


def _unpin_thread_states(pinned: List[int]) -> None:
    """After fl_engine_destroy joined the workers: frees their pinned thread states."""
    while pinned:
        ts = pinned.pop()
        _pyapi.PyThreadState_Clear(ts)
        _pyapi.PyThreadState_Delete(ts)


def _release(key: int) -> None:
    # Runs on any thread, exactly once per registration; drops the engine's reference.
    try:
        payload = _keep.pop(key, None)
        if payload is not None:
            _pin_thread_state(getattr(payload, "engine", None))
            if isinstance(payload, _Instr) and payload.future is not None:
                payload.future._on_cleanup()  # fn ran, or the instruction was skipped/cancelled
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


_release_trampoline = _capi.fl_release_fn(_release)

_PACKAGE_DIR = os.path.dirname(__file__)


def _user_traceback(exc: BaseException) -> Optional[TracebackType]:
    """exc's traceback without the bindings' own trampoline frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return tb


def _describe_exception(exc: BaseException) -> str:
    """Type, message and traceback, without the bindings' own trampoline frames."""
    text = "".join(traceback.format_exception(type(exc), exc, _user_traceback(exc)))
    return "Python %s: %s\n%s" % (type(exc).__qualname__, exc, text.rstrip())


def _without_traceback(message: str) -> str:
    """An instruction failure's text without the Python traceback that _describe_exception
    put there (the exception re-raised next to it carries its own)."""
    return re.sub(r"\nTraceback \(most recent call last\):\n.*", "", message, flags=re.S)


def raise_failure(err: FlowlaneError, original: Optional[BaseException], tb: Optional[TracebackType]) -> NoReturn:
    """Raises ``original`` (the exception of a Python callable) chained from ``err`` (the
    flowlane error with the instruction's context), as concurrent.futures re-raises a
    worker's exception; raises ``err`` itself when there is no Python exception."""
    if original is None or not isinstance(err, InstructionFailed):
        raise err
    err.original = original
    err.message = _without_traceback(err.message)
    raise original.with_traceback(tb) from err


# --------------------------------------------------------------------------------------
# Instruction context


class InstrContext:
    """What a running instruction knows about itself; see :func:`current_instruction`.

    Valid only while the callable runs (afterwards its attributes still read, but it can
    no longer be used to submit)."""

    __slots__ = ("engine", "lane", "id", "name", "_ctx")

    def __init__(self, engine: "Engine", ctx: Any, name: Optional[str]):
        #: The engine running the instruction.
        self.engine = engine
        self._ctx = ctx
        #: The lane the instruction runs on.
        self.lane = int(lib.fl_instr_lane(ctx))
        #: The instruction's id (as returned by submit).
        self.id = int(lib.fl_instr_get_id(ctx))
        #: The instruction's name.
        self.name = name

    def stream(self, kind: Union[StreamKind, int, str, None] = None, device: Optional[Device] = None) -> "Stream":
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

    __slots__ = ("engine", "fn", "reads", "writes", "name", "future")

    def __init__(self, engine: "Engine", fn: Callable[..., Any], reads: List["Object[Any]"],
                 writes: List["Object[Any]"], name: Optional[str], future: "Optional[Future[Any]]"):
        self.engine = engine
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.name = name
        self.future = future

    def run(self, ctx: Any) -> int:
        future = self.future
        if future is not None and not future._start():
            lib.fl_instr_set_error(ctx, b"cancelled by Future.cancel() before it started")
            return _capi.FL_ERR_CANCELLED
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
            if future is not None:
                future._outcome = (True, result)
            return _capi.FL_OK
        except BaseException as exc:  # noqa: B902 - a callback must not unwind into C
            if future is not None:
                future._outcome = (False, exc)
            fail_instruction(self.engine, ctx, info.id, self.name, exc)
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            info._ctx = None
            _tls.instr = prev
            _tls.depth -= 1


def fail_instruction(engine: "Engine", ctx: Any, instr_id: int, name: Optional[str], exc: BaseException) -> None:
    """Inside a callback: remembers exc for the wait that will observe the failure (and for
    close(), which reports it if none does) and gives the library its description (the
    error text every language sees)."""
    engine._remember_failure(instr_id, exc, "instruction %r (#%d, lane %d)"
                             % (name, instr_id, int(lib.fl_instr_lane(ctx))))
    try:
        lib.fl_instr_set_error(ctx, _describe_exception(exc).encode("utf-8", "replace"))
    except BaseException:
        pass


def _host(ctx: Any, key: int) -> int:
    try:
        payload = _keep.get(key)
        if payload is None:
            lib.fl_instr_set_error(ctx, b"flowlane python binding: instruction payload missing")
            return _capi.FL_ERR_INTERNAL
        _pin_thread_state(payload.engine)
        return int(payload.run(ctx))
    except BaseException:
        return _capi.FL_ERR_INTERNAL


_host_trampoline = _capi.fl_host_fn(_host)


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
        self._closing = False
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
        with self._close_lock:
            h = self._handle
            if h is None:
                return
            # Drain first (Ctrl-C can interrupt it), so every future is completed while the
            # engine can still answer queries. Callbacks that still run can use the engine,
            # but submitting (from them or any thread) raises Shutdown, as destroy would.
            self._closing = True
            wait_sliced(lambda ns: lib.fl_engine_drain(h, ns), None, "Engine.close")
            self._completer.flush()
            _live_engines.discard(self)
            st = lib.fl_engine_destroy(h)
            if st != _capi.FL_OK:
                check(st, "Engine.close")
            self._handle = None
            self._completer.stop()
            self._watchdogs.clear()
            _unpin_thread_states(self._pinned)
            with self._failures_lock:
                _report_unretrieved(self._unretrieved, self._unretrieved_overflow, "Engine.close")

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

            self._closing = True

            def destroy() -> None:
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
            check(lib.fl_lane_acquire(h, byref(out)), "Engine.lane")
            return Lane(self, int(out.value), owned=True)
        lane_id = _int("lane", id, 0, _U32_MAX)
        if lane_id >= self.lanes:
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
        kind_v = _int("kind", kind, 0, _U32_MAX)
        out = _ffi.stream_p()
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
               lane: Optional[int] = None, block: bool = True) -> "Future[T]":
        """Submits ``fn`` on the host stream of ``lane`` (default: the current lane) and
        returns its :class:`Future`; see :meth:`Stream.submit`."""
        return self.stream(lane)._submit(fn, reads, writes, name, block, "Engine.submit")

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for every instruction submitted before the call; raises the first failure
        among them not yet reported by another wait (each failure is reported once): the
        callable's own exception, chained from the flowlane error. ``timeout`` (seconds,
        None: forever) raises :class:`Timeout` (a TimeoutError) and consumes nothing: the
        call can be repeated. Blocking releases the GIL; Ctrl-C interrupts it. Not allowed
        inside a callback (InvalidArgument)."""
        h = self._ptr()
        st = wait_sliced(lambda ns: lib.fl_engine_synchronize_for(h, ns), timeout, "Engine.synchronize")
        if st != _capi.FL_OK:
            self._raise(st, "Engine.synchronize")

    async def synchronize_async(self, timeout: Optional[float] = None) -> None:
        """``await engine.synchronize_async()``: synchronize() on a helper thread, so the
        event loop keeps running (it neither blocks nor polls)."""
        h = self._ptr()

        def wait(stop: threading.Event) -> None:
            st = wait_sliced(lambda ns: lib.fl_engine_synchronize_for(h, ns), timeout, "Engine.synchronize_async",
                             stop)
            if st != _capi.FL_OK:
                self._raise(st, "Engine.synchronize_async")

        await run_blocking_async(wait)

    def cancel(self) -> None:
        """Cancels every instruction submitted before the call that has not started
        (``fl_engine_cancel``): they do not run, their futures are cancelled, and what reads
        their outputs is skipped. synchronize() then raises :class:`Cancelled` once."""
        check(lib.fl_engine_cancel(self._ptr()), "Engine.cancel")

    def task_group(self) -> "TaskGroup":
        """A new :class:`TaskGroup`: ``with engine.task_group() as g: g.spawn(fn, ...)``
        runs the tasks on the workers and waits for them at the end of the block."""
        from .graph import TaskGroup

        return TaskGroup(self)

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        s = _ffi.init(_capi.fl_engine_stats)
        check(lib.fl_engine_stats(self._ptr(), byref(s)), "Engine.stats")
        return EngineStats(s.submitted, s.completed, s.failed, s.in_flight, s.window_stalls, s.steals, s.parks)

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
        h = self._ptr()
        need = c_uint64()
        check(lib.fl_engine_dump(h, None, 0, byref(need)), "Engine.dump")
        buf = ctypes.create_string_buffer(1)
        for _ in range(4):  # the state may grow between the calls
            size = max(int(need.value), 1)
            buf = ctypes.create_string_buffer(size)
            check(lib.fl_engine_dump(h, buf, size, byref(need)), "Engine.dump")
            if int(need.value) <= size:
                break
        return buf.value.decode("utf-8", "replace")

    def trace_start(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Starts writing a trace (Chrome trace JSON) to ``path``."""
        check(lib.fl_trace_start(self._ptr(), _ffi.encode_name(os.fspath(path))), "Engine.trace_start")

    def trace_stop(self) -> None:
        """Stops the trace and finishes its file."""
        check(lib.fl_trace_stop(self._ptr()), "Engine.trace_stop")

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
        check(lib.fl_engine_set_watchdog(self._ptr(), byref(d)), "Engine.set_watchdog")
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


class _Tracing:
    def __init__(self, engine: Engine, path: Union[str, "os.PathLike[str]"]):
        self.engine = engine
        self.path = path

    def __enter__(self) -> Engine:
        self.engine.trace_start(self.path)
        return self.engine

    def __exit__(self, *exc: object) -> None:
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
        #: The engine.
        self.engine = engine
        #: The lane id.
        self.id = lane_id
        #: True when this Lane acquired the id (and releases it).
        self.owned = owned
        self._released = False

    def __index__(self) -> int:
        return self.id

    def __int__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return "<flowlane.Lane %d%s>" % (self.id, " (released)" if self._released else "")

    def stream(self, *, device: Optional[Device] = None, kind: Union[StreamKind, int, str, None] = None) -> "Stream":
        """This lane's stream (host by default)."""
        if self._released:
            raise ClosedError("lane %d was released" % self.id, function="Lane.stream")
        return self.engine.stream(self.id, device=device, kind=kind)

    def submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *,
               block: bool = True) -> "Future[T]":
        """Submits on this lane's host stream; see :meth:`Stream.submit`."""
        return self.stream()._submit(fn, reads, writes, name, block, "Lane.submit")

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for this lane's host stream; see :meth:`Stream.synchronize`."""
        self.stream()._synchronize(timeout, "Lane.synchronize")

    def close(self) -> None:
        """Releases an acquired lane (work already submitted on it still runs). Named
        lanes (``engine.lane(k)``) are not released. Idempotent."""
        if self._released:
            return
        self._released = True
        if self.owned and self.engine._handle is not None:
            check(lib.fl_lane_release(self.engine._handle, self.id), "Lane.close")

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._released

    def __enter__(self) -> "Lane":
        if self._released:
            raise ClosedError("lane %d was released" % self.id, function="Lane.__enter__")
        self.engine._push_lane(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine._pop_lane(self.id)
        self.close()

    def __del__(self) -> None:
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

    def __init__(self, engine: Engine, handle: Any, lane: int, device: Device, kind: int):
        #: The engine.
        self.engine = engine
        self._handle = handle
        #: The lane id.
        self.lane = lane
        #: The device.
        self.device = device
        #: The kind (a StreamKind, or an int the bindings do not know).
        self.kind: Union[StreamKind, int]
        try:
            self.kind = StreamKind(kind)
        except ValueError:
            self.kind = kind

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this stream is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        """True once the engine is closed."""
        return self.engine._handle is None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and _ffi.address(self._handle) == _ffi.address(other._handle)

    def __hash__(self) -> int:
        return hash(_ffi.address(self._handle))

    def __repr__(self) -> str:
        kind = self.kind.name if isinstance(self.kind, StreamKind) else self.kind
        return "<flowlane.Stream lane=%d device=%s kind=%s>" % (self.lane, self.device, kind)

    def info(self) -> Tuple[int, Device, StreamKind]:
        """(lane, Device, StreamKind) as the library reports them."""
        lane = c_uint32()
        dev = _capi.fl_device()
        kind = _capi.fl_stream_kind_t()
        check(lib.fl_stream_info(self._ptr(), byref(lane), byref(dev), byref(kind)), "Stream.info")
        return int(lane.value), Device(DeviceType(dev.type), dev.index), StreamKind(kind.value)

    def submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *,
               block: bool = True) -> "Future[T]":
        """Submits ``fn`` as a host instruction and returns its :class:`Future`
        (asynchronous): ``future.result(timeout)`` is fn's return value, ``future.id`` the
        instruction's id, ``future.cancel()`` cancels it if it has not started.

        ``fn(*values)`` is called on a worker thread with the values of ``reads``, in
        order, once every earlier writer of those objects (and every earlier reader and
        writer of ``writes``) has completed. Its return value becomes the new value of
        ``writes``: one object takes the value itself, several take a tuple of that
        length; ``flowlane.KEEP`` (alone or in the tuple) leaves a value unchanged (after
        an in-place mutation). An object in both lists is read-write.

        If ``fn`` raises, the instruction fails: its written objects are poisoned, the
        instructions that read them are skipped, and the wait that observes it raises
        ``fn``'s own exception, chained from an :class:`InstructionFailed` (or
        :class:`DependencyFailed`, for a skipped dependent) that names the instruction; so
        does the future's ``result()``.

        ``block=False`` raises :class:`WouldBlock` instead of waiting when the engine's
        in-flight window is full. Submissions from inside a callback never block.
        """
        return self._submit(fn, reads, writes, name, block, "Stream.submit")

    def _submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"], writes: Iterable["Object[Any]"],
                name: Optional[str], block: bool, where: str) -> "Future[T]":
        h = self._ptr()
        if self.engine._closing:
            raise Shutdown("the engine is being closed (Engine.close drains and destroys it): it admits no new instructions", function=where)
        if not callable(fn):
            raise TypeError("%s: fn must be callable, not %s" % (where, type(fn).__name__))
        r = _objects("reads", reads, self.engine, where)
        w = _objects("writes", writes, self.engine, where)
        label = name if name is not None else getattr(fn, "__qualname__", None)
        cname = _ffi.encode_name(label)
        ops, n = _operands(r, w)
        future: Future[T] = Future(self, label)
        payload = _Instr(self.engine, fn, r, w, label, future)
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
            err = error_for(st, None, where)
            _keep.pop(key, None)
            raise err
        future._set_id(int(out.value))
        return future

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for everything submitted to this stream before the call; raises the
        first failure among them not yet reported. ``timeout`` (seconds, None: forever)
        raises :class:`Timeout` (a TimeoutError) and consumes nothing. Releases the GIL
        while waiting; Ctrl-C interrupts it."""
        self._synchronize(timeout, "Stream.synchronize")

    def _synchronize(self, timeout: Optional[float], where: str) -> None:
        h = self._ptr()
        st = wait_sliced(lambda ns: lib.fl_stream_synchronize_for(h, ns), timeout, where)
        if st != _capi.FL_OK:
            self.engine._raise(st, where)

    async def synchronize_async(self, timeout: Optional[float] = None) -> None:
        """``await stream.synchronize_async()``: synchronize() on a helper thread, so the
        event loop keeps running."""
        h = self._ptr()

        def wait(stop: threading.Event) -> None:
            st = wait_sliced(lambda ns: lib.fl_stream_synchronize_for(h, ns), timeout, "Stream.synchronize_async",
                             stop)
            if st != _capi.FL_OK:
                self.engine._raise(st, "Stream.synchronize_async")

        await run_blocking_async(wait)

    def cancel(self) -> None:
        """Cancels every instruction submitted to this stream before the call that has not
        started (``fl_stream_cancel``); see :meth:`Engine.cancel`."""
        check(lib.fl_stream_cancel(self._ptr()), "Stream.cancel")

    # GPU entry points live in gpu.py; bound here so streams grow with the API.
    def set_priority(self, priority: int) -> int:
        """Sets a CUDA stream's priority before its first instruction; returns the applied
        (clamped) value."""
        from .gpu import stream_set_priority

        return stream_set_priority(self, priority)

    def submit_kernel(self, func: int, *, grid: Union[int, Sequence[int]] = (1, 1, 1),
                      block: Union[int, Sequence[int]] = (1, 1, 1), args: Sequence[Any] = (), shared_mem: int = 0,
                      reads: Iterable["Object[Any]"] = (), writes: Iterable["Object[Any]"] = (),
                      name: Optional[str] = None, nonblocking: bool = False) -> int:
        """Launches a ``__global__`` function; see :func:`flowlane.gpu.submit_kernel`."""
        from .gpu import submit_kernel

        return submit_kernel(self, func, grid=grid, block=block, args=args, shared_mem=shared_mem,
                             reads=reads, writes=writes, name=name, nonblocking=nonblocking)

    def submit_device(self, fn: Callable[[int], Any], reads: Iterable["Object[Any]"] = (),
                      writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *, block: bool = True) -> int:
        """Submits ``fn(cuda_stream)``; see :func:`flowlane.gpu.submit_device`."""
        from .gpu import submit_device

        return submit_device(self, fn, reads=reads, writes=writes, name=name, block=block)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: Union["MemcpyKind", int], *,
               reads: Iterable["Object[Any]"] = (), writes: Iterable["Object[Any]"] = (),
               name: Optional[str] = None, block: bool = True) -> int:
        """Copies ``nbytes`` from ``src`` to ``dst`` (addresses as ints) on this CUDA stream."""
        from .gpu import submit_memcpy

        return submit_memcpy(self, kind, dst, src, nbytes, 0, reads=reads, writes=writes, name=name, block=block,
                             where="Stream.memcpy")

    def memset(self, dst: int, value: int, nbytes: int, *, reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, block: bool = True) -> int:
        """Sets ``nbytes`` at ``dst`` to the byte ``value`` on this CUDA stream."""
        from .gpu import submit_memcpy

        return submit_memcpy(self, _capi.FL_MEMSET, dst, 0, nbytes, value, reads=reads, writes=writes,
                             name=name, block=block, where="Stream.memset")


def _objects(what: str, items: Any, engine: Engine, where: str) -> List["Object[Any]"]:
    if isinstance(items, Object):
        items = (items,)
    try:
        seq = list(items)
    except TypeError:
        raise TypeError("%s: %s must be a list of flowlane.Object, not %s"
                        % (where, what, type(items).__name__)) from None
    for o in seq:
        if not isinstance(o, Object):
            raise TypeError("%s: %s must contain flowlane.Object instances, got %s"
                            % (where, what, type(o).__name__))
        if o.engine is not engine:
            raise ValueError("%s: %s: %r belongs to another engine" % (where, what, o))
    return seq


def _operands(reads: Sequence["Object[Any]"], writes: Sequence["Object[Any]"]) -> Tuple[Any, int]:
    """A ctypes array of fl_operand_t for reads then writes (None, 0 when empty)."""
    n = len(reads) + len(writes)
    if not n:
        return None, 0
    ops = (_capi.fl_operand * n)()
    for i, o in enumerate(reads):
        ops[i].object, ops[i].access = o._ptr(), _capi.FL_READ
    for j, o in enumerate(writes):
        ops[len(reads) + j].object, ops[len(reads) + j].access = o._ptr(), _capi.FL_WRITE
    return ops, n


# --------------------------------------------------------------------------------------
# Object


class _Box:
    """Holds an object's value; owned by the engine (via its key) until release."""

    __slots__ = ("value", "engine")

    def __init__(self, value: Any, engine: Engine):
        self.value = value
        self.engine = engine


class Object(Managed, Generic[T]):
    """A dependence object carrying a Python value of type ``T``.

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

    def __init__(self, engine: Engine, value: T = None):  # type: ignore[assignment]
        super().__init__()
        if not isinstance(engine, Engine):
            raise TypeError("engine must be a flowlane.Engine, not %s" % type(engine).__name__)
        h = engine._ptr()
        #: The engine.
        self.engine = engine
        self._box = _Box(value, engine)
        key = _register(self._box)
        out = _ffi.object_p()
        st = lib.fl_object_create(h, key, _release_trampoline, byref(out))
        if st != _capi.FL_OK:
            err = error_for(st, None, "Engine.object")
            _keep.pop(key, None)
            raise err
        self._key = key
        self._handle = out

    @property
    def _value(self) -> T:
        return self._box.value  # type: ignore[no-any-return]

    @_value.setter
    def _value(self, v: T) -> None:
        self._box.value = v

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this object is closed")
        return super()._ptr()

    def _close_handle(self, handle: Any) -> None:
        if self.engine._handle is None:
            return  # the engine's destroy already released everything
        check(lib.fl_object_release(handle), "Object.close")

    def wait(self, access: AccessLike = Access.READ, timeout: Optional[float] = None) -> T:
        """Blocks (releasing the GIL) until the object may be accessed: READ waits for
        every earlier write, WRITE/READ_WRITE also for every earlier read. Returns the
        value. If the value is poisoned, raises the failing callable's own exception,
        chained from an InstructionFailed/DependencyFailed naming the instruction.
        ``timeout`` (seconds, None: forever) raises :class:`Timeout` (a TimeoutError);
        Ctrl-C interrupts the wait."""
        return self._wait(access, "Object.wait", timeout)

    def _wait(self, access: AccessLike, where: str, timeout: Optional[float] = None,
              stop: Optional[threading.Event] = None) -> T:
        h, a = self._ptr(), _access(access)
        st = wait_sliced(lambda ns: lib.fl_object_wait_for(h, a, ns), timeout, where, stop)
        if st != _capi.FL_OK:
            self.engine._raise(st, where)
        return self._box.value  # type: ignore[no-any-return]

    async def wait_async(self, access: AccessLike = Access.READ, timeout: Optional[float] = None) -> T:
        """``await obj.wait_async()``: wait() on a helper thread (the event loop's default
        executor), so the event loop neither blocks nor polls. Cancelling the awaiting task
        releases the helper thread within a fraction of a second."""
        self._ptr()
        return await run_blocking_async(lambda stop: self._wait(access, "Object.wait_async", timeout, stop))

    @property
    def value(self) -> T:
        """The value: waits for earlier writers first (not inside a callback). After the
        engine is closed, the final value. Assigning waits for every earlier access."""
        if self.engine._handle is None or callback_depth() > 0:
            return self._box.value  # type: ignore[no-any-return]
        return self._wait(Access.READ, "Object.value")

    @value.setter
    def value(self, v: T) -> None:
        if self.engine._handle is not None and callback_depth() == 0:
            self._wait(Access.WRITE, "Object.value")
        self._box.value = v

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return "<flowlane.Object %s #%d>" % (state, self._key)


__all__ = [
    "Access", "CPU", "Device", "DeviceType", "Engine", "EngineStats", "InstrContext", "KEEP", "Lane", "Object",
    "Stream", "StreamKind", "current_instruction", "logger",
]
