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

Any member of the cache dir's group can write here, so a reader trusts nothing it finds (K41):
a list longer than ``MAX_LIST_BYTES`` or ``MAX_LIST_ENTRIES`` is refused unread (a publisher
lists only the prefix of its order that fits), one pass takes at most ``MAX_PASS_ENTRIES``
entries from all lists together, JSON is parsed strictly (shared_reads.py), and a file that
fails any of this is skipped — once per version of the file, not on every pass. A reader
removes only what it proves dead: the files of a ``.keys`` whose lock it took, and a
``.keys.new`` whose lock it took (that file alone: its token may be a live publisher's).
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
from shardkit.storage.shared_reads import UntrustedFileError, loads_json, read_open, read_small

logger = logging.getLogger(__name__)

USES_DIR = "uses"
KEYS_SUFFIX = ".keys"
POS_SUFFIX = ".pos"
NEW_MARK = ".new"  # a file being written: ``<token>.keys.new``, ``<token>.pos.new``
_MAX_POS_BYTES = 32
#: K41: the largest list a publisher writes and a reader reads (bytes, entries), and the most
#: entries one eviction pass takes from all live publishers together.
MAX_LIST_BYTES = 4 << 20
MAX_LIST_ENTRIES = 65_536
MAX_PASS_ENTRIES = 262_144
MAX_PASS_BYTES = 32 << 20  # of lists new to this process, read and parsed in one pass
MAX_PASS_FILES = 4096  # lists (and lists being written) one pass opens at most


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
            os.write(fd, encode_list(horizon, self._entries))
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
    num_entries: int


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


_parsed: dict[str, tuple[tuple[int, int, int], _Published | None]] = {}  # None: malformed


def encode_list(horizon: int, entries: Sequence[str]) -> bytes:
    """A publisher's ``.keys`` record: the longest prefix of ``entries`` within the K41 caps
    (a reader refuses longer lists; the entries after it count as listed by no one)."""
    budget, count = MAX_LIST_BYTES - 64, 0  # 64: the record's keys and the horizon
    for entry in entries[:MAX_LIST_ENTRIES]:
        budget -= len(json.dumps(entry)) + 2
        if budget < 0:
            break
        count += 1
    return json.dumps({"horizon": horizon, "entries": list(entries[:count])}).encode()


def read_next_uses(root: str) -> NextUses:
    """Every live publisher's list and position under ``root``; dead publishers' files are
    removed (K32). Unreadable, malformed or oversized files are skipped (K41)."""
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
    uses, room = NextUses(), _Room(MAX_PASS_ENTRIES, MAX_PASS_BYTES)
    lists = [name for name in names if name.endswith((KEYS_SUFFIX, KEYS_SUFFIX + NEW_MARK))]
    if len(lists) > MAX_PASS_FILES:
        logger.debug("%s holds %d lists; reading the first %d", folder, len(lists), MAX_PASS_FILES)
    for name in lists[:MAX_PASS_FILES]:
        if name.endswith(KEYS_SUFFIX + NEW_MARK):
            _remove_if_dead(folder, name)
        elif name.endswith(KEYS_SUFFIX) and (found := _read_publisher(folder, name, room)) is not None:
            uses.consumers.append(found)
    return uses


@dataclass
class _Room:
    """What is left of one pass's budget (K41): entries taken, bytes read and parsed."""

    num_entries: int
    num_bytes: int


def _read_publisher(folder: str, name: str, room: _Room) -> tuple[_Published, int] | None:
    """A live publisher's list and position; a dead one's files are removed (K32)."""
    path = os.path.join(folder, name)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:  # gone, or a link or special file planted there (K13)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # the publisher is alive
            return _load(fd, path, room)
        if _names(path, fd):  # the file we hold the lock of is the one at this name
            token = name[: -len(KEYS_SUFFIX)]
            for suffix in (POS_SUFFIX + NEW_MARK, POS_SUFFIX, KEYS_SUFFIX):
                _unlink(os.path.join(folder, token + suffix))  # a dead publisher's
        return None
    finally:
        os.close(fd)


def _remove_if_dead(folder: str, name: str) -> None:
    """Remove a ``.keys.new`` whose writer is dead (its lock is free) — that file alone: its
    token names no proof about any other file, which may be a live publisher's (K41)."""
    path = os.path.join(folder, name)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _names(path, fd):
            _unlink(path)
    except BlockingIOError:
        pass  # being written by a live publisher
    finally:
        os.close(fd)


def _load(fd: int, path: str, room: _Room) -> tuple[_Published, int] | None:
    """The list in ``fd``, parsed once per version of the file (a malformed one too), within
    what is left of the pass's ``room``; a list that does not fit is not kept."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _parsed.get(path)
    if cached is None or cached[0] != ident:
        if room.num_bytes < st.st_size <= MAX_LIST_BYTES:  # a longer one is refused unread below
            logger.debug("skipping next uses in %s this pass: %d bytes of lists read already",
                         path, MAX_PASS_BYTES - room.num_bytes)
            return None
        room.num_bytes -= st.st_size
        try:
            cached = ident, _parse(read_open(fd, MAX_LIST_BYTES, path), path)
        except (OSError, UntrustedFileError) as exc:
            logger.debug("skipping next uses in %s: %s", path, exc)
            cached = ident, None
        _parsed[path] = cached
    published = cached[1]
    if published is None:
        return None
    if published.num_entries > room.num_entries:
        logger.debug("skipping next uses in %s: this pass took %d entries already", path,
                     MAX_PASS_ENTRIES - room.num_entries)
        del _parsed[path]  # not kept in memory either
        return None
    room.num_entries -= published.num_entries
    return published, _read_position(path[: -len(KEYS_SUFFIX)] + POS_SUFFIX)


def _parse(data: bytes, path: str) -> _Published:
    record = loads_json(data, path)
    horizon = record.get("horizon") if isinstance(record, dict) else None
    entries = record.get("entries") if isinstance(record, dict) else None
    if (type(horizon) is not int or horizon < 0 or not isinstance(entries, list)
            or len(entries) > MAX_LIST_ENTRIES or not all(isinstance(e, str) for e in entries)):
        raise UntrustedFileError(f"{path}: not a list of next uses (a horizon >= 0 and at most "
                                 f"{MAX_LIST_ENTRIES} entry names)")
    positions: dict[str, list[int]] = {}
    for index, entry in enumerate(entries):
        positions.setdefault(entry, []).append(index)
    return _Published(min(horizon, len(entries)), positions, len(entries))


def _read_position(path: str) -> int:
    """The publisher's index in its list; 0 when not written yet or not a small number."""
    try:
        text = read_small(path, _MAX_POS_BYTES).decode("ascii").strip()
        return max(0, int(text or 0))
    except (OSError, ValueError):  # UntrustedFileError and UnicodeDecodeError included
        return 0


def _names(path: str, fd: int) -> bool:
    try:
        here, mine = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
