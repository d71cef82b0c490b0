"""flowlane: Python bindings (ctypes, standard library only) of the flowlane engine.

    import flowlane

    with flowlane.Engine(workers=4) as engine:
        x = engine.object(3.0)
        y = engine.object()
        f = engine.submit(lambda v: v * 2, reads=[x], writes=[y], name="double")
        print(y.wait(timeout=5))   # 6.0
        print(f.result())          # 6.0: a concurrent.futures.Future

See bindings/README.md for the model (lanes, streams, objects), errors and thread-safety.
"""

from . import _ffi
from ._context import InstrContext, current_instruction
from ._engine import Engine
from ._ffi import LibraryNotFound, LibraryVersionMismatch
from ._future import Future, InstrState
from ._object import Object
from ._stream import Lane, Stream
from ._types import CPU, KEEP, Access, Device, DeviceType, EngineStats, StreamKind
from .comm import CollOp, CollPart, Comm, CommBackend, CommUniqueId, DType, RedOp
from .errors import (
    Cancelled,
    ClosedError,
    CudaError,
    DependencyFailed,
    Exhausted,
    FlowlaneError,
    InstructionFailed,
    InternalError,
    InvalidArgument,
    InvalidHandle,
    NcclError,
    NoDevice,
    NoMemory,
    OutOfRange,
    Shutdown,
    Timeout,
    UndeclaredAccess,
    UnknownStatus,
    Unsupported,
    WouldBlock,
)
from .gpu import MemcpyKind, PinnedBuffer, cuda_device_count, cuda_priority_range
from .graph import Task, TaskGraph, TaskGroup, parallel_for

__version__ = "0.1.0"

#: (major, minor, patch) of the loaded C library.
library_version = _ffi.version
#: Path the C library was loaded from.
library_path = _ffi.path

READ = Access.READ
WRITE = Access.WRITE
READ_WRITE = Access.READ_WRITE

__all__ = [
    "Access", "CPU", "Cancelled", "ClosedError", "CollOp", "CollPart", "Comm", "CommBackend", "CommUniqueId",
    "CudaError", "DType", "DependencyFailed", "Device", "DeviceType", "Engine", "EngineStats", "Exhausted",
    "FlowlaneError", "Future", "InstrContext", "InstrState", "InstructionFailed", "InternalError", "InvalidArgument", "InvalidHandle",
    "KEEP", "Lane", "LibraryNotFound", "LibraryVersionMismatch", "MemcpyKind", "NcclError", "NoDevice", "NoMemory",
    "Object", "OutOfRange", "PinnedBuffer", "READ", "READ_WRITE", "RedOp", "Shutdown", "Stream", "StreamKind",
    "Task", "TaskGraph", "TaskGroup", "Timeout", "UndeclaredAccess", "UnknownStatus", "Unsupported", "WRITE", "WouldBlock", "cuda_device_count",
    "cuda_priority_range", "current_instruction", "library_path", "library_version", "parallel_for",
]
