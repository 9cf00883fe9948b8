"""Pack-time shuffle: samples written in a seeded random order, in bounded memory (specs/pack-shuffle.md).

The order is defined by a key per sample, never by how the shuffle ran: sample ``i`` (its
position among the encoded samples, in source order) gets ``sort_keys(seed, i)``, a keyed
bijection of ``i`` onto 64-bit integers, and the dataset is the samples sorted by key (PS1). The
keys are distinct, so the sort has no ties, and any algorithm that sorts by them gives the same
order: the same bytes for any ``--workers``, memory budget, temp folder or engine (PS2).

:class:`ExternalShuffle` (external_shuffle.py) sorts by key in at most ``memory_bytes`` of held
samples (PS3), spilling to bucket files; the keys and ``ShuffleOptions`` are in shuffle_order.py.
This module writes a pack in that order: :func:`write_chunks` (``pack``) and :class:`ShuffledWriter`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from shardkit.format import Manifest, SampleEncoder, SchemaBuilder
from shardkit.write.external_shuffle import ExternalShuffle
from shardkit.write.shuffle_order import ShuffleOptions, sort_keys
from shardkit.write.writer import PublishOnExit, ShardWriter

log = logging.getLogger(__name__)
__all__ = ["ExternalShuffle", "ShuffleOptions", "ShuffledWriter", "sort_keys", "write_chunks"]


class _Chunk(Protocol):
    encoded: list[bytes]
    schema: dict[str, Any]


def write_chunks(writer: ShardWriter, chunks: Iterable[_Chunk], shuffle: ShuffleOptions | None) -> int:
    """Write encoded chunks (source order) to ``writer``: as they come, or sorted by key (PS1),
    and record which in the manifest's ``order`` (M9). Returns the temp bytes written (PS4)."""
    if shuffle is None:
        for chunk in chunks:
            writer.write_encoded(chunk.encoded, chunk.schema)
        writer.order = {"shuffled": False}
        return 0
    with ExternalShuffle(shuffle) as external:
        for chunk in chunks:
            writer.observe_schema(chunk.schema, len(chunk.encoded))
            external.add(chunk.encoded)
        for piece in external.drain():
            writer.write_encoded(piece, None)
        log.info("shuffle: %d samples, %d bytes of temp files", external.num_samples, external.spilled_bytes)
    writer.order = shuffle.describe()
    return external.spilled_bytes


class ShuffledWriter(PublishOnExit):
    """A ``ShardWriter`` front that writes its samples in the pack-time shuffle order (PS1):
    ``write`` encodes and collects (at most ``options.memory`` held, PS3), ``close`` sorts them
    into ``writer`` and publishes the manifest with its ``order``. The order is the one
    ``shardkit pack`` gives the same samples with the same seed. Not thread-safe.

    Usage::

        with ShuffledWriter(ShardWriter("out/"), ShuffleOptions(seed=0)) as writer:
            for sample in samples:
                writer.write(sample)
    """

    CHUNK = 256

    def __init__(self, writer: ShardWriter, options: ShuffleOptions | None = None) -> None:
        self.writer, self.options = writer, options or ShuffleOptions()
        self._external = ExternalShuffle(self.options)
        self._encoder, self._schema = SampleEncoder(), SchemaBuilder()
        self._chunk: list[bytes] = []

    def write(self, sample: dict[str, Any]) -> None:
        """Append one sample (``EncodeError`` names the field and the sample's index)."""
        self._chunk.append(self._encoder.encode(sample, self._external.num_samples + len(self._chunk)))
        self._schema.observe(sample)
        if len(self._chunk) >= self.CHUNK:
            self._flush()

    def close(self) -> Manifest:
        """Sort what was written into the writer, then publish the manifest."""
        self._flush()
        try:
            for piece in self._external.drain():
                self.writer.write_encoded(piece, None)
        finally:
            self._external.close()
        self.writer.order = self.options.describe()
        return self.writer.close()

    def _flush(self) -> None:
        if self._chunk:
            self.writer.observe_schema(self._schema.fields, len(self._chunk))
            self._external.add(self._chunk)
            self._chunk, self._schema = [], SchemaBuilder()

    @property
    def closed(self) -> bool:
        return self.writer.closed

    def abort(self) -> None:
        """Stop without a manifest: remove the temp files and the shards written so far."""
        self._external.close()
        self.writer.abort()
