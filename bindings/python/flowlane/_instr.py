"""A submitted Python host instruction: its payload, the trampoline the engine calls, and how
its callable's exception fails the instruction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional

from . import _capi
from ._base import _keep, _pin_thread_state
from ._context import InstrContext
from ._failures import _describe_exception
from ._ffi import lib
from ._future import Future
from ._managed import _tls
from ._types import KEEP

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._engine_base import EngineBase
    from ._object import Object


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


def fail_instruction(engine: "EngineBase", ctx: Any, instr_id: int, name: Optional[str], exc: BaseException) -> None:
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
