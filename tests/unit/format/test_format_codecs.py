"""Sample codec, block codec, manifest and schema units (specs/shard-format.md, manifest.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from shardkit.errors import CorruptShardError, FormatError, ManifestError
from shardkit.format import (
    BlockCompressor,
    BlockDecompressor,
    CompressOptions,
    SampleEncoder,
    SchemaBuilder,
    check_sample,
    check_shard_name,
    decode_sample,
)
from shardkit.format.block_codec import CODEC_RAW, CODEC_ZSTD
from tests.helpers.samples import assert_value_equal, samples


@settings(max_examples=200, deadline=None)
@given(sample=samples)
def test_sample_codec_round_trip(sample):
    """SV2: every supported value decodes to an equal value of the same type, dtype and shape;
    encoding is deterministic."""
    encoder = SampleEncoder()
    data = encoder.encode(sample, 0)
    assert encoder.encode(sample, 0) == data
    assert_value_equal(decode_sample(data), sample)


@settings(max_examples=100, deadline=None)
@given(sample=samples)
def test_schema_accepts_what_it_was_built_from(sample):
    """Schema: ``check_sample`` accepts every decoded sample the builder saw."""
    builder = SchemaBuilder()
    builder.observe(sample)
    builder.observe({})
    schema = builder.to_dict()
    assert check_sample(decode_sample(SampleEncoder().encode(sample)), schema) is None


def test_numpy_scalars_keep_their_type():
    """SV3: np.float64 is a float subclass but comes back as np.float64 (not float)."""
    sample = {"f": np.float64(1.5), "b": np.bool_(True), "i": np.int64(-3), "h": np.float16(2)}
    got = decode_sample(SampleEncoder().encode(sample))
    for key, value in sample.items():
        assert type(got[key]) is type(value) and got[key] == value


def test_tensors_come_back_as_tensors():
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()  # non-contiguous
    got = decode_sample(SampleEncoder().encode({"t": t, "g": torch.ones(2, requires_grad=True)}))
    assert isinstance(got["t"], torch.Tensor) and torch.equal(got["t"], t)
    assert got["t"].dtype == torch.int64 and tuple(got["t"].shape) == (4, 3)
    got["t"][0, 0] = 99  # writable: decoded tensors own their memory


def test_arrays_decode_read_only_views():
    got = decode_sample(SampleEncoder().encode({"a": np.arange(3)}))["a"]
    assert not got.flags.writeable


def test_incompressible_block_is_stored_raw():
    """C1: auto stores a block raw (codec 0) when zstd cannot save 5%."""
    noise = np.random.default_rng(0).bytes(200_000)
    codec, stored = BlockCompressor(CompressOptions("auto")).compress(noise)
    assert codec == CODEC_RAW and stored == noise
    small = np.random.default_rng(1).bytes(2000)
    assert BlockCompressor(CompressOptions("auto")).compress(small)[0] == CODEC_RAW


def test_compressible_block_is_zstd():
    data = b"token " * 20_000
    codec, stored = BlockCompressor(CompressOptions("auto")).compress(data)
    assert codec == CODEC_ZSTD and len(stored) < len(data) // 10
    assert BlockDecompressor().decompress(codec, stored, len(data)) == data


def test_forced_modes():
    noise = np.random.default_rng(0).bytes(1000)
    assert BlockCompressor(CompressOptions("zstd")).compress(noise)[0] == CODEC_ZSTD
    assert BlockCompressor(CompressOptions("none")).compress(b"a" * 1000)[0] == CODEC_RAW


def test_decompressor_checks_declared_sizes():
    """I7: declared sizes bound decompression; unknown codecs and garbage frames are refused."""
    stored = BlockCompressor(CompressOptions("zstd")).compress(b"a" * 1000)[1]
    with pytest.raises(CorruptShardError, match="declares 1000 bytes, index says 999"):
        BlockDecompressor().decompress(CODEC_ZSTD, stored, 999)
    with pytest.raises(CorruptShardError, match="refusing"):
        BlockDecompressor().decompress(CODEC_ZSTD, b"not a zstd frame", 10)
    with pytest.raises(CorruptShardError, match="index says 5"):
        BlockDecompressor().decompress(CODEC_RAW, b"abc", 5)
    with pytest.raises(FormatError, match="unknown block codec 7"):
        BlockDecompressor().decompress(7, b"abc", 3)


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x05<i4", b"\x03<i4\x01" + b"\x02" * 8, b"\x03|O8\x00", b"\x03zz9\x00"],
)
def test_malformed_array_extension(payload):
    import msgpack

    data = msgpack.packb({"a": msgpack.ExtType(1, payload)})
    with pytest.raises(FormatError):
        decode_sample(data)


@pytest.mark.parametrize("name", ["shard-000001.sks", "shards/shard-000001.sks", "a_b.c-d"])
def test_safe_shard_names(name):
    assert check_shard_name(name) == name


@pytest.mark.parametrize("name", ["../a", "/a", "a\n", "a\tb", "a/b/c", ".a", "a/..", 5, None, "é"])
def test_unsafe_shard_names(name):
    """M3."""
    with pytest.raises(ManifestError):
        check_shard_name(name)
