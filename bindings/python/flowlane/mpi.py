"""Collectives across processes over MPI: the plugin ``libflowlane_mpi.so`` (EXPERIMENTAL).

    from mpi4py import MPI          # initializes MPI with MPI_THREAD_MULTIPLE
    import flowlane, flowlane.mpi
    with flowlane.Engine(lanes=4) as engine:
        comm = flowlane.mpi.comm_create(engine, MPI.COMM_WORLD, lane=1)
        comm.all_reduce(addr, addr, n, flowlane.DType.FLOAT32)

:func:`comm_create` returns an ordinary :class:`flowlane.Comm` whose collectives run on
MPI's nonblocking collectives (``fl_mpi_comm_create``); :func:`nccl_comm_create` an NCCL
communicator whose unique id travels over MPI. The MPI communicator is an mpi4py
communicator (its handle's address is taken with ``MPI._addressof``) or that address as an
int. Standard library only: the plugin is loaded with ctypes, from, in order,
``FLOWLANE_MPI_LIBRARY``, the directory of the libflowlane loaded, a build tree next to it
(``<build>/mpi``), then the system loader.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_uint64, c_void_p
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Tuple, Union

from . import _capi, _ffi
from ._types import _U64_MAX, _int
from .comm import Comm, CommBackend
from .errors import check

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine

__all__ = ["comm_create", "nccl_comm_create", "library_path", "SERIALIZED"]

LIBRARY_ENV = "FLOWLANE_MPI_LIBRARY"
SONAME = "libflowlane_mpi.so.%d" % _capi.FL_VERSION_MAJOR
#: fl_comm_desc_t flag FL_MPI_SERIALIZED: MPI runs at MPI_THREAD_SERIALIZED and the program
#: makes no MPI call of its own while flowlane communicators exist.
SERIALIZED = 1 << 32

_plugin: Optional[ctypes.CDLL] = None
_plugin_path = ""


def _candidates() -> Iterator[Tuple[str, str]]:
    env = os.environ.get(LIBRARY_ENV)
    if env:
        yield ("$" + LIBRARY_ENV, env)
        return
    core = Path(_ffi.path).resolve().parent if os.sep in _ffi.path else None  # else: found by the loader
    if core is not None:
        yield ("beside libflowlane", str(core / SONAME))
        yield ("the build tree", str(core.parent / "mpi" / SONAME))
    yield ("the system loader", SONAME)


def _load() -> ctypes.CDLL:
    global _plugin, _plugin_path
    if _plugin is not None:
        return _plugin
    tried: List[str] = []
    for where, path in _candidates():
        try:
            # RTLD_GLOBAL: Open MPI's components look MPI's symbols up globally.
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
            continue
        for name in ("fl_mpi_comm_create", "fl_mpi_nccl_comm_create"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int32
            fn.argtypes = [_ffi.engine_p, POINTER(_capi.fl_comm_desc), c_void_p, POINTER(_ffi.comm_p)]
        _plugin, _plugin_path = lib, path
        return lib
    raise ImportError("flowlane.mpi: cannot load %s (built when CMake finds MPI: libopenmpi-dev). Set %s to its "
                      "path. Tried:\n  %s" % (SONAME, LIBRARY_ENV, "\n  ".join(tried)))


def library_path() -> str:
    """The path of the libflowlane_mpi.so loaded (loading it if needed)."""
    _load()
    return _plugin_path


def _address(mpi_comm: Any) -> int:
    """The address of the MPI_Comm handle: mpi4py's ``MPI._addressof(comm)``, or an int."""
    if isinstance(mpi_comm, int):
        if mpi_comm <= 0:
            raise ValueError("flowlane.mpi: the communicator's address must be a positive int")
        return mpi_comm
    try:
        from mpi4py import MPI  # the caller's mpi4py: a communicator's handle address
    except ImportError:  # pragma: no cover - only without mpi4py
        raise TypeError("flowlane.mpi: pass an mpi4py communicator, or the address of an MPI_Comm as an int")
    if not isinstance(mpi_comm, MPI.Comm):
        raise TypeError("flowlane.mpi: %s is not an mpi4py communicator" % type(mpi_comm).__name__)
    return int(MPI._addressof(mpi_comm))


def _create(fn_name: str, engine: "Engine", mpi_comm: Any, lane: int, device: int, flags: int, nranks: int,
            rank: int, backend: Union[CommBackend, int, None]) -> Comm:
    lib = _load()
    d = _ffi.init(_capi.fl_comm_desc)
    d.nranks = _int("nranks", nranks, 0, _U64_MAX)
    d.rank = _int("rank", rank, 0, _U64_MAX)
    d.lane = _int("lane", lane, 0, _U64_MAX)
    d.device = _int("device", device, 0, _U64_MAX)
    d.backend = _capi.FL_COMM_NCCL if backend == CommBackend.NCCL else 0
    d.flags = _int("flags", flags, 0, _U64_MAX)
    out = _ffi.comm_p()
    where = "flowlane.mpi." + fn_name
    with engine._admitted(where) as h:
        check(getattr(lib, "fl_mpi_" + fn_name)(h, byref(d), c_void_p(_address(mpi_comm)), byref(out)), where)
    return Comm._adopt(engine, out, lane=lane, device=device, backend=backend)


def comm_create(engine: "Engine", mpi_comm: Any, *, lane: int = 0, serialized: bool = False, unordered: bool = False,
                nranks: int = 0, rank: int = 0) -> Comm:
    """This engine's rank in a communicator over MPI (collective over ``mpi_comm``; its size
    and rank unless nranks is given). MPI must run at MPI_THREAD_MULTIPLE (mpi4py's
    default), or MPI_THREAD_SERIALIZED with ``serialized=True``."""
    flags = (SERIALIZED if serialized else 0) | (_capi.FL_COMM_UNORDERED if unordered else 0)
    return _create("comm_create", engine, mpi_comm, lane, 0, flags, nranks, rank, None)


def nccl_comm_create(engine: "Engine", mpi_comm: Any, *, device: int, lane: int = 0, unordered: bool = False) -> Comm:
    """An NCCL communicator of ``mpi_comm``'s ranks on CUDA device ``device``, rank 0's
    unique id broadcast over MPI (collective over ``mpi_comm``)."""
    flags = _capi.FL_COMM_UNORDERED if unordered else 0
    return _create("nccl_comm_create", engine, mpi_comm, lane, device, flags, 0, 0, CommBackend.NCCL)
