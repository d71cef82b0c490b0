"""GPU work on a stream: kernels, device functions, copies and memsets, stream priorities.
The :class:`flowlane.Stream` methods (``submit_kernel``, ``submit_device``, ``memcpy``,
``memset``, ``set_priority``) call these; :mod:`flowlane.gpu` exports them.

Raw device pointers are plain ints here. The library copies kernel arguments at submit;
buffers behind pointers (memcpy) must stay alive until the instruction completes: describe
them with flowlane Objects in ``reads``/``writes`` and wait on those."""

from __future__ import annotations

import ctypes
import enum
from ctypes import byref, c_int32, c_uint64, c_void_p
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Tuple, Union

from . import _capi, _ffi
from ._base import _keep, _pin_thread_state, _register, _release_trampoline
from ._engine_base import EngineBase
from ._ffi import lib
from ._instr import fail_instruction
from ._managed import _tls
from ._object import Object, _objects, _operands
from ._types import _U32_MAX, _U64_MAX, _int
from .errors import check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._stream import Stream


class MemcpyKind(enum.IntEnum):
    """Direction of a copy (or MEMSET)."""

    H2D = _capi.FL_MEMCPY_H2D
    D2H = _capi.FL_MEMCPY_D2H
    D2D = _capi.FL_MEMCPY_D2D
    MEMSET = _capi.FL_MEMSET



def stream_set_priority(stream: "Stream", priority: int) -> int:
    """Sets a CUDA stream's priority (before its first instruction); returns the applied,
    clamped value."""
    applied = c_int32()
    p = _int("priority", priority, -(2**31), 2**31 - 1)
    with stream.engine._call("Stream.set_priority"):
        check(lib.fl_stream_set_priority(stream._ptr(), p, byref(applied)), "Stream.set_priority")
    return int(applied.value)


def _gpu_operands(stream: "Stream", reads: Iterable[Object[Any]], writes: Iterable[Object[Any]],
                  where: str) -> Tuple[Any, int]:
    return _operands(_objects("reads", reads, stream.engine, where), _objects("writes", writes, stream.engine, where))


def _dim3(what: str, v: Union[int, Sequence[int]]) -> Any:
    t = (v,) if isinstance(v, int) else tuple(v)
    if len(t) > 3:
        raise ValueError("%s must have at most 3 components" % what)
    t = t + (1,) * (3 - len(t))
    return _capi.fl_dim3(*[_int(what, c, 0, _U32_MAX) for c in t])


def submit_kernel(stream: "Stream", func: int, *, grid: Union[int, Sequence[int]] = (1, 1, 1),
                  block: Union[int, Sequence[int]] = (1, 1, 1), args: Sequence[Any] = (), shared_mem: int = 0,
                  reads: Iterable[Object[Any]] = (), writes: Iterable[Object[Any]] = (), name: Optional[str] = None,
                  nonblocking: bool = False) -> int:
    """Launches a ``__global__`` function (its host-side handle as an int address) with
    ``args``: ctypes instances (``c_float(1.0)``, ``c_void_p(ptr)``), copied at submit."""
    where = "Stream.submit_kernel"
    h = stream._ptr()
    instr = _ffi.init(_capi.fl_kernel_instr)
    instr.func = _int("func", func, 0, _U64_MAX)
    instr.grid = _dim3("grid", grid)
    instr.block = _dim3("block", block)
    instr.shared_mem_bytes = _int("shared_mem", shared_mem, 0, _U64_MAX)
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

    def __init__(self, stream: "Stream", fn: Callable[[int], Any], name: Optional[str]):
        self.stream = stream
        self.engine: EngineBase = stream.engine
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
            fail_instruction(payload.engine, ctx, int(lib.fl_instr_get_id(ctx)), int(lib.fl_instr_get_lane(ctx)),
                             payload.name, exc)
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            _tls.depth -= 1
    except BaseException:
        return _capi.FL_ERR_INTERNAL


_device_trampoline = _capi.fl_device_fn(_device)


def submit_device(stream: "Stream", fn: Callable[[int], Any], reads: Iterable[Object[Any]] = (),
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


def submit_memcpy(stream: "Stream", kind: Union[MemcpyKind, int], dst: int, src: int, nbytes: int, value: int = 0, *,
                  reads: Iterable[Object[Any]] = (), writes: Iterable[Object[Any]] = (), name: Optional[str] = None,
                  block: bool = True, where: str = "submit_memcpy") -> int:
    """Copies (H2D, D2H, D2D) or sets (MEMSET, with the byte ``value``) device memory."""
    h = stream._ptr()
    instr = _ffi.init(_capi.fl_memcpy_instr)
    instr.kind = _int("kind", kind, 0, _U32_MAX)
    instr.value = _int("value", value, 0, 255)
    instr.dst = _int("dst", dst, 0, _U64_MAX)
    instr.src = _int("src", src, 0, _U64_MAX)
    instr.bytes = _int("nbytes", nbytes, 0, _U64_MAX)
    ops, n = _gpu_operands(stream, reads, writes, where)
    if n:
        instr.operands, instr.num_operands = ops, n
    instr.name = _ffi.encode_name(name)
    instr.flags = 0 if block else _capi.FL_SUBMIT_NONBLOCKING
    out = c_uint64()
    with stream.engine._admitted(where):
        check(lib.fl_submit_memcpy(h, byref(instr), byref(out)), where)
    return int(out.value)
