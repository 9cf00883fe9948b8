"""The one release rule for reusable batch memory (X2, specs/batch-transport.md).

Reusable memory — a ring slot (``ring.py``) or a recycled buffer (``recycler.py``) — is lent out
as exactly one numpy array over it. Every tensor, view, slice, ``.numpy()`` array and ``Ragged``
made from that array keeps it alive (through numpy's ``base`` or torch's storage), so the array
becomes garbage exactly when nothing of the batch can still see the memory; a
``weakref.finalize`` on it then hands the memory back. The lender never counts references and
never guesses: on a free-threaded build, whose deferred reference counting may delay
deallocation, memory comes back later, never earlier.

The lent array must view a non-ndarray buffer — an ``mmap`` (ring slots) or a ``memoryview``
of an array (recycled buffers): numpy collapses a view's ``base`` to the first *array* that
owns its data, so views made from an array lent straight over an owning ndarray would skip the
lent array and let it die while the batch lives. A memoryview or mmap stops that collapse.
"""

from __future__ import annotations

import mmap
import weakref
from collections.abc import Callable

import numpy as np


def lend(
    memory: mmap.mmap | memoryview, offset: int, nbytes: int, release: Callable[[int], None], key: int
) -> np.ndarray:
    """``memory[offset : offset + nbytes]`` as a uint8 array; ``release(key)`` runs once that
    array and everything made from it are garbage."""
    array = np.frombuffer(memory, dtype=np.uint8, count=nbytes, offset=offset)
    weakref.finalize(array, release, key)
    return array
