"""Capture and replay (EXPERIMENTAL; flowlane.h, "Capture and replay"):
``with engine.capture() as program:`` records the calling thread's submissions to the engine
instead of running them; each ``program.launch()`` then runs them all, with their
dependencies computed once, as one instruction."""

from __future__ import annotations

import threading
from ctypes import POINTER, byref, c_uint32, c_uint64
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

from . import _capi, _ffi
from ._future import Future, T
from ._waits import wait_sliced
from .errors import Capturing, ClosedError, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._stream import Lane, Stream

__all__ = ["Program", "Launch", "ProgramInfo", "CapturedFuture"]

_lib = _ffi.lib
_close_lock = threading.Lock()


class ProgramInfo(NamedTuple):
    """What :meth:`Program.info` reports (fl_program_info_t)."""

    instructions: int
    host_instructions: int
    edges: int
    tasks: int
    device_graphs: int
    operands: int
    bytes: int
    launches: int


class CapturedFuture(Future[T]):
    """What a submission returns while its thread captures: the instruction runs at every
    launch of the program, never by itself, so it has no result of its own. ``result()``
    and ``exception()`` raise :class:`flowlane.Capturing`, ``done()`` is False and
    ``cancel()`` returns False; a failure of its callable in a launch is raised by that
    launch's :meth:`Launch.wait` (and by the engine's waits), as the callable's own exception."""

    def _refuse(self, where: str) -> BaseException:
        return Capturing("this instruction was captured into a program: it runs at each launch of the program, not "
                         "by itself; wait for a launch (Launch.wait)", _capi.FL_ERR_CAPTURING, where)

    def result(self, timeout: Optional[float] = None) -> T:
        """Raises :class:`Capturing`: the instruction has no result of its own."""
        raise self._refuse("Future.result")

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """Raises :class:`Capturing`: the instruction has no outcome of its own."""
        raise self._refuse("Future.exception")

    def done(self) -> bool:
        """False: the instruction never completes by itself."""
        return False

    def cancel(self) -> bool:
        """False: a captured instruction cannot be cancelled (cancel a launch)."""
        return False

    def _set_id(self, instr_id: int) -> None:
        self._id = instr_id  # 0: a captured instruction has no id

    def _claim(self) -> Optional[bool]:
        return True  # the callable runs at every launch

    def _on_cleanup(self) -> None:
        pass  # the program was freed: nothing to complete


