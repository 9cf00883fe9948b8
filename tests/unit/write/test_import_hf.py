"""``shardkit pack --format hf``: local Hugging Face datasets — ``save_to_disk`` folders (one
split and DatasetDict), hub cache folders and Parquet exports — come back row for row with
Arrow's types: int32 stays int32, float32 stays float32, list columns become arrays.

The ``datasets`` library itself is not installed in the test venv (its fsspec pin conflicts
with s3fs's), so the folders are laid out here with pyarrow exactly as ``datasets`` writes them:
Arrow IPC *stream* files, ``state.json`` listing ``_data_files``, ``dataset_dict.json`` listing splits.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.helpers.peers import assert_round_trip, pack, read_back

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SCHEMA = pa.schema([
    ("id", pa.int64()), ("label", pa.int32()), ("score", pa.float32()), ("weight", pa.float64()),
    ("ok", pa.bool_()), ("text", pa.string()), ("blob", pa.binary()),
    ("embedding", pa.list_(pa.float32())), ("grid", pa.list_(pa.list_(pa.int16()))),
    ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
])  # fmt: skip
LAYOUTS = ("save_to_disk", "dataset_dict", "hub_cache", "parquet")


def f32() -> st.SearchStrategy[np.float32]:
    return hnp.from_dtype(np.dtype("float32"), allow_nan=False).map(np.float32)


rows = st.fixed_dictionaries({
    "id": st.integers(-(2**63), 2**63 - 1), "label": st.integers(-(2**31), 2**31 - 1).map(np.int32),
    "score": f32(), "weight": st.floats(allow_nan=False), "ok": st.booleans(), "text": st.text(max_size=8),
    "blob": st.binary(max_size=16), "embedding": hnp.arrays(np.float32, st.integers(0, 5)),
    "grid": hnp.arrays(np.int16, st.tuples(st.integers(1, 3), st.integers(0, 3))),
    "image": st.tuples(st.binary(max_size=8), st.text(max_size=5)).map(lambda p: {"bytes": p[0], "path": p[1]}),
}).map(lambda row: {name: row[name] for name in SCHEMA.names})  # fmt: skip  (fixed_dictionaries shuffles keys)


def to_table(samples: list[dict[str, Any]]) -> Any:
    columns = {name: [_plain(s[name]) for s in samples] for name in SCHEMA.names}
    return pa.table(columns, schema=SCHEMA)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def write_stream(path: str, table: Any) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=3)


def save_to_disk(folder: str, table: Any, num_files: int) -> None:
    """``Dataset.save_to_disk`` layout: data-0000i-of-0000n.arrow + state.json + dataset_info.json."""
    os.makedirs(folder)
    step = -(-table.num_rows // num_files)
    names = [f"data-{i:05d}-of-{num_files:05d}.arrow" for i in range(num_files)]
    for i, name in enumerate(names):
        write_stream(os.path.join(folder, name), table.slice(i * step, step))
    state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "0", "_split": None}
    with open(os.path.join(folder, "state.json"), "w") as fh:
        json.dump(state, fh)
    with open(os.path.join(folder, "dataset_info.json"), "w") as fh:
        json.dump({"features": {}}, fh)


def write_layout(root: str, layout: str, train: Any, test: Any) -> tuple[str, list[str]]:
    """Write ``train`` (and ``test``) in ``layout``; the path and extra args that pick ``train``."""
    if layout == "save_to_disk":
        save_to_disk(root, train, 2)
        return root, []
    if layout == "dataset_dict":
        os.makedirs(root)
        with open(os.path.join(root, "dataset_dict.json"), "w") as fh:
            json.dump({"splits": ["train", "test"]}, fh)
        save_to_disk(os.path.join(root, "train"), train, 2)
        save_to_disk(os.path.join(root, "test"), test, 1)
        return root, ["--split", "train"]
    if layout == "hub_cache":
        os.makedirs(root)
        half = train.num_rows // 2
        write_stream(os.path.join(root, "mydata-train-00000-of-00002.arrow"), train.slice(0, half))
        write_stream(os.path.join(root, "mydata-train-00001-of-00002.arrow"), train.slice(half))
        write_stream(os.path.join(root, "mydata-test.arrow"), test)
        write_stream(os.path.join(root, "cache-0123abcd.arrow"), test)  # a .map() result beside them
        with open(os.path.join(root, "dataset_info.json"), "w") as fh:
            json.dump({"builder_name": "mydata", "splits": {}}, fh)
        return root, ["--split", "train"]
    for split, table in (("train", train), ("test", test)):
        os.makedirs(os.path.join(root, "default", split))
        pq.write_table(table, os.path.join(root, "default", split, "0000.parquet"), row_group_size=3)
    return root, ["--format", "hf", "--split", "train"]


@settings(max_examples=20, deadline=None)
@given(train=st.lists(rows, min_size=2, max_size=10), layout=st.sampled_from(LAYOUTS))
def test_every_row_round_trips_with_its_arrow_type(train, layout):
    with tempfile.TemporaryDirectory() as tmp:
        src, extra = write_layout(os.path.join(tmp, "hf"), layout, to_table(train), to_table(train[:1]))
        assert pack(src, os.path.join(tmp, "out"), *extra) == 0
        assert_round_trip(read_back(os.path.join(tmp, "out")), train)


def example_rows(count: int) -> list[dict[str, Any]]:
    return [{"id": i, "label": np.int32(i), "score": np.float32(i / 4), "weight": i / 3, "ok": True, "text": "t",
             "blob": b"b", "embedding": np.zeros(2, np.float32), "grid": np.zeros((1, 2), np.int16),
             "image": {"bytes": b"", "path": ""}} for i in range(count)]  # fmt: skip


def test_several_splits_without_split_name_them(tmp_path, capsys):
    table = to_table(example_rows(2))
    src, _ = write_layout(str(tmp_path / "hf"), "dataset_dict", table, table)
    assert pack(src, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "holds splits train, test; pass --split" in err, err
    assert not (tmp_path / "out").exists()


def test_a_missing_data_file_is_named(tmp_path, capsys):
    table = to_table(example_rows(2))
    save_to_disk(str(tmp_path / "hf"), table, 2)
    os.remove(tmp_path / "hf" / "data-00001-of-00002.arrow")
    assert pack(tmp_path / "hf", tmp_path / "out") == 1
    assert "data-00001-of-00002.arrow: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_hub_cache_folder_of_one_split_needs_no_split_and_skips_map_results(tmp_path):
    os.makedirs(tmp_path / "hf")
    write_stream(str(tmp_path / "hf" / "mydata-train.arrow"), to_table(example_rows(3)))
    write_stream(str(tmp_path / "hf" / "cache-0123abcd.arrow"), to_table(example_rows(1)))  # from .map()
    (tmp_path / "hf" / "dataset_info.json").write_text("{}")
    assert pack(tmp_path / "hf", tmp_path / "out") == 0
    assert_round_trip(read_back(tmp_path / "out"), example_rows(3))


def test_format_parquet_widens_integer_scalars_where_format_hf_keeps_them(tmp_path):
    """What docs/migration/huggingface.md says of the two readers of one Parquet export."""
    folder = tmp_path / "export"
    folder.mkdir()
    table = pa.table({"label": pa.array([1, 2], pa.int32()), "small": pa.array([3, 4], pa.uint8()),
                      "score": pa.array([0.5, 1.5], pa.float32()),
                      "emb": pa.array([[1.0], [2.0]], pa.list_(pa.float32()))})  # fmt: skip
    pq.write_table(table, folder / "0000.parquet")
    types = {}
    for fmt in ("parquet", "hf"):
        assert pack(folder, tmp_path / fmt, "--format", fmt) == 0
        first = read_back(tmp_path / fmt)[0]
        types[fmt] = {name: getattr(value, "dtype", type(value).__name__) for name, value in first.items()}
    assert types["parquet"] == {"label": "int", "small": "int", "score": np.float32, "emb": np.float32}
    assert types["hf"] == {"label": np.int32, "small": np.uint8, "score": np.float32, "emb": np.float32}
