"""Small public value types (Access, StreamKind, DeviceType, Device, CPU, EngineStats, KEEP)
and the checks every binding applies to integer and access arguments."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional, TypeVar, Union

from . import _capi

T = TypeVar("T")

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


class Access(enum.IntFlag):
    """How an instruction (or a wait) accesses an object: READ, WRITE or READ_WRITE."""

    READ = _capi.FL_READ
    WRITE = _capi.FL_WRITE
    READ_WRITE = _capi.FL_READ_WRITE


class StreamKind(enum.IntEnum):
    """The kind of a stream: HOST (Python callables), or a CUDA stream (COMPUTE, H2D, D2H,
    COLLECTIVE)."""

    HOST = _capi.FL_STREAM_HOST
    COMPUTE = _capi.FL_STREAM_COMPUTE
    H2D = _capi.FL_STREAM_H2D
    D2H = _capi.FL_STREAM_D2H
    COLLECTIVE = _capi.FL_STREAM_COLLECTIVE


class DeviceType(enum.IntEnum):
    """CPU or CUDA."""

    CPU = _capi.FL_DEVICE_CPU
    CUDA = _capi.FL_DEVICE_CUDA


@dataclass(frozen=True)
class Device:
    """A device: ``Device.cpu()`` (the default) or ``Device.cuda(i)``."""

    type: DeviceType = DeviceType.CPU
    index: int = 0

    @staticmethod
    def cpu() -> "Device":
        """The host."""
        return CPU

    @staticmethod
    def cuda(index: int = 0) -> "Device":
        """CUDA device ``index``."""
        return Device(DeviceType.CUDA, _int("index", index, -(2**31), 2**31 - 1))

    def _c(self) -> Any:
        return _capi.fl_device(int(self.type), int(self.index))

    def __str__(self) -> str:
        return "cpu" if self.type == DeviceType.CPU else "cuda:%d" % self.index


#: The host device.
CPU = Device()


@dataclass(frozen=True)
class EngineStats:
    """Counters of fl_engine_stats (a snapshot): instructions submitted, completed and
    failed, in flight now, submissions that waited for the window, work-stealing steals,
    worker parks, instructions whose outcome is cancelled (counted in failed too) and
    pool tasks run."""

    submitted: int
    completed: int
    failed: int
    in_flight: int
    window_stalls: int
    steals: int
    parks: int
    cancelled: int = 0
    tasks: int = 0


class _Keep:
    """A marker a callable returns (alone, or in its tuple) to leave a written object's
    value unchanged, e.g. after mutating it in place."""

    _instance: Optional["_Keep"] = None

    def __new__(cls) -> "_Keep":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "flowlane.KEEP"

    def __reduce__(self) -> str:
        return "KEEP"


#: Returned by a callable (alone or in its tuple) to leave a written object's value as it
#: is, e.g. after mutating it in place.
KEEP = _Keep()

AccessLike = Union[Access, int, str]


def _int(what: str, value: Any, lo: int, hi: int) -> int:
    """An integer argument, refusing bools, floats and strings with a clear TypeError and
    out-of-range values with a ValueError (ctypes would silently wrap them)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, not %s" % (what, type(value).__name__))
    v = int(value.__index__())
    if v < lo or v > hi:
        raise ValueError("%s must be in [%d, %d], got %d" % (what, lo, hi, v))
    return v


def _access(value: AccessLike) -> int:
    if isinstance(value, str):
        m = {"r": 1, "read": 1, "w": 2, "write": 2, "rw": 3, "read_write": 3, "readwrite": 3}
        try:
            return m[value.lower()]
        except KeyError:
            raise ValueError("access must be 'read', 'write' or 'read_write', got %r" % value) from None
    return _int("access", value, 0, _U32_MAX)
