"""What C owns of Python: every Python value the engine holds (an instruction's callable, an
object's value, a task) is registered under a key, the C ``user_data``; the callback looks
its payload up by key, and the cleanup or release callback pops it, exactly once. Keys are
never reused, so a stray duplicate callback would find nothing.

Also the pinned thread states of the engine's worker threads, which run those callbacks."""

from __future__ import annotations

import ctypes
import itertools
import threading
from ctypes import c_void_p
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from . import _capi
from ._managed import _tls

if TYPE_CHECKING:  # pragma: no cover
    from ._engine_base import EngineBase

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


def _pin_thread_state(engine: Optional["EngineBase"]) -> None:
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
            if not getattr(_tls, "pinned", False):
                _pin_thread_state(getattr(payload, "engine", None))
            cleanup = getattr(payload, "_cleanup", None)
            if cleanup is not None:
                cleanup()  # an instruction's: fn ran, or the instruction was skipped/cancelled
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
