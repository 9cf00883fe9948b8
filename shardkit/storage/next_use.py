"""What the consumers of a node will open next, shared through the cache dir (K30–K32).

A consumer's plan fixes the order of the entries it will open, so eviction can drop the
entry whose next use is furthest away (Belady's rule) instead of the least recently used.
Each consumer with a prefetcher publishes its list once and its position as it moves::

    <cache_dir>/v1/uses/<pid>-<hex>.keys     {"horizon": h, "entries": [entry names, in order]}
    <cache_dir>/v1/uses/<pid>-<hex>.pos      the index in that list the consumer is at (text)

The publisher holds an exclusive ``flock`` on its ``.keys`` file for its life (taken on a
temporary name before the file appears, so no reader sees it unlocked). A reader that can take
that lock knows the publisher is dead — the kernel drops the lock with the process, even on
SIGKILL — and removes its files instead of using them. ``.pos`` is replaced atomically.

Publishing is an optimisation: when the folder cannot be written, the consumer publishes
nothing and eviction falls back to LRU for its entries. Not thread-safe: one publisher per
consumer; readers run under the cache's ``.space.lock``.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import logging
import math
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from shardkit.storage.cache_files import check_dir, create_new, make_dir, open_regular

logger = logging.getLogger(__name__)

USES_DIR = "uses"
KEYS_SUFFIX = ".keys"
POS_SUFFIX = ".pos"
NEW_MARK = ".new"  # a file being written: ``<token>.keys.new``, ``<token>.pos.new``
_MAX_POS_BYTES = 32


class UsePublisher:
    """Publishes one consumer's upcoming entries and its position among them (K32)."""

    def __init__(self, root: str, entries: Sequence[str], horizon: int) -> None:
        self._folder = os.path.join(root, USES_DIR)
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._entries, self._position, self._pid = list(entries), 0, os.getpid()
        self._started = False  # whether ``reach`` was called: the first finds index 0 too
        self._fd: int | None = None
        try:
            make_dir(self._folder)
            check_dir(self._folder, follow=False)
            self._fd = self._publish(horizon)
            self._write_position()
        except OSError as exc:  # CacheError included (a planted link or special file, K13)
            logger.debug("not publishing next uses in %s: %s", self._folder, exc)
            self.close()

    def _path(self, suffix: str) -> str:
        return os.path.join(self._folder, self._token + suffix)

    def _publish(self, horizon: int) -> int:
        new = self._path(KEYS_SUFFIX + NEW_MARK)
        fd = create_new(new)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours alone: created O_EXCL just now
            os.write(fd, json.dumps({"horizon": horizon, "entries": self._entries}).encode())
            os.rename(new, self._path(KEYS_SUFFIX))
        except BaseException:
            os.close(fd)
            _unlink(new)
            raise
        return fd

    def reach(self, entry: str) -> None:
        """The consumer moved on to the next occurrence of ``entry`` in its list (an entry not
        listed ahead changes nothing)."""
        if self._fd is None or os.getpid() != self._pid:
            return
        try:
            self._position = self._entries.index(entry, self._position + self._started)
        except ValueError:
            return
        self._started = True
        try:
            self._write_position()
        except OSError as exc:
            logger.debug("cannot update %s: %s", self._path(POS_SUFFIX), exc)

    def _write_position(self) -> None:
        new = self._path(POS_SUFFIX + NEW_MARK)
        _unlink(new)
        with os.fdopen(create_new(new), "w", encoding="ascii") as fh:
            fh.write(str(self._position))
        os.replace(new, self._path(POS_SUFFIX))

    def close(self) -> None:
        """Remove the published files (position first: a ``.pos`` never outlives its list)."""
        if os.getpid() != self._pid or self._fd is None:
            return  # a forked child never removes its parent's list; nothing was published
        for suffix in (POS_SUFFIX + NEW_MARK, POS_SUFFIX, KEYS_SUFFIX):
            _unlink(self._path(suffix))
        os.close(self._fd)
        self._fd = None


