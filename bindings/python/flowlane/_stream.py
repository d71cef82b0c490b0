"""Lanes and streams: submission of host instructions (returning futures) and stream waits."""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_uint32, c_uint64
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _capi, _ffi
from ._base import _keep, _register, _release_trampoline
from ._device import MemcpyKind, stream_set_priority, submit_device, submit_kernel, submit_memcpy
from ._ffi import lib, nogil
from ._future import Future
from ._waits import run_blocking_async, wait_sliced
from ._instr import _host_trampoline, _Instr
from ._object import Object, _objects, _operands
from ._program import CapturedFuture
from ._types import Device, DeviceType, StreamKind, T
from .errors import ClosedError, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine

_NO_OBJECTS: List["Object[Any]"] = []


class _Slot(threading.local):
    """This thread's submission descriptor, filled anew for each submission (C copies it),
    with the out-parameter for the id: a submission allocates neither."""

    def __init__(self) -> None:
        self.instr = _ffi.init(_capi.fl_host_instr)
        self.instr.fn = _host_trampoline
        self.instr.cleanup = _release_trampoline
        self.addr = ctypes.addressof(self.instr)
        self.out = c_uint64()
        self.out_addr = ctypes.addressof(self.out)
        self.has_operands = False
        self.busy = False


_slot = _Slot()

# Names of instructions, encoded once (most submissions reuse a few names).
_NAMES: Dict[str, bytes] = {}
_NAMES_KEPT = 4096


def _name(label: Optional[str]) -> Optional[bytes]:
    if type(label) is not str:
        return _ffi.encode_name(label)
    b = _NAMES.get(label)
    if b is None:
        b = label.encode("utf-8")
        if len(_NAMES) < _NAMES_KEPT:
            _NAMES[label] = b
    return b


# --------------------------------------------------------------------------------------
# Lane


