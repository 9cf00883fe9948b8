"""File-mode helpers: run code under a given umask, list the modes of everything in a folder."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    """Set the process umask for the ``with`` block (tests run their writers in one thread)."""
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def file_modes(folder: str) -> dict[str, int]:
    """``{relative path: permission bits}`` of every regular file under ``folder``."""
    modes = {}
    for dirpath, _, filenames in os.walk(folder):
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                modes[os.path.relpath(path, folder)] = stat.S_IMODE(st.st_mode)
    return modes
