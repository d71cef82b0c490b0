"""The exception hierarchy: one FlowlaneError subclass per status of the header's
FL_STATUS_MAP (taken from the generated status table, :data:`flowlane._capi.STATUSES`).

Each class below names its status (``c_name``); its value and description come from the
table, never restated here. A status appended to the header that has no class here yet
still gets its own class (named after it, e.g. ``FL_ERR_NEW_THING`` -> ``NewThing``), so a
newer header never makes an error fall back to :class:`UnknownStatus`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Dict, Optional, Tuple, Type

from . import _capi, _ffi

__all__ = [
    "FlowlaneError",
    "InvalidArgument",
    "InvalidHandle",
    "OutOfRange",
    "NoMemory",
    "WouldBlock",
    "Exhausted",
    "Shutdown",
    "InstructionFailed",
    "DependencyFailed",
    "Cancelled",
    "Capturing",
    "Timeout",
    "Unsupported",
    "NoDevice",
    "CudaError",
    "NcclError",
    "InternalError",
    "UnknownStatus",
    "ClosedError",
    "UndeclaredAccess",
    "STATUS_CLASSES",
    "error_for",
    "check",
]

#: name -> (value, description), from the header's FL_STATUS_MAP.
_TABLE: Dict[str, Tuple[int, str]] = {name: (value, text) for name, value, text in _capi.STATUSES}

# "fl_stream_get: lane 9 is out of range" -> ("fl_stream_get", "lane 9 is out of range")
_C_PREFIX = re.compile(r"^(fl_[a-z0-9_]+): ")


class FlowlaneError(Exception):
    """A flowlane call failed.

    Attributes:
        status: the fl_status_t value (int).
        status_name: its C name, e.g. "FL_ERR_OUT_OF_RANGE".
        message: what went wrong, in words (fl_last_error_message() of the failed call,
            without the C function's name).
        function: the Python call that failed, e.g. "Engine.stream" (or None).
        c_function: the C function that reported it, e.g. "fl_stream_get" (or None).
    """

    #: The fl_status_t value of this class (set from the status table).
    status: int = -1
    #: The status's name in the header (set on each subclass).
    c_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("c_name")
        if name:
            if name not in _TABLE:
                raise RuntimeError("flowlane.errors: %s names %s, which the header's FL_STATUS_MAP does not have"
                                   % (cls.__name__, name))
            value, text = _TABLE[name]
            cls.status = value
            cls.__doc__ = "%s: %s.%s" % (name, text, ("\n\n" + cls.__doc__) if cls.__doc__ else "")

    def __init__(self, message: str = "", status: Optional[int] = None, function: Optional[str] = None,
                 c_function: Optional[str] = None):
        if status is not None:
            self.status = status
        m = _C_PREFIX.match(message)
        if m:
            c_function = c_function or m.group(1)
            message = message[m.end():]
        self.message = message
        self.function = function
        self.c_function = c_function
        super().__init__(message)

    @property
    def status_name(self) -> str:
        """The status's C name, e.g. "FL_ERR_OUT_OF_RANGE"."""
        return _ffi.status_name(self.status)

    def __str__(self) -> str:
        text = self.message or _ffi.status_string(self.status)
        where = "%s: " % self.function if self.function else ""
        return "%s%s [%s]" % (where, text, self.status_name)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.message, self.status, self.function, self.c_function))


class InvalidArgument(FlowlaneError, ValueError):
    """Also a ValueError: NULL pointer, bad flag, bad size, cycle, a wait on itself."""

    c_name = "FL_ERR_INVALID_ARGUMENT"


class InvalidHandle(FlowlaneError):
    """A handle that was released, destroyed or belongs to something else."""

    c_name = "FL_ERR_INVALID_HANDLE"


class ClosedError(InvalidHandle):
    """A Python wrapper was used after close() (detected without calling C)."""


class UndeclaredAccess(InvalidArgument):
    """An instruction's callable read or wrote ``obj.value`` of an object it did not declare
    in ``reads=``/``writes=`` (raised when ``FLOWLANE_CHECK_ACCESS=1``): the engine does not
    order that access, so the value may be stale or overwritten concurrently."""


class OutOfRange(FlowlaneError, IndexError):
    """Also an IndexError: lane, device index or count out of range."""

    c_name = "FL_ERR_OUT_OF_RANGE"


class NoMemory(FlowlaneError, MemoryError):
    """Also a MemoryError."""

    c_name = "FL_ERR_NO_MEMORY"


