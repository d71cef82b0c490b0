"""GPU and collective entry points.

In a CPU-only build of the library every call here raises :class:`Unsupported` (the
symbols exist with or without CUDA); the wrappers are complete so that Python code
written against them runs unchanged on a CUDA build.

Raw device pointers are plain ints here. The library copies kernel arguments at submit;
buffers behind pointers (memcpy, collectives) must stay alive until the instruction
completes: describe them with flowlane Objects in ``reads``/``writes`` and wait on those.
"""

from __future__ import annotations

import ctypes
import enum
import os
from ctypes import byref, c_int32, c_uint64, c_void_p
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Union

from . import _capi, _ffi
from ._base import Device, StreamKind, _int, _keep, _pin_thread_state, _register, _release_trampoline, \
    fail_instruction
from ._core import Engine
from ._object import Object
from ._stream import Stream, _objects, _operands
from ._ffi import lib
from ._managed import Managed, _tls
from .errors import ClosedError, check, error_for

__all__ = [
    "cuda_device_count",
    "cuda_priority_range",
    "PinnedBuffer",
    "CommBackend",
    "CollOp",
    "DType",
    "RedOp",
    "MemcpyKind",
    "CollPart",
    "CommUniqueId",
    "Comm",
    "submit_kernel",
    "submit_device",
    "submit_memcpy",
    "stream_set_priority",
]

_U32 = 2**32 - 1
_U64 = 2**64 - 1


class MemcpyKind(enum.IntEnum):
    """Direction of a copy (or MEMSET)."""

    H2D = _capi.FL_MEMCPY_H2D
    D2H = _capi.FL_MEMCPY_D2H
    D2D = _capi.FL_MEMCPY_D2D
    MEMSET = _capi.FL_MEMSET


class CommBackend(enum.IntEnum):
    """NCCL, or HOST_FAKE: host-memory ranks inside one process (tests, CPU builds)."""

    NCCL = _capi.FL_COMM_NCCL
    HOST_FAKE = _capi.FL_COMM_HOST_FAKE


class CollOp(enum.IntEnum):
    """The collective operation of a :class:`CollPart`."""

    ALL_REDUCE = _capi.FL_COLL_ALL_REDUCE
    ALL_GATHER = _capi.FL_COLL_ALL_GATHER
    REDUCE_SCATTER = _capi.FL_COLL_REDUCE_SCATTER
    BROADCAST = _capi.FL_COLL_BROADCAST
    SEND = _capi.FL_COLL_SEND
    RECV = _capi.FL_COLL_RECV


class DType(enum.IntEnum):
    """Element type of a collective's buffers."""

    INT8 = _capi.FL_DTYPE_INT8
    UINT8 = _capi.FL_DTYPE_UINT8
    INT32 = _capi.FL_DTYPE_INT32
    UINT32 = _capi.FL_DTYPE_UINT32
    INT64 = _capi.FL_DTYPE_INT64
    UINT64 = _capi.FL_DTYPE_UINT64
    FLOAT16 = _capi.FL_DTYPE_FLOAT16
    FLOAT32 = _capi.FL_DTYPE_FLOAT32
    FLOAT64 = _capi.FL_DTYPE_FLOAT64
    BFLOAT16 = _capi.FL_DTYPE_BFLOAT16


class RedOp(enum.IntEnum):
    """Reduction of ALL_REDUCE / REDUCE_SCATTER."""

    SUM = _capi.FL_REDOP_SUM
    PROD = _capi.FL_REDOP_PROD
    MAX = _capi.FL_REDOP_MAX
    MIN = _capi.FL_REDOP_MIN


def cuda_device_count() -> int:
    """Number of visible CUDA devices (Unsupported in a CPU-only build)."""
    out = c_int32()
    check(lib.fl_cuda_device_count(byref(out)), "cuda_device_count")
    return int(out.value)


def cuda_priority_range(device: int = 0) -> Tuple[int, int]:
    """(least, greatest) stream priority of a device (lower number = higher priority)."""
    least, greatest = c_int32(), c_int32()
    check(lib.fl_cuda_priority_range(_int("device", device, -(2**31), 2**31 - 1), byref(least), byref(greatest)),
          "cuda_priority_range")
    return int(least.value), int(greatest.value)


def stream_set_priority(stream: Stream, priority: int) -> int:
    """Sets a CUDA stream's priority (before its first instruction); returns the applied,
    clamped value."""
    applied = c_int32()
    p = _int("priority", priority, -(2**31), 2**31 - 1)
    with stream.engine._call("Stream.set_priority"):
        check(lib.fl_stream_set_priority(stream._ptr(), p, byref(applied)), "Stream.set_priority")
    return int(applied.value)


