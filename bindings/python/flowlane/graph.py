"""parallel_for and task graphs: fork-join work with no stream ordering."""

from __future__ import annotations

import functools
import threading
import time
from ctypes import POINTER, byref, c_uint64
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Union

from . import _capi, _ffi
from ._base import _keep, _pin_thread_state, _register
from ._engine_base import EngineBase
from ._failures import _describe_exception, _user_traceback, raise_failure
from ._ffi import encode_name, lib
from ._waits import WAIT_SLICE_S, _check_timeout, wait_sliced
from ._managed import Managed, _tls, callback_depth
from ._types import _int
from .errors import ClosedError, Timeout, check, error_for

if TYPE_CHECKING:  # pragma: no cover
    from ._engine import Engine

__all__ = ["parallel_for", "TaskGraph", "Task", "TaskGroup"]


class _Failure:
    """The first Python exception raised by the callables of one synchronous call."""

    __slots__ = ("lock", "exc")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exc: Optional[BaseException] = None

    def record(self, exc: BaseException) -> None:
        with self.lock:
            if self.exc is None:
                self.exc = exc

    def raise_for(self, status: int, function: str, prefix: str) -> None:
        """Raises the recorded exception chained from the flowlane error (or the error)."""
        exc = self.exc
        self.exc = None
        err = error_for(status, None, function)
        if exc is not None:
            err.message = "%s\n%s%s" % (err.message, prefix, _describe_exception(exc))
        raise_failure(err, exc, _user_traceback(exc) if exc is not None else None)


def _enter() -> None:
    _tls.depth = getattr(_tls, "depth", 0) + 1


def _leave() -> None:
    _tls.depth -= 1


class _Body:
    __slots__ = ("fn", "failure", "engine")

    def __init__(self, fn: Callable[[int, int], Any], failure: _Failure, engine: "Engine"):
        self.fn = fn
        self.failure = failure
        self.engine = engine


def _range(lo: int, hi: int, key: int) -> int:
    try:
        body = _keep.get(key)
        if body is None:
            return _capi.FL_ERR_INTERNAL
        _pin_thread_state(body.engine)
        _enter()
        try:
            body.fn(lo, hi)
        except BaseException as exc:
            body.failure.record(exc)
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            _leave()
        return _capi.FL_OK
    except BaseException:
        return _capi.FL_ERR_INTERNAL


_range_trampoline = _capi.fl_range_fn(_range)


def parallel_for(engine: "Engine", begin: Union[int, range], end: Union[int, Callable[[int, int], Any], None] = None,
                 body: Optional[Callable[[int, int], Any]] = None, *, grain: int = 0) -> None:
    """Calls ``body(lo, hi)`` on disjoint chunks ``[lo, hi)`` covering ``[begin, end)``,
    each at most ``grain`` long (0: chosen by the engine), in parallel on the engine's
    workers; the calling thread helps. Also ``parallel_for(engine, range(n), body)``.

    Python bodies hold the GIL while they run Python code, so the speed-up comes from
    bodies that release it (NumPy, I/O, C extensions). Blocks until done. If a body
    raises, chunks not yet started are skipped and the (first) body's own exception is
    raised, chained from an :class:`InstructionFailed`.
    """
    if not isinstance(engine, EngineBase):
        raise TypeError("parallel_for: engine must be a flowlane.Engine, not %s" % type(engine).__name__)
    if isinstance(begin, range):
        if body is None and callable(end):
            body, end = end, None
        if end is not None:
            raise TypeError("parallel_for(range, body): end must not be given with a range")
        if begin.step != 1:
            raise ValueError("parallel_for needs a range with step 1")
        rng = begin
        begin, end = rng.start, max(rng.start, rng.stop)
    if end is None or body is None or callable(end):
        raise TypeError("parallel_for(begin, end, body) or parallel_for(range, body)")
    if not callable(body):
        raise TypeError("parallel_for: body must be callable, not %s" % type(body).__name__)
    b = _int("begin", begin, 0, 2**64 - 1)
    e = _int("end", end, 0, 2**64 - 1)
    g = _int("grain", grain, 0, 2**64 - 1)
    engine._ptr()
    failure = _Failure()
    key = _register(_Body(body, failure, engine))
    try:
        with engine._admitted("parallel_for") as h:
            st = lib.fl_parallel_for(h, b, e, g, _range_trampoline, key)
    finally:
        _keep.pop(key, None)
    if st != _capi.FL_OK:
        failure.raise_for(st, "parallel_for", "body raised ")


