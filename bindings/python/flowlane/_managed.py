"""Managed: the one base class of every wrapper that owns a C handle."""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from . import _ffi
from .errors import ClosedError

# Per-thread state of the bindings: whether this thread is inside a flowlane callback
# (instruction, task, parallel_for body), and which instruction.
_tls = threading.local()

M = TypeVar("M", bound="Managed")


def callback_depth() -> int:
    """How many flowlane callbacks this thread is inside (0 outside any)."""
    return int(getattr(_tls, "depth", 0))


class Managed:
    """Owns one C handle: ``close()`` frees it once, ``with`` closes on exit, and the
    garbage collector closes it too (never during interpreter shutdown, when the atexit
    hook has already closed every engine and the C library may be half torn down).

    Subclasses set ``self._handle`` and implement ``_close_handle(handle)``. ``closed``
    tells whether close() ran; using a closed wrapper raises :class:`ClosedError` (an
    :class:`InvalidHandle`) without calling C.
    """

    __slots__ = ("_handle", "__weakref__")
    _kind = "handle"

    def __init__(self) -> None:
        self._handle: Any = None

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._handle is None

    def _ptr(self) -> Any:
        h = self._handle
        if h is None:
            raise ClosedError("this %s is closed" % self._kind, function=None)
        return h

    def _close_handle(self, handle: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Frees the C handle. Idempotent: a second close() does nothing."""
        h = self._handle
        if h is None:
            return
        self._handle = None
        self._close_handle(h)

    def __enter__(self: M) -> M:
        self._ptr()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if _ffi.is_finalizing():
            return
        try:
            self._finalize()
        except Exception:
            pass

    def _finalize(self) -> None:
        """What the garbage collector does; close() unless a subclass knows better."""
        self.close()
