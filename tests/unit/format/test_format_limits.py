"""Limits of the format against hostile input (specs/shard-format.md I12, SV3, SV4; manifest.md
M1, M4, M6): nesting depth on write and read, the block size bound in the codec, torch-only
tensor dtypes round-tripping without changing the bytes of existing types, and malformed
manifests and column blocks refused with ``FormatError`` subclasses, never anything else."""

from __future__ import annotations

import json
import struct

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import CorruptShardError, EncodeError, FormatError, ManifestError
from shardkit.format import BlockDecompressor, Manifest, SampleEncoder, decode_block_samples, decode_sample
from shardkit.format.block_codec import CODEC_ZSTD, BlockCompressor, CompressOptions
from shardkit.format.column_parse import parse_columns
from shardkit.format.limits import MAX_BLOCK_BYTES, MAX_NESTING_DEPTH
from shardkit.format.manifest import decode_manifest
from shardkit.format.schema import SchemaBuilder, check_sample
from shardkit.format.tensor_dtypes import TORCH_ONLY_DTYPES

TORCH_ONLY = [name for name in TORCH_ONLY_DTYPES if hasattr(torch, name)]


def nested(depth: int, kinds: list[bool]) -> dict:
    """A sample whose lists and maps nest exactly ``depth`` levels (the sample map is level 1);
    ``kinds[i]`` picks a map (True) or a list (False) for level i + 2."""
    value: object = 0
    for level in range(depth - 1):
        value = {"k": value} if kinds[level % len(kinds)] else [value]
    return {"x": value}


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, MAX_NESTING_DEPTH + 40), kinds=st.lists(st.booleans(), min_size=1, max_size=5),
       check_keys=st.booleans())
def test_nesting_is_accepted_exactly_up_to_the_limit_on_write_and_read(depth, kinds, check_keys):
    """SV3: the encoder refuses a sample deeper than MAX_NESTING_DEPTH naming the sample and the
    path; bytes that deep written by anything else are refused by every decode path."""
    sample = nested(depth, kinds)
    raw = msgpack.packb(sample, use_bin_type=True)
    if depth <= MAX_NESTING_DEPTH:
        assert SampleEncoder().encode(sample, 7, check_keys=check_keys) == raw
        assert decode_sample(raw) == sample
        assert decode_block_samples(raw * 2, 2) == [sample, sample]
        assert decode_block_samples(raw, 1, [0, len(raw)]) == [sample]
        return
    with pytest.raises(EncodeError, match=r"sample 7: cannot encode field \$\.x.*nested deeper than 100 levels"):
        SampleEncoder().encode(sample, 7, check_keys=check_keys)
    with pytest.raises(FormatError, match="nested deeper than 100"):
        decode_sample(raw)
    with pytest.raises(FormatError, match="sample 1 of block: .*nested deeper than 100"):
        decode_block_samples(msgpack.packb({"a": 1}) + raw, 2)


def test_msgpack_nested_beyond_its_stack_is_a_named_format_error():
    """SV3: msgpack's own 1024-level stack gives an empty StackError; the reader's error says why."""
    raw = b"\x81\xa1a" + b"\x91" * 2000 + b"\xc0"
    for decode in (lambda: decode_sample(raw), lambda: decode_block_samples(raw, 1),
                   lambda: decode_block_samples(raw, 1, [0, len(raw)])):
        with pytest.raises(FormatError, match=r"nested deeper than msgpack's 1024 levels") as caught:
            decode()
        assert str(caught.value).strip()