# --------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("fn", "graph_failure", "name", "engine")

    def __init__(self, fn: Callable[[], Any], failure: _Failure, name: Optional[str], engine: "Engine"):
        self.fn = fn
        self.graph_failure = failure
        self.name = name
        self.engine = engine


def _task(key: int) -> int:
    try:
        node = _keep.get(key)
        if node is None:
            return _capi.FL_ERR_INTERNAL
        _pin_thread_state(node.engine)
        _enter()
        try:
            node.fn()
        except BaseException as exc:
            node.graph_failure.record(exc)
            return _capi.FL_ERR_INSTRUCTION_FAILED
        finally:
            _leave()
        return _capi.FL_OK
    except BaseException:
        return _capi.FL_ERR_INTERNAL


_task_trampoline = _capi.fl_task_fn(_task)


class Task:
    """A node of a :class:`TaskGraph` (returned by ``graph.add``)."""

    __slots__ = ("graph", "id", "name")

    def __init__(self, graph: "TaskGraph", node_id: int, name: Optional[str]):
        #: The graph.
        self.graph = graph
        #: The node id (dense from 0).
        self.id = node_id
        #: The name given to add() (or the callable's qualified name).
        self.name = name

    def precede(self, *others: "Task") -> "Task":
        """Each of ``others`` starts only after this task has finished."""
        for o in others:
            self.graph.precede(self, o)
        return self

    def succeed(self, *others: "Task") -> "Task":
        """This task starts only after each of ``others`` has finished."""
        for o in others:
            self.graph.precede(o, self)
        return self

    def __rshift__(self, other: "Task") -> "Task":
        """``a >> b``: b after a; returns b so chains read ``a >> b >> c``."""
        self.graph.precede(self, other)
        return other

    def __repr__(self) -> str:
        return "<flowlane.Task %d %r>" % (self.id, self.name)


