"""Objects written piece by piece and published whole (``Store.open_atomic``).

``LocalAtomicWrite`` streams the pieces to a temp file beside the target and renames it into
place after an fsync, so a writer never holds a whole shard in memory (joining blocks into
fresh memory was the largest cost of packing images: benchmarks/README.md, streamed shards).
Readers see the old file or the new one, never a part; a failed write leaves nothing behind.
``BufferedAtomicWrite`` keeps the pieces and hands them to ``write_atomic`` at ``commit``
(object stores: one PUT or one multipart upload, retried whole by the store).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable


class LocalAtomicWrite:
    def __init__(self, target: str) -> None:
        self.target = target
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        fd, self.temp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        self._file = os.fdopen(fd, "wb")
        self._done = False

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._file.write(data)  # larger than the buffer: straight to the kernel, no extra copy
        except BaseException:  # a full disk, say: the temp file is of no use any more
            self.discard()
            raise

    def commit(self) -> None:
        """fsync, then rename over the target; on failure nothing is left behind."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self.temp, self.target)
            self._done = True
        except BaseException:
            self.discard()
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


AtomicWrite = LocalAtomicWrite | BufferedAtomicWrite