def _gpu_operands(stream: Stream, reads: Iterable[Object[Any]], writes: Iterable[Object[Any]],
                  where: str) -> Tuple[Any, int]:
    return _operands(_objects("reads", reads, stream.engine, where), _objects("writes", writes, stream.engine, where))


def _dim3(what: str, v: Union[int, Sequence[int]]) -> Any:
    t = (v,) if isinstance(v, int) else tuple(v)
    if len(t) > 3:
        raise ValueError("%s must have at most 3 components" % what)
    t = t + (1,) * (3 - len(t))
    return _capi.fl_dim3(*[_int(what, c, 0, _U32) for c in t])


def submit_kernel(stream: Stream, func: int, *, grid: Union[int, Sequence[int]] = (1, 1, 1),
                  block: Union[int, Sequence[int]] = (1, 1, 1), args: Sequence[Any] = (), shared_mem: int = 0,
                  reads: Iterable[Object[Any]] = (), writes: Iterable[Object[Any]] = (), name: Optional[str] = None,
                  nonblocking: bool = False) -> int:
    """Launches a ``__global__`` function (its host-side handle as an int address) with
    ``args``: ctypes instances (``c_float(1.0)``, ``c_void_p(ptr)``), copied at submit."""
    where = "Stream.submit_kernel"
    h = stream._ptr()
    instr = _ffi.init(_capi.fl_kernel_instr)
    instr.func = _int("func", func, 0, _U64)
    instr.grid = _dim3("grid", grid)
    instr.block = _dim3("block", block)
    instr.shared_mem_bytes = _int("shared_mem", shared_mem, 0, _U64)
    arglist = list(args)
    for a in arglist:
        if not isinstance(a, (ctypes._SimpleCData, ctypes.Structure, ctypes.Array)):
            raise TypeError("%s: kernel args must be ctypes instances (c_float(...), c_void_p(ptr)), not %s"
                            % (where, type(a).__name__))
    ptrs = (c_void_p * max(len(arglist), 1))(*[ctypes.cast(ctypes.pointer(a), c_void_p) for a in arglist])
    sizes = (c_uint64 * max(len(arglist), 1))(*[ctypes.sizeof(a) for a in arglist])
    if arglist:
        instr.args = ptrs
        instr.arg_sizes = sizes
        instr.num_args = len(arglist)
    ops, n = _gpu_operands(stream, reads, writes, where)
    if n:
        instr.operands, instr.num_operands = ops, n
    instr.name = _ffi.encode_name(name)
    instr.flags = _capi.FL_SUBMIT_NONBLOCKING if nonblocking else 0
    out = c_uint64()
    with stream.engine._admitted(where):
        check(lib.fl_submit_kernel(h, byref(instr), byref(out)), where)
    return int(out.value)


class _DeviceInstr:
    __slots__ = ("stream", "fn", "name", "engine")

    def __init__(self, stream: Stream, fn: Callable[[int], Any], name: Optional[str]):
        self.stream = stream
        self.engine = stream.engine
        self.fn = fn
        self.name = name


def _device(ctx: Any, cuda_stream: Optional[int], key: int) -> int:
    try:
        payload = _keep.get(key)
        if payload is None:
            return _capi.FL_ERR_INTERNAL
        _pin_thread_state(payload.engine)
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            payload.fn(cuda_stream or 0)
            return _capi.FL_OK
        except BaseException as exc:
            fail_instruction(payload.engine, ctx, int(lib.fl_instr_get_id(ctx)), payload.name, exc)
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            _tls.depth -= 1
    except BaseException:
        return _capi.FL_ERR_INTERNAL


_device_trampoline = _capi.fl_device_fn(_device)


def submit_device(stream: Stream, fn: Callable[[int], Any], reads: Iterable[Object[Any]] = (),
                  writes: Iterable[Object[Any]] = (), name: Optional[str] = None, *, block: bool = True) -> int:
    """Submits ``fn(cuda_stream: int)``, which may enqueue any GPU work on that stream
    (e.g. through CuPy or PyTorch external streams)."""
    where = "Stream.submit_device"
    h = stream._ptr()
    if not callable(fn):
        raise TypeError("%s: fn must be callable, not %s" % (where, type(fn).__name__))
    ops, n = _gpu_operands(stream, reads, writes, where)
    cname = _ffi.encode_name(name)
    key = _register(_DeviceInstr(stream, fn, name))
    instr = _ffi.init(_capi.fl_device_instr)
    instr.fn = _device_trampoline
    instr.user_data = key
    instr.cleanup = _release_trampoline
    if n:
        instr.operands, instr.num_operands = ops, n
    instr.name = cname
    instr.flags = 0 if block else _capi.FL_SUBMIT_NONBLOCKING
    out = c_uint64()
    try:
        with stream.engine._admitted(where):
            st = lib.fl_submit_device(h, byref(instr), byref(out))
    except BaseException:
        _keep.pop(key, None)
        raise
    if st != _capi.FL_OK:
        err = error_for(st, None, where)
        _keep.pop(key, None)
        raise err
    return int(out.value)


