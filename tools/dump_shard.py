"""Print a shard's structure: header, block records, index, footer; ``--hex`` adds an annotated
hex dump (the one pasted into specs/shard-format.md §9). A dev tool, not shipped.

    python tools/dump_shard.py tests/golden/v1/basic/shards/shard-000000.sks --hex
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from shardkit.format.block_codec import CODEC_NAMES  # noqa: E402
from shardkit.format.shard_layout import (  # noqa: E402
    FOOTER,
    FOOTER_SIZE,
    HEADER,
    HEADER_SIZE,
    check_header,
    decode_footer,
    decode_index,
)


def regions(data: bytes) -> list[tuple[int, int, str]]:
    """``(start, end, label)`` for every part of the file, in order."""
    index_offset, index_length, checksum = decode_footer(data, len(data), "shard")
    index = decode_index(
        data[index_offset : index_offset + index_length], checksum, index_offset, "shard"
    )
    out = [(0, HEADER_SIZE, "header")]
    for i, block in enumerate(index.blocks):
        start = int(block["offset"])
        codec = CODEC_NAMES.get(int(block["codec"]), "?")
        out.append((start, start + int(block["stored_size"]), f"block {i} ({codec})"))
    out.append((index_offset, index_offset + index_length, "index (msgpack map)"))
    out.append((len(data) - FOOTER_SIZE, len(data), "footer"))
    return out


def describe(data: bytes) -> str:
    check_header(data, "shard")
    magic, major, minor, flags = HEADER.unpack_from(data)
    lines = [f"header   magic={magic!r} version={major}.{minor} flags={flags}"]
    index_offset, index_length, checksum = decode_footer(data, len(data), "shard")
    index = decode_index(
        data[index_offset : index_offset + index_length], checksum, index_offset, "shard"
    )
    for i, b in enumerate(index.blocks):
        offsets = index.offsets_of(i).tolist()
        lines.append(
            f"block {i}  offset={int(b['offset'])} stored_size={int(b['stored_size'])} "
            f"raw_size={int(b['raw_size'])} num_samples={int(b['num_samples'])} "
            f"codec={int(b['codec'])} ({CODEC_NAMES.get(int(b['codec']), '?')}) "
            f"layout={int(b['layout'])} ({'columns' if b['layout'] else 'rows'}) "
            f"xxh64={int(b['checksum']):016x} sample_offsets={offsets}"
        )
    lines.append(
        f"index    offset={index_offset} length={index_length} num_samples={index.num_samples}"
    )
    fields = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)
    lines.append(
        f"footer   index_offset={fields[0]} index_length={fields[1]} flags={fields[2]} "
        f"index_xxh64={fields[3]:016x} version={fields[4]}.{fields[5]} magic={fields[6]!r}"
    )
    return "\n".join(lines)


def hexdump(data: bytes, width: int = 16) -> str:
    lines = []
    for start, end, label in regions(data):
        lines.append(f"-- {label}: [{start}, {end}) {end - start} bytes")
        for row in range(start, end, width):
            chunk = data[row : min(row + width, end)]
            text = "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
            lines.append(f"{row:08x}  {chunk.hex(' '):<{width * 3}} {text}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path")
    parser.add_argument("--hex", action="store_true", help="also print an annotated hex dump")
    args = parser.parse_args()
    with open(args.path, "rb") as fh:
        data = fh.read()
    print(f"{args.path}: {len(data)} bytes")
    print(describe(data))
    if args.hex:
        print(hexdump(data))


if __name__ == "__main__":
    main()
