"""``shardkit pack --format mds``: directories written by the real ``streaming.MDSWriter``
(mosaicml-streaming 0.13.0) come back sample for sample, field for field, types intact."""

from __future__ import annotations

import io
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.helpers.peers import assert_round_trip, pack, peer, read_back

COLUMNS = {
    "id": "int", "f32": "float32", "f64": "float64", "u8": "uint8", "i16": "int16",
    "text": "str", "blob": "bytes", "meta": "json", "arr": "ndarray", "fixed": "ndarray:int16:2,3",
    "digits": "str_int", "ratio": "str_float",
}  # fmt: skip
MDS_DTYPES = ("uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "uint64", "int64", "float64")


def scalar(dtype: str) -> st.SearchStrategy[np.generic]:
    return hnp.from_dtype(np.dtype(dtype), allow_nan=False).map(np.dtype(dtype).type)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=5,
)
arrays = st.sampled_from(MDS_DTYPES).flatmap(
    lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
)
samples = st.fixed_dictionaries({
    "id": st.integers(-(2**63), 2**63 - 1),
    "f32": scalar("float32"), "f64": scalar("float64"), "u8": scalar("uint8"), "i16": scalar("int16"),
    "text": st.text(max_size=12), "blob": st.binary(max_size=40), "meta": json_values, "arr": arrays,
    "fixed": hnp.arrays(np.dtype("int16"), (2, 3)),
    "digits": st.integers(-(2**63), 2**63 - 1), "ratio": st.floats(allow_nan=False, allow_infinity=False),
})  # fmt: skip


def write_mds(root: str, rows: list[dict], columns: dict[str, str], compression: str | None, size_limit: int) -> None:
    streaming = peer("streaming")
    with streaming.MDSWriter(out=root, columns=columns, compression=compression, size_limit=size_limit) as writer:
        for row in rows:
            writer.write(row)


@settings(max_examples=15, deadline=None)
@given(
    rows=st.lists(samples, min_size=1, max_size=12),
    compression=st.sampled_from([None, "zstd", "zstd:7", "gz", "bz2"]),
    size_limit=st.sampled_from([1 << 9, 1 << 12, 1 << 20]),
)
def test_every_mds_sample_round_trips_with_its_types(rows, compression, size_limit):
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "mds"), os.path.join(tmp, "out")
        write_mds(src, rows, COLUMNS, compression, size_limit)
        assert pack(src, out) == 0  # detected as MDS
        assert_round_trip(read_back(out), rows, sort_keys=True)


def test_image_columns_come_back_as_their_bytes_and_pixels(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 255, (6, 5, 3), dtype=np.uint8) for _ in range(3)]
    paths = []
    for i, array in enumerate(pixels):
        paths.append(str(tmp_path / f"{i}.jpg"))
        image_module.fromarray(array).save(paths[-1], format="JPEG")
    columns = {"jpg": "jpeg", "png": "png", "raw": "pil", "many": "list[jpeg]"}
    opened = [image_module.open(path) for path in paths]  # JPEG files: MDS stores their own bytes
    rows = [
        {"jpg": jpg, "png": image_module.fromarray(array), "raw": image_module.fromarray(array), "many": [jpg, jpg]}
        for jpg, array in zip(opened, pixels, strict=True)
    ]
    write_mds(str(tmp_path / "mds"), rows, columns, "zstd", 1 << 20)
    for image in opened:
        image.close()
    assert pack(tmp_path / "mds", tmp_path / "out", "--format", "mds") == 0
    got = read_back(tmp_path / "out")
    for sample, path, array in zip(got, paths, pixels, strict=True):
        with open(path, "rb") as fh:
            jpeg = fh.read()
        assert sample["jpg"] == jpeg and sample["many"] == [jpeg, jpeg]  # the file's own bytes
        assert np.array_equal(np.asarray(image_module.open(io.BytesIO(sample["png"]))), array)
        assert sample["raw"].dtype == np.uint8 and np.array_equal(sample["raw"], array)


@pytest.fixture
def small_mds(tmp_path):
    rows = [{"id": i, "text": f"t{i}"} for i in range(4)]
    write_mds(str(tmp_path / "mds"), rows, {"id": "int", "text": "str"}, None, 1 << 20)
    return tmp_path / "mds"


def test_a_truncated_shard_is_named_and_nothing_is_written(small_mds, tmp_path, capsys):
    shard = small_mds / "shard.00000.mds"
    shard.write_bytes(shard.read_bytes()[:-3])
    assert pack(small_mds, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "shard.00000.mds" in err and "index says" in err, err
    assert not (tmp_path / "out").exists()


def test_a_corrupt_sample_is_named_by_file_and_index(small_mds, tmp_path, capsys):
    index = json.loads((small_mds / "index.json").read_text())
    index["shards"][0]["column_sizes"] = [8, 4]  # the str column claims a fixed size it does not have
    (small_mds / "index.json").write_text(json.dumps(index))
    assert pack(small_mds, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "shard.00000.mds: sample 0" in err, err


def test_pickled_columns_are_refused_naming_the_column(small_mds, tmp_path, capsys):
    index = json.loads((small_mds / "index.json").read_text())
    index["shards"][0]["column_encodings"][1] = "pkl"
    (small_mds / "index.json").write_text(json.dumps(index))
    assert pack(small_mds, tmp_path / "out", "--format", "mds") == 1
    err = capsys.readouterr().err
    assert "'text'" in err and "never unpickles" in err, err
    assert not (tmp_path / "out").exists()