def submit_memcpy(stream: Stream, kind: Union[MemcpyKind, int], dst: int, src: int, nbytes: int, value: int = 0, *,
                  reads: Iterable[Object[Any]] = (), writes: Iterable[Object[Any]] = (), name: Optional[str] = None,
                  block: bool = True, where: str = "submit_memcpy") -> int:
    """Copies (H2D, D2H, D2D) or sets (MEMSET, with the byte ``value``) device memory."""
    h = stream._ptr()
    instr = _ffi.init(_capi.fl_memcpy_instr)
    instr.kind = _int("kind", kind, 0, _U32)
    instr.value = _int("value", value, 0, 255)
    instr.dst = _int("dst", dst, 0, _U64)
    instr.src = _int("src", src, 0, _U64)
    instr.bytes = _int("nbytes", nbytes, 0, _U64)
    ops, n = _gpu_operands(stream, reads, writes, where)
    if n:
        instr.operands, instr.num_operands = ops, n
    instr.name = _ffi.encode_name(name)
    instr.flags = 0 if block else _capi.FL_SUBMIT_NONBLOCKING
    out = c_uint64()
    with stream.engine._admitted(where):
        check(lib.fl_submit_memcpy(h, byref(instr), byref(out)), where)
    return int(out.value)


class PinnedBuffer(Managed):
    """Page-locked host memory (``fl_host_alloc_pinned``): ``.address``, ``len()``, and the
    buffer protocol through ``memoryview(buf.view())``."""

    __slots__ = ("nbytes", "_array")
    _kind = "pinned buffer"

    def __init__(self, nbytes: int):
        super().__init__()
        #: Size in bytes.
        self.nbytes = _int("nbytes", nbytes, 0, _U64)
        out = c_void_p()
        check(lib.fl_host_alloc_pinned(self.nbytes, byref(out)), "PinnedBuffer")
        self._handle = out
        self._array: Any = None

    @property
    def address(self) -> int:
        """The buffer's address."""
        return int(self._ptr().value or 0)

    def view(self) -> Any:
        """A ctypes ubyte array over the memory (valid until close())."""
        if self._array is None:
            self._array = (ctypes.c_ubyte * self.nbytes).from_address(self.address)
        return self._array

    def __len__(self) -> int:
        return self.nbytes

    def _close_handle(self, handle: Any) -> None:
        self._array = None
        check(lib.fl_host_free_pinned(handle), "PinnedBuffer.close")


class CommUniqueId:
    """The rendezvous id shared by the ranks of a communicator (128 opaque bytes)."""

    __slots__ = ("_c",)

    def __init__(self, raw: Optional[bytes] = None):
        self._c = _capi.fl_comm_unique_id()
        if raw is not None:
            if not isinstance(raw, (bytes, bytearray)) or len(raw) != 128:
                raise ValueError("a unique id is 128 bytes")
            ctypes.memmove(byref(self._c), bytes(raw), 128)

    @classmethod
    def new(cls, backend: Union[CommBackend, int] = CommBackend.NCCL) -> "CommUniqueId":
        """A fresh id from the backend (rank 0 makes it and shares its bytes)."""
        uid = cls()
        check(lib.fl_comm_get_unique_id(_int("backend", backend, 0, _U32), byref(uid._c)), "CommUniqueId.new")
        return uid

    def __bytes__(self) -> bytes:
        return ctypes.string_at(byref(self._c), 128)


class CollPart:
    """One collective of a group: op, dtype, count, send/recv buffers (int addresses)."""

    __slots__ = ("op", "dtype", "count", "sendbuf", "recvbuf", "redop", "peer")

    def __init__(self, op: Union[CollOp, int], dtype: Union[DType, int], count: int, sendbuf: int, recvbuf: int,
                 redop: Union[RedOp, int] = RedOp.SUM, peer: int = 0):
        self.op, self.dtype, self.count = op, dtype, count
        self.sendbuf, self.recvbuf, self.redop, self.peer = sendbuf, recvbuf, redop, peer


