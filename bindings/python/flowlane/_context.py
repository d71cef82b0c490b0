"""The running instruction as its callable sees it: :class:`InstrContext` and
:func:`current_instruction`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

from ._ffi import nogil
from ._managed import _tls
from ._types import Device, StreamKind

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._stream import Stream


class InstrContext:
    """What a running instruction knows about itself; see :func:`current_instruction`.

    Valid only while the callable runs (afterwards its attributes still read, but it can
    no longer be used to submit)."""

    __slots__ = ("engine", "lane", "name", "_ctx", "_id", "_payload")

    def __init__(self, engine: "Engine", ctx: Optional[int], name: Optional[str], lane: int, payload: Any):
        #: The engine running the instruction.
        self.engine = engine
        self._ctx = ctx
        #: The lane the instruction runs on.
        self.lane = lane
        #: The instruction's name.
        self.name = name
        self._id = 0
        self._payload = payload  # its _Instr: the objects it declared (FLOWLANE_CHECK_ACCESS)

    @property
    def id(self) -> int:
        """The instruction's id (as returned by submit)."""
        if not self._id:
            ctx = self._ctx
            self._id = int(nogil.fl_instr_get_id(ctx)) if ctx is not None else self._payload.future.id
        return self._id

    def stream(self, kind: Union[StreamKind, int, str, None] = None, device: Optional[Device] = None) -> "Stream":
        """A stream on this instruction's lane (host by default), to submit follow-up work
        (which never blocks on the window from inside a callback)."""
        return self.engine._stream(self.lane, device, kind)

    def __repr__(self) -> str:
        return "<InstrContext %r #%d lane %d>" % (self.name, self.id, self.lane)


def current_instruction() -> Optional[InstrContext]:
    """The instruction whose callable runs on this thread, or None outside callbacks."""
    running = getattr(_tls, "instr", None)  # the running instruction's payload (an _Instr)
    return None if running is None else running.context()
