"""A submitted Python host instruction: its payload, the trampoline the engine calls, how
its callable's exception fails the instruction, and the run on the waiting thread that
``Future.result()`` does for a submission no worker has started yet."""

from __future__ import annotations

import ctypes
from ctypes import c_void_p
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from . import _capi
from ._base import _keep, _pin_thread_state
from ._context import InstrContext
from ._failures import _describe_exception
from ._ffi import nogil
from ._managed import _tls
from ._types import KEEP

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._engine_base import EngineBase
    from ._future import Future
    from ._object import Object

_OK = _capi.FL_OK
_FAILED = _capi.FL_ERR_INSTRUCTION_FAILED
_NO_OBJECTS: List["Object[Any]"] = []


class _Instr:
    """One submitted Python instruction: the payload its key maps to until cleanup.

    ``spread``: submitted without operands or lane (a lane picked by the bindings), so it is
    ordered against nothing and ``Future.result()`` may run it on the waiting thread."""

    __slots__ = ("engine", "fn", "reads", "writes", "name", "future", "lane", "spread", "_ctx", "_info")

    def __init__(self, engine: "Engine", fn: Callable[..., Any], reads: List["Object[Any]"],
                 writes: List["Object[Any]"], name: Optional[str], future: "Future[Any]", lane: int, spread: bool):
        self.engine = engine
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.name = name
        self.future = future
        self.lane = lane
        self.spread = spread
        self._ctx: Optional[int] = None
        self._info: Optional[InstrContext] = None

    def context(self) -> InstrContext:
        """current_instruction() while fn runs: made on first use (most callables never
        ask)."""
        info = self._info
        if info is None:
            info = self._info = InstrContext(self.engine, self._ctx, self.name, self.lane, self)
        return info

    def run(self, ctx: Optional[int]) -> int:
        """On the worker (``ctx``: the C context), once the engine starts the instruction."""
        claimed = self.future._claim()
        if claimed is None:
            return _OK  # Future.result() ran it on the waiting thread: nothing left to do
        if not claimed:
            nogil.fl_instr_set_error(ctx, b"cancelled by Future.cancel() before it started")
            return _capi.FL_ERR_CANCELLED
        return self.call(ctx)

    def call(self, ctx: Optional[int]) -> int:
        """Calls fn with the values it reads and stores what it returns; ``ctx`` None: on
        the thread of Future.result(). Returns the instruction's status."""
        future = self.future
        self._ctx = ctx
        prev = getattr(_tls, "instr", None)
        _tls.instr = self
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            reads = self.reads
            result = self.fn(*[o._value for o in reads]) if reads else self.fn()
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
            future._outcome = (True, result)
            return _OK
        except BaseException as exc:  # noqa: B902 - a callback must not unwind into C
            future._outcome = (False, exc)
            if ctx is not None:
                fail_instruction(self.engine, ctx, self.context().id, self.lane, self.name, exc)
            return _FAILED
        finally:
            self._ctx = None
            if self._info is not None:
                self._info._ctx = None
            _tls.instr = prev
            _tls.depth -= 1

    def _cleanup(self) -> None:
        """The instruction's cleanup (after fn ran, or instead of it when it was skipped or
        cancelled): completes the future, drops the lane count."""
        try:
            self.future._on_cleanup()
        finally:
            self.engine._lanes.finished(self.lane)


def fail_instruction(engine: "EngineBase", ctx: Any, instr_id: int, lane: int, name: Optional[str],
                     exc: BaseException) -> None:
    """Inside a callback: remembers exc for the wait that will observe the failure (and for
    close(), which reports it if none does) and gives the library its description (the
    error text every language sees)."""
    engine._remember_failure(instr_id, exc, "instruction %r (#%d, lane %d)" % (name, instr_id, lane))
    try:
        nogil.fl_instr_set_error(ctx, _describe_exception(exc).encode("utf-8", "replace"))
    except BaseException:
        pass


def _host(ctx: Optional[int], key: Optional[int]) -> int:
    try:
        payload = _keep.get(key or 0)
        if payload is None:
            nogil.fl_instr_set_error(ctx, b"flowlane python binding: instruction payload missing")
            return _capi.FL_ERR_INTERNAL
        if not getattr(_tls, "pinned", False):
            _pin_thread_state(payload.engine)
        return int(payload.run(ctx))
    except BaseException:
        return _capi.FL_ERR_INTERNAL


# fl_host_fn with both parameters as plain pointers: ctypes then hands the trampoline two
# ints instead of building a pointer object per call. Cast to the header's type when put in
# a descriptor (the same code either way); the callback object lives as long as the module.
_host_callback = ctypes.CFUNCTYPE(_capi.fl_status_t, c_void_p, c_void_p)(_host)
_host_trampoline = ctypes.cast(_host_callback, _capi.fl_host_fn)
