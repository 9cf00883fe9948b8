"""Reading the small files others may have written into a shared cache dir (K40).

Any member of a cache dir's group can write every small file the cache reads back: a sidecar
(``<entry>.json``), a published list of next uses and its position (``uses/``), a lock file's
pid. None of them may cost a reader more than a bounded amount of memory and time, or end its
job with a traceback, whatever it holds. So each is read through ``read_small``: opened as
every cache file is (``open_regular``: no link, no special file, no hang), refused — not
truncated — when longer than its cap, and read with at most ``cap + 1`` bytes. JSON goes
through ``loads_json``: ``NaN``, ``Infinity`` and numbers that overflow a float (``1e400``) are
refused, as is nesting deeper than ``format.limits.MAX_NESTING_DEPTH``.
Every refusal is an ``UntrustedFileError`` (a ``ValueError``): the caller skips the file.
"""

from __future__ import annotations

import os
from typing import Any

from shardkit.errors import FormatError
from shardkit.format.bounded_json import loads_bounded
from shardkit.storage.cache_files import open_regular


class UntrustedFileError(ValueError):
    """A file of a shared cache dir that is too large or does not parse: skip it."""


def read_small(path: str, max_bytes: int) -> bytes:
    """The whole of the regular file at ``path``; ``UntrustedFileError`` when it is longer
    than ``max_bytes``. OSError (``CacheError`` included) when it cannot be opened."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        return read_open(fd, max_bytes, path)
    finally:
        os.close(fd)


def read_open(fd: int, max_bytes: int, where: str) -> bytes:
    """The whole of the open regular file ``fd`` (from its start), refused as ``read_small``
    says: a length over ``max_bytes`` is refused before any byte is read (a sparse file's
    length counts: it would read as zeros), and a file still growing is read no further."""
    length = os.fstat(fd).st_size
    if length > max_bytes:
        raise UntrustedFileError(f"{where}: {length} bytes, more than the {max_bytes} a file "
                                 f"of this kind can hold; skipped")
    pieces, got = [], 0
    while got <= max_bytes:
        piece = os.pread(fd, max_bytes + 1 - got, got)
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    if got > max_bytes:
        raise UntrustedFileError(f"{where}: more than {max_bytes} bytes; skipped")
    return b"".join(pieces)


def loads_json(data: bytes, where: str) -> Any:
    """JSON parsed as ``format.bounded_json`` does with ``finite``: refusing what no shardkit
    writer writes (non-finite numbers, deep nesting) as ``UntrustedFileError``."""
    try:
        return loads_bounded(data, where, finite=True)
    except FormatError as exc:
        raise UntrustedFileError(f"{exc}; skipped") from None