def test_a_sample_100k_levels_deep_is_refused_without_recursion_error():
    value: object = 0
    for _ in range(100_000):
        value = [value]
    with pytest.raises(EncodeError, match=r"sample 3: cannot encode field \$\.x\[0\].*nested deeper"):
        SampleEncoder().encode({"x": value}, 3, check_keys=False)


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    if not tensor.numel():
        return b""
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from([*TORCH_ONLY, "float16", "float32", "int64", "bool"]),
    shape=st.lists(st.integers(0, 4), max_size=3),
    seed=st.integers(0, 2**32 - 1),
    transpose=st.booleans(),
)
def test_tensors_round_trip_with_their_dtype_including_torch_only_ones(dtype, shape, seed, transpose):
    """SV4, SV2: bfloat16 and float8 tensors (and float16 …) decode with the same dtype, shape and
    bytes, writable; the schema names the dtype and verifies the sample."""
    generator = torch.Generator().manual_seed(seed)
    tensor = torch.randn(shape, generator=generator).to(getattr(torch, dtype))
    if transpose and tensor.ndim == 2:
        tensor = tensor.t()  # non-contiguous
    sample = {"t": tensor}
    decoded = decode_sample(SampleEncoder().encode(sample, 0))["t"]
    assert isinstance(decoded, torch.Tensor)
    assert decoded.dtype == tensor.dtype and decoded.shape == tensor.shape
    assert _tensor_bytes(decoded) == _tensor_bytes(tensor)
    decoded.zero_()  # writable
    schema = SchemaBuilder()
    schema.observe(sample)
    expected = dtype if dtype in TORCH_ONLY else np.dtype(getattr(np, dtype)).str
    assert schema.fields["t"]["dtype"] == expected
    assert check_sample(decode_sample(SampleEncoder().encode(sample, 0)), schema.fields) is None


def test_existing_types_keep_their_bytes():
    """SV4 changes nothing for dtypes numpy has: the spec's worked example, and a float32 tensor
    written as before (ext type 2 over the same array payload as an ndarray)."""
    example = SampleEncoder().encode({"tokens": np.arange(6, dtype=np.int32)})
    assert example.hex() == (
        "81a6746f6b656e73c7250103" + b"<i4".hex() + "01" + "0600000000000000"
        + "".join(f"{i:02x}000000" for i in range(6))
    )
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    as_array = SampleEncoder().encode({"t": array})
    as_tensor = SampleEncoder().encode({"t": torch.from_numpy(array)})
    assert as_tensor == as_array.replace(b"\x01\x03<f4", b"\x02\x03<f4", 1)
    assert SampleEncoder().encode({"s": np.float32(1.5)}).hex() == "81a173c70903033c6634000000c03f"


def test_torch_only_tensor_bytes_are_pinned():
    """SV4 layout: torch's dtype name, ndim, u64 shape, little-endian data (ext type 2)."""
    data = SampleEncoder().encode({"t": torch.tensor([1.0, -2.0], dtype=torch.bfloat16)})
    assert data.hex() == "81a174c71602" + "08" + b"bfloat16".hex() + "01" + "0200000000000000" + "803f00c0"


def test_the_codec_refuses_a_block_above_its_limit_before_decompressing():
    """I12: the declared size is checked first (no allocation), naming both sizes."""
    codec, stored = BlockCompressor(CompressOptions(compression="zstd")).compress(bytes(5000))
    assert codec == CODEC_ZSTD
    with pytest.raises(CorruptShardError, match="declares 5000 raw bytes, more than the maximum block size 4096"):
        BlockDecompressor(max_block_bytes=4096).decompress(codec, stored, 5000)
    assert BlockDecompressor().max_block_bytes == MAX_BLOCK_BYTES == 256 << 20
    assert len(BlockDecompressor(max_block_bytes=5000).decompress(codec, stored, 5000)) == 5000
    with pytest.raises(FormatError, match="max_block_bytes must be an integer"):
        BlockDecompressor(max_block_bytes=0)


def _column_block(tail: list[int], data: bytes) -> bytes:
    """A two-sample column block with one array column of row shape ``tail`` (B2)."""
    start = 256
    header = msgpack.packb({"n": 2, "columns": [{
        "name": "a", "kind": "array", "dtype": "<i4", "as": "<i4", "tail": tail,
        "data": [start, len(data)], "offsets": start + len(data),
    }]})
    head = struct.pack("<I", len(header)) + header
    return head + bytes(start - len(head)) + data + np.array([0, 1, 2], dtype="<u4").tobytes()


