"""Opening local files for reading without hanging on what is not a regular file.

Opening a FIFO for reading blocks until a writer appears, and reading a device (``/dev/zero``,
``/dev/urandom``) never ends; a directory fails later with an unhelpful errno. So every local
read of a dataset file (manifest, shard) opens with ``O_NONBLOCK`` — which makes opening a FIFO
return at once — then ``fstat``s the descriptor and refuses anything but a regular file, naming
it, before a single byte is read.
"""

from __future__ import annotations

import os
import stat

from shardkit.errors import NotFoundError, StorageError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular_file(path: str, what: str = "file") -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened read-only; ``StorageError`` naming it unless it is a
    regular file (symlinks are followed: the target must be regular). The caller closes ``fd``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: {what} does not exist") from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot open {what}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise StorageError(f"{path}: {what} is {kind}, not a regular file; refusing to read it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_regular_file(path: str, what: str = "file") -> bytes:
    """The whole content of the regular file ``path`` (``open_regular_file``'s checks first)."""
    fd, _ = open_regular_file(path, what)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError as exc:
        raise StorageError(f"{path}: cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)
