"""Bad input (G9): each corruption is caught by the reader *and* by ``shardkit verify``, with an
error naming the file, the shard and (where there is one) the sample.

Tampering helpers re-write a shard and fix up the checksums that would otherwise catch it first
(block xxh64, index xxh64, whole-file xxh64, fingerprint), so each test isolates one check.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import zstandard

import shardkit as sk
from shardkit.cli import main
from shardkit.errors import (
    CorruptShardError,
    EncodeError,
    ManifestError,
    NotFoundError,
    UnsupportedVersionError,
)
from shardkit.format import Manifest, ShardInfo
from shardkit.format.shard_builder import SealedBlock, build_shard
from shardkit.format.shard_layout import FOOTER_SIZE
from shardkit.read import open_dataset

SHARD0 = "shards/shard-000000.sks"


@pytest.fixture
def dataset(tmp_path) -> str:
    """Three shards of a few blocks each; zstd blocks (compressible payloads)."""
    folder = str(tmp_path / "ds")
    with sk.ShardWriter(folder, shard_size=1200, block_size=300) as w:
        for i in range(60):
            w.write({"id": i, "tokens": np.arange(i % 7 + 20, dtype=np.int32), "text": "ab" * 20})
    return folder


def verify(folder: str, capsys, *extra: str) -> tuple[int, str]:
    code = main(["verify", folder, "--no-progress", *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def read_all(folder: str) -> list[dict]:
    return list(open_dataset(folder).samples())


def load_manifest(folder: str) -> dict:
    with open(os.path.join(folder, "manifest.json")) as fh:
        return json.load(fh)


def save_manifest(folder: str, raw: dict) -> None:
    with open(os.path.join(folder, "manifest.json"), "wb") as fh:
        fh.write(json.dumps(raw).encode())


def refresh_manifest(folder: str) -> None:
    """Re-describe every shard from its bytes and recompute the fingerprint (a consistent lie)."""
    raw = load_manifest(folder)
    shards = []
    for entry in raw["shards"]:
        with open(os.path.join(folder, entry["name"]), "rb") as fh:
            data = fh.read()
        from shardkit.format.checksum import xxh64_text

        shards.append(
            ShardInfo.from_dict({**entry, "num_bytes": len(data), "checksum": xxh64_text(data)}, "")
        )
    manifest = Manifest(tuple(shards), raw["schema"], raw["metadata"], raw["created_by"])
    with open(os.path.join(folder, "manifest.json"), "wb") as fh:
        fh.write(manifest.to_json())


def edit_shard(folder: str, name: str, edit) -> None:
    path = os.path.join(folder, name)
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    with open(path, "wb") as fh:
        fh.write(bytes(edit(data)))


def rebuild_shard(folder: str, shard_index: int, replace_block0: bytes) -> None:
    """Re-assemble a shard with block 0's stored bytes replaced (checksums all recomputed)."""
    dataset = open_dataset(folder)
    info = dataset.manifest.shards[shard_index]
    with dataset.open_shard(shard_index) as reader:
        blocks = []
        for i, record in enumerate(reader.index.blocks):
            stored = replace_block0 if i == 0 else reader.read_stored_block(i)
            offsets = reader.index.offsets_of(i).copy()
            blocks.append(
                SealedBlock(int(record["codec"]), stored, int(record["raw_size"]), offsets)
            )
    data, _ = build_shard(info.name, blocks)
    with open(os.path.join(folder, info.name), "wb") as fh:
        fh.write(data)
    refresh_manifest(folder)


