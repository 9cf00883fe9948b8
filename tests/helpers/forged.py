"""Forged metadata as an attacker makes it: self-consistent, so only a check rooted elsewhere
catches it (specs/manifest.md M20)."""

from __future__ import annotations

import struct

import xxhash


def rebound_companion(companion: bytes, json_data: bytes) -> bytes:
    """``companion`` (a ``manifest.bin``) made to claim it describes ``json_data``: its recorded
    xxh64 of the JSON replaced, its own trailing checksum recomputed."""
    body = bytearray(companion[:-8])
    struct.pack_into("<Q", body, 16, xxhash.xxh64_intdigest(json_data))
    return bytes(body) + struct.pack("<Q", xxhash.xxh64_intdigest(bytes(body)))
