"""``shardkit pack`` of WebDataset shards keeps the types WebDataset's own decoders give:
``.cls``/``.id`` → int, ``.txt`` → str, ``.json`` → its value, ``.npy`` → an array of the
saved dtype and shape, anything else (``.jpg``, ``.wav`` …) → its bytes. Tars are written
member by member as ``webdataset.TarWriter`` lays them out (key.ext, consecutive per key)."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.helpers.peers import assert_round_trip, pack, read_back

DTYPES = ("<i1", "<i4", "<i8", "<u2", "<f2", "<f4", "<f8", "|b1", ">i4")
samples = st.fixed_dictionaries({
    "cls": st.integers(-(2**63), 2**63 - 1), "txt": st.text(max_size=10),
    "json": st.dictionaries(st.text(max_size=3), st.integers(-9, 9) | st.text(max_size=3), max_size=3),
    "npy": st.sampled_from(DTYPES).flatmap(lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=0, min_side=0))),
    "jpg": st.binary(max_size=30),
})  # fmt: skip


def encode(ext: str, value: Any) -> bytes:
    if ext == "npy":
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        return out.getvalue()
    if ext == "json":
        import json

        return json.dumps(value).encode()
    return value if isinstance(value, bytes) else str(value).encode()


def write_tars(folder: str, rows: list[dict[str, Any]], per_tar: int) -> None:
    os.makedirs(folder)
    for start in range(0, len(rows), per_tar):
        with tarfile.open(os.path.join(folder, f"shard-{start:06d}.tar"), "w") as tar:
            for index in range(start, min(start + per_tar, len(rows))):
                for ext, value in rows[index].items():
                    data = encode(ext, value)
                    info = tarfile.TarInfo(f"part/{index:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


@settings(max_examples=20, deadline=None)
@given(rows=st.lists(samples, min_size=1, max_size=8), per_tar=st.integers(1, 4))
def test_every_webdataset_sample_round_trips_with_its_types(rows, per_tar):
    with tempfile.TemporaryDirectory() as tmp:
        write_tars(os.path.join(tmp, "wds"), rows, per_tar)
        assert pack(os.path.join(tmp, "wds"), os.path.join(tmp, "out")) == 0
        want = [{"__key__": f"part/{i:06d}", **row} for i, row in enumerate(rows)]
        assert_round_trip(read_back(os.path.join(tmp, "out")), want, sort_keys=True)
