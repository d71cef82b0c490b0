"""Which lane a submission goes to when the program did not say: the lanes the bindings
spread submissions without operands or a lane over, and the fresh lane ``engine.lane()``
hands out.

The engine runs each lane's instructions one after the other (a lane is a strand), so a
program that submits independent work to one lane gets it run serially. The bindings
therefore count, per lane, the Python instructions submitted and not yet cleaned up, and:

* spread: a submission with neither operands nor a lane goes to a lane of the spread
  range, the ``min(workers, lanes - 2)`` highest lanes (one per worker is all the engine
  can run at once; lane 0 and at least lane 1 stay out of it): the first idle one from the
  top, else the least loaded. The range is not acquired (``fl_lane_acquire`` hands out the
  smallest free id, the lanes programs also name by hand, and holding lanes would make
  ``engine.lane()`` run out); instead a lane of the range that the program holds (from
  ``engine.lane()``) or has named (``lane=k``, ``engine.lane(k)``, ``engine.stream(k)``) is
  left out of it. With an empty range (an engine with one or two lanes) such submissions
  go to lane 0, in order, as before.
* fresh: ``engine.lane()`` acquires, and keeps acquiring past a lane that still has
  instructions of ours in flight (a loop that takes a new lane per iteration thus gets an
  idle one each time rather than the lane it has just released), then releases the busy
  ones it passed.

Lane 0 is never spread to or handed out, so it is not counted. Counts change under one
lock; a count is taken before the submission and dropped by the instruction's cleanup.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Set

from .errors import Exhausted

#: How many busy lanes ``fresh()`` acquires past before it settles for the least loaded.
_FRESH_PROBES = 8


class LanePool:
    """One engine's lane counts, spread range and fresh-lane choice."""

    __slots__ = ("_lock", "_inflight", "_range", "_low", "_named", "_held")

    def __init__(self, lanes: int, workers: int):
        self._lock = threading.Lock()
        self._inflight = [0] * lanes
        cap = max(0, min(workers, lanes - 2))
        self._range = list(range(lanes - 1, lanes - 1 - cap, -1))  # from the top
        self._low = lanes - cap  # the lowest lane of the range
        self._named: Set[int] = set()  # lanes of the range the program named
        self._held: Dict[int, int] = {}  # lanes of the range the program holds -> holds

    def started(self, lane: int) -> None:
        """Before a submission to ``lane``."""
        if lane:
            with self._lock:
                self._inflight[lane] += 1

    def finished(self, lane: int) -> None:
        """After that submission's cleanup (or its failure to submit)."""
        if lane:
            with self._lock:
                self._inflight[lane] -= 1

    def inflight(self, lane: int) -> int:
        """Our instructions on ``lane`` that have not been cleaned up (0 for lane 0)."""
        return self._inflight[lane] if lane else 0

    def spread(self, avoid: int = 0) -> int:
        """The lane for a submission without operands or lane, counted as started (0, not
        counted, when the range is empty or all of it is the program's). ``avoid``: the lane
        of the instruction whose callback submits (queued behind it, the submission could
        not run before the callback returns, and a wait for it there would be refused)."""
        with self._lock:
            inflight = self._inflight
            best = 0
            for lane in self._range:
                if lane == avoid or lane in self._held or lane in self._named:
                    continue
                if inflight[lane] == 0:
                    best = lane
                    break
                if not best or inflight[lane] < inflight[best]:
                    best = lane
            if best:
                inflight[best] += 1
            return best

    def named(self, lane: int) -> None:
        """The program named ``lane``: it is never spread to from now on."""
        if lane >= self._low and lane not in self._named:
            with self._lock:
                self._named.add(lane)

    def fresh(self, acquire: Callable[[], int], release: Callable[[int], None]) -> int:
        """An acquired lane for ``engine.lane()``: the first acquired one with nothing of
        ours in flight, else the least loaded of the few it tried (the others are released
        again). Raises :class:`Exhausted` when every lane is held. Until ``unhold``, the
        lane is not spread to."""
        tried: List[int] = []
        try:
            while len(tried) < _FRESH_PROBES:
                try:
                    lane = acquire()
                except Exhausted:
                    if tried:
                        break
                    raise
                tried.append(lane)
                if self.inflight(lane) == 0:
                    break
            chosen = min(tried, key=self.inflight)
        except BaseException:
            for lane in tried:
                release(lane)
            raise
        for lane in tried:
            if lane != chosen:
                release(lane)
        if chosen >= self._low:
            with self._lock:
                self._held[chosen] = self._held.get(chosen, 0) + 1
        return chosen

    def unhold(self, lane: int) -> None:
        """The program released ``lane`` (from ``fresh``)."""
        if lane >= self._low:
            with self._lock:
                n = self._held.get(lane, 0) - 1
                if n > 0:
                    self._held[lane] = n
                else:
                    self._held.pop(lane, None)
