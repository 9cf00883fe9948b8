"""Fetch a whole object into an already-allocated local file, in concurrent ranged parts.

Parts are separate range requests of ``part_bytes``, up to ``parts_in_flight`` of one object at
once, each retried on its own (the store's ``RetryPolicy``): a transient failure costs one
part, not the whole shard, and memory stays bounded by ``part_bytes × parts_in_flight`` (× 2
while hedging). Every request passes two gates (specs/cache.md, K20–K22):

- ``Pacing`` (pacing.py): this process's AIMD limit, lowered when the store throttles (503
  SlowDown, 429) and raised again as requests succeed;
- ``NodeBudget`` (budget.py): slots shared by every process of the node, crash-safe.

A part still running after ``Pacing.hedge_after`` gets a second request for the same range;
the first to return the bytes wins, and only the winner's bytes are written (the loser's
thread stops at its next retry or gate and its bytes are dropped). ``cancel`` stops between
requests. Nothing here publishes: the caller verifies and renames the file (K1).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from shardkit.errors import CacheError, StorageError, ThrottledError
from shardkit.storage.budget import NodeBudget
from shardkit.storage.cache_files import open_regular, sole_link
from shardkit.storage.pacing import Pacing
from shardkit.storage.retry import NO_RETRY, call_with_retry
from shardkit.storage.store import Store

Stop = Callable[[], bool]
T = TypeVar("T")


class DownloadCancelled(StorageError):
    """A download stopped because its prefetch was cancelled."""


@dataclass(frozen=True)
class DownloadOptions:
    """Parts of one download; ``hedge_after`` None: never hedge; parts below
    ``hedge_min_bytes`` are never hedged either. Seconds for times."""

    part_bytes: int = 8 * 1024 * 1024
    parts_in_flight: int = 8
    hedge_after: float | None = 1.0
    hedge_factor: float = 4.0
    hedge_min_bytes: int = 1 << 20
    slot_timeout: float = 900.0


class Downloader:
    """The cache downloads of one process: parts, pacing, node budget, hedging, counters.

    ``count(**deltas)`` receives ``parts``, ``hedged``, ``hedge_wins`` and ``throttled``.
    """

    def __init__(
        self, options: DownloadOptions, pacing: Pacing, budget: NodeBudget | None, count: Callable[..., None]
    ) -> None:
        self.options, self.pacing, self.budget, self._count = options, pacing, budget, count
        self.pid = os.getpid()

    def fetch(self, store: Store, name: str, path: str, num_bytes: int, cancel: threading.Event | None = None) -> None:
        """Write bytes ``[0, num_bytes)`` of ``name`` into the file at ``path`` (opened r+)."""
        step = self.options.part_bytes
        parts = [(s, min(s + step, num_bytes)) for s in range(0, num_bytes, step)]
        outer = cancel or threading.Event()
        failed = threading.Event()

        def stopped() -> bool:
            return outer.is_set() or failed.is_set()

        fd = open_regular(path, os.O_WRONLY)  # never through a link planted in our place (K13)
        try:
            if not sole_link(fd):
                raise CacheError(f"{path} has another name (a hard link); refusing to write into it")
            if len(parts) <= 1 or self.options.parts_in_flight <= 1:
                for start, end in parts:
                    _write_at(fd, self._part(store, name, start, end, stopped), start)
                return
            with ThreadPoolExecutor(
                max_workers=self.options.parts_in_flight, thread_name_prefix="shardkit-download"
            ) as pool:
                futures = [
                    pool.submit(lambda s, e: _write_at(fd, self._part(store, name, s, e, stopped), s), start, end)
                    for start, end in parts
                ]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                errors = [f.exception() for f in done if f.exception() is not None]
                if errors:
                    failed.set()
                    for future in futures:
                        future.cancel()
                    raise errors[0]  # type: ignore[misc]
        finally:
            os.close(fd)

    def _part(self, store: Store, name: str, start: int, end: int, stopped: Stop) -> bytes:
        """The bytes of one part; hedged by a second request when it runs late (K22)."""
        self._count(parts=1)
        if self.options.hedge_after is None or end - start < self.options.hedge_min_bytes:
            return self._attempt(store, name, start, end, stopped)
        results: queue.Queue[tuple[int, bytes | None, BaseException | None]] = queue.Queue()
        won = threading.Event()
        watch = _Watch()  # when the first attempt's current request went out

        def loser_stops() -> bool:
            return stopped() or won.is_set()

        def run(index: int) -> None:
            try:
                data = self._attempt(store, name, start, end, loser_stops, None if index else watch, hedge=index == 1)
                results.put((index, data, None))
            except BaseException as exc:  # handed to the waiting thread
                results.put((index, None, exc))

        _start_thread(run, 0)
        launched = 1
        outcome = watch.first_or_none(
            results, self.pacing.hedge_after(self.options.hedge_after, self.options.hedge_factor)
        )
        if outcome is None:  # the request went out and is late: hedge it
            self._count(hedged=1)
            _start_thread(run, 1)
            launched = 2
            outcome = results.get()
        first_error: BaseException | None = None
        for answered in range(launched):
            index, data, error = outcome if answered == 0 else results.get()
            if data is not None:
                won.set()
                self._count(hedge_wins=index)
                return data
            first_error = first_error or error
        raise first_error  # type: ignore[misc]

    def _attempt(
        self,
        store: Store,
        name: str,
        start: int,
        end: int,
        stopped: Stop,
        watch: _Watch | None = None,
        *,
        hedge: bool = False,
    ) -> bytes:
        """One request chain for ``[start, end)``: retried per the store's policy, every
        request through the pacing gate (a ``hedge`` passes it: it stands in for a late request that
        still holds its place) and a node slot; ``watch`` sees each one out."""
        url = store.url_of(name)

        def once() -> bytes:
            if stopped():
                raise DownloadCancelled(f"{url}: download cancelled")
            entered = self.pacing.enter(self.options.slot_timeout, stopped, hedge=hedge)
            if entered is None:
                raise DownloadCancelled(f"{url}: download cancelled")
            try:
                slot = self.budget.acquire(self.options.slot_timeout, stopped) if self.budget else -1
                if slot is None:
                    raise DownloadCancelled(f"{url}: download cancelled")
                try:
                    entered = time.monotonic()  # the request's own time, without the gates
                    if watch is not None:
                        watch.sent = entered
                    data = store.read_range(name, start, end, retry=NO_RETRY)
                finally:
                    if watch is not None:
                        watch.sent = None  # retrying or backing off is not "late"
                    if self.budget is not None and slot >= 0:
                        self.budget.release(slot)
            except ThrottledError:
                self._count(throttled=1)
                self.pacing.leave(entered, ok=False, throttled=True)
                raise
            except BaseException:
                self.pacing.leave(entered, ok=False)
                raise
            self.pacing.leave(entered, ok=True)
            return data

        return call_with_retry(once, policy=store.retry, what=f"{url} bytes [{start}, {end})")


class _Watch:
    """When the watched attempt's request in flight was sent (None between requests)."""

    def __init__(self) -> None:
        self.sent: float | None = None

    def first_or_none(self, results: queue.Queue[T], late: float) -> T | None:
        """The first result, or None once a request has been out ``late`` seconds."""
        while True:
            sent = self.sent
            wait_s = 0.05 if sent is None else min(0.05, sent + late - time.monotonic())
            try:
                return results.get(timeout=max(0.0, wait_s))
            except queue.Empty:
                sent = self.sent
                if sent is not None and time.monotonic() >= sent + late:
                    return None


def _start_thread(target: Callable[[int], None], index: int) -> None:
    # Daemon: a losing request stuck on a dead connection must not hold up interpreter exit;
    # it ends by itself at the socket read timeout.
    threading.Thread(
        target=target, args=(index,), daemon=True, name=f"shardkit-part-{'hedge' if index else 'first'}"
    ).start()


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