def test_truncated_shard(dataset, capsys):
    """I1/M4: a shard shorter than the manifest says is named as truncated."""
    edit_shard(dataset, SHARD0, lambda d: d[:-50])
    with pytest.raises(CorruptShardError, match=rf"{SHARD0}.*truncated"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "manifest says" in text


def test_truncated_shard_with_consistent_manifest(dataset, capsys):
    """I2: even when the manifest agrees with the short file, the footer check catches it."""
    edit_shard(dataset, SHARD0, lambda d: d[:-50])
    refresh_manifest(dataset)
    with pytest.raises(CorruptShardError, match=rf"{SHARD0}.*footer"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "footer magic" in text


@pytest.mark.parametrize("fix_manifest", [False, True])
def test_flipped_byte_in_a_block(dataset, capsys, fix_manifest):
    """I5: one flipped byte in block 1 fails its xxh64; the error names shard, block and the
    samples it holds (and the whole-file checksum when the manifest is untouched)."""
    reader = open_dataset(dataset).open_shard(0)
    block = reader.index.blocks[1]
    first, count = int(reader.index.first_sample[1]), int(block["num_samples"])
    reader.close()
    position = int(block["offset"]) + int(block["stored_size"]) // 2

    def flip(data: bytearray) -> bytearray:
        data[position] ^= 0x40
        return data

    edit_shard(dataset, SHARD0, flip)
    if fix_manifest:
        refresh_manifest(dataset)
    with pytest.raises(
        CorruptShardError,
        match=rf"{SHARD0}.*block 1 \(samples {first}\.\.{first + count - 1}\) at offset \d+: "
        "checksum mismatch",
    ):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "block 1" in text
    assert f"first bad sample {first}" in text and count > 0
    assert ("checksum xxh64:" in text) != fix_manifest


def test_wrong_magic(dataset, capsys):
    """I1: the header starts with ``SKSHARD\\0``."""
    edit_shard(dataset, SHARD0, lambda d: b"NOTSHARD" + d[8:])
    refresh_manifest(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "bad magic" in text


def test_wrong_footer_magic(dataset, capsys):
    edit_shard(dataset, SHARD0, lambda d: d[:-4] + b"XXXX")
    refresh_manifest(dataset)
    with pytest.raises(CorruptShardError, match="footer magic"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and "footer magic" in text


def test_future_shard_major_version(dataset, capsys):
    """V1: a shard of format 2.x is refused (header and footer both carry the version)."""

    def bump(data: bytearray) -> bytearray:
        struct.pack_into("<H", data, 8, 2)
        struct.pack_into("<H", data, len(data) - 8, 2)
        return data

    edit_shard(dataset, SHARD0, bump)
    refresh_manifest(dataset)
    with pytest.raises(UnsupportedVersionError, match=rf"{SHARD0}.*format 2\.\d"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "format 2." in text


def test_future_minor_version_is_read(dataset):
    """V2: minor versions are backward compatible; a 1.7 shard reads."""
    edit_shard(dataset, SHARD0, lambda d: d[:-6] + struct.pack("<H", 7) + d[-4:])
    refresh_manifest(dataset)
    assert len(read_all(dataset)) == 60


def test_future_manifest_major_version(dataset, capsys):
    raw = load_manifest(dataset)
    raw["format_version"] = "2.0"
    save_manifest(dataset, raw)
    with pytest.raises(UnsupportedVersionError, match=r"manifest\.json.*2\.0"):
        open_dataset(dataset)
    code, text = verify(dataset, capsys)
    assert code == 2 and "manifest.json" in text and "2.0" in text


def test_manifest_names_a_missing_shard(dataset, capsys):
    os.remove(os.path.join(dataset, "shards/shard-000001.sks"))
    with pytest.raises(NotFoundError, match="shard-000001.sks"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and "shard-000001.sks" in text
    assert "FAILED: 1 of" in text


@pytest.mark.parametrize(
    "name",
    [
        "../x.sks",
        "/abs/x.sks",
        "a/../../x",
        "shard\n.sks",
        "shard.sks\n",
        "sh\x00ard",
        "a/b/c.sks",
        ".hidden",
        "manifest.json",
        "",
        "C:\\x.sks",
    ],
)
def test_manifest_with_unsafe_shard_name(dataset, capsys, name):
    """M3: names are relative, one folder deep at most, no '..', no controls; exit 2."""
    raw = load_manifest(dataset)
    raw["shards"][1]["name"] = name
    save_manifest(dataset, raw)
    with pytest.raises(ManifestError, match=r"manifest\.json.*shards\[1\].*unsafe shard name"):
        open_dataset(dataset)
    code, text = verify(dataset, capsys)
    assert code == 2 and "unsafe shard name" in text


@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe\x00", b"[]", b'{"format": "other"}', b"[" * 100000, b""]
)
def test_garbage_manifest(dataset, capsys, body):
    with open(os.path.join(dataset, "manifest.json"), "wb") as fh:
        fh.write(body)
    with pytest.raises(ManifestError, match=r"manifest\.json"):
        open_dataset(dataset)
    code, text = verify(dataset, capsys)
    assert code == 2 and "manifest.json" in text


def test_tampered_manifest_fingerprint(dataset, capsys):
    """M5: the fingerprint is checked against the contents on every open."""
    raw = load_manifest(dataset)
    raw["shards"][0]["num_samples"] += 1
    raw["num_samples"] += 1
    save_manifest(dataset, raw)
    code, text = verify(dataset, capsys)
    assert code == 2 and "fingerprint" in text


def test_missing_manifest(tmp_path, capsys):
    code, text = verify(str(tmp_path), capsys)
    assert code == 2 and "no manifest" in text


def _bomb_without_content_size(raw_size: int) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=False).compress(b"\x00" * (8 << 20))


def _bomb_with_lying_content_size(raw_size: int) -> bytes:
    """An 8 MiB frame whose header claims ``raw_size`` (the Frame_Content_Size field patched)."""
    frame = bytearray(
        zstandard.ZstdCompressor(write_content_size=True).compress(b"\x00" * (8 << 20))
    )
    descriptor = frame[4]
    single_segment, dict_flag, fcs_flag = (descriptor >> 5) & 1, descriptor & 3, descriptor >> 6
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    assert fcs_flag == 2  # a 4-byte field for 8 MiB
    struct.pack_into("<I", frame, position, raw_size)
    assert zstandard.frame_content_size(bytes(frame)) == raw_size
    return bytes(frame)


@pytest.mark.parametrize("make_bomb", [_bomb_without_content_size, _bomb_with_lying_content_size])
def test_decompression_bomb_is_refused(dataset, capsys, make_bomb):
    """I7: a zstd block never inflates past the raw size its index record declares, even when
    every checksum is consistent."""
    reader = open_dataset(dataset).open_shard(0)
    raw_size = int(reader.index.blocks[0]["raw_size"])
    reader.close()
    rebuild_shard(dataset, 0, make_bomb(raw_size))
    with pytest.raises(CorruptShardError, match=rf"{SHARD0}.*block 0") as info:
        read_all(dataset)
    assert "refusing" in str(info.value) or "does not decompress" in str(info.value)
    code, text = verify(dataset, capsys)
    assert code == 1 and SHARD0 in text and "block 0" in text and "first bad sample 0" in text


def test_index_raw_size_is_bounded_by_the_manifest(dataset, capsys):
    """M8: an index whose raw sizes disagree with the manifest's raw_bytes is refused before any
    block is decompressed."""
    raw = load_manifest(dataset)
    raw["shards"][0]["raw_bytes"] -= 1
    save_manifest(dataset, raw)  # the fingerprint does not cover raw_bytes
    with pytest.raises(CorruptShardError, match=rf"{SHARD0}.*raw bytes"):
        read_all(dataset)
    code, text = verify(dataset, capsys)
    assert code == 1 and "manifest says" in text


def test_unsupported_sample_type_names_field_and_sample(tmp_path):
    """SV1: EncodeError names the field path and the sample index; no manifest is left."""
    folder = str(tmp_path / "ds")
    with pytest.raises(EncodeError, match=r"sample 3: cannot encode field \$\.x\.y\[1\]"):
        with sk.ShardWriter(folder, shard_size=1, block_size=1) as w:
            for i in range(3):
                w.write({"id": i})
            w.write({"x": {"y": [1, object()]}})
    assert not os.path.exists(os.path.join(folder, "manifest.json"))
    assert not [n for n in os.listdir(os.path.join(folder, "shards")) if n.endswith(".sks")]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": {1: 2}}, r"\$\.a\[1\] \(keys must be str\)"),
        ({"a": [{"b": 1}, {(1,): 2}]}, r"\$\.a\[1\]\[\(1,\)\]"),
        ({"s": np.array(["x"])}, r"\$\.s: numpy dtype"),
        ({"o": np.array([object()])}, r"\$\.o"),
        ({"big": 2**64}, r"\$\.big"),
        ({"set": {1, 2}}, r"\$\.set: unsupported type builtins\.set"),
        ({"dt": np.datetime64("2020-01-01")}, r"\$\.dt"),
    ],
)
def test_encode_errors(tmp_path, value, path):
    with pytest.raises(EncodeError, match=rf"sample 0: cannot encode field {path}"):
        sk.ShardWriter(str(tmp_path / "ds")).write(value)


def test_tensors_the_format_cannot_hold_are_refused(tmp_path):
    """SV1: sparse tensors and tensors off the CPU (bfloat16 and float8 are supported: SV4)."""
    torch = pytest.importorskip("torch")
    for value in (torch.eye(2).to_sparse(), torch.empty(2, device="meta")):
        with pytest.raises(EncodeError, match=r"sample 0: cannot encode field \$\.t"):
            sk.ShardWriter(str(tmp_path / "ds"), overwrite=True).write({"t": value})


def test_index_suffix_is_one_request(dataset):
    """R1: with the manifest entry, opening a shard reads exactly ``index_bytes`` from the end."""
    from shardkit.read import ShardReader
    from shardkit.read.sources import MemorySource

    info = open_dataset(dataset).manifest.shards[0]
    with open(os.path.join(dataset, info.name), "rb") as fh:
        data = fh.read()
    calls: list[tuple[int, int]] = []

    class Counting(MemorySource):
        def read_range(self, start: int, end: int) -> bytes:
            calls.append((start, end))
            return super().read_range(start, end)

    reader = ShardReader(Counting(data, "mem"), info)
    assert calls == [(len(data) - info.index_bytes, len(data))]
    assert info.index_bytes > FOOTER_SIZE
    reader[5]
    record = reader.index.blocks[reader.index.block_of(5)]
    assert calls[1] == (int(record["offset"]), int(record["offset"]) + int(record["stored_size"]))
