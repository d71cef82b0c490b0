"""The completer: one helper thread per engine that completes the futures a worker does
not complete itself (a failure, a skip or a cancellation, whose outcome the engine publishes
just after the cleanup, and any future with done-callbacks, which never run on a worker).
A done-callback may block or wait freely there."""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any, Deque, Optional

from ._failures import logger
from ._waits import WAIT_SLICE_S

if TYPE_CHECKING:  # pragma: no cover
    from ._future import Future


class Completer:
    """One engine's helper thread that completes futures (started on first use)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: Deque[Future[Any]] = collections.deque()
        self._busy = False
        self._stopped = False
        self._thread: Optional[threading.Thread] = None

    def put(self, fut: "Future[Any]") -> None:
        """Queues a future whose instruction's cleanup has run."""
        with self._cond:
            self._items.append(fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="flowlane-futures", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopped:
                    self._cond.wait()
                if not self._items:
                    return
                # One at a time: a done-callback that waits for another future completes
                # the queued ones itself (help), so none may be held aside here.
                fut: Optional[Future[Any]] = self._items.popleft()
                self._busy = True
            assert fut is not None
            _complete_one(fut)
            # Hold no future while idle: a future holds its engine, which the garbage
            # collector may then close (from this thread; close() allows that).
            fut = None
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def is_current(self) -> bool:
        """True on the completer's own thread (inside a done-callback)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def help(self, timeout: Optional[float]) -> None:
        """On the completer's thread: completes one queued future, or waits up to
        ``timeout`` for one to be queued."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)
            fut = self._items.popleft() if self._items else None
        if fut is not None:
            _complete_one(fut)

    def flush(self) -> None:
        """Waits until every queued future is completed (on the completer itself, e.g. from
        a done-callback that closes the engine, completes them here)."""
        if threading.current_thread() is self._thread:
            while True:
                with self._cond:
                    if not self._items:
                        return
                    fut = self._items.popleft()
                _complete_one(fut)
        with self._cond:
            while self._items or self._busy:
                self._cond.wait(WAIT_SLICE_S)

    def stop(self) -> None:
        """Completes what is queued, then ends the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _complete_one(fut: "Future[Any]") -> None:
    try:
        fut._complete()
    except BaseException as e:  # never lose the thread
        logger.exception("flowlane: completing %r failed", fut)
        if not fut.done():  # nor the future: its waiters would hang
            try:
                fut._finish(exc=e)
            except BaseException:
                pass
