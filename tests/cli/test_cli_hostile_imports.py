"""Hostile MDS, LitData and Hugging Face inputs to ``shardkit pack``: each is refused with a
``SourceError`` naming the file (and shard, chunk, item or row), exit 1 as for any bad pack
input (specs/pack-inputs.md PI1), no traceback and no output folder — never a hang, a
traceback, an out-of-bounds read or memory without bound (PI10–PI13). Every pack runs as the
real ``shardkit`` command in a child with a timeout and an address-space limit."""

from __future__ import annotations

import json
import os
import struct

import pytest
import zstandard

from shardkit.read import open_dataset
from tests.helpers.hostile_peers import (
    LEAF,
    dict_spec,
    litdata_chunk,
    mds_shard,
    pack_limited,
    text_sample,
    write_litdata,
    write_mds,
)

TEXT = [("text", "str", None)]


def refused(src, out, *needles: str, **kwargs) -> str:
    """Pack ``src``: exit 1, the output names every needle, no traceback, nothing written."""
    code, _, text = pack_limited(src, out, **kwargs)
    assert code == 1, (code, text)
    assert "Traceback" not in text and "error:" in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert not os.path.exists(out), "a refused pack wrote output"
    return text


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_hand_built_mds_and_litdata_folders_pack(tmp_path):
    """The builders make folders the importers read (so each hostile case below differs from
    a good folder in the one way it names)."""
    write_mds(tmp_path / "mds", [text_sample("a"), text_sample("bc")], TEXT)
    chunk = litdata_chunk([[b"x"], [b"yz"]])
    write_litdata(tmp_path / "lit", chunk, ["bytes"], dict_spec(["blob"]), 2)
    for name, field, want in (("mds", "text", ["a", "bc"]), ("lit", "blob", [b"x", b"yz"])):
        code, _, text = pack_limited(tmp_path / name, tmp_path / f"out-{name}", "--no-shuffle")
        assert code == 0, text
        assert [s[field] for s in open_dataset(str(tmp_path / f"out-{name}")).samples()] == want


# --- PI10: only regular files --------------------------------------------------------------


@pytest.mark.parametrize("case", ["mds raw_data", "mds zip_data", "mds index.json", "litdata chunk"])
def test_an_importer_input_that_is_a_fifo_is_refused_by_name_not_read(tmp_path, case):
    """PI10: a FIFO where a shard, chunk or index should be is refused, naming it; before,
    the read blocked forever (a timeout here is a failure)."""
    src = tmp_path / "src"
    if case.startswith("mds"):
        zipped = ("zstd", zstandard.ZstdCompressor().compress(b"")) if case == "mds zip_data" else None
        write_mds(src, [text_sample("a")], TEXT, zipped=zipped, raw=case != "mds zip_data")
        fifo = {"mds raw_data": "shard.00000.mds", "mds zip_data": "shard.00000.mds.zstd",
                "mds index.json": "index.json"}[case]  # fmt: skip
    else:
        write_litdata(src, litdata_chunk([[b"x"]]), ["bytes"], dict_spec(["blob"]), 1)
        fifo = "chunk-0-0.bin"
    os.unlink(src / fifo)
    os.mkfifo(src / fifo)
    extra = ("--format", "mds") if case == "mds index.json" else ()
    code, _, text = pack_limited(src, tmp_path / "out", *extra)
    assert code == 1, (code, text)
    assert f"{fifo}: not a regular file (a FIFO)" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()


# --- PI11: every inflate bounded -------------------------------------------------------------

BOMB_BYTES = 1 << 30  # what each bomb below would inflate to


