"""Fresh buffers for a batch that has no reusable one (X5): what a worker sends when no ring slot
is free or the batch does not fit in one, and what spawn/forkserver workers always send."""

from __future__ import annotations

import torch

INLINE_BYTES = 1 << 20  # below: a bytearray pickled inline through the result pipe
ALIGN = 64


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the 64-byte alignment every tensor of a packed batch starts on."""
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def fresh_buffer(nbytes: int) -> tuple[bytearray | torch.Tensor, torch.Tensor]:
    """``(what travels, a uint8 tensor over it)`` of ``nbytes``: a ``bytearray`` below
    ``INLINE_BYTES`` (inline through the pipe: no segment, no descriptor), else one fresh
    shared-memory segment (torch passes its handle)."""
    if nbytes < INLINE_BYTES:
        inline = bytearray(nbytes)
        return inline, torch.frombuffer(inline, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
    shared = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))
    return shared, shared