@dataclass
class _Published:
    horizon: int
    positions: dict[str, list[int]]  # entry → its indices in the list, ascending


@dataclass
class NextUses:
    """The live consumers' lists and positions, read once per eviction pass (K30, K31)."""

    consumers: list[tuple[_Published, int]] = field(default_factory=list)

    def distance(self, entry: str) -> float:
        """How many entries from now some live consumer opens ``entry`` (0: at it now); inf when
        no live consumer lists it ahead."""
        return self._nearest(entry)[0]

    def protected(self, entry: str) -> bool:
        """Within some live consumer's prefetch horizon: evicted only as a last resort (K31)."""
        return self._nearest(entry)[1]

    def victim_key(self, entry: str, last_use: float) -> tuple[bool, float, float]:
        """Sort key of eviction victims: unprotected first, then furthest next use (unknown
        first), then least recently used (K30)."""
        distance, protected = self._nearest(entry)
        return protected, -distance, last_use

    def _nearest(self, entry: str) -> tuple[float, bool]:
        best, protected = math.inf, False
        for published, position in self.consumers:
            indices = published.positions.get(entry)
            if indices:
                at = bisect.bisect_left(indices, position)
                if at < len(indices):
                    ahead = indices[at] - position
                    best, protected = min(best, ahead), protected or ahead <= published.horizon
        return best, protected


_parsed: dict[str, tuple[tuple[int, int, int], _Published]] = {}


def read_next_uses(root: str) -> NextUses:
    """Every live publisher's list and position under ``root``; dead publishers' files are
    removed (K32). Unreadable or malformed files are skipped."""
    folder = os.path.join(root, USES_DIR)
    if not os.path.isdir(folder):
        return NextUses()
    try:
        check_dir(folder, follow=False)  # a link planted there is never followed (K13)
        names = sorted(os.listdir(folder))
    except OSError:  # CacheError included
        return NextUses()
    for stale in set(_parsed) - {os.path.join(folder, name) for name in names}:
        del _parsed[stale]
    uses = NextUses()
    for name in names:
        if name.endswith(KEYS_SUFFIX) or name.endswith(KEYS_SUFFIX + NEW_MARK):
            found = _read_publisher(folder, name)
            if found is not None:
                uses.consumers.append(found)
    return uses


def _read_publisher(folder: str, name: str) -> tuple[_Published, int] | None:
    path = os.path.join(folder, name)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:  # gone, or a link or special file planted there (K13)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # the publisher is alive
            return _load(fd, path) if name.endswith(KEYS_SUFFIX) else None
        token = name.split(KEYS_SUFFIX, 1)[0]
        for suffix in (POS_SUFFIX + NEW_MARK, POS_SUFFIX, KEYS_SUFFIX + NEW_MARK, KEYS_SUFFIX):
            _unlink(os.path.join(folder, token + suffix))  # a dead publisher's (K32)
        return None
    finally:
        os.close(fd)


def _load(fd: int, path: str) -> tuple[_Published, int] | None:
    try:
        st = os.fstat(fd)
        ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _parsed.get(path)
        if cached is None or cached[0] != ident:
            with os.fdopen(os.dup(fd), "rb") as fh:
                record = json.loads(fh.read())
            positions: dict[str, list[int]] = {}
            for index, entry in enumerate(record["entries"]):
                positions.setdefault(str(entry), []).append(index)
            cached = ident, _Published(int(record["horizon"]), positions)
            _parsed[path] = cached
        return cached[1], _read_position(path[: -len(KEYS_SUFFIX)] + POS_SUFFIX)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.debug("skipping next uses in %s: %s", path, exc)
        return None


def _read_position(path: str) -> int:
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return 0  # not written yet: the consumer is at its start
    try:
        return int(os.read(fd, _MAX_POS_BYTES).decode("ascii") or 0)
    except (OSError, ValueError):
        return 0
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