def zstd_bomb(head: bytes, size: int) -> bytes:
    """One zstd frame of ``head`` and then zeros, ``size`` bytes in all, in a few dozen KB."""
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(64 << 20)
    out = [compressor.compress(head)]
    for _ in range((size - len(head)) // len(zeros)):
        out.append(compressor.compress(zeros))
    out.append(compressor.compress(zeros[: (size - len(head)) % len(zeros)]))
    return b"".join(out) + compressor.flush()


def test_an_mds_gz_shard_inflates_no_further_than_its_declared_size(tmp_path):
    """PI11: a small gz shard that inflates to 1 GiB, for a raw size of 40 bytes, stops at 40;
    before, the whole GiB was inflated (peak RSS > 1 GiB) and only then compared."""
    import zlib

    member = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    gz = member.compress(bytes(64 << 20)) + member.flush()
    src = tmp_path / "mds"
    write_mds(src, [text_sample("a")], TEXT, zipped=("gz", gz * (BOMB_BYTES // (64 << 20))), raw=False)
    code, peak, text = pack_limited(src, tmp_path / "out")
    assert peak < 300, f"peak RSS {peak} MiB for a {BOMB_BYTES >> 20} MiB bomb"
    assert code == 1 and "Traceback" not in text, text
    assert "shard.00000.mds.gz: gz data inflates past 17 bytes (" in text and "raw_data.bytes 17" in text, text
    assert "not a valid" not in text, text


def test_a_litdata_zstd_chunk_inflates_no_further_than_the_maximum(tmp_path):
    """PI11: a 33 KB zstd chunk holding one 1 GiB item, its index declaring no size, stops at
    the maximum ($SHARDKIT_MAX_IMPORT_BYTES, here 64 MiB); before, it inflated whole and
    packed (exit 0)."""
    head = struct.pack("<IIII", 1, 12, 12 + 4 + BOMB_BYTES - 16, BOMB_BYTES - 16)
    chunk = zstd_bomb(head, BOMB_BYTES)
    assert len(chunk) < 64 << 10
    src = tmp_path / "lit"
    index = write_litdata(src, chunk, ["bytes"], dict_spec(["blob"]), 1, compression="zstd")
    index["chunks"][0]["chunk_bytes"] = None
    (src / "index.json").write_text(json.dumps(index))
    env = {"SHARDKIT_MAX_IMPORT_BYTES": "64MiB"}
    code, peak, text = pack_limited(src, tmp_path / "out", env=env)
    assert peak < 400, f"peak RSS {peak} MiB for a {BOMB_BYTES >> 20} MiB bomb"
    assert code == 1 and "Traceback" not in text, text
    assert f"chunk-0-0.bin: zstd data inflates past {64 << 20} bytes (the maximum; $SHARDKIT_MAX_IMPORT_BYTES" in text
    assert "not a valid" not in text, text


def test_litdata_items_compressed_one_by_one_inflate_no_further_than_the_maximum_together(tmp_path):
    """PI11: with compression_level "sample" each item is its own zstd frame; a 1 GiB item
    stops at the maximum (here 64 MiB); before, the limit was 16 GiB per item."""
    frame = zstd_bomb(struct.pack("<I", BOMB_BYTES - 4), BOMB_BYTES)
    src = tmp_path / "lit"
    write_litdata(src, mds_shard([frame]), ["bytes"], dict_spec(["blob"]), 1, compression="zstd",
                  compression_level="sample")  # fmt: skip
    code, peak, text = pack_limited(src, tmp_path / "out", env={"SHARDKIT_MAX_IMPORT_BYTES": "64MiB"})
    assert peak < 400, f"peak RSS {peak} MiB for a {BOMB_BYTES >> 20} MiB bomb"
    assert code == 1 and "Traceback" not in text, text
    assert f"chunk-0-0.bin: item 0: zstd data inflates past {64 << 20} bytes (what is left of the maximum)" in text


def test_a_litdata_chunk_declaring_more_than_the_maximum_is_refused_unread(tmp_path):
    """PI11: chunk_bytes above the maximum (default 1 GiB) is refused before inflating."""
    src = tmp_path / "lit"
    chunk = zstandard.ZstdCompressor().compress(litdata_chunk([[b"x"]]))
    index = write_litdata(src, chunk, ["bytes"], dict_spec(["blob"]), 1, compression="zstd")
    index["chunks"][0]["chunk_bytes"] = 2 << 30
    (src / "index.json").write_text(json.dumps(index))
    refused(src, tmp_path / "out", f"chunk-0-0.bin: declares {2 << 30} bytes", f"the maximum {1 << 30}")


def test_a_litdata_json_leaf_declaring_four_billion_rows_is_refused_in_bounded_memory(tmp_path):
    """PI11: a 25-byte tagged json leaf (records, 2**32 - 1 rows of no keys) is refused naming
    the item and leaf; before, it built rows until MemoryError."""
    leaf = bytes([6]) + struct.pack("<II", 2**32 - 1, 0) + bytes(16)
    assert len(leaf) == 25
    src = tmp_path / "lit"
    write_litdata(src, litdata_chunk([[leaf]]), ["json"], dict_spec(["meta"]), 1)
    code, peak, text = pack_limited(src, tmp_path / "out", limit_gib=2)
    assert code == 1 and "Traceback" not in text, text  # before: MemoryError at the address-space limit
    assert "chunk-0-0.bin: item 0: leaf 0: bad json value" in text, text
    assert peak < 300, f"peak RSS {peak} MiB"


# --- PI13: Arrow buffers validated before a row is read --------------------------------------


def arrow_file(path, table) -> None:
    import pyarrow as pa

    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


@pytest.mark.parametrize("raised_by", [1, 1 << 20, 2**31 - 10])
def test_an_arrow_binary_column_whose_last_offset_runs_past_its_buffer_is_refused(tmp_path, raised_by):
    """PI13: raising the last offset of a binary column (the file otherwise intact) makes
    pack refuse the file naming it and its record batch; before, it packed bytes read past the
    buffer's end (or crashed with SIGSEGV)."""
    pa = pytest.importorskip("pyarrow")
    path = tmp_path / "data.arrow"
    arrow_file(path, pa.table({"blob": pa.array([b"abc", b"def", b"ghi"], pa.binary())}))
    data = path.read_bytes()
    offsets = struct.pack("<4i", 0, 3, 6, 9)
    assert data.count(offsets) == 1
    path.write_bytes(data.replace(offsets, struct.pack("<4i", 0, 3, 6, 9 + raised_by)))
    refused(path, tmp_path / "out", "data.arrow: not a readable Arrow/Parquet file (record batch 0, column 'blob')")


def test_an_arrow_string_column_that_is_not_utf8_names_the_file(tmp_path):
    """PI13: a string column with bytes that are not UTF-8 names the file; before, the
    message was the codec's alone ("'utf-8' codec can't decode …")."""
    pa = pytest.importorskip("pyarrow")
    path = tmp_path / "data.arrow"
    arrow_file(path, pa.table({"text": pa.array(["abc", "dQf"])}))
    path.write_bytes(path.read_bytes().replace(b"abcdQf", b"abcd\xfff"))
    refused(path, tmp_path / "out", "data.arrow: not a readable Arrow/Parquet file (record batch 0, column 'text')",
            "UTF8")


# --- PI12: JSON nested without bound, values of the wrong type ---------------------------------


def tagged_dicts(depth: int) -> bytes:
    """A LitData tagged json leaf of ``depth`` dicts, each ``{"k": <the next>}``, ending in null."""
    return (bytes([5]) + struct.pack("<II", 1, 1) + b"k") * depth + bytes([11])


def spec_chain(depth: int) -> str:
    node = '{"type": "builtins.list", "context": null, "children_spec": ['
    return "[1, " + node * depth + json.dumps(LEAF) + "]}" * depth + "]"


def mds_case(tmp_path, columns, payload: bytes, **entry) -> tuple[object, str]:
    write_mds(tmp_path / "mds", [payload], columns, **entry)
    return tmp_path / "mds", "shard.00000.mds: sample 0: column"


def lit_case(tmp_path, leaf: bytes, fmt: str = "json", spec: str | None = None) -> object:
    write_litdata(tmp_path / "lit", litdata_chunk([[leaf]]), [fmt], spec or dict_spec(["meta"]), 1)
    return tmp_path / "lit"


def hf_state(tmp_path, state: str) -> object:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "state.json").write_text(state)
    (tmp_path / "hf" / "dataset_info.json").write_text("{}")
    return tmp_path / "hf"


def deep_mds_index(tmp_path):
    index = write_mds(tmp_path / "mds", [text_sample("a")], TEXT)
    text = json.dumps(index)[:-1] + ', "extra": ' + deep(100_000) + "}"
    (tmp_path / "mds" / "index.json").write_text(text)
    return tmp_path / "mds", ("--format", "mds"), ["index.json: JSON nested deeper than 100 levels"]


CASES = {
    "MDS index.json nested 100k deep": deep_mds_index,
    "MDS json column nested 100k deep": lambda p: (
        mds_case(p, [("meta", "json", None)], text_sample(deep(100_000)))[0], (),
        ["shard.00000.mds: sample 0: column 'meta'", "nested deeper than 99 levels"]),
    "MDS json column nested 150 deep": lambda p: (
        mds_case(p, [("meta", "json", None)], text_sample(deep(150)))[0], (),
        ["shard.00000.mds: sample 0: column 'meta'", "nested deeper than 99 levels"]),
    "LitData data_spec nested 5k deep": lambda p: (
        lit_case(p, b"x", "bytes", spec_chain(5_000)), (), ["index.json: config.data_spec: JSON nested deeper"]),
    "LitData json leaf (text) nested 100k deep": lambda p: (
        lit_case(p, deep(100_000).encode()), (), ["chunk-0-0.bin: item 0: leaf 0", "nested deeper than 99 levels"]),
    "LitData json leaf (tagged) nested 5k deep": lambda p: (
        lit_case(p, tagged_dicts(5_000)), (), ["chunk-0-0.bin: item 0: leaf 0", "nested deeper than 99 levels"]),
    "HF state.json nested 100k deep": lambda p: (
        hf_state(p, '{"_data_files": ' + deep(100_000) + "}"), (), ["state.json: JSON nested deeper than 100"]),
    "HF state.json not an object": lambda p: (hf_state(p, "[]"), (), ["state.json: must hold a JSON object"]),
    "MDS 1-byte ndarray": lambda p: (
        mds_case(p, [("arr", "ndarray", None)], struct.pack("<I", 1) + b"\x08")[0], (),
        ["shard.00000.mds: sample 0: column 'arr'", "before the ndarray's shape header"]),
    "MDS ndarray shape cut short": lambda p: (
        mds_case(p, [("arr", "ndarray", None)], struct.pack("<I", 3) + b"\x08\x09\x01")[0], (),
        ["shard.00000.mds: sample 0: column 'arr'", "inside the ndarray's 2-d shape"]),
    "MDS column name that is a list": lambda p: (
        mds_case(p, [(["a"], "str", None)], text_sample("a"))[0], (),
        ["index.json: shard 0: column names must be non-empty strings, got ['a']"]),
    "MDS column names that repeat": lambda p: (
        mds_case(p, [("a", "str", None), ("a", "str", None)], text_sample("a") + text_sample("b"))[0], (),
        ["index.json: shard 0: column names repeat"]),
    "LitData children_spec=5": lambda p: (
        lit_case(p, b"x", "bytes", json.dumps([1, {"type": "builtins.list", "context": None, "children_spec": 5}])),
        (), ["index.json: config.data_spec: children_spec must be a list, got 5"]),
    "LitData child that is not a node": lambda p: (
        lit_case(p, b"x", "bytes", json.dumps([1, {"type": "builtins.list", "context": None, "children_spec": [5]}])),
        (), ["index.json: config.data_spec: a node must be an object, got 5"]),
    "LitData dict context that is not JSON": lambda p: (
        lit_case(p, b"x", "bytes", json.dumps([1, {"type": "builtins.dict", "context": "[oops",
                                                   "children_spec": [LEAF]}])),
        (), ["index.json: config.data_spec: context: not valid JSON"]),
    "LitData dict context with repeated keys": lambda p: (
        lit_case(p, b"", "bytes", json.dumps([1, {"type": "builtins.dict", "context": '["a", "a"]',
                                                       "children_spec": [LEAF, LEAF]}])),
        (), ["index.json: config.data_spec: a dict node needs 2 distinct keys"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_importer_input_is_named_never_a_traceback(tmp_path, case):
    """PI12: nesting past the bound, values of the wrong type and short headers are a
    ``SourceError`` naming file, shard/chunk, sample/item and column/leaf; before, each was a
    ``RecursionError``, ``TypeError``, ``IndexError``, ``AttributeError`` or a message that
    named no file."""
    src, extra, needles = CASES[case](tmp_path)
    code, _, text = pack_limited(src, tmp_path / "out", *extra, limit_gib=2)
    assert code == 1, (code, text)
    assert "Traceback" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert not (tmp_path / "out").exists()


def test_a_hugging_face_data_file_that_is_a_fifo_is_refused_by_name(tmp_path):
    """PI10: a ``_data_files`` entry that is a FIFO is named as one (not "no such file")."""
    src = tmp_path / "hf"
    src.mkdir()
    (src / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (src / "dataset_info.json").write_text("{}")
    os.mkfifo(src / "data-00000-of-00001.arrow")
    refused(src, tmp_path / "out", "data-00000-of-00001.arrow: not a regular file (a FIFO)")
