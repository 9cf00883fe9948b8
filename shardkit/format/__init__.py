"""Pure bytes ⇄ objects: shard layout, block codec, sample codec, checksums, manifest, schema.

Depends on zstandard, msgpack, xxhash and numpy only; no I/O.
"""

from shardkit.format.block_codec import BlockCompressor, BlockDecompressor, CompressOptions
from shardkit.format.column_block import decode_block
from shardkit.format.manifest import MANIFEST_NAME, Manifest, ShardInfo, check_shard_name, decode_manifest
from shardkit.format.sample_codec import SampleEncoder, decode_block_samples, decode_sample
from shardkit.format.schema import SchemaBuilder, check_sample
from shardkit.format.shard_layout import ShardIndex

__all__ = [
    "MANIFEST_NAME",
    "BlockCompressor",
    "BlockDecompressor",
    "CompressOptions",
    "Manifest",
    "SampleEncoder",
    "SchemaBuilder",
    "ShardIndex",
    "ShardInfo",
    "check_sample",
    "check_shard_name",
    "decode_block",
    "decode_block_samples",
    "decode_manifest",
    "decode_sample",
]
