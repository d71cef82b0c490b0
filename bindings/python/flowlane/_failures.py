"""How a Python callable's exception becomes an instruction failure and comes back: its
description for the library (the text every language sees), the exception re-raised at the
wait that observes the failure, and the report of failures nobody retrieved."""

from __future__ import annotations

import collections
import logging
import os
import re
import traceback
from types import TracebackType
from typing import NoReturn, Optional, Tuple

from .errors import FlowlaneError, InstructionFailed

#: The logger that reports failures nobody retrieved ("flowlane"), as asyncio reports
#: exceptions of tasks that nobody awaited.
logger = logging.getLogger("flowlane")

_PACKAGE_DIR = os.path.dirname(__file__)

#: What an engine keeps of a failure nobody retrieved yet: (what failed, exception, traceback).
Unretrieved = Tuple[str, BaseException, Optional[TracebackType]]


def _user_traceback(exc: BaseException) -> Optional[TracebackType]:
    """exc's traceback without the bindings' own trampoline frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return tb


def exception_text(exc: BaseException) -> str:
    """str(exc), or a placeholder when its __str__ raises (as traceback prints it)."""
    try:
        return str(exc)
    except BaseException:
        return "<exception str() failed>"


def _describe_exception(exc: BaseException) -> str:
    """Type, message and traceback, without the bindings' own trampoline frames."""
    text = "".join(traceback.format_exception(type(exc), exc, _user_traceback(exc)))
    return "Python %s: %s\n%s" % (type(exc).__qualname__, exception_text(exc), text.rstrip())


def _without_traceback(message: str) -> str:
    """An instruction failure's text without the Python traceback that _describe_exception
    put there (the exception re-raised next to it carries its own)."""
    return re.sub(r"\nTraceback \(most recent call last\):\n.*", "", message, flags=re.S)


def raise_failure(err: FlowlaneError, original: Optional[BaseException], tb: Optional[TracebackType]) -> NoReturn:
    """Raises ``original`` (the exception of a Python callable) chained from ``err`` (the
    flowlane error with the instruction's context), as concurrent.futures re-raises a
    worker's exception; raises ``err`` itself when there is no Python exception."""
    if original is None or not isinstance(err, InstructionFailed):
        raise err
    err.original = original
    err.message = _without_traceback(err.message)
    raise original.with_traceback(tb) from err


def report_unretrieved(unretrieved: "collections.OrderedDict[int, Unretrieved]", overflow: int, where: str) -> None:
    """After fl_engine_destroy: logs one ERROR record on the "flowlane" logger, with the
    exception and its traceback, per Python callable that failed and whose failure no
    wait, synchronize() or value observed, as asyncio logs "Task exception was never
    retrieved" (by default Python prints it to stderr)."""
    for _id, (what, exc, tb) in unretrieved.items():
        logger.error("%s: a failure was never retrieved (no wait, synchronize() or value observed it): %s raised "
                     "%s: %s", where, what, type(exc).__qualname__, exc, exc_info=(type(exc), exc, tb))
    if overflow:
        logger.error("%s: %d more failures were never retrieved", where, overflow)
    unretrieved.clear()