class Launch:
    """One launch of a program: an instruction of ``stream`` with id ``id``."""

    __slots__ = ("program", "stream", "id")

    def __init__(self, program: "Program", stream: "Stream", instr_id: int):
        self.program = program
        self.stream = stream
        self.id = instr_id

    def __repr__(self) -> str:
        return "<flowlane.Launch #%d of %r on lane %d>" % (self.id, self.program.name, self.stream.lane)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits (``timeout`` seconds, None: forever) until the launch has completed; raises
        its failure: the exception a captured callable raised (chained from an
        InstructionFailed naming the launch and the inner instruction), or :class:`Timeout`."""
        engine = self.program.engine
        h = self.stream._ptr()
        st = wait_sliced(engine._sliced(lambda _e, ns: _lib.fl_instr_wait_for(h, self.id, ns), "Launch.wait"),
                         timeout, "Launch.wait")
        if st != _capi.FL_OK:
            engine._raise(st, "Launch.wait")

    def done(self) -> bool:
        """True once the launch has completed (successfully or not)."""
        state = c_uint32()
        with self.program.engine._call("Launch.done"):
            check(_lib.fl_instr_query(self.stream._ptr(), self.id, byref(state)), "Launch.done")
        return int(state.value) != _capi.FL_INSTR_PENDING


class Program:
    """A captured program (``fl_program_t``), made by ``with engine.capture() as program:``.
    Usable once the ``with`` block has ended; :meth:`launch` runs it. The engine frees it at
    close; :meth:`close` frees it earlier (launches already made still run)."""

    __slots__ = ("engine", "name", "_handle")

    def __init__(self, engine: "Engine", name: Optional[str]):
        self.engine = engine
        self.name = name
        self._handle: Any = None

    def __repr__(self) -> str:
        state = "capturing" if self._handle is None else "captured"
        return "<flowlane.Program %r %s>" % (self.name, state)

    def _ptr(self, where: str) -> Any:
        if self._handle is None:
            raise ClosedError("the program is not captured yet (launch it after its `with engine.capture()` block) "
                              "or was closed", function=where)
        return self._handle

    def launch(self, lane: Union[int, "Lane", None] = None, *, stream: Optional["Stream"] = None,
               inline: bool = False, block: bool = True) -> Launch:
        """Runs the program once, as one instruction of ``stream`` (default: the host stream
        of ``lane``, default the current lane); returns its :class:`Launch`. Launches of a
        program run one after the other; a launch is ordered against other work through the
        objects its instructions use. ``inline`` and ``block`` as for :meth:`Stream.submit`.
        A program with device work only may be launched on a CUDA stream of its device."""
        where = "Program.launch"
        handle = self._ptr(where)
        engine = self.engine
        s = stream if stream is not None else engine.stream(lane)
        engine._enter_submit(where)
        try:
            out = c_uint64()
            flags = _capi.FL_SUBMIT_INLINE if inline else 0
            st = _lib.fl_program_launch(handle, s._ptr(), flags | _capi.FL_SUBMIT_NONBLOCKING, byref(out))
            if st == _capi.FL_ERR_WOULD_BLOCK and block:
                st = _lib.fl_program_launch(handle, s._ptr(), flags, byref(out))
            if st != _capi.FL_OK:
                raise error_for(st, None, where)
        finally:
            engine._leave_submit()
        return Launch(self, s, int(out.value))

    def info(self) -> ProgramInfo:
        """Its size and shape (fl_program_info)."""
        info = _ffi.init(_capi.fl_program_info)
        with self.engine._call("Program.info"):
            check(_lib.fl_program_info(self._ptr("Program.info"), byref(info)), "Program.info")
        return ProgramInfo(int(info.instructions), int(info.host_instructions), int(info.edges), int(info.tasks),
                           int(info.device_graphs), int(info.operands), int(info.bytes), int(info.launches))

    def close(self) -> None:
        """Frees the program (launches already made still run; the captured callables are
        released once the last of them has completed). Idempotent."""
        with _close_lock:  # two threads closing at once: one frees it
            handle, self._handle = self._handle, None
        if handle is None or self.engine._handle is None:
            return  # the engine's close freed it
        with self.engine._call("Program.close"):
            check(_lib.fl_program_destroy(handle), "Program.close")


class Capture:
    """``engine.capture(name)``'s context manager: ``with`` it as ``program``."""

    __slots__ = ("_program",)

    def __init__(self, engine: "Engine", name: Optional[str]):
        self._program = Program(engine, name)

    def __enter__(self) -> Program:
        p = self._program
        engine = p.engine
        if getattr(engine._tls, "capturing", None) is not None:
            raise Capturing("this thread already captures on this engine (captures do not nest)",
                            _capi.FL_ERR_CAPTURING, "Engine.capture")
        desc = _ffi.init(_capi.fl_capture_desc)
        name = _ffi.encode_name(p.name)
        desc.name = name
        with engine._call("Engine.capture"):
            check(_lib.fl_capture_begin(engine._ptr(), byref(desc)), "Engine.capture")
        engine._tls.capturing = p
        return p

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        p = self._program
        engine = p.engine
        engine._tls.capturing = None
        if engine._handle is None:
            return  # closed meanwhile: its close discarded the capture
        out = POINTER(_capi.fl_program)()
        with engine._call("Engine.capture"):
            # An exception inside the block discards the capture (its callables are released).
            st = _lib.fl_capture_end(engine._ptr(), byref(out) if exc_type is None else None)
        if exc_type is not None:
            return
        check(st, "Engine.capture")
        p._handle = out