class TaskGraph(Managed):
    """A reusable graph of Python callables with "runs before" edges (Taskflow style).

        with engine.taskgraph() as g:
            a = g.add(load, name="load")
            b = g.add(parse, name="parse")
            a >> b
            g.run(threads=-1)

    run() may be called many times. A task that raises stops the tasks not yet started
    and run() raises that task's own exception, chained from an :class:`InstructionFailed`.

    Thread-safety: build and run a graph from one thread at a time (running one graph
    from two threads at once raises InvalidArgument); the callables run on workers.
    """

    __slots__ = ("engine", "_keys", "_failure", "tasks")
    _kind = "task graph"

    def __init__(self, engine: "Engine"):
        super().__init__()
        if not isinstance(engine, EngineBase):
            raise TypeError("TaskGraph: engine must be a flowlane.Engine, not %s" % type(engine).__name__)
        out = _ffi.taskgraph_p()
        with engine._admitted("Engine.taskgraph") as h:
            check(lib.fl_taskgraph_create(h, byref(out)), "Engine.taskgraph")
        #: The engine.
        self.engine = engine
        self._keys: List[int] = []
        self._failure = _Failure()
        #: The nodes, in the order they were added.
        self.tasks: List[Task] = []
        self._handle = out

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this task graph is closed")
        return super()._ptr()

    def _close_handle(self, handle: Any) -> None:
        try:
            if self.engine._handle is not None:
                with self.engine._call("TaskGraph.close"):
                    check(lib.fl_taskgraph_destroy(handle), "TaskGraph.close")
        except ClosedError:
            pass  # the engine is closed or being closed
        finally:
            for k in self._keys:
                _keep.pop(k, None)
            self._keys = []

    def add(self, fn: Callable[[], Any], name: Optional[str] = None) -> Task:
        """Adds a node running ``fn()``; returns its :class:`Task`."""
        h = self._ptr()
        if not callable(fn):
            raise TypeError("TaskGraph.add: fn must be callable, not %s" % type(fn).__name__)
        label = name if name is not None else getattr(fn, "__qualname__", None)
        key = _register(_Node(fn, self._failure, label, self.engine))
        out = c_uint64()
        try:
            with self.engine._call("TaskGraph.add"):
                st = lib.fl_taskgraph_add(h, _task_trampoline, key, encode_name(label), byref(out))
        except BaseException:
            _keep.pop(key, None)
            raise
        if st != _capi.FL_OK:
            err = error_for(st, None, "TaskGraph.add")
            _keep.pop(key, None)
            raise err
        self._keys.append(key)
        t = Task(self, int(out.value), label)
        self.tasks.append(t)
        return t

    def precede(self, before: Task, after: Task) -> None:
        """``after`` starts only once ``before`` has finished."""
        for t in (before, after):
            if not isinstance(t, Task):
                raise TypeError("TaskGraph.precede takes flowlane.Task nodes, not %s" % type(t).__name__)
            if t.graph is not self:
                raise ValueError("TaskGraph.precede: %r belongs to another task graph" % (t,))
        with self.engine._call("TaskGraph.precede"):
            check(lib.fl_taskgraph_precede(self._ptr(), before.id, after.id), "TaskGraph.precede")

    def run(self, threads: int = -1) -> None:
        """Runs every node once, respecting edges, and blocks until done (releasing the
        GIL). threads: -1 all logical cores, 0 physical cores, N > 0 at most N."""
        self._ptr()
        n = _int("threads", threads, -(2**63), 2**63 - 1)
        with self.engine._admitted("TaskGraph.run"):
            st = lib.fl_taskgraph_run(self._ptr(), n)
        if st != _capi.FL_OK:
            self._failure.raise_for(st, "TaskGraph.run", "")
        self._failure.exc = None

    def __len__(self) -> int:
        return len(self.tasks)


# --------------------------------------------------------------------------------------


class _GroupTask(_Node):
    __slots__ = ("group",)

    def __init__(self, fn: Callable[[], Any], group: "TaskGroup"):
        super().__init__(fn, group._failure, None, group.engine)
        self.group = group


def _group_cleanup(key: int) -> None:
    # Called exactly once per spawned task, after it ran or was skipped.
    try:
        task = _keep.pop(key, None)
        if task is not None:
            task.group._task_done()
    except BaseException:
        pass


_group_cleanup_trampoline = _capi.fl_release_fn(_group_cleanup)


