"""``shardkit pack --format litdata``: directories written by the real ``litdata`` 0.2.76
``BinaryWriter`` (what ``litdata.optimize`` runs) come back item for item, field for field,
in every chunk compression mode; tensors come back as numpy arrays of the same dtype and shape."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.helpers.peers import assert_round_trip, pack, peer, read_back

DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")
DTYPES += ("bool",)
TENSOR_DTYPES = ("float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64", "bool")
MODES = [(None, None), ("zstd", "chunk"), ("zstd", "batch"), ("zstd:5", "sample")]
words = st.text(max_size=6)


def one_item(vec_dtype: str, img_dtype: str, tensor_dtype: str) -> st.SearchStrategy[dict[str, Any]]:
    def tensor(shape: Any) -> st.SearchStrategy[torch.Tensor]:
        return hnp.arrays(np.dtype(tensor_dtype), shape).map(lambda a: torch.from_numpy(a.copy()))

    return st.fixed_dictionaries({
        "id": st.integers(-(2**63), 2**63 - 1), "score": st.floats(allow_nan=False), "flag": st.booleans(),
        "name": words, "blob": st.binary(max_size=30),
        "vec": hnp.arrays(np.dtype(vec_dtype), st.integers(0, 6)),
        "img": hnp.arrays(np.dtype(img_dtype), hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4)),
        "t2": tensor(hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=3)),
        "t1": tensor(st.integers(1, 5)),
        "n": st.fixed_dictionaries({"a": st.integers(-5, 5), "b": words}),
        "tags": st.lists(words, max_size=3), "counts": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
        "weights": st.lists(st.floats(allow_nan=False), min_size=1, max_size=3),
        "records": st.lists(st.fixed_dictionaries({"k": words, "v": st.integers(0, 9)}), min_size=1, max_size=2),
        "mixed": st.tuples(words, st.integers(0, 9), st.none()).map(list),
    })  # fmt: skip


def sorted_keys(value: Any) -> Any:
    """Dicts with sorted keys, all the way down: LitData fixes the leaf order from the first
    item's key order, and hypothesis varies that order from draw to draw."""
    if isinstance(value, dict):
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(item) for item in value]
    return value


items = st.tuples(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.sampled_from(TENSOR_DTYPES)).flatmap(
    lambda dtypes: st.lists(one_item(*dtypes).map(sorted_keys), min_size=1, max_size=9)
)


def write_litdata(root: str, rows: list[Any], chunk_size: int, compression: str | None, level: str | None) -> None:
    litdata = peer("litdata")
    writer = litdata.streaming.writer.BinaryWriter(
        root, chunk_size=chunk_size, compression=compression, compression_level=level, compression_batch_size=2
    )
    for index, row in enumerate(rows):
        writer[index] = row
    writer.done()
    writer.merge()


def expected(value: Any) -> Any:
    """What shardkit stores for a LitData leaf: tensors as numpy arrays, tuples as lists."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {key: expected(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [expected(item) for item in value]
    return value


@settings(max_examples=15, deadline=None)
@given(rows=items, chunk_size=st.integers(1, 4), mode=st.sampled_from(MODES))
def test_every_litdata_item_round_trips_with_its_types(rows, chunk_size, mode):
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "lit"), os.path.join(tmp, "out")
        write_litdata(src, rows, chunk_size, *mode)
        assert pack(src, out) == 0  # detected as LitData
        assert_round_trip(read_back(out), [expected(row) for row in rows])


def test_an_item_that_is_not_a_dict_gets_field_names(tmp_path):
    write_litdata(str(tmp_path / "tuples"), [(i, f"s{i}") for i in range(3)], 2, None, None)
    write_litdata(str(tmp_path / "ints"), list(range(3)), 2, None, None)
    assert pack(tmp_path / "tuples", tmp_path / "out1") == 0
    assert pack(tmp_path / "ints", tmp_path / "out2", "--format", "litdata") == 0
    assert read_back(tmp_path / "out1") == [{"0": i, "1": f"s{i}"} for i in range(3)]
    assert read_back(tmp_path / "out2") == [{"item": i} for i in range(3)]


def test_chunks_that_keep_their_rows_as_arrow_round_trip(tmp_path):
    """Items of plain values only: litdata stores the rows as an Arrow table after the chunk."""
    rows = [{"id": i, "score": i / 3, "text": f"t{i}", "ok": i % 2 == 0, "tags": ["a"] * i, "n": {"k": i}}
            for i in range(5)]  # fmt: skip
    write_litdata(str(tmp_path / "lit"), rows, 2, None, None)
    assert b"LDARW01" in (tmp_path / "lit" / "chunk-0-0.bin").read_bytes()  # the case under test
    assert pack(tmp_path / "lit", tmp_path / "out") == 0
    assert_round_trip(read_back(tmp_path / "out"), rows)


@pytest.fixture
def small_litdata(tmp_path):
    """Chunks with item bytes (an array leaf keeps litdata off its Arrow-table form)."""
    rows = [{"id": i, "vec": np.arange(i + 1, dtype=np.int32)} for i in range(4)]
    write_litdata(str(tmp_path / "lit"), rows, 2, None, None)
    return tmp_path / "lit"


def test_a_chunk_with_fewer_items_than_the_index_says_is_named(small_litdata, tmp_path, capsys):
    index = json.loads((small_litdata / "index.json").read_text())
    index["chunks"][1]["chunk_size"] = 3
    (small_litdata / "index.json").write_text(json.dumps(index))
    assert pack(small_litdata, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "chunk-0-1.bin" in err and "says 3" in err, err
    assert not (tmp_path / "out").exists()


def test_a_corrupt_item_is_named_by_chunk_and_index(small_litdata, tmp_path, capsys):
    chunk = small_litdata / "chunk-0-0.bin"
    data = bytearray(chunk.read_bytes())
    data[16:20] = (999).to_bytes(4, "little")  # item 0's first leaf size (after u32 n, 3 offsets)
    chunk.write_bytes(bytes(data))
    assert pack(small_litdata, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "chunk-0-0.bin: item 0" in err, err


def test_pickled_leaves_are_refused(small_litdata, tmp_path, capsys):
    index = json.loads((small_litdata / "index.json").read_text())
    index["config"]["data_format"][0] = "pickle"
    (small_litdata / "index.json").write_text(json.dumps(index))
    assert pack(small_litdata, tmp_path / "out", "--format", "litdata") == 1
    assert "never unpickles" in capsys.readouterr().err
