"""Communicators: ranks that run collectives (all-reduce, all-gather, reduce-scatter,
broadcast, send/receive) through a lane's COLLECTIVE stream, in submission order.

Two backends: NCCL (CUDA devices, a CUDA build) and HOST_FAKE, host-memory ranks inside one
process, which needs no GPU (tests, CPU-only builds); across processes on host memory,
MPI (:mod:`flowlane.mpi`). Buffers are plain int addresses and
must stay alive until the collective completes: describe them with flowlane Objects in
``reads``/``writes`` and wait on those."""

from __future__ import annotations

import ctypes
import enum
import os
from ctypes import byref, c_uint64
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, Union

from . import _capi, _ffi
from ._ffi import lib
from ._managed import Managed
from ._object import Object, _objects, _operands
from ._types import _U32_MAX, _U64_MAX, Device, StreamKind, _int
from .errors import ClosedError, check

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine
    from ._stream import Stream

__all__ = ["CommBackend", "CollOp", "DType", "RedOp", "CollPart", "CommUniqueId", "Comm"]


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
        check(lib.fl_comm_get_unique_id(_int("backend", backend, 0, _U32_MAX), byref(uid._c)), "CommUniqueId.new")
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

    def __init__(self, engine: "Engine", nranks: int, rank: int, unique_id: CommUniqueId, *, lane: int = 0,
                 device: int = 0, backend: Union[CommBackend, int, None] = None, unordered: bool = False):
        super().__init__()
        if not isinstance(unique_id, CommUniqueId):
            raise TypeError("Comm: unique_id must be a flowlane.CommUniqueId")
        be = CommBackend.NCCL if backend is None else backend
        d = _ffi.init(_capi.fl_comm_desc)
        d.nranks = _int("nranks", nranks, 0, _U64_MAX)
        d.rank = _int("rank", rank, 0, _U64_MAX)
        d.device = _int("device", device, 0, _U64_MAX)
        d.lane = _int("lane", lane, 0, _U64_MAX)
        d.backend = _int("backend", be, 0, _U64_MAX)
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
        #: The backend (None: a transport's, such as flowlane.mpi's).
        self.backend: Union[CommBackend, int, None] = be
        self._handle = out

    @classmethod
    def _adopt(cls, engine: "Engine", handle: Any, *, lane: int, device: int = 0,
               backend: Union[CommBackend, int, None] = None) -> "Comm":
        """Wraps a communicator another library made on ``engine`` (flowlane.mpi); backend
        None: a transport's, on host memory."""
        c = cls.__new__(cls)
        Managed.__init__(c)
        c.engine, c.lane, c.device, c.backend = engine, lane, device, backend
        c._handle = handle
        return c

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this communicator is closed")
        return super()._ptr()

    def set_timeout(self, timeout_ms: int) -> None:
        """Fails a collective waiting longer than ``timeout_ms`` for its peers with
        FL_ERR_TIMEOUT, after the communicator dumps (0: never; fl_comm_set_timeout)."""
        with self.engine._call("Comm.set_timeout"):
            check(lib.fl_comm_set_timeout(self._ptr(), _int("timeout_ms", timeout_ms, 0, _U64_MAX)),
                  "Comm.set_timeout")

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

    def stream(self) -> "Stream":
        """The COLLECTIVE stream this communicator issues on."""
        dev = Device.cuda(self.device) if self.backend == CommBackend.NCCL else Device.cpu()
        return self.engine.stream(self.lane, device=dev, kind=StreamKind.COLLECTIVE)

    def submit(self, parts: Sequence[CollPart], *, reads: Iterable[Object[Any]] = (),
               writes: Iterable[Object[Any]] = (), name: Optional[str] = None, stream: "Optional[Stream]" = None,
               block: bool = True) -> int:
        """Issues ``parts`` as one group on the comm's COLLECTIVE stream."""
        where = "Comm.submit"
        s = stream if stream is not None else self.stream()
        plist = list(parts)
        arr = (_capi.fl_coll_part * max(len(plist), 1))()
        for i, p in enumerate(plist):
            if not isinstance(p, CollPart):
                raise TypeError("%s: parts must be flowlane.CollPart, not %s" % (where, type(p).__name__))
            arr[i].op = _int("op", p.op, 0, _U32_MAX)
            arr[i].dtype = _int("dtype", p.dtype, 0, _U32_MAX)
            arr[i].redop = _int("redop", p.redop, 0, _U32_MAX)
            arr[i].peer = _int("peer", p.peer, 0, _U32_MAX)
            arr[i].sendbuf = _int("sendbuf", p.sendbuf, 0, _U64_MAX)
            arr[i].recvbuf = _int("recvbuf", p.recvbuf, 0, _U64_MAX)
            arr[i].count = _int("count", p.count, 0, _U64_MAX)
        instr = _ffi.init(_capi.fl_collective_instr)
        instr.parts, instr.num_parts = arr, len(plist)
        ops, n = _operands(_objects("reads", reads, self.engine, where), _objects("writes", writes, self.engine, where))
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
