"""Low-level ctypes declarations of the flowlane C API (capi/include/flowlane/flowlane.h).

This module loads ``libflowlane.so.0`` once, checks its major version, and declares
``argtypes``/``restype`` for every function of the header. Everything here mirrors C
one-to-one; the Pythonic surface lives in the other modules of the package.

Where the library is looked for, in order:

1. the ``FLOWLANE_LIBRARY`` environment variable (a path to the shared library);
2. next to this package (``flowlane/libflowlane.so.0``, for wheels that ship it);
3. the CMake build trees of a source checkout: ``<repo>/build/capi``, then the other
   ``<repo>/build*/capi`` directories (newest first);
4. the system loader (``LD_LIBRARY_PATH``, ``ldconfig``): ``libflowlane.so.0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int32,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

# The major version these bindings are written against; a library with another major
# version has an incompatible ABI and is refused at import.
EXPECTED_MAJOR = 0
# The minor version of the header these bindings were written against (informational: a
# newer minor is a superset, an older one may lack symbols, which is reported at use).
EXPECTED_MINOR = 1

LIBRARY_ENV = "FLOWLANE_LIBRARY"
SONAME = "libflowlane.so.0"

# --------------------------------------------------------------------------------------
# Statuses (pinned values; only appended)

FL_OK = 0
FL_ERR_INVALID_ARGUMENT = 1
FL_ERR_INVALID_HANDLE = 2
FL_ERR_OUT_OF_RANGE = 3
FL_ERR_NO_MEMORY = 4
FL_ERR_WOULD_BLOCK = 5
FL_ERR_EXHAUSTED = 6
FL_ERR_SHUTDOWN = 7
FL_ERR_INSTRUCTION_FAILED = 8
FL_ERR_DEPENDENCY_FAILED = 9
FL_ERR_CANCELLED = 10
FL_ERR_TIMEOUT = 11
FL_ERR_UNSUPPORTED = 12
FL_ERR_NO_DEVICE = 13
FL_ERR_CUDA = 14
FL_ERR_NCCL = 15
FL_ERR_INTERNAL = 16

FL_READ = 1
FL_WRITE = 2
FL_READ_WRITE = 3

FL_SUBMIT_NONBLOCKING = 1
FL_COMM_UNORDERED = 1  # fl_comm_desc_t.flags

FL_DEVICE_CPU = 0
FL_DEVICE_CUDA = 1

FL_STREAM_HOST = 0
FL_STREAM_COMPUTE = 1
FL_STREAM_H2D = 2
FL_STREAM_D2H = 3
FL_STREAM_COLLECTIVE = 4

FL_MEMCPY_H2D = 1
FL_MEMCPY_D2H = 2
FL_MEMCPY_D2D = 3
FL_MEMSET = 4

FL_COMM_NCCL = 0
FL_COMM_HOST_FAKE = 1

FL_COLL_ALL_REDUCE = 1
FL_COLL_ALL_GATHER = 2
FL_COLL_REDUCE_SCATTER = 3
FL_COLL_BROADCAST = 4
FL_COLL_SEND = 5
FL_COLL_RECV = 6

FL_DTYPE_INT8 = 0
FL_DTYPE_UINT8 = 1
FL_DTYPE_INT32 = 2
FL_DTYPE_UINT32 = 3
FL_DTYPE_INT64 = 4
FL_DTYPE_UINT64 = 5
FL_DTYPE_FLOAT16 = 6
FL_DTYPE_FLOAT32 = 7
FL_DTYPE_FLOAT64 = 8
FL_DTYPE_BFLOAT16 = 9

FL_REDOP_SUM = 0
FL_REDOP_PROD = 1
FL_REDOP_MAX = 2
FL_REDOP_MIN = 3

fl_status_t = c_int32  # a C enum: int-sized
fl_instr_id = c_uint64


# --------------------------------------------------------------------------------------
# Opaque handles: empty structures used only through POINTER, so ctypes refuses to pass an
# engine where a stream is expected.

class fl_engine(Structure):
    pass


class fl_stream(Structure):
    pass


class fl_object(Structure):
    pass


class fl_taskgraph(Structure):
    pass


class fl_comm(Structure):
    pass


class fl_instr_ctx(Structure):
    pass


engine_p = POINTER(fl_engine)
stream_p = POINTER(fl_stream)
object_p = POINTER(fl_object)
taskgraph_p = POINTER(fl_taskgraph)
comm_p = POINTER(fl_comm)
instr_ctx_p = POINTER(fl_instr_ctx)

# --------------------------------------------------------------------------------------
# Callback types

fl_release_fn = CFUNCTYPE(None, c_void_p)
fl_host_fn = CFUNCTYPE(fl_status_t, instr_ctx_p, c_void_p)
fl_task_fn = CFUNCTYPE(fl_status_t, c_void_p)
fl_range_fn = CFUNCTYPE(fl_status_t, c_uint64, c_uint64, c_void_p)
fl_device_fn = CFUNCTYPE(fl_status_t, instr_ctx_p, c_void_p, c_void_p)
fl_dump_fn = CFUNCTYPE(None, c_char_p, c_void_p)

# --------------------------------------------------------------------------------------
# Plain structures (size-prefixed descriptors)


class fl_engine_desc(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("num_workers", c_uint64),
        ("max_lanes", c_uint64),
        ("inflight_limit", c_uint64),
        ("watchdog_ms", c_uint64),
        ("flags", c_uint64),
    ]


class fl_device(Structure):
    _fields_ = [("type", c_int32), ("index", c_int32)]


class fl_operand(Structure):
    _fields_ = [("object", object_p), ("access", c_uint32), ("reserved", c_uint32)]


class fl_host_instr(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("fn", fl_host_fn),
        ("user_data", c_void_p),
        ("cleanup", fl_release_fn),
        ("operands", POINTER(fl_operand)),
        ("num_operands", c_uint64),
        ("name", c_char_p),
        ("flags", c_uint64),
    ]


class fl_dim3(Structure):
    _fields_ = [("x", c_uint32), ("y", c_uint32), ("z", c_uint32)]


class fl_kernel_instr(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("func", c_void_p),
        ("grid", fl_dim3),
        ("block", fl_dim3),
        ("shared_mem_bytes", c_uint64),
        ("args", POINTER(c_void_p)),
        ("arg_sizes", POINTER(c_uint64)),
        ("num_args", c_uint64),
        ("operands", POINTER(fl_operand)),
        ("num_operands", c_uint64),
        ("name", c_char_p),
        ("flags", c_uint64),
    ]


class fl_device_instr(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("fn", fl_device_fn),
        ("user_data", c_void_p),
        ("cleanup", fl_release_fn),
        ("operands", POINTER(fl_operand)),
        ("num_operands", c_uint64),
        ("name", c_char_p),
        ("flags", c_uint64),
    ]


class fl_memcpy_instr(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("kind", c_uint32),
        ("value", c_uint32),
        ("dst", c_void_p),
        ("src", c_void_p),
        ("bytes", c_uint64),
        ("operands", POINTER(fl_operand)),
        ("num_operands", c_uint64),
        ("name", c_char_p),
        ("flags", c_uint64),
    ]


class fl_comm_unique_id(Structure):
    _fields_ = [("internal", c_char * 128)]


class fl_comm_desc(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("nranks", c_uint64),
        ("rank", c_uint64),
        ("device", c_uint64),
        ("lane", c_uint64),
        ("backend", c_uint64),
        ("flags", c_uint64),
    ]


class fl_coll_part(Structure):
    _fields_ = [
        ("op", c_uint32),
        ("dtype", c_uint32),
        ("redop", c_uint32),
        ("peer", c_uint32),
        ("sendbuf", c_void_p),
        ("recvbuf", c_void_p),
        ("count", c_uint64),
    ]


class fl_collective_instr(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("parts", POINTER(fl_coll_part)),
        ("num_parts", c_uint64),
        ("operands", POINTER(fl_operand)),
        ("num_operands", c_uint64),
        ("name", c_char_p),
        ("flags", c_uint64),
    ]


class fl_watchdog_desc(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("timeout_ms", c_uint64),
        ("callback", fl_dump_fn),
        ("user_data", c_void_p),
        ("path", c_char_p),
        ("flags", c_uint64),
    ]


class fl_engine_stats(Structure):
    _fields_ = [
        ("struct_size", c_uint64),
        ("submitted", c_uint64),
        ("completed", c_uint64),
        ("failed", c_uint64),
        ("in_flight", c_uint64),
        ("window_stalls", c_uint64),
        ("steals", c_uint64),
        ("parks", c_uint64),
    ]


def init(struct_type):
    """A zeroed descriptor with struct_size set: the FL_*_INIT macros."""
    s = struct_type()
    s.struct_size = ctypes.sizeof(struct_type)
    return s


# --------------------------------------------------------------------------------------
# Every function of the header: name -> (restype, argtypes).

_S = fl_status_t
FUNCTIONS = {
    # version and status
    "fl_version_hex": (c_uint32, []),
    "fl_version_string": (c_char_p, []),
    "fl_status_name": (c_char_p, [fl_status_t]),
    "fl_status_string": (c_char_p, [fl_status_t]),
    "fl_last_error_message": (c_char_p, []),
    # engine
    "fl_engine_create": (_S, [POINTER(fl_engine_desc), POINTER(engine_p)]),
    "fl_engine_synchronize": (_S, [engine_p]),
    "fl_engine_destroy": (_S, [engine_p]),
    "fl_engine_lane_count": (c_uint32, [engine_p]),
    "fl_engine_worker_count": (c_uint32, [engine_p]),
    # lanes
    "fl_lane_acquire": (_S, [engine_p, POINTER(c_uint32)]),
    "fl_lane_release": (_S, [engine_p, c_uint32]),
    # streams
    "fl_stream_get": (_S, [engine_p, c_uint32, fl_device, c_int32, POINTER(stream_p)]),
    "fl_stream_synchronize": (_S, [stream_p]),
    "fl_stream_info": (_S, [stream_p, POINTER(c_uint32), POINTER(fl_device), POINTER(c_int32)]),
    # objects
    "fl_object_create": (_S, [engine_p, c_void_p, fl_release_fn, POINTER(object_p)]),
    "fl_object_release": (_S, [object_p]),
    "fl_object_wait": (_S, [object_p, c_uint32]),
    "fl_object_user_data": (_S, [object_p, POINTER(c_void_p)]),
    # host instructions
    "fl_instr_set_error": (None, [instr_ctx_p, c_char_p]),
    "fl_instr_lane": (c_uint32, [instr_ctx_p]),
    "fl_instr_get_id": (fl_instr_id, [instr_ctx_p]),
    "fl_instr_engine": (engine_p, [instr_ctx_p]),
    "fl_submit_host": (_S, [stream_p, POINTER(fl_host_instr), POINTER(fl_instr_id)]),
    # task graphs and parallel loops
    "fl_parallel_for": (_S, [engine_p, c_uint64, c_uint64, c_uint64, fl_range_fn, c_void_p]),
    "fl_taskgraph_create": (_S, [engine_p, POINTER(taskgraph_p)]),
    "fl_taskgraph_add": (_S, [taskgraph_p, fl_task_fn, c_void_p, c_char_p, POINTER(c_uint64)]),
    "fl_taskgraph_precede": (_S, [taskgraph_p, c_uint64, c_uint64]),
    "fl_taskgraph_run": (_S, [taskgraph_p, c_int64]),
    "fl_taskgraph_destroy": (_S, [taskgraph_p]),
    # GPU
    "fl_cuda_device_count": (_S, [POINTER(c_int32)]),
    "fl_submit_kernel": (_S, [stream_p, POINTER(fl_kernel_instr), POINTER(fl_instr_id)]),
    "fl_submit_device": (_S, [stream_p, POINTER(fl_device_instr), POINTER(fl_instr_id)]),
    "fl_submit_memcpy": (_S, [stream_p, POINTER(fl_memcpy_instr), POINTER(fl_instr_id)]),
    "fl_host_alloc_pinned": (_S, [c_uint64, POINTER(c_void_p)]),
    "fl_host_free_pinned": (_S, [c_void_p]),
    "fl_cuda_priority_range": (_S, [c_int32, POINTER(c_int32), POINTER(c_int32)]),
    "fl_stream_set_priority": (_S, [stream_p, c_int32, POINTER(c_int32)]),
    # collectives
    "fl_comm_get_unique_id": (_S, [c_uint32, POINTER(fl_comm_unique_id)]),
    "fl_comm_create": (_S, [engine_p, POINTER(fl_comm_desc), POINTER(fl_comm_unique_id), POINTER(comm_p)]),
    "fl_comm_destroy": (_S, [comm_p]),
    "fl_submit_collective": (_S, [stream_p, comm_p, POINTER(fl_collective_instr), POINTER(fl_instr_id)]),
    # diagnostics
    "fl_engine_set_watchdog": (_S, [engine_p, POINTER(fl_watchdog_desc)]),
    "fl_engine_dump": (_S, [engine_p, c_char_p, c_uint64, POINTER(c_uint64)]),
    "fl_trace_start": (_S, [engine_p, c_char_p]),
    "fl_trace_stop": (_S, [engine_p]),
    "fl_engine_stats": (_S, [engine_p, POINTER(fl_engine_stats)]),
}


# --------------------------------------------------------------------------------------
# Loading


class LibraryNotFound(ImportError):
    """The shared library could not be found or loaded (an ImportError)."""


class LibraryVersionMismatch(ImportError):
    """The shared library found has an incompatible major version (an ImportError)."""


def _candidates():
    """(description, path or name) in search order."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        yield ("$" + LIBRARY_ENV, env)
        return  # an explicit choice is never second-guessed
    here = Path(__file__).resolve().parent
    for name in (SONAME, "libflowlane.so"):
        p = here / name
        if p.exists():
            yield ("next to the package", str(p))
    # A source checkout: bindings/python/flowlane -> repo root is parents[2].
    root = here.parents[2] if len(here.parents) > 2 else None
    if root is not None:
        preferred = root / "build" / "capi" / SONAME
        if preferred.exists():
            yield ("the build tree", str(preferred))
        others = []
        for d in root.glob("build*/capi/" + SONAME):
            if d != preferred:
                try:
                    others.append((d.stat().st_mtime, d))
                except OSError:
                    pass
        for _, d in sorted(others, reverse=True):
            yield ("a build tree", str(d))
    yield ("the system loader", SONAME)
    found = ctypes.util.find_library("flowlane")
    if found and found != SONAME:
        yield ("the system loader", found)


