"""Objects written piece by piece and published whole (``Store.open_atomic``).

``LocalAtomicWrite`` streams the pieces to a temp file beside the target and renames it into
place after an fsync, so a writer never holds a whole shard in memory (joining blocks into
fresh memory was the largest cost of packing images: benchmarks/README.md, streamed shards).
Readers see the old file or the new one, never a part; a failed write leaves nothing behind.
The temp file is created ``O_EXCL`` with mode ``0666``, so the published file gets
``0666 & ~umask`` like any file the user creates (shard-format.md W4). A failure to write
(a full disk, a file size limit) is a ``StorageError`` naming the file being written (W6).
``BufferedAtomicWrite`` keeps the pieces and hands them to ``write_atomic`` at ``commit``
(object stores: one PUT or one multipart upload, retried whole by the store).
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable

from shardkit.errors import StorageError

TEMP_PREFIX = ".tmp-"
_DISK_FULL = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
              errno.EFBIG: "file size limit reached"}


class LocalAtomicWrite:
    def __init__(self, target: str) -> None:
        self.target = target
        self.temp = ""
        self._done = False
        folder = os.path.dirname(target)
        try:
            os.makedirs(folder, exist_ok=True)
            self.temp, fd = _create_temp(folder, os.path.basename(target))
        except OSError as exc:
            raise write_error(exc, target, self.temp or folder) from exc
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._file.write(data)  # larger than the buffer: straight to the kernel, no extra copy
        except BaseException as exc:  # a full disk, say: the temp file is of no use any more
            self.discard()
            if isinstance(exc, OSError) and not isinstance(exc, StorageError):
                raise write_error(exc, self.target, self.temp) from exc
            raise

    def commit(self) -> None:
        """fsync, then rename over the target; on failure nothing is left behind."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self.temp, self.target)
            self._done = True
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError) and not isinstance(exc, StorageError):
                raise write_error(exc, self.target, self.temp) from exc
            raise

    def discard(self) -> None:
        """Drop what was written (idempotent; nothing to do once committed)."""
        if self._done:
            return
        self._done = True
        try:
            self._file.close()
        except OSError:
            pass
        try:
            os.unlink(self.temp)
        except OSError:
            pass


def write_error(exc: OSError, target: str, temp: str) -> StorageError:
    """``exc`` as a ``StorageError`` naming the file being written (and its temp file)."""
    what = _DISK_FULL.get(exc.errno or 0, "cannot write")
    error = StorageError(f"{target}: {what} while writing it (temp file {temp}): "
                         f"{exc.strerror or exc}")
    error.errno = exc.errno
    return error


def _create_temp(folder: str, name: str) -> tuple[str, int]:
    """A new temp file beside the target; mode 0666 narrowed by the umask (never 0600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(16):
        path = os.path.join(folder, f"{TEMP_PREFIX}{uuid.uuid4().hex[:12]}-{name}"[:255])
        try:
            return path, os.open(path, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp file name", folder)


def link_or_copy(src: str, dst: str) -> None:
    """Publish the bytes of local file ``src`` at ``dst`` atomically (readers see the old
    ``dst`` or the new one): a hard link renamed into place, or a streamed copy where the
    filesystem has no hard links. ``src`` stays."""
    folder = os.path.dirname(dst)
    try:
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f"{TEMP_PREFIX}{uuid.uuid4().hex[:12]}-{os.path.basename(dst)}")
        os.link(src, temp)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            raise write_error(exc, dst, folder) from exc
        _copy(src, dst)
        return
    try:
        os.replace(temp, dst)
    except OSError as exc:
        remove_quietly(temp)
        raise write_error(exc, dst, temp) from exc


def _copy(src: str, dst: str) -> None:
    file = LocalAtomicWrite(dst)
    with open(src, "rb") as fh:
        while chunk := fh.read(16 << 20):
            file.write(chunk)
    file.commit()


def temp_files(folder: str) -> list[str]:
    """Names of the temp files in local ``folder`` (one level), left by interrupted writes."""
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX))
    except OSError:
        return []


def remove_quietly(path: str) -> None:
    """Remove a file or an empty folder if it is there (best effort)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


class BufferedAtomicWrite:
    def __init__(self, publish: Callable[[bytes], None]) -> None:
        self._publish = publish
        self._parts: list[bytes | memoryview] = []

    def write(self, data: bytes | memoryview) -> None:
        self._parts.append(data)

    def commit(self) -> None:
        data, self._parts = b"".join(self._parts), []
        self._publish(data)

    def discard(self) -> None:
        self._parts = []


