"""A small shared-memory mailbox from the training process to its DataLoader workers.

Persistent workers keep their copy of the dataset across epochs, so attributes set in the main
process never reach them (L6, specs/resume-state.md). Before each iteration ``ShardLoader`` writes the epoch, the
topology and any pending resume state here; every worker reads it at the start of ``__iter__``.
The buffer is a shared-memory tensor, so it is inherited by fork and passed by handle to spawn.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

_HEADER = struct.Struct("<Q")


class Control:
    """JSON payload in a fixed shared buffer. Written only by the main process between iterations."""

    def __init__(self, capacity: int = 8 << 20) -> None:
        self._buffer = torch.zeros(capacity, dtype=torch.uint8).share_memory_()

    def write(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        view = self._buffer.numpy()
        if len(data) + _HEADER.size > len(view):
            raise ValueError(f"loader control payload of {len(data)} bytes exceeds {len(view)} bytes")
        view[_HEADER.size : _HEADER.size + len(data)] = memoryview(data)
        view[: _HEADER.size] = memoryview(_HEADER.pack(len(data)))

    def read(self) -> dict[str, Any] | None:
        view = self._buffer.numpy()
        (length,) = _HEADER.unpack(view[: _HEADER.size].tobytes())
        if length == 0:
            return None
        payload: dict[str, Any] = json.loads(view[_HEADER.size : _HEADER.size + length].tobytes())
        return payload
