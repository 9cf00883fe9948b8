"""Opening files in a shared cache dir without being tricked by what others planted (K13–K16).

A cache dir may be writable by a whole group (specs/cache.md, "Sharing a cache dir"), so any
member can put a symbolic link, a hard link, a FIFO or a device file where the cache expects
one of its own files. Every file the cache opens therefore goes through ``open_regular``:
``O_NOFOLLOW`` (a link is refused, never followed), ``O_CLOEXEC``, ``O_NONBLOCK`` (a FIFO
cannot hang the open), then ``fstat`` refuses anything but a regular file. Files are created
with ``O_EXCL`` and mode ``0666``, which the kernel narrows by the umask; the cache never
changes the mode of a file (and only of a folder it has just created itself).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat

from shardkit.errors import CacheError

logger = logging.getLogger(__name__)

#: Mode given to ``open(2)``/``mkdir(2)``; the process umask removes bits from it (K15).
FILE_MODE = 0o666
DIR_MODE = 0o777

_SAFE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_checked_dirs: set[tuple[int, int]] = set()


def open_regular(path: str, flags: int, mode: int = FILE_MODE) -> int:
    """A descriptor of the regular file at ``path``; a link or special file → ``CacheError``."""
    try:
        fd = os.open(path, flags | _SAFE, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CacheError(f"{path} is a symbolic link; the cache never creates links, so it "
                             f"refuses to follow it (remove it; someone else may have planted it)"
                             ) from exc
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CacheError(f"{path} is not a regular file (mode {stat.filemode(st.st_mode)}); "
                         f"the cache refuses to use it")
    return fd


def create_new(path: str) -> int:
    """Create ``path`` (it must not exist, not even as a dangling link); read-write fd."""
    return open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)


def create_new_with_mode(path: str, mode: int) -> int:
    """``create_new`` with ``mode`` (narrowed by the umask) instead of ``FILE_MODE``."""
    return open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)


def regular_stat(path: str) -> os.stat_result | None:
    """``lstat`` of ``path`` if it is a regular file; None if missing, a link or special."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def sole_link(fd: int) -> bool:
    """The open file has exactly one name: writing to it cannot reach a file named elsewhere."""
    return os.fstat(fd).st_nlink == 1


def make_dir(path: str) -> None:
    """Create the folder ``path`` if missing. One this call creates gets the setgid bit (files
    keep the folder's group); an existing one is never changed."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _SAFE)
    except OSError:
        return  # replaced between mkdir and open: not ours to change
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid():
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_ISGID)
    except OSError:
        pass  # setgid is a convenience for groups, never required
    finally:
        os.close(fd)


def check_dir(path: str, *, follow: bool) -> None:
    """Refuse a folder that is a link (unless ``follow``: the user named it) or not a folder;
    warn once per process when any user may write it without the sticky bit (K14)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise CacheError(f"cache folder {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"cache folder {path} is not a folder (mode {stat.filemode(st.st_mode)}); "
                         f"the cache refuses to use it")
    ident = (st.st_dev, st.st_ino)
    if ident in _checked_dirs:
        return
    _checked_dirs.add(ident)
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        logger.warning(
            "cache folder %s (owner uid %d, gid %d, mode %s) is writable by every user and has no "
            "sticky bit: anyone on this machine can replace cached shards; use a folder shared "
            "by a group only (specs/cache.md, 'Sharing a cache dir')",
            path, st.st_uid, st.st_gid, stat.filemode(st.st_mode))


#: Mode of a download in progress: only its downloader may open it (K46).
PRIVATE_MODE = 0o600


def make_private(path: str, num_bytes: int) -> int:
    """Put a file only this user can open at ``path`` (a temp just reserved, ``0666 & ~umask``),
    of ``num_bytes`` bytes allocated; the mode to publish it with: the reserved file's read bits
    (``0444 & ~umask``). Anyone may have opened the reserved file for writing in the moment it
    was group-writable; that open file is unlinked here, so nothing written through it reaches
    the download (K46)."""
    st = os.lstat(path)
    fresh = f"{path}-p"
    fd = create_new_with_mode(fresh, PRIVATE_MODE)
    try:
        os.ftruncate(fd, num_bytes)  # the size is counted (eviction) from now: no gap at the rename
        os.replace(fresh, path)
        if num_bytes:
            try:
                os.posix_fallocate(fd, 0, num_bytes)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                    raise
    except BaseException:
        for name in (fresh, path):
            with contextlib.suppress(OSError):
                os.unlink(name)
        raise
    finally:
        os.close(fd)
    return stat.S_IMODE(st.st_mode) & 0o444


def seal(path: str, mode: int) -> None:
    """Make the finished download at ``path`` read-only (``mode``) before it is checked and
    published: from then on only its owner (or root) can change its bytes (K46)."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise CacheError(f"{path}: the download in progress is no longer this process's file "
                             f"(owner uid {st.st_uid}, {st.st_nlink} names); refusing to publish it")
        try:
            os.fchmod(fd, mode)
        except OSError as exc:  # a filesystem without modes: readers' checks (K45) still hold
            logger.warning("cannot make %s read-only (%s); publishing it as it is", path, exc.strerror)
    finally:
        os.close(fd)


def sealed_by_self(st: os.stat_result) -> bool:
    """The file is this user's and nobody may write it: a sealed download of this user (K46),
    whose bytes nobody else can have written (root aside)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o222
