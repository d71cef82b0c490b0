"""flowlane: Python bindings (ctypes, standard library only) of the flowlane engine.

    import flowlane

    with flowlane.Engine(workers=4) as engine:
        x = engine.object(3.0)
        y = engine.object()
        f = engine.submit(lambda v: v * 2, reads=[x], writes=[y], name="double")
        print(y.wait(timeout=5))   # 6.0
        print(f.result())          # 6.0: a concurrent.futures.Future

The model. An :class:`Engine` runs *instructions* (Python callables) on its worker threads.
An instruction may list the :class:`Object` values it reads and writes (``reads=``,
``writes=``): the engine runs it after the last writer of what it reads and after every
earlier reader and writer of what it writes, and everything else in parallel. A *lane*
(``lane=k``, ``with engine.lane():``, :class:`Lane`, :class:`Stream`) runs its instructions
in submission order. ``engine.submit(fn)`` with neither operands nor lane runs as on a
thread pool: in parallel with other such submissions, ordered against nothing (see
:meth:`Engine.submit`).

Results and errors. ``submit`` returns a :class:`Future` (a ``concurrent.futures.Future``).
A callable's exception fails its instruction, poisons what it writes and skips what reads
that; the wait that observes it raises the exception itself, chained from an
:class:`InstructionFailed` (or :class:`DependencyFailed`) naming the instruction. Failures
nobody observed are logged (logger "flowlane") when the engine closes. Every wait takes a
timeout and Ctrl-C interrupts it; Ctrl-C that ends a ``with Engine`` block cancels what has
not started and waits only for what runs (a second Ctrl-C exits at once).

Threads. Engines, streams, objects, lanes and futures may be used from any thread; see each
class. Environment: ``FLOWLANE_LIBRARY`` (the shared library to load),
``FLOWLANE_CHECK_ACCESS=1`` (``obj.value`` of an undeclared object inside a callable raises
:class:`UndeclaredAccess`). ``python -m flowlane`` checks an installation.
"""

from . import _ffi
from ._context import InstrContext, current_instruction
from ._engine import Engine
from ._ffi import LibraryNotFound, LibraryVersionMismatch
from ._future import Future, InstrState
from ._object import Object
from ._program import CapturedFuture, Launch, Program, ProgramInfo
from ._stream import Lane, Stream
from ._types import CPU, KEEP, Access, Device, DeviceType, EngineStats, StreamKind
from .comm import CollOp, CollPart, Comm, CommBackend, CommUniqueId, DType, RedOp
from .errors import (
    Cancelled,
    Capturing,
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
    "Access", "CPU", "Cancelled", "CapturedFuture", "Capturing", "ClosedError", "CollOp", "CollPart", "Comm", "CommBackend", "CommUniqueId",
    "CudaError", "DType", "DependencyFailed", "Device", "DeviceType", "Engine", "EngineStats", "Exhausted",
    "FlowlaneError", "Future", "InstrContext", "InstrState", "InstructionFailed", "InternalError", "InvalidArgument", "InvalidHandle",
    "KEEP", "Lane", "Launch", "LibraryNotFound", "LibraryVersionMismatch", "MemcpyKind", "NcclError", "NoDevice", "NoMemory",
    "Object", "OutOfRange", "PinnedBuffer", "Program", "ProgramInfo", "READ", "READ_WRITE", "RedOp", "Shutdown", "Stream", "StreamKind",
    "Task", "TaskGraph", "TaskGroup", "Timeout", "UndeclaredAccess", "UnknownStatus", "Unsupported", "WRITE", "WouldBlock", "cuda_device_count",
    "cuda_priority_range", "current_instruction", "library_path", "library_version", "parallel_for",
]
