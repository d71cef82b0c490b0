"""Loads ``libflowlane.so.0`` once, checks its major version, and applies the generated
declarations (:mod:`flowlane._capi`, from the C header) to it.

Where the library is looked for, in order:

1. the ``FLOWLANE_LIBRARY`` environment variable (a path to the shared library);
2. next to this package (``flowlane/libflowlane.so.0``, as the wheel ships it);
3. the CMake build trees of a source checkout: ``<repo>/build/capi``, then the other
   ``<repo>/build*/capi`` directories (newest first);
4. the system loader (``LD_LIBRARY_PATH``, ``ldconfig``): ``libflowlane.so.0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from ctypes import POINTER, c_char_p, c_int, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple, Type, TypeVar, Union

from . import _capi

# The major version these bindings are written against; a library with another major
# version has an incompatible ABI and is refused at import.
EXPECTED_MAJOR = _capi.FL_VERSION_MAJOR
# The minor version of the header the declarations were generated from (informational: a
# newer minor is a superset, an older one may lack symbols, which is reported at use).
EXPECTED_MINOR = _capi.FL_VERSION_MINOR

LIBRARY_ENV = "FLOWLANE_LIBRARY"
SONAME = "libflowlane.so.%d" % EXPECTED_MAJOR

#: The C signatures, generated from the header (name -> (restype, argtypes)).
FUNCTIONS = _capi.FUNCTIONS

# Pointer types of the opaque handles (ctypes refuses an engine where a stream is expected).
engine_p = POINTER(_capi.fl_engine)
stream_p = POINTER(_capi.fl_stream)
object_p = POINTER(_capi.fl_object)
taskgraph_p = POINTER(_capi.fl_taskgraph)
comm_p = POINTER(_capi.fl_comm)
instr_ctx_p = POINTER(_capi.fl_instr_ctx)

S = TypeVar("S", bound=ctypes.Structure)


def init(struct_type: Type[S]) -> S:
    """A zeroed descriptor with struct_size set: the header's FL_*_INIT macros."""
    s = struct_type()
    s.struct_size = ctypes.sizeof(struct_type)
    return s


# --------------------------------------------------------------------------------------
# Loading


class LibraryNotFound(ImportError):
    """The shared library could not be found or loaded (an ImportError)."""


class LibraryVersionMismatch(ImportError):
    """The shared library found has an incompatible major version (an ImportError)."""


_PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout_root() -> Optional[Path]:
    """The repository root when this package runs from a source checkout, else None."""
    parents = _PACKAGE_DIR.parents
    if len(parents) > 2 and (parents[2] / "capi" / "include" / "flowlane" / "flowlane.h").exists():
        return parents[2]
    return None