class Lane:
    """A lane id of an engine. From ``engine.lane()`` it is held (acquired) until the
    ``with`` block ends or close(); from ``engine.lane(k)`` it is only named.

    Thread-safety: a Lane may be used from any thread; entering it (``with``) makes it
    the current lane of the entering thread only."""

    __slots__ = ("engine", "id", "owned", "_released", "__weakref__")

    def __init__(self, engine: "Engine", lane_id: int, owned: bool):
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
        return self.engine._stream(self.id, device, kind)

    def submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *,
               block: bool = True, inline: bool = False) -> "Future[T]":
        """Submits on this lane's host stream; see :meth:`Stream.submit`."""
        return self.stream()._submit(fn, reads, writes, name, block, "Lane.submit", inline)

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for this lane's host stream; see :meth:`Stream.synchronize`."""
        self.stream()._synchronize(timeout, "Lane.synchronize")

    def close(self) -> None:
        """Releases an acquired lane (work already submitted on it still runs). Named
        lanes (``engine.lane(k)``) are not released. Idempotent."""
        if self._released:
            return
        self._released = True
        if self.owned:
            self.engine._lanes.unhold(self.id)
        if self.owned and self.engine._handle is not None:
            try:
                with self.engine._call("Lane.close") as h:
                    check(lib.fl_lane_release(h, self.id), "Lane.close")
            except ClosedError:
                pass  # the engine is closed or being closed: its destroy releases every lane

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

    __slots__ = ("engine", "_handle", "_addr", "lane", "device", "kind")

    def __init__(self, engine: "Engine", handle: Any, lane: int, device: Device, kind: int):
        #: The engine.
        self.engine = engine
        self._handle = handle
        self._addr = _ffi.address(handle)
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
        with self.engine._call("Stream.info"):
            check(lib.fl_stream_info(self._ptr(), byref(lane), byref(dev), byref(kind)), "Stream.info")
        return int(lane.value), Device(DeviceType(dev.type), dev.index), StreamKind(kind.value)

    def submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *,
               block: bool = True, inline: bool = False) -> "Future[T]":
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

        ``inline=True`` (``FL_SUBMIT_INLINE``) runs ``fn`` on the calling thread before
        this returns when it is ready at once: its lane has nothing queued or running and
        every instruction it depends on has completed; otherwise it is queued as usual.
        Ignored inside callbacks. For short work: a long ``fn`` holds up the caller. (The
        future is completed by the binding's completer thread, as for any submission.)
        """
        return self._submit(fn, reads, writes, name, block, "Stream.submit", inline)

    def _submit(self, fn: Callable[..., T], reads: Iterable["Object[Any]"], writes: Iterable["Object[Any]"],
                name: Optional[str], block: bool, where: str, inline: bool = False, spread: bool = False,
                counted: bool = False) -> "Future[T]":
        """Submits fn (see submit). ``spread``: a submission without operands or lane, on a
        lane the bindings picked; ``counted``: its lane count was taken already."""
        engine = self.engine
        try:
            if engine._handle is None:
                raise ClosedError("the engine of this stream is closed", function=where)
            if not callable(fn):
                raise TypeError("%s: fn must be callable, not %s" % (where, type(fn).__name__))
            r = _objects("reads", reads, engine, where) if reads else _NO_OBJECTS
            w = _objects("writes", writes, engine, where) if writes else _NO_OBJECTS
            engine._enter_submit(where)
        except BaseException:
            if counted:
                engine._lanes.finished(self.lane)
            raise
        label = name if name is not None else getattr(fn, "__qualname__", None)
        try:
            return self._submit_host(fn, r, w, label, block, where, inline, spread, counted)
        finally:
            engine._leave_submit()

    def _submit_host(self, fn: Callable[..., T], r: List["Object[Any]"], w: List["Object[Any]"],
                     label: Optional[str], block: bool, where: str, inline: bool, spread: bool,
                     counted: bool) -> "Future[T]":
        engine = self.engine
        lane = self.lane
        if not counted:
            engine._lanes.started(lane)
        try:
            cname = _name(label)
            ops, n = _operands(r, w) if r or w else (None, 0)
            # While this thread captures on the engine the instruction runs at each launch
            # of the program, never by itself: its future has no result (see CapturedFuture).
            future: Future[T]
            if getattr(engine._tls, "capturing", None) is not None:
                future = CapturedFuture(self, label)
            else:
                future = Future(self, label)
            payload = _Instr(engine, fn, r, w, label, future, lane, spread)
        except BaseException:
            engine._lanes.finished(lane)
            raise
        if spread:
            future._instr = payload  # result() may run it on the waiting thread
        key = _register(payload)
        slot = _slot
        if slot.busy:  # a submission from a callback run inline by this thread's own submit
            slot = _Slot()
        slot.busy = True
        try:
            instr = slot.instr
            instr.user_data = key
            if n or slot.has_operands:
                instr.operands = ops
                instr.num_operands = n
                slot.has_operands = n > 0
            instr.name = cname
            flags = _capi.FL_SUBMIT_INLINE if inline else 0
            instr.flags = flags | _capi.FL_SUBMIT_NONBLOCKING
            # The GIL is kept across the call (see _ffi.nogil): nonblocking, it never waits.
            st = nogil.fl_submit_host(self._addr, slot.addr, slot.out_addr)
            if st == _capi.FL_ERR_WOULD_BLOCK and block:
                instr.flags = flags  # the window is full: wait for room without the GIL
                st = lib.fl_submit_host(self._handle, instr, slot.out)
            if st != _capi.FL_OK:
                # Neither fn nor cleanup will ever run: the payload is ours again.
                err = error_for(st, None, where)
                _keep.pop(key, None)
                engine._lanes.finished(lane)
                raise err
            future._set_id(slot.out.value)
        finally:
            slot.busy = False
        return future

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for everything submitted to this stream before the call; raises the
        first failure among them not yet reported. ``timeout`` (seconds, None: forever)
        raises :class:`Timeout` (a TimeoutError) and consumes nothing. Releases the GIL
        while waiting; Ctrl-C interrupts it."""
        self._synchronize(timeout, "Stream.synchronize")

    def _synchronize(self, timeout: Optional[float], where: str) -> None:
        h = self._ptr()
        st = wait_sliced(self.engine._sliced(lambda _e, ns: lib.fl_stream_synchronize_for(h, ns), where), timeout, where)
        self.engine._settle(st)
        if st != _capi.FL_OK:
            self.engine._raise(st, where)

    async def synchronize_async(self, timeout: Optional[float] = None) -> None:
        """``await stream.synchronize_async()``: synchronize() on a helper thread, so the
        event loop keeps running."""
        h = self._ptr()

        def wait(stop: threading.Event) -> None:
            st = wait_sliced(self.engine._sliced(lambda _e, ns: lib.fl_stream_synchronize_for(h, ns),
                                                 "Stream.synchronize_async"), timeout, "Stream.synchronize_async", stop)
            self.engine._settle(st)
            if st != _capi.FL_OK:
                self.engine._raise(st, "Stream.synchronize_async")

        await run_blocking_async(wait)

    def cancel(self) -> None:
        """Cancels every instruction submitted to this stream before the call that has not
        started (``fl_stream_cancel``); see :meth:`Engine.cancel`."""
        with self.engine._call("Stream.cancel"):
            check(lib.fl_stream_cancel(self._ptr()), "Stream.cancel")

    # GPU work (_device.py), bound here so streams grow with the API.
    def set_priority(self, priority: int) -> int:
        """Sets a CUDA stream's priority before its first instruction; returns the applied
        (clamped) value."""
        return stream_set_priority(self, priority)

    def submit_kernel(self, func: int, *, grid: Union[int, Sequence[int]] = (1, 1, 1),
                      block: Union[int, Sequence[int]] = (1, 1, 1), args: Sequence[Any] = (), shared_mem: int = 0,
                      reads: Iterable["Object[Any]"] = (), writes: Iterable["Object[Any]"] = (),
                      name: Optional[str] = None, nonblocking: bool = False) -> int:
        """Launches a ``__global__`` function; see :func:`flowlane.gpu.submit_kernel`."""
        return submit_kernel(self, func, grid=grid, block=block, args=args, shared_mem=shared_mem,
                             reads=reads, writes=writes, name=name, nonblocking=nonblocking)

    def submit_device(self, fn: Callable[[int], Any], reads: Iterable["Object[Any]"] = (),
                      writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, *, block: bool = True) -> int:
        """Submits ``fn(cuda_stream)``; see :func:`flowlane.gpu.submit_device`."""
        return submit_device(self, fn, reads=reads, writes=writes, name=name, block=block)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: Union[MemcpyKind, int], *,
               reads: Iterable["Object[Any]"] = (), writes: Iterable["Object[Any]"] = (),
               name: Optional[str] = None, block: bool = True) -> int:
        """Copies ``nbytes`` from ``src`` to ``dst`` (addresses as ints) on this CUDA stream."""
        return submit_memcpy(self, kind, dst, src, nbytes, 0, reads=reads, writes=writes, name=name, block=block,
                             where="Stream.memcpy")

    def memset(self, dst: int, value: int, nbytes: int, *, reads: Iterable["Object[Any]"] = (),
               writes: Iterable["Object[Any]"] = (), name: Optional[str] = None, block: bool = True) -> int:
        """Sets ``nbytes`` at ``dst`` to the byte ``value`` on this CUDA stream."""
        return submit_memcpy(self, _capi.FL_MEMSET, dst, 0, nbytes, value, reads=reads, writes=writes,
                             name=name, block=block, where="Stream.memset")
