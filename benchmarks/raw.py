"""The raw limit: read shard files, zstd-decompress each block, decode its samples.

    python -m benchmarks.raw --kind tokens --procs 2 [--blocks shardkit|own] [--scale 0.05]

No DataLoader, no collation, no per-sample Python objects beyond what msgpack creates: the
ceiling a reader of zstd + msgpack blocks can approach. Two block sources:

* ``own``: blocks written here (``bench-data/<kind>/packed/raw-own``): samples as msgpack
  maps ``{"id", <payload field>: bin, ["label"]}`` concatenated into ~1 MiB blocks,
  zstd level 3 each, in ≤64 MiB files. Exists whether or not shardkit does.
* ``shardkit``: the blocks of shardkit's own packed data set, located through its manifest
  and shard index; a block stored raw (incompressible payloads) is not decompressed, which
  is what the format promises readers. Each block is decoded by shardkit's own block decoder
  (``shardkit.format.decode_block``: msgpack for row blocks, columns for column blocks, arrays
  as numpy views): what shardkit's reader does per block with no loader around it.

Target T1 (benchmarks/README.md) defines the raw limit as zstd decompress + msgpack unpack: that is ``own``, the
yardstick of the ≥ 50% target; ``shardkit`` shows what shardkit's own blocks cost to decode.

With ``--procs 2`` the block list is cut into two contiguous halves, each read by a forked
process; the clock starts when both are ready (a barrier) and stops when both are done.
After the timed loop, an untimed pass decodes every sample and checks the data set digest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zstandard

from benchmarks import data
from benchmarks.checksum import Digest
from benchmarks.measure import emit, now

BLOCK_RAW_BYTES = 1 << 20
SHARD_BYTES = 64 << 20
ZSTD_LEVEL = 3
CODEC_RAW, CODEC_ZSTD = 0, 1
MB = 1e6


@dataclass(frozen=True)
class BlockRef:
    path: str
    offset: int
    stored_size: int
    num_samples: int
    codec: int  # CODEC_RAW or CODEC_ZSTD
    layout: int = 0  # shardkit blocks: 0 rows, 1 columns (specs/shard-format.md §3a)


# ---- own blocks ------------------------------------------------------------------------------
def _encode_own(source: data.Source, index: int) -> bytes:
    record: dict[str, Any] = {"id": index, source.payload_field: source.payload(index).tobytes()}
    if source.kind == "images":
        record["label"] = source.label(index)
    return msgpack.packb(record, use_bin_type=True)


def write_own_blocks(source: data.Source, out_dir: Path) -> list[BlockRef]:
    """Pack ``source`` into own zstd+msgpack blocks (idempotent: reuses a finished set)."""
    index_path = out_dir / "blocks.json"
    if index_path.exists():
        return [BlockRef(**ref) for ref in json.loads(index_path.read_text())]
    out_dir.mkdir(parents=True, exist_ok=True)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    refs: list[BlockRef] = []
    shard, shard_path, pending, count = None, "", bytearray(), 0

    def flush_block() -> None:
        nonlocal shard, shard_path, pending, count
        if shard is None or shard.tell() >= SHARD_BYTES:
            if shard is not None:
                shard.close()
            shard_path = str(out_dir / f"shard-{len(refs):06d}.bin")
            shard = open(shard_path, "wb")
        stored = compressor.compress(bytes(pending))
        refs.append(BlockRef(shard_path, shard.tell(), len(stored), count, CODEC_ZSTD))
        shard.write(stored)
        pending, count = bytearray(), 0

    for index in source.iter_indices():
        pending += _encode_own(source, index)
        count += 1
        if len(pending) >= BLOCK_RAW_BYTES:
            flush_block()
    if count:
        flush_block()
    if shard is not None:
        shard.close()
    index_path.write_text(json.dumps([ref.__dict__ for ref in refs]))
    return refs


def _unpack_all(raw: bytes | memoryview, ref: BlockRef | None = None) -> list[Any]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(raw), 1))
    unpacker.feed(raw)
    return list(unpacker)


Decode = Callable[[Any, BlockRef], list[Any]]  # a raw block → its samples


# ---- the timed loop --------------------------------------------------------------------------
def _read_ranges(refs: list[BlockRef]) -> Iterator[tuple[memoryview, list[BlockRef], int]]:
    """Group consecutive blocks by file; read each group's byte range with one read."""
    start = 0
    while start < len(refs):
        stop = start
        while stop < len(refs) and refs[stop].path == refs[start].path:
            stop += 1
        group = refs[start:stop]
        first, last = group[0].offset, group[-1].offset + group[-1].stored_size
        with open(group[0].path, "rb", buffering=0) as f:
            f.seek(first)
            yield memoryview(f.read(last - first)), group, first
        start = stop


