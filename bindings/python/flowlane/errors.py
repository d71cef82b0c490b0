"""The exception hierarchy: one FlowlaneError subclass per fl_status_t value."""

from __future__ import annotations

from . import _ffi

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
    "Timeout",
    "Unsupported",
    "NoDevice",
    "CudaError",
    "NcclError",
    "InternalError",
    "UnknownStatus",
    "ClosedError",
    "error_for",
    "check",
]


class FlowlaneError(Exception):
    """A flowlane call failed.

    Attributes:
        status: the fl_status_t value (int).
        status_name: its C name, e.g. "FL_ERR_OUT_OF_RANGE".
        message: fl_last_error_message() of the failed call (what went wrong, in words).
        function: the C function that failed (or None).
    """

    status = -1

    def __init__(self, message: str = "", status: int | None = None, function: str | None = None):
        if status is not None:
            self.status = status
        self.message = message
        self.function = function
        super().__init__(message)

    @property
    def status_name(self) -> str:
        return _ffi.status_name(self.status)

    def __str__(self) -> str:
        text = self.message or _ffi.status_string(self.status)
        # The library's messages usually name the function already.
        where = "%s: " % self.function if self.function and not text.startswith(self.function) else ""
        return "%s%s [%s]" % (where, text, self.status_name)

    def __reduce__(self):
        return (type(self), (self.message, self.status, self.function))


class InvalidArgument(FlowlaneError, ValueError):
    """FL_ERR_INVALID_ARGUMENT: NULL pointer, bad flag, bad size, cycle, wait on itself."""

    status = _ffi.FL_ERR_INVALID_ARGUMENT


class InvalidHandle(FlowlaneError):
    """FL_ERR_INVALID_HANDLE: stale, released or foreign handle."""

    status = _ffi.FL_ERR_INVALID_HANDLE


class ClosedError(InvalidHandle):
    """A Python wrapper was used after close() (detected without calling C)."""


class OutOfRange(FlowlaneError, IndexError):
    """FL_ERR_OUT_OF_RANGE: lane, device index or count out of range."""

    status = _ffi.FL_ERR_OUT_OF_RANGE


class NoMemory(FlowlaneError, MemoryError):
    """FL_ERR_NO_MEMORY."""

    status = _ffi.FL_ERR_NO_MEMORY


class WouldBlock(FlowlaneError):
    """FL_ERR_WOULD_BLOCK: the in-flight window is full and block=False was given."""

    status = _ffi.FL_ERR_WOULD_BLOCK


class Exhausted(FlowlaneError):
    """FL_ERR_EXHAUSTED: every lane is held."""

    status = _ffi.FL_ERR_EXHAUSTED


class Shutdown(FlowlaneError):
    """FL_ERR_SHUTDOWN: the engine is being destroyed."""

    status = _ffi.FL_ERR_SHUTDOWN


class InstructionFailed(FlowlaneError):
    """FL_ERR_INSTRUCTION_FAILED: an instruction reported failure.

    When the failing instruction was a Python callable, ``original`` is the exception it
    raised (also set as ``__cause__``); the message holds its type, text and traceback.
    """

    status = _ffi.FL_ERR_INSTRUCTION_FAILED
    original: BaseException | None = None


class DependencyFailed(InstructionFailed):
    """FL_ERR_DEPENDENCY_FAILED: skipped because something it read was poisoned.

    A subclass of InstructionFailed, so ``except InstructionFailed`` catches both;
    ``original`` is the exception of the instruction that poisoned the input, if known.
    """

    status = _ffi.FL_ERR_DEPENDENCY_FAILED


class Cancelled(FlowlaneError):
    status = _ffi.FL_ERR_CANCELLED


class Timeout(FlowlaneError, TimeoutError):
    status = _ffi.FL_ERR_TIMEOUT


class Unsupported(FlowlaneError, NotImplementedError):
    """FL_ERR_UNSUPPORTED: not supported by this build (e.g. a GPU call without CUDA)."""

    status = _ffi.FL_ERR_UNSUPPORTED


class NoDevice(FlowlaneError):
    status = _ffi.FL_ERR_NO_DEVICE


class CudaError(FlowlaneError):
    status = _ffi.FL_ERR_CUDA


class NcclError(FlowlaneError):
    status = _ffi.FL_ERR_NCCL


class InternalError(FlowlaneError):
    status = _ffi.FL_ERR_INTERNAL


class UnknownStatus(FlowlaneError):
    """A status value this version of the bindings does not know (a newer library)."""


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgument,
        InvalidHandle,
        OutOfRange,
        NoMemory,
        WouldBlock,
        Exhausted,
        Shutdown,
        InstructionFailed,
        DependencyFailed,
        Cancelled,
        Timeout,
        Unsupported,
        NoDevice,
        CudaError,
        NcclError,
        InternalError,
    )
}


def error_for(status: int, message: str | None = None, function: str | None = None) -> FlowlaneError:
    """The exception for a failed status (message defaults to fl_last_error_message())."""
    if message is None:
        message = _ffi.last_error_message()
    cls = _BY_STATUS.get(status, UnknownStatus)
    return cls(message, status, function)


def check(status: int, function: str | None = None) -> None:
    """Raises the FlowlaneError subclass for a non-OK status."""
    if status != _ffi.FL_OK:
        raise error_for(status, None, function)
