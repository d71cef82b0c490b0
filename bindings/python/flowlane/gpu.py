"""GPU entry points: devices, pinned host memory, and (re-exported from where they live)
the GPU submissions of a stream and the communicators.

In a CPU-only build of the library every CUDA call raises :class:`Unsupported` (the
symbols exist with or without CUDA); the wrappers are complete so that Python code
written against them runs unchanged on a CUDA build. Communicators with the HOST_FAKE
backend need no GPU: they live in :mod:`flowlane.comm` and are re-exported here.

Raw device pointers are plain ints here. The library copies kernel arguments at submit;
buffers behind pointers (memcpy, collectives) must stay alive until the instruction
completes: describe them with flowlane Objects in ``reads``/``writes`` and wait on those.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int32, c_void_p
from typing import Any, Tuple

from ._device import MemcpyKind, stream_set_priority, submit_device, submit_kernel, submit_memcpy
from ._ffi import lib
from ._managed import Managed
from ._types import _U64_MAX, _int
from .comm import CollOp, CollPart, Comm, CommBackend, CommUniqueId, DType, RedOp
from .errors import check

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


class PinnedBuffer(Managed):
    """Page-locked host memory (``fl_host_alloc_pinned``): ``.address``, ``len()``, and the
    buffer protocol through ``memoryview(buf.view())``."""

    __slots__ = ("nbytes", "_array")
    _kind = "pinned buffer"

    def __init__(self, nbytes: int):
        super().__init__()
        #: Size in bytes.
        self.nbytes = _int("nbytes", nbytes, 0, _U64_MAX)
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


