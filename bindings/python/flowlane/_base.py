"""The bindings' foundations: small public types (Access, StreamKind, Device, KEEP), the
ownership of Python values by C (keys, release trampoline, pinned worker thread states),
how a callable's exception becomes an instruction failure and comes back, and host
instructions (InstrContext, the trampolines)."""

from __future__ import annotations

import ctypes
import enum
import itertools
import logging
import os
import re
import threading
import traceback
from ctypes import c_void_p
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NoReturn, Optional, TypeVar, Union

from . import _capi
from ._ffi import lib
from ._future import Future
from ._managed import _tls
from .errors import FlowlaneError, InstructionFailed

if TYPE_CHECKING:  # pragma: no cover
    from ._core import Engine
    from ._object import Object
    from ._stream import Stream

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
    failed, in flight now, submissions that waited for the window, work-stealing steals,
    worker parks, instructions whose outcome is cancelled (counted in failed too) and
    pool tasks run."""

    submitted: int
    completed: int
    failed: int
    in_flight: int
    window_stalls: int
    steals: int
    parks: int
    cancelled: int = 0
    tasks: int = 0


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


def exception_text(exc: BaseException) -> str:
    """str(exc), or a placeholder when its __str__ raises (as traceback prints it)."""
    try:
        return str(exc)
    except BaseException:
        return "<exception str() failed>"


def _describe_exception(exc: BaseException) -> str:
    """Type, message and traceback, without the bindings' own trampoline frames."""
    text = "".join(traceback.format_exception(type(exc), exc, _user_traceback(exc)))
    return "Python %s: %s\n%s" % (type(exc).__qualname__, exception_text(exc), text.rstrip())


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
        self.lane = int(lib.fl_instr_get_lane(ctx))
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
                             % (name, instr_id, int(lib.fl_instr_get_lane(ctx))))
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

