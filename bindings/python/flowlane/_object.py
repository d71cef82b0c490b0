"""Objects: dependence objects carrying a Python value, their waits, and their use as an
instruction's operands."""

from __future__ import annotations

import os
import threading
from ctypes import byref
from typing import TYPE_CHECKING, Any, Generic, List, Optional, Sequence, Tuple

from . import _capi, _ffi
from ._base import _keep, _register, _release_trampoline
from ._engine_base import EngineBase
from ._ffi import lib
from ._managed import Managed, _tls, callback_depth
from ._types import Access, AccessLike, T, _access
from ._waits import run_blocking_async, wait_sliced
from .errors import ClosedError, UndeclaredAccess, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine

#: FLOWLANE_CHECK_ACCESS=1 (read at import): ``obj.value`` inside an instruction's callable
#: raises :class:`UndeclaredAccess` for an object the instruction did not declare.
CHECK_ACCESS = os.environ.get("FLOWLANE_CHECK_ACCESS", "") not in ("", "0")

# --------------------------------------------------------------------------------------
# Object


class _Box:
    """Holds an object's value; owned by the engine (via its key) until release."""

    __slots__ = ("value", "engine")

    def __init__(self, value: Any, engine: EngineBase):
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

    def __init__(self, engine: "Engine", value: T = None):  # type: ignore[assignment]
        super().__init__()
        if not isinstance(engine, EngineBase):
            raise TypeError("engine must be a flowlane.Engine, not %s" % type(engine).__name__)
        engine._ptr()
        #: The engine.
        self.engine = engine
        self._box = _Box(value, engine)
        key = _register(self._box)
        out = _ffi.object_p()
        try:
            with engine._admitted("Engine.object") as h:
                st = lib.fl_object_create(h, key, _release_trampoline, byref(out))
        except BaseException:
            _keep.pop(key, None)
            raise
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
        try:
            with self.engine._call("Object.close"):
                check(lib.fl_object_release(handle), "Object.close")
        except ClosedError:
            return  # the engine is closed or being closed: its destroy releases everything

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
        st = wait_sliced(self.engine._sliced(lambda _e, ns: lib.fl_object_wait_for(h, a, ns), where), timeout, where,
                         stop)
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
            if CHECK_ACCESS:
                self._check_declared(False)
            return self._box.value  # type: ignore[no-any-return]
        try:
            return self._wait(Access.READ, "Object.value")
        except ClosedError:
            if self._handle is None or not self.engine._drained():
                raise
            return self._box.value  # type: ignore[no-any-return]  # closed meanwhile: final

    @value.setter
    def value(self, v: T) -> None:
        if CHECK_ACCESS and callback_depth() > 0:
            self._check_declared(True)
        if self.engine._handle is not None and callback_depth() == 0:
            try:
                self._wait(Access.WRITE, "Object.value")
            except ClosedError:
                if self._handle is None or not self.engine._drained():
                    raise
        self._box.value = v

    def _check_declared(self, write: bool) -> None:
        """FLOWLANE_CHECK_ACCESS: inside an instruction's callable, ``value`` of an object
        the instruction did not declare (to write it: in ``writes``) raises."""
        running = getattr(_tls, "instr", None)  # the running instruction's _Instr
        if running is None:
            return  # a task, a loop body or a release callback: no operands to check against
        declared = running.writes if write else running.reads + running.writes
        if any(o is self for o in declared):
            return
        info = running.context()
        raise UndeclaredAccess(
            "%r is %s by instruction %r (#%d, lane %d), which does not declare it in %s: the engine does not "
            "order this access (add the object to the instruction's %s)"
            % (self, "written" if write else "read", info.name, info.id, info.lane,
               "writes=" if write else "reads= or writes=", "writes=" if write else "reads="),
            function="Object.value")

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return "<flowlane.Object %s #%d>" % (state, self._key)


def _objects(what: str, items: Any, engine: EngineBase, where: str) -> List["Object[Any]"]:
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