def _candidates() -> Iterator[Tuple[str, str]]:
    """(description, path or name) in search order."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        yield ("$" + LIBRARY_ENV, env)
        return  # an explicit choice is never second-guessed
    for name in (SONAME, "libflowlane.so"):
        p = _PACKAGE_DIR / name
        if p.exists():
            yield ("bundled with the package", str(p))
    root = _checkout_root()
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


def _hint(tried: List[str]) -> str:
    """What to do, depending on where this package runs from and why loading failed."""
    missing_dep = [m.group(1) for t in tried for m in [re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared "
                                                                r"object file", t)]
                   if m and not m.group(1).startswith("libflowlane")]
    lines = []
    if missing_dep:
        lines.append("libflowlane was found but needs %s, which is not installed (`ldd` on the library "
                     "lists what it needs)."
                     % ", ".join(sorted(set(missing_dep))))
    if os.environ.get(LIBRARY_ENV):
        lines.append("%s=%s could not be loaded: point it at a libflowlane.so.%d, or unset it to search "
                     "the usual places." % (LIBRARY_ENV, os.environ[LIBRARY_ENV], EXPECTED_MAJOR))
    elif _checkout_root() is not None:
        lines.append("This is a source checkout: build the library (cmake -S . -B build && cmake --build build "
                     "--target flowlane), or set %s to its path." % LIBRARY_ENV)
    else:
        lines.append("This flowlane package does not bundle the library. Install the wheel that does "
                     "(scripts/wheel.sh in the flowlane repository builds it), or install libflowlane "
                     "(cmake --install <build> --prefix /usr/local, which runs ldconfig), or set %s to the "
                     "path of libflowlane.so.%d." % (LIBRARY_ENV, EXPECTED_MAJOR))
    return " ".join(lines)


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
            continue
        return lib, path
    raise LibraryNotFound("flowlane: cannot load the shared library %s. %s Tried:\n  %s"
                          % (SONAME, _hint(tried), "\n  ".join(tried)))


def _declare(lib: ctypes.CDLL) -> List[str]:
    """Applies FUNCTIONS (and the header's deprecated aliases) to lib; returns the names the
    library lacks."""
    missing = []
    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype = restype
        f.argtypes = argtypes
    for old, new in _capi.ALIASES.items():
        if not hasattr(lib, old) and hasattr(lib, new):
            setattr(lib, old, getattr(lib, new))
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
missing_symbols = _declare(lib)


# The calls of the submission path, through ctypes.PyDLL on the same library: the calling
# thread keeps the GIL across the call. A call through ``lib`` releases the GIL and takes it
# back afterwards; while the workers run Python callbacks, taking it back means waiting for
# one of them to let go, every time. Only calls that never wait for another thread (a
# submission with FL_SUBMIT_NONBLOCKING, queries, the context getters) go here; anything
# that may wait goes through ``lib``, so that the workers can run meanwhile. Handles are
# passed as plain ints (c_void_p converts cheapest), with the same prototypes otherwise.
class _NoGil:
    """The library's non-blocking calls, with the GIL kept (see above)."""

    def __init__(self, path: str) -> None:
        pylib = ctypes.PyDLL(path)
        for name, restype, argtypes in (
            ("fl_submit_host", c_int, [c_void_p, c_void_p, c_void_p]),  # FL_SUBMIT_NONBLOCKING only
            ("fl_instr_query", c_int, [c_void_p, c_uint64, c_void_p]),
            ("fl_instr_get_id", c_uint64, [c_void_p]),
            ("fl_instr_get_lane", c_uint32, [c_void_p]),
            ("fl_instr_set_error", None, [c_void_p, c_char_p]),
        ):
            f = getattr(pylib, name)
            f.restype = restype
            f.argtypes = argtypes
            setattr(self, name, f)

    fl_submit_host: Any
    fl_instr_query: Any
    fl_instr_get_id: Any
    fl_instr_get_lane: Any
    fl_instr_set_error: Any


nogil = _NoGil(path)


def last_error_message() -> str:
    """fl_last_error_message() of the calling thread."""
    msg = lib.fl_last_error_message()
    return str(msg.decode("utf-8", "replace")) if msg else ""


def status_name(status: int) -> str:
    """fl_status_name(status), e.g. "FL_ERR_OUT_OF_RANGE"."""
    return str(lib.fl_status_name(status).decode("ascii", "replace"))


def status_string(status: int) -> str:
    """fl_status_string(status): a one-line description."""
    return str(lib.fl_status_string(status).decode("utf-8", "replace"))


def encode_name(name: Union[str, bytes, None]) -> Optional[bytes]:
    """A str/bytes/None name to bytes or None (C copies it)."""
    if name is None:
        return None
    if isinstance(name, bytes):
        return name
    if isinstance(name, str):
        return name.encode("utf-8")
    raise TypeError("name must be a str, bytes or None, not %s" % type(name).__name__)


def address(ptr: Any) -> int:
    """The address held by a ctypes pointer (0 for NULL)."""
    return ctypes.cast(ptr, c_void_p).value or 0


is_finalizing = sys.is_finalizing