class Comm(Managed):
    """A communicator; its collectives go through lane ``lane``'s COLLECTIVE stream, in
    submission order, so every rank issues them in one order. NCCL collectives of one engine
    are also issued in one order across communicators, unless ``unordered=True``
    (FL_COMM_UNORDERED: the caller keeps the ranks' issue order consistent)."""

    __slots__ = ("engine", "lane", "device", "backend")
    _kind = "communicator"

    def __init__(self, engine: Engine, nranks: int, rank: int, unique_id: CommUniqueId, *, lane: int = 0,
                 device: int = 0, backend: Union[CommBackend, int, None] = None, unordered: bool = False):
        super().__init__()
        if not isinstance(unique_id, CommUniqueId):
            raise TypeError("Comm: unique_id must be a flowlane.CommUniqueId")
        be = CommBackend.NCCL if backend is None else backend
        d = _ffi.init(_capi.fl_comm_desc)
        d.nranks = _int("nranks", nranks, 0, _U64)
        d.rank = _int("rank", rank, 0, _U64)
        d.device = _int("device", device, 0, _U64)
        d.lane = _int("lane", lane, 0, _U64)
        d.backend = _int("backend", be, 0, _U64)
        d.flags = _capi.FL_COMM_UNORDERED if unordered else 0
        out = _ffi.comm_p()
        with engine._admitted("Comm") as h:
            check(lib.fl_comm_create(h, byref(d), byref(unique_id._c), byref(out)), "Comm")
        #: The engine.
        self.engine = engine
        #: The lane whose COLLECTIVE stream issues the collectives.
        self.lane = lane
        #: The CUDA device index (NCCL).
        self.device = device
        #: The backend.
        self.backend = be
        self._handle = out

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this communicator is closed")
        return super()._ptr()

    def _close_handle(self, handle: Any) -> None:
        try:
            with self.engine._call("Comm.close"):
                check(lib.fl_comm_destroy(handle), "Comm.close")
        except ClosedError:
            pass  # the engine is closed or being closed: its destroy aborts the communicator

    def dump(self, path: Union[str, "os.PathLike[str]", None] = None) -> None:
        """Writes this rank's communicator dump (JSON, for ``flowlane-comm-analyze``): to
        ``path``, or with None to its file in ``FLOWLANE_COMM_DUMP_DIR`` (fl_comm_dump)."""
        name = None if path is None else _ffi.encode_name(os.fspath(path))
        with self.engine._call("Comm.dump"):
            check(lib.fl_comm_dump(self._ptr(), name), "Comm.dump")

    def stream(self) -> Stream:
        """The COLLECTIVE stream this communicator issues on."""
        dev = Device.cpu() if self.backend == CommBackend.HOST_FAKE else Device.cuda(self.device)
        return self.engine.stream(self.lane, device=dev, kind=StreamKind.COLLECTIVE)

    def submit(self, parts: Sequence[CollPart], *, reads: Iterable[Object[Any]] = (),
               writes: Iterable[Object[Any]] = (), name: Optional[str] = None, stream: Optional[Stream] = None,
               block: bool = True) -> int:
        """Issues ``parts`` as one group on the comm's COLLECTIVE stream."""
        where = "Comm.submit"
        s = stream if stream is not None else self.stream()
        plist = list(parts)
        arr = (_capi.fl_coll_part * max(len(plist), 1))()
        for i, p in enumerate(plist):
            if not isinstance(p, CollPart):
                raise TypeError("%s: parts must be flowlane.CollPart, not %s" % (where, type(p).__name__))
            arr[i].op = _int("op", p.op, 0, _U32)
            arr[i].dtype = _int("dtype", p.dtype, 0, _U32)
            arr[i].redop = _int("redop", p.redop, 0, _U32)
            arr[i].peer = _int("peer", p.peer, 0, _U32)
            arr[i].sendbuf = _int("sendbuf", p.sendbuf, 0, _U64)
            arr[i].recvbuf = _int("recvbuf", p.recvbuf, 0, _U64)
            arr[i].count = _int("count", p.count, 0, _U64)
        instr = _ffi.init(_capi.fl_collective_instr)
        instr.parts, instr.num_parts = arr, len(plist)
        ops, n = _gpu_operands(s, reads, writes, where)
        if n:
            instr.operands, instr.num_operands = ops, n
        instr.name = _ffi.encode_name(name)
        instr.flags = 0 if block else _capi.FL_SUBMIT_NONBLOCKING
        out = c_uint64()
        with self.engine._admitted(where):
            check(lib.fl_submit_collective(s._ptr(), self._ptr(), byref(instr), byref(out)), where)
        return int(out.value)

    def all_reduce(self, sendbuf: int, recvbuf: int, count: int, dtype: Union[DType, int],
                   op: Union[RedOp, int] = RedOp.SUM, **kw: Any) -> int:
        """One ALL_REDUCE of ``count`` elements; keyword arguments as :meth:`submit`."""
        return self.submit([CollPart(CollOp.ALL_REDUCE, dtype, count, sendbuf, recvbuf, redop=op)], **kw)