def raw_loop(refs: list[BlockRef], passes: int = 1, decode: Decode = _unpack_all) -> tuple[int, int]:
    """(samples, decompressed bytes): the whole measured work, ``passes`` times over."""
    decompressor = zstandard.ZstdDecompressor()
    num_samples = num_bytes = 0
    for buffer, group, base in (item for _ in range(passes) for item in _read_ranges(refs)):
        for ref in group:
            stored = buffer[ref.offset - base : ref.offset - base + ref.stored_size]
            raw = decompressor.decompress(stored) if ref.codec == CODEC_ZSTD else stored
            num_bytes += len(raw)
            num_samples += len(decode(raw, ref))
    return num_samples, num_bytes


def _worker(refs: list[BlockRef], passes: int, decode: Decode, barrier: Any, queue: Any) -> None:
    barrier.wait()
    queue.put(raw_loop(refs, passes, decode))


def timed(refs: list[BlockRef], procs: int, passes: int = 1, decode: Decode = _unpack_all) -> tuple[float, int, int]:
    if procs == 1:
        t0 = now()
        num_samples, num_bytes = raw_loop(refs, passes, decode)
        return now() - t0, num_samples, num_bytes
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(procs + 1), context.Queue()
    cuts = [len(refs) * i // procs for i in range(procs + 1)]
    workers = [
        context.Process(target=_worker, args=(refs[cuts[i] : cuts[i + 1]], passes, decode, barrier, queue))
        for i in range(procs)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    t0 = now()
    results = [queue.get() for _ in workers]
    elapsed = now() - t0
    for worker in workers:
        worker.join()
    return elapsed, sum(r[0] for r in results), sum(r[1] for r in results)


# ---- verification (untimed) ------------------------------------------------------------------
def verify(refs: list[BlockRef], kind: str, decode: Decode) -> Digest:
    field = "tokens" if kind == "tokens" else "jpg"
    digest = Digest()
    decompressor = zstandard.ZstdDecompressor()
    for buffer, group, base in _read_ranges(refs):
        for ref in group:
            stored = buffer[ref.offset - base : ref.offset - base + ref.stored_size]
            raw = decompressor.decompress(stored) if ref.codec == CODEC_ZSTD else bytes(stored)
            for sample in decode(raw, ref):
                digest.add(int(sample["id"]), sample[field])
    return digest


def block_source(source: data.Source, blocks: str) -> tuple[list[BlockRef], Decode]:
    if blocks == "own":
        return write_own_blocks(source, source.packed_dir("raw-own")), _unpack_all
    from benchmarks.peers.shardkit import shardkit_blocks

    refs, decode = shardkit_blocks(str(source.packed_dir("shardkit")))
    return refs, decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=data.KINDS, required=True)
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--blocks", choices=("own", "shardkit"), default="own")
    parser.add_argument("--passes", type=int, default=1, help="go over the blocks this many times")
    parser.add_argument("--root", type=Path, default=data.DEFAULT_ROOT)
    args = parser.parse_args(argv)
    source = data.load(args.kind, args.scale, args.root)
    refs, decode = block_source(source, args.blocks)
    passes = max(args.passes, 1)
    elapsed, num_samples, num_bytes = timed(refs, args.procs, passes, decode)
    digest = verify(refs, args.kind, decode)
    elapsed = max(elapsed, 1e-9)
    record = {
        "event": "raw",
        "peer": f"raw-{args.blocks}",
        "kind": args.kind,
        "scale": args.scale,
        "workers": args.procs,
        "passes": passes,
        "samples": num_samples,
        "block_bytes": num_bytes,
        "num_blocks": len(refs),
        "cpus": os.cpu_count(),
        "epoch_s": round(elapsed, 4),
        "samples_per_s": round(num_samples / elapsed, 1),
        "mb_per_s": round(passes * int(source.meta["payload_bytes"]) / elapsed / MB, 2),
        "digest": digest.hexdigest(),
        "expected_digest": source.meta["digest"],
        "ok": digest.hexdigest() == source.meta["digest"] and num_samples == passes * digest.count,
    }
    emit(record)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
