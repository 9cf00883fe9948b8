"""Ways in from other dataset formats: each reads a peer's directory with no dependency on the
peer's library and yields ``sources.Item`` rows whose values keep their types.

``mds`` (MosaicML Streaming), ``litdata`` (LitData optimize), ``hf`` (Hugging Face
``save_to_disk`` folders, hub cache folders, Parquet exports). WebDataset tars are the ``wds``
source in ``shardkit.write.sources``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from shardkit.errors import SourceError
from shardkit.write.imports.hf_arrow import is_hf, iter_hf
from shardkit.write.imports.litdata import is_litdata, iter_litdata
from shardkit.write.imports.mds import is_mds, iter_mds
from shardkit.write.sources import Item

FORMATS = ("mds", "litdata", "hf")


def detect(path: str) -> str | None:
    """The peer format of ``path``, or None when it is none of them."""
    if os.path.isdir(path):
        if is_mds(path):
            return "mds"
        if is_litdata(path):
            return "litdata"
    return "hf" if is_hf(path) else None


def iter_items(fmt: str, path: str, split: str | None = None) -> Iterator[Item]:
    if fmt != "hf" and split is not None:
        raise SourceError(f"--split applies to Hugging Face datasets, not {fmt}")
    if fmt == "mds":
        return iter_mds(path)
    if fmt == "litdata":
        return iter_litdata(path)
    return iter_hf(path, split)
