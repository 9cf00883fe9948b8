"""Values keep their dtype through packing and writing (specs/shard-format.md SV2, SV4): Parquet
float32/float16 columns arrive as numpy scalars of that dtype, not float64; bfloat16 and float8
tensors go through the writer, verify and ``head``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit as sk
from shardkit.cli import main
from shardkit.format.tensor_dtypes import TORCH_ONLY_DTYPES
from shardkit.read import open_dataset
from shardkit.read.verify import verify_dataset


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint16"])
@settings(max_examples=4, deadline=None)
@given(values=st.lists(st.integers(-100, 100), min_size=1, max_size=20), nulls=st.booleans())
def test_parquet_numeric_columns_keep_their_dtype(tmp_path_factory, dtype, values, nulls):
    """SV2: a float32 (or float16) column arrives as np.float32 (np.float16) values, list columns
    as arrays of the column's dtype; wider types as before (Python int/float); nulls as None."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path_factory.mktemp("pq")
    kind = np.dtype(dtype)
    cast = [None if nulls and i % 3 == 1 else kind.type(abs(v) if kind.kind == "u" else v)
            for i, v in enumerate(values)]
    arrow = pa.from_numpy_dtype(kind)
    table = pa.table({
        "x": pa.array([None if v is None else v.item() for v in cast], arrow),
        "xs": pa.array([[v.item()] * 2 if v is not None else [] for v in cast], pa.list_(arrow)),
    })
    pq.write_table(table, folder / "t.parquet")
    assert main(["pack", str(folder / "t.parquet"), str(folder / "out"), "--no-progress", "--no-shuffle"]) == 0
    dataset = open_dataset(str(folder / "out"))
    assert verify_dataset(dataset).ok
    for sample, want in zip(dataset.samples(), cast, strict=True):
        assert sample["xs"].dtype == kind
        if want is None:
            assert sample["x"] is None
        elif kind in (np.float16, np.float32):
            assert type(sample["x"]) is kind.type and sample["x"] == want
        else:
            assert sample["x"] == want.item() and type(sample["x"]) is type(want.item())


def test_torch_only_tensors_through_writer_verify_and_head(tmp_path, capsys):
    """SV4 end to end: written, verified against the schema, read back bit for bit, shown."""
    torch = pytest.importorskip("torch")
    names = [name for name in TORCH_ONLY_DTYPES if hasattr(torch, name)]
    generator = torch.Generator().manual_seed(0)
    written = [{name: torch.randn(2, 3, generator=generator).to(getattr(torch, name)) for name in names}
               for _ in range(5)]
    with sk.ShardWriter(str(tmp_path / "ds"), block_size=200) as writer:
        for sample in written:
            writer.write(sample)
    dataset = open_dataset(str(tmp_path / "ds"))
    assert dataset.manifest.schema["bfloat16"] == {"dtype": "bfloat16", "shape": [2, 3], "type": "tensor"}
    assert verify_dataset(dataset).ok
    for got, want in zip(dataset.samples(), written, strict=True):
        for name in names:
            assert got[name].dtype == want[name].dtype
            assert torch.equal(got[name].view(torch.uint8), want[name].view(torch.uint8))
    assert main(["head", str(tmp_path / "ds"), "-n", "1"]) == 0
    assert "Tensor bfloat16 [2, 3]" in capsys.readouterr().out