def _load():
    tried = []
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
            continue
        return lib, path
    raise LibraryNotFound(
        "flowlane: cannot load the shared library %s. Build it (cmake --build build --target "
        "flowlane) or set %s to its path. Tried:\n  %s" % (SONAME, LIBRARY_ENV, "\n  ".join(tried))
    )


def _declare(lib, path):
    missing = []
    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype = restype
        f.argtypes = argtypes
    return missing


lib, path = _load()
lib.fl_version_hex.restype = c_uint32
lib.fl_version_hex.argtypes = []
version_hex = int(lib.fl_version_hex())
version = (version_hex >> 16, (version_hex >> 8) & 0xFF, version_hex & 0xFF)
if version[0] != EXPECTED_MAJOR:
    raise LibraryVersionMismatch(
        "flowlane: %s is version %d.%d.%d, but these bindings need major version %d "
        "(an incompatible ABI). Point %s at a matching libflowlane.so.%d."
        % (path, version[0], version[1], version[2], EXPECTED_MAJOR, LIBRARY_ENV, EXPECTED_MAJOR)
    )
# Symbols a (stale or older) library lacks are reported here; calling one raises
# AttributeError naming it. The test suite checks that the list is empty.
missing_symbols = _declare(lib, path)


def last_error_message() -> str:
    msg = lib.fl_last_error_message()
    return msg.decode("utf-8", "replace") if msg else ""


def status_name(status: int) -> str:
    return lib.fl_status_name(status).decode("ascii", "replace")


def status_string(status: int) -> str:
    return lib.fl_status_string(status).decode("utf-8", "replace")


def encode_name(name):
    """A str/bytes/None name to bytes or None (C copies it)."""
    if name is None:
        return None
    if isinstance(name, bytes):
        return name
    if isinstance(name, str):
        return name.encode("utf-8")
    raise TypeError("name must be a str, bytes or None, not %s" % type(name).__name__)


def address(ptr) -> int:
    """The address held by a ctypes pointer (0 for NULL)."""
    return ctypes.cast(ptr, c_void_p).value or 0


is_finalizing = sys.is_finalizing