class TaskGroup(Managed):
    """Tasks waited for together (fork-join, as ``tbb::task_group`` and ``rayon::scope``)::

        with engine.task_group() as group:
            for part in parts:
                group.spawn(work, part)
        # every task has finished here

    Tasks run on the engine's workers, in no particular order and with no stream
    ordering; a task may spawn more tasks into any group, and wait for groups it created
    (a worker waiting for a group helps run its tasks). Once a task has raised, tasks not
    yet started are skipped, and wait() (or the end of the ``with`` block) raises that
    task's own exception, chained from an :class:`InstructionFailed`; the group is then
    empty and usable again.

    Thread-safety: spawn() from any thread or task; wait() and close() from one thread.
    """

    __slots__ = ("engine", "_failure", "_cond", "_pending")
    _kind = "task group"

    def __init__(self, engine: "Engine"):
        super().__init__()
        if not isinstance(engine, EngineBase):
            raise TypeError("TaskGroup: engine must be a flowlane.Engine, not %s" % type(engine).__name__)
        out = POINTER(_capi.fl_task_group_t)()
        with engine._admitted("Engine.task_group") as h:
            check(lib.fl_task_group_create(h, byref(out)), "Engine.task_group")
        #: The engine.
        self.engine = engine
        self._failure = _Failure()
        self._cond = threading.Condition()
        self._pending = 0
        self._handle = out

    def _ptr(self) -> Any:
        if self.engine._handle is None:
            raise ClosedError("the engine of this task group is closed")
        return super()._ptr()

    def _task_done(self) -> None:
        with self._cond:
            self._pending -= 1
            if self._pending == 0:
                self._cond.notify_all()

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedules ``fn(*args)`` to run once on a worker; never blocks."""
        h = self._ptr()
        if not callable(fn):
            raise TypeError("TaskGroup.spawn: fn must be callable, not %s" % type(fn).__name__)
        task: Callable[[], Any] = fn
        if args:
            task = functools.partial(fn, *args)
        key = _register(_GroupTask(task, self))
        with self._cond:
            self._pending += 1
        try:
            with self.engine._admitted("TaskGroup.spawn"):
                st = lib.fl_task_group_spawn(h, _task_trampoline, key, _group_cleanup_trampoline)
        except BaseException:
            _keep.pop(key, None)
            self._task_done()
            raise
        if st != _capi.FL_OK:
            err = error_for(st, None, "TaskGroup.spawn")
            _keep.pop(key, None)
            self._task_done()
            raise err

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits until every task spawned into the group (before or during the wait) has
        finished; raises the first task's exception (see the class). ``timeout`` (seconds,
        None: forever) raises :class:`Timeout` with the tasks still running (they go on;
        an exception among them is raised by a later wait). Outside tasks the wait can be
        interrupted with Ctrl-C; inside a task or instruction it helps run the group's
        tasks (fl_task_group_wait_for), giving up at the first check after the timeout."""
        h = self._ptr()
        timeout = _check_timeout(timeout, "TaskGroup.wait")
        if callback_depth() == 0:
            # Python counts the tasks, so the program's threads wait in slices (Ctrl-C);
            # the C wait below then returns at once with the group's outcome.
            main = threading.current_thread() is threading.main_thread()
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cond:
                while self._pending > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise Timeout("%d tasks of the group have not finished within %g s"
                                      % (self._pending, timeout or 0.0), function="TaskGroup.wait")
                    if main:
                        left = WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S)
                    self._cond.wait(left)
        elif timeout is not None:
            with self.engine._call("TaskGroup.wait"):
                st = wait_sliced(lambda ns: lib.fl_task_group_wait_for(h, ns), timeout, "TaskGroup.wait")
            if st == _capi.FL_ERR_TIMEOUT:
                raise error_for(st, None, "TaskGroup.wait")
            if st != _capi.FL_OK:
                self._failure.raise_for(st, "TaskGroup.wait", "task raised ")
            self._failure.exc = None
            return
        with self.engine._call("TaskGroup.wait"):
            st = lib.fl_task_group_wait(h)
        if st != _capi.FL_OK:
            self._failure.raise_for(st, "TaskGroup.wait", "task raised ")
        self._failure.exc = None

    def _close_handle(self, handle: Any) -> None:
        try:
            with self.engine._call("TaskGroup.close"):
                check(lib.fl_task_group_destroy(handle), "TaskGroup.close")
        except ClosedError:
            pass  # the engine is closed or being closed

    def close(self) -> None:
        """Waits for the group's tasks (their exceptions are dropped: wait() first to see
        them) and frees the group. Idempotent."""
        if self._handle is not None and self.engine._handle is not None and callback_depth() == 0:
            with self._cond:  # Ctrl-C can interrupt the wait for running tasks
                while self._pending > 0:
                    self._cond.wait(WAIT_SLICE_S)
        super().close()

    def __exit__(self, *exc: object) -> None:
        """Waits for the tasks and raises the first task's exception, unless the block
        itself raised (that exception wins; the tasks are still waited for)."""
        try:
            if exc[0] is None:
                self.wait()
        finally:
            self.close()