@pytest.mark.parametrize("tail", [[2**32, 2**32], [2**62, 4], [2**63 - 1, 2**63 - 1, 2]])
def test_a_column_tail_that_overflows_is_a_format_error(tail):
    """B5: row shapes multiply exactly; one that cannot fit the data is refused (was a
    ZeroDivisionError when the product wrapped to 0 in int64)."""
    with pytest.raises(FormatError, match=r"column 'a'"):
        parse_columns(_column_block(tail, bytes(8)), 2)
    assert len(parse_columns(_column_block([1], bytes(8)), 2)[0].data) == 2  # the same block, sane


def _manifest() -> dict:
    return json.loads(Manifest(shards=(), schema={"x": {"type": "int"}}).to_json())


def _with_schema(schema: dict) -> bytes:
    raw = _manifest()
    raw["schema"] = schema
    raw["fingerprint"] = Manifest(shards=(), schema=schema).compute_fingerprint()
    return json.dumps(raw).encode()


@pytest.mark.parametrize("desc, problem", [
    ({"type": "any"}, "'any' needs a non-empty 'types'"),
    ({"type": "any", "types": ["int", 3]}, "'any' needs"),
    ({"type": "ndarray", "dtype": "<i4"}, "needs a 'shape'"),
    ({"type": "ndarray", "shape": [2]}, "needs a str 'dtype'"),
    ({"type": "tensor", "dtype": None, "shape": None}, "needs a str 'dtype'"),
    ({"type": "npscalar", "dtype": "<f4", "shape": [-1]}, "needs a 'shape'"),
    ({"type": "widget"}, "unknown type 'widget'"),
    ({"type": "int", "optional": "yes"}, "must be booleans"),
])
def test_schema_descriptions_of_the_wrong_shape_are_refused_naming_the_field(desc, problem):
    """M6: validated on open, so verify/info never meet a description they cannot read."""
    with pytest.raises(ManifestError, match=rf"m\.json: schema field 'x': .*{problem}"):
        decode_manifest(_with_schema({"x": desc}), "m.json")


def test_well_formed_schema_descriptions_pass():
    schema = {"a": {"type": "any", "types": ["int", "str"], "optional": True},
              "b": {"type": "ndarray", "dtype": None, "dtypes": ["<f4", "<i4"], "shape": [None, 3]},
              "c": {"type": "tensor", "dtype": "bfloat16", "shape": None, "nullable": True}}
    assert decode_manifest(_with_schema(schema), "m.json").schema == schema


def test_a_manifest_must_be_utf8():
    """M1: UTF-16 (which json.loads would guess) is refused."""
    text = json.dumps(_manifest())
    assert decode_manifest(text.encode(), "m.json").schema
    for encoding in ("utf-16", "utf-32"):
        with pytest.raises(ManifestError, match=r"m\.json: not UTF-8"):
            decode_manifest(text.encode(encoding), "m.json")


@pytest.mark.parametrize("literal, problem", [
    ("9" * 5000, "integer literal of 5000 characters"),
    (str(2**70), "integer literal of 22 characters"),
    (str(2**63), r"must be an integer in \[0, 2\*\*63\)"),
])
def test_huge_integers_in_a_manifest_are_refused(literal, problem):
    """M4: counts fit int64; no literal is long enough to cost a slow conversion."""
    raw = _manifest()
    raw["shards"] = [{"name": "s", "num_samples": 1, "num_bytes": 100, "num_blocks": 1, "raw_bytes": 1,
                      "index_bytes": 40, "checksum": "xxh64:" + "0" * 16}]
    text = json.dumps(raw).replace('"num_samples": 1,', f'"num_samples": {literal},')
    with pytest.raises(ManifestError, match=rf"m\.json.*{problem}"):
        decode_manifest(text.encode(), "m.json")
