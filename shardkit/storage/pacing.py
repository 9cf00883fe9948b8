"""How many part requests one process keeps in flight: additive increase, multiplicative
decrease (AIMD) on throttling (K21), and when a slow part is worth a second request (K22).

``Pacing`` is a gate in front of every part request of the cache's downloads in a process.
``limit`` starts at ``ceiling``. A throttled request (``ThrottledError``: 503 SlowDown, 429)
halves it — to half of what was in flight, at least 1 — once per round trip: only a request
that started after the last decrease can decrease it again, so a burst of 503s answering one
window of requests halves once, as TCP does per window. Successful requests while the gate was
full (requests waiting or in flight at the limit) raise it by one per ``limit`` of them (one
more per window of successes), up to ``ceiling``. Counters say what happened (``lowest``, ``decreases``).

It also keeps the durations of recent successful part requests: ``hedge_after(floor,
factor)`` is ``factor`` × their median, never below ``floor`` (seconds).

Thread-safety: all methods may be called from any thread. A forked child must make its own
(cache.py does): the parent's in-flight count means nothing there.
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from collections.abc import Callable

from shardkit.errors import StorageTimeoutError

_RECENT = 64  # part durations kept for the hedging threshold


class Pacing:
    """An AIMD-limited gate; ``enter`` waits for room, ``leave`` reports how it went."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"ceiling must be >= 1, got {ceiling}")
        self.ceiling = ceiling
        self.limit = ceiling
        self._credit = 0  # successes at a full gate since the limit last changed
        self.lowest = ceiling
        self.decreases = 0
        self.throttled = 0
        self.in_flight = 0
        self._waiting = 0
        self._last_decrease = float("-inf")
        self._durations: collections.deque[float] = collections.deque(maxlen=_RECENT)
        self._cond = threading.Condition()

    @property
    def current(self) -> int:
        """The number of requests allowed in flight now."""
        return self.limit

    def enter(self, timeout: float, cancel: Callable[[], bool], *, hedge: bool = False) -> float | None:
        """Wait until fewer than ``current`` requests are in flight; the start time (for
        ``leave``), or None once ``cancel()`` is true. ``StorageTimeoutError`` after ``timeout``.
        A ``hedge`` enters at once: it stands in for a late request that still counts."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while self.in_flight >= self.current and not hedge:
                    if cancel():
                        return None
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise StorageTimeoutError(
                            f"no room among {self.current} download requests in flight after {timeout:.0f}s"
                        )
                    self._cond.wait(min(left, 0.05))
            finally:
                self._waiting -= 1
            self.in_flight += 1
            return time.monotonic()

    def leave(self, started: float, *, ok: bool, throttled: bool = False) -> None:
        """The request sent at ``started`` ended: succeeded, throttled, or failed otherwise."""
        with self._cond:
            full = self._waiting > 0 or self.in_flight >= self.current
            self.in_flight -= 1
            if ok:
                self._durations.append(time.monotonic() - started)
                if full and self.limit < self.ceiling:
                    self._credit += 1
                    if self._credit >= self.limit:  # a window of successes: one more
                        self.limit, self._credit = self.limit + 1, 0
            elif throttled:
                self.throttled += 1
                if started > self._last_decrease:
                    flight = self.in_flight + 1  # this request included
                    self.limit, self._credit = max(1, min(self.limit, flight) // 2), 0
                    self._last_decrease = time.monotonic()
                    self.decreases += 1
                    self.lowest = min(self.lowest, self.current)
            self._cond.notify_all()

    def hedge_after(self, floor: float, factor: float) -> float:
        """Seconds after which a part still running gets a second request."""
        with self._cond:
            recent = list(self._durations)
        if not recent:
            return floor
        return max(floor, factor * statistics.median(recent))