class WouldBlock(FlowlaneError):
    """The in-flight window is full and block=False was given."""

    c_name = "FL_ERR_WOULD_BLOCK"


class Exhausted(FlowlaneError):
    """Every lane is held: release one (``with engine.lane():`` does)."""

    c_name = "FL_ERR_EXHAUSTED"


class Shutdown(FlowlaneError):
    """The engine is being closed."""

    c_name = "FL_ERR_SHUTDOWN"


class InstructionFailed(FlowlaneError):
    """An instruction reported failure.

    When the failing instruction was a Python callable, the wait that observes the failure
    raises the callable's own exception (``except FileNotFoundError`` catches it), chained
    from this error, which carries the instruction's context (its name, id and lane in the
    message); ``original`` then refers to that exception. This class itself is raised for
    failures with no Python exception behind them (a C instruction, a GPU error).
    """

    c_name = "FL_ERR_INSTRUCTION_FAILED"
    #: The Python exception of the failing callable, when there was one.
    original: Optional[BaseException] = None


class DependencyFailed(InstructionFailed):
    """Skipped because something it read was poisoned by a failed instruction.

    A subclass of InstructionFailed; ``original`` is the exception of the instruction that
    poisoned the input, if it was a Python callable.
    """

    c_name = "FL_ERR_DEPENDENCY_FAILED"


class Cancelled(FlowlaneError):
    """The operation was cancelled (e.g. a collective aborted by the engine's close())."""

    c_name = "FL_ERR_CANCELLED"


class Capturing(FlowlaneError):
    """Refused because the calling thread captures on this engine (``with engine.capture()``):
    a wait, synchronize, query or launch would wait for, or ask about, work that has not been
    submitted; a captured instruction's future has no result of its own."""

    c_name = "FL_ERR_CAPTURING"


class Timeout(FlowlaneError, TimeoutError):
    """Also a TimeoutError."""

    c_name = "FL_ERR_TIMEOUT"


class Unsupported(FlowlaneError, NotImplementedError):
    """Also a NotImplementedError: e.g. a GPU call in a CPU-only build of the library."""

    c_name = "FL_ERR_UNSUPPORTED"


class NoDevice(FlowlaneError):
    """The device does not exist on this machine."""

    c_name = "FL_ERR_NO_DEVICE"


class CudaError(FlowlaneError):
    """The CUDA runtime reported an error (the message has its text)."""

    c_name = "FL_ERR_CUDA"


class NcclError(FlowlaneError):
    """NCCL reported an error (the message has its text)."""

    c_name = "FL_ERR_NCCL"


class InternalError(FlowlaneError):
    """A bug in flowlane or in these bindings: please report it with the message."""

    c_name = "FL_ERR_INTERNAL"


class UnknownStatus(FlowlaneError):
    """A status value that the header these bindings were generated from does not have
    (a newer library)."""


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in re.sub(r"^FL_(ERR_)?", "", name).split("_") if p)


def _status_classes() -> Dict[int, Type[FlowlaneError]]:
    declared: Dict[str, Type[FlowlaneError]] = {}
    todo = list(FlowlaneError.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__dict__.get("c_name"):
            declared[cls.__dict__["c_name"]] = cls
    classes: Dict[int, Type[FlowlaneError]] = {}
    for name, value, _text in _capi.STATUSES:
        if value == _capi.FL_OK:
            continue
        found = declared.get(name)
        if found is None:  # appended to the header after this file was written
            found = type(_camel(name), (FlowlaneError,), {"c_name": name, "__module__": __name__})
            globals()[found.__name__] = found
        classes[value] = found
    return classes


#: fl_status_t value -> exception class, one per failure status of FL_STATUS_MAP.
STATUS_CLASSES: Dict[int, Type[FlowlaneError]] = _status_classes()


def error_for(status: int, message: Optional[str] = None, function: Optional[str] = None) -> FlowlaneError:
    """The exception for a failed status (message defaults to fl_last_error_message());
    ``function`` names the Python call that failed."""
    if message is None:
        message = _ffi.last_error_message()
    cls = STATUS_CLASSES.get(status, UnknownStatus)
    return cls(message, status, function)


def check(status: int, function: Optional[str] = None) -> None:
    """Raises the FlowlaneError subclass for a non-OK status; ``function`` names the
    Python call that failed (e.g. "Engine.stream")."""
    if status != _capi.FL_OK:
        raise error_for(status, None, function)
