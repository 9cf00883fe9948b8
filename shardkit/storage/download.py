"""Fetch a whole object into an already-allocated local file, in concurrent ranged parts.

Parts are separate range requests of ``part_bytes``, up to ``parts_in_flight`` of one object at
once, each retried on its own (the store's ``RetryPolicy``): a transient failure costs one
part, not the whole shard, and memory stays bounded by ``part_bytes × parts_in_flight`` (× 2
while hedging; one 128 KiB piece per request on the direct path, K23). Every request passes two
gates (specs/cache.md, K20–K22):

- ``Pacing`` (pacing.py): this process's AIMD limit, lowered when the store throttles (503
  SlowDown, 429) and raised again as requests succeed;
- ``NodeBudget`` (budget.py): slots shared by every process of the node, crash-safe.

Each request streams its body into the part's place in the file as it arrives
(``Store.stream_range``: over plain HTTP connections for S3 (``DirectS3Store``), spliced
socket → pipe → file where it can be, K23), so no part is ever held whole in memory there. A part still running
after ``Pacing.hedge_after`` gets a second request for the same range; both write the same
bytes into the same place until one has delivered the whole range: that one wins, and from
then on the other's writes are refused (it stops at its next piece; its thread ends with its
request). ``cancel`` stops between requests: a request already out completes (a one-part
shard still gets published for whoever asks next). Nothing here publishes: the caller
verifies and renames the file (K1).
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
from shardkit.storage.body_splice import splice_to_file
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

    ``count(**deltas)`` receives ``parts``, ``retries``, ``hedged``, ``hedge_wins`` and ``throttled``.
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
        sink = _Sink(fd)
        try:
            if not sole_link(fd):
                raise CacheError(f"{path} has another name (a hard link); refusing to write into it")
            if len(parts) <= 1 or self.options.parts_in_flight <= 1:
                for start, end in parts:
                    self._part(store, name, _Part(sink, start, end), stopped)
                return
            with ThreadPoolExecutor(
                max_workers=self.options.parts_in_flight, thread_name_prefix="shardkit-download"
            ) as pool:
                futures = [
                    pool.submit(self._part, store, name, _Part(sink, start, end), stopped) for start, end in parts
                ]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                errors = [f.exception() for f in done if f.exception() is not None]
                if errors:
                    failed.set()
                    for future in futures:
                        future.cancel()
                    raise errors[0]  # type: ignore[misc]
        except _WriteFailed as failure:
            raise failure.error from None  # the disk's error, as the caller handles it (K11)
        finally:
            sink.close()  # once no write is under way; requests still out write nothing more

    def _part(self, store: Store, name: str, part: _Part, stopped: Stop) -> None:
        """Fetch one part into its place; hedged by a second request when it runs late (K22)."""
        self._count(parts=1)
        if self.options.hedge_after is None or part.end - part.start < self.options.hedge_min_bytes:
            self._attempt(store, name, part, stopped)
            return
        results: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
        watch = _Watch()  # when the first attempt's current request went out

        def run(index: int) -> None:
            try:
                self._attempt(store, name, part, stopped, None if index else watch, hedge=index == 1)
                results.put((index, None))
            except BaseException as exc:  # handed to the waiting thread
                results.put((index, exc))

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
            index, error = outcome if answered == 0 else results.get()
            if error is None:
                self._count(hedge_wins=index)
                return
            first_error = first_error or error
        raise first_error  # type: ignore[misc]

    def _attempt(
        self, store: Store, name: str, part: _Part, stopped: Stop, watch: _Watch | None = None, *, hedge: bool = False
    ) -> None:
        """One request chain for ``part``, until it holds the whole range or another attempt
        won it: retried per the store's policy, every request through the pacing gate (a
        ``hedge`` passes it: it stands in for a late request that still holds its place) and
        a node slot; ``watch`` sees each one out."""
        url = store.url_of(name)

        def write(piece: memoryview, offset: int) -> None:
            part.write(piece, offset, url)  # not stopped by ``cancel``: a request out may still publish

        def put(pipe_fd: int, count: int, offset: int) -> None:
            part.write(pipe_fd, offset, url, count)

        tries = 0

        def once() -> None:
            nonlocal tries
            tries += 1
            if tries > 1:
                self._count(retries=1)
            if stopped() or part.won:
                raise DownloadCancelled(f"{url}: download cancelled")
            entered = self.pacing.enter(self.options.slot_timeout, lambda: stopped() or part.won, hedge=hedge)
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
                    store.stream_range(name, part.start, part.end, write, retry=NO_RETRY, put=put)
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
            if not part.finish():
                raise DownloadCancelled(f"{url}: bytes [{part.start}, {part.end}) came first by another request")

        call_with_retry(once, policy=store.retry, what=f"{url} bytes [{part.start}, {part.end})")


class _WriteFailed(StorageError):
    """A local write failed; ``error`` is the ``OSError`` (carried past the store's error mapping)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _Sink:
    """The download's file descriptor, closed only once no write into it is under way."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._open = True
        self._writing = 0
        self._cond = threading.Condition()

    def write(self, piece: memoryview | int, offset: int, url: str, count: int = 0) -> None:
        """``piece`` at ``offset``; or, ``piece`` a pipe's descriptor, ``count`` bytes out of it."""
        with self._cond:
            if not self._open:
                raise DownloadCancelled(f"{url}: download ended")
            self._writing += 1
        try:
            if isinstance(piece, int):
                splice_to_file(piece, self.fd, count, offset)
            else:
                while piece:
                    written = os.pwrite(self.fd, piece, offset)
                    piece, offset = piece[written:], offset + written
        except OSError as exc:
            raise _WriteFailed(exc) from exc
        finally:
            with self._cond:
                self._writing -= 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._open = False
            while self._writing:  # a pwrite of one piece: bounded by the local disk
                self._cond.wait()
        os.close(self.fd)


class _Part:
    """Bytes ``[start, end)`` of the file: attempts write into it until one finishes (K22)."""

    def __init__(self, sink: _Sink, start: int, end: int) -> None:
        self.sink, self.start, self.end = sink, start, end
        self.won = False
        self._lock = threading.Lock()  # held across each write: none lands after the win

    def write(self, piece: memoryview | int, offset: int, url: str, count: int = 0) -> None:
        """As ``_Sink.write``; refused once another attempt has won the part."""
        with self._lock:
            if self.won:
                raise DownloadCancelled(f"{url}: bytes [{self.start}, {self.end}) came first by another request")
            self.sink.write(piece, offset, url, count)

    def finish(self) -> bool:
        """Claim the part for the attempt that has just written all of it; False if another
        attempt had already."""
        with self._lock:
            if self.won:
                return False
            self.won = True
            return True


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
    # it ends by itself at the socket read timeout, or at its deadline (K25).
    threading.Thread(
        target=target, args=(index,), daemon=True, name=f"shardkit-part-{'hedge' if index else 'first'}"
    ).start()

